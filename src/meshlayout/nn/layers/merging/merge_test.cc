#include "meshlayout/nn/layers/merging/merge.h"
#include "meshlayout/nn/layers/core/dense.h"

#include <gtest/gtest.h>

#include "meshlayout/core/errors.h"
#include "meshlayout/nn/layers/merging/merge_test_util.h"
#include "meshlayout/nn/nn_test_util.h"
#include "meshlayout/testing/test_util.h"

namespace meshlayout {
namespace {

using testing::ValueErrorMessage;

class MergeTest : public NnTest {};

TEST_F(MergeTest, ResidualAndTwoInputGraphsMatchTheFloat64ReferenceOnEveryInputLayout) {
  for (const std::string layout :
       {"None,None", "data,None", "(data,model),None", "data,model", "None,model"}) {
    EXPECT_NO_THROW(testing::run_merge_cases(default_runtime(), mesh_, layout, 41));
  }
}

// Layers in Keras' order: by depth from the output, ties in the order the graph is walked
// from the output (the add's first input first).
TEST_F(MergeTest, GraphOrderAndPathsAreKeras) {
  Tensor a = Input({6}, 4), b = Input({2}, 4);
  auto d1 = std::make_shared<Dense>(8, DenseOptions{.name = "d1"});
  auto add = std::make_shared<Add>();
  Tensor h = (*d1)(a);
  Tensor joined = std::make_shared<Concatenate>()->apply({a, b});
  Tensor out = add->apply({joined, h});
  auto model = Model::functional({a, b}, out);
  std::vector<std::string> names;
  for (const auto& l : model->layers()) names.push_back(l->name());
  EXPECT_EQ(names,
            (std::vector<std::string>{"input_layer", "input_layer_1", "concatenate", "d1", "add"}));
  EXPECT_EQ(add->path(), "add");
  ASSERT_EQ(model->variables().size(), 2u);
  EXPECT_EQ(model->variables()[0]->path(), "d1/kernel");
  EXPECT_EQ(out.shape(), (Shape{4, 8}));
  EXPECT_EQ(out.inputs().size(), 2u);

  // Deeper layers first even when the walk meets them later: add(d3(x), d2(d1(x))).
  Tensor x = Input({4}, 2);
  auto l1 = std::make_shared<Dense>(4, DenseOptions{.name = "l1"});
  auto l2 = std::make_shared<Dense>(4, DenseOptions{.name = "l2"});
  auto l3 = std::make_shared<Dense>(4, DenseOptions{.name = "l3"});
  auto deep =
      Model::functional(x, std::make_shared<Add>("sum")->apply({(*l3)(x), (*l2)((*l1)(x))}));
  names.clear();
  for (const auto& l : deep->layers()) names.push_back(l->name());
  EXPECT_EQ(names, (std::vector<std::string>{"input_layer_2", "l1", "l3", "l2", "sum"}));
}

TEST_F(MergeTest, ASharedLayerAppearsOnceAndRunsTwice) {
  LayoutMap replicated(mesh_);
  LayoutMapScope scope = replicated.scope();
  Tensor x = Input({4}, 2);
  auto d = std::make_shared<Dense>(4, DenseOptions{.name = "shared"});
  Tensor y = std::make_shared<Add>()->apply({(*d)(x), (*d)((*d)(x))});
  auto model = Model::functional(x, y);
  EXPECT_EQ(model->layers().size(), 3u);  // input_layer, shared, add
  HostTensor hx = HostTensor::random(DType::kF32, {2, 4}, 3);
  Tensor out = (*model)(distribute_tensor(hx, TensorLayout({None, None}, mesh_)));
  testing::HostMatrix m = testing::to_matrix(hx), once = testing::dense_ref(m, *d),
                      twice = testing::dense_ref(once, *d);
  for (size_t i = 0; i < once.v.size(); ++i) once.v[i] += twice.v[i];
  EXPECT_NO_THROW(testing::expect_close(out.value().gather(), once, "shared layer"));
}

TEST_F(MergeTest, BadCallsAreRefusedWithKerasMessages) {
  Tensor a = Input({6}, 4), b = Input({2}, 4), c = Input({3, 2}, 4);
  auto add = std::make_shared<Add>(std::string("add_x"));
  EXPECT_EQ(ValueErrorMessage([&] { (void)(*add)(a); }),
            "A merge layer should be called on a list of inputs. Received: inputs of shape "
            "(4, 6) (not a list); layer 'add_x'");
  EXPECT_EQ(ValueErrorMessage([&] { (void)add->apply({}); }),
            "A merge layer should be called on a list of at least 1 input. Got 0 inputs (layer "
            "'add_x')");
  EXPECT_EQ(ValueErrorMessage([&] {
              (void)add->apply({a, b});
            }),
            "Inputs have incompatible shapes. Received shapes [(4, 6), (4, 2)] (layer 'add_x' "
            "needs one shape)");
  auto cat = std::make_shared<Concatenate>(1, "cat");
  EXPECT_EQ(ValueErrorMessage([&] {
              (void)cat->apply({a, c});
            }),
            "A `Concatenate` layer requires inputs with matching shapes except for the "
            "concatenation axis. Received: input_shape=[(4, 6), (4, 3, 2)], axis=1 (layer 'cat')");
  EXPECT_EQ(ValueErrorMessage([&] {
              (void)std::make_shared<Concatenate>(2)->apply({a, b});
            }),
            "A `Concatenate` layer requires inputs with matching shapes except for the "
            "concatenation axis. Received: input_shape=[(4, 6), (4, 2)], axis=2 (layer "
            "'concatenate')");
  HostTensor h = HostTensor::random(DType::kF32, {4, 6}, 1);
  Tensor concrete = distribute_tensor(h, TensorLayout({None, None}, mesh_));
  EXPECT_EQ(ValueErrorMessage([&] {
              (void)add->apply({a, concrete});
            }),
            "layer 'add_x' got 1 symbolic and 1 concrete inputs; call it on symbolic tensors to "
            "build a model, or on arrays to run it");
  auto d = std::make_shared<Dense>(2);
  EXPECT_EQ(ValueErrorMessage([&] {
              (void)d->apply({a, a});
            }),
            "layer 'dense' takes one input, got a list of 2");
  auto model = Model::functional({a, b}, std::make_shared<Concatenate>()->apply({a, b}), "two");
  EXPECT_EQ(ValueErrorMessage([&] { (void)(*model)(concrete); }),
            "model 'two' takes 2 inputs, got 1");
  Tensor other = Input({6}, 4);
  EXPECT_EQ(ValueErrorMessage([&] {
              (void)Model::functional(a, std::make_shared<Add>()->apply({a, other}));
            }),
            "the outputs are not computed from the inputs of shape (4, 6): they depend on another "
            "input, of shape (4, 6)");
}

}  // namespace
}  // namespace meshlayout
