// Every row of reference/keras-semantics.md §C.1 (Keras 3 scope paths) and §C.2 (Keras 2
// object paths) that meshlayout has the layers for: each test builds the model and compares
// every path string exactly. BatchNormalization and LSTM rows are in their own tests.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/layout_map/layout_map_scope.h"
#include "meshlayout/nn/layers/convolutional/conv2d.h"
#include "meshlayout/nn/layers/core/dense.h"
#include "meshlayout/nn/layers/core/embedding.h"
#include "meshlayout/nn/layers/normalization/layer_normalization.h"
#include "meshlayout/nn/layers/regularization/dropout.h"
#include "meshlayout/nn/model.h"
#include "meshlayout/nn/name_scope.h"
#include "meshlayout/nn/nn_test_util.h"

namespace meshlayout {
namespace {

using ::testing::ElementsAre;

class PathsTest : public NnTest {};

std::vector<std::string> paths(const std::vector<VariablePtr>& vars) {
  std::vector<std::string> out;
  for (const VariablePtr& v : vars) out.push_back(v->path());
  return out;
}

std::vector<std::string> object_paths(const std::vector<VariablePtr>& vars) {
  std::vector<std::string> out;
  for (const VariablePtr& v : vars) out.push_back(v->object_path());
  return out;
}

std::shared_ptr<Dense> dense(int64_t units, std::string name = "") {
  return std::make_shared<Dense>(units, DenseOptions{.name = std::move(name)});
}

Tensor ones(const Shape& shape) {
  return Tensor(distribute_tensor(
      HostTensor(DType::kF32, shape),
      TensorLayout::replicated(static_cast<int>(shape.size()),
                               DeviceMesh({1}, {"x"}, std::vector<std::string>{"cpu:0"}))));
}

// ---- name_scope and standalone variables ----

TEST_F(PathsTest, StandaloneVariableIsItsNameAndNameScopesPrefixIt) {
  EXPECT_EQ(Variable(VariableSpec{.name = "v"}).path(), "v");
  {
    NameScope a("a");
    EXPECT_EQ(current_path(), "a");
    EXPECT_EQ(Variable(VariableSpec{.name = "v"}).path(), "a/v");
    {
      NameScope b("b");
      EXPECT_EQ(Variable(VariableSpec{.name = "w"}).path(), "a/b/w");
    }
    EXPECT_EQ(Variable(VariableSpec{.name = "v"}).path(), "a/v");
  }
  EXPECT_EQ(current_path(), "");
}

TEST_F(PathsTest, ANameWithASlashIsRefusedInKerasWords) {
  try {
    NameScope bad("a/b");
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(),
                 "Argument `name` must be a string and cannot contain character `/`. "
                 "Received: name=a/b");
  }
  EXPECT_EQ(current_path(), "");
  EXPECT_THROW(Variable(VariableSpec{.name = "k/1"}), ValueError);
  EXPECT_THROW(Dense(4, DenseOptions{.name = "d/1"}), ValueError);
}

// ---- §C.1 Keras 3 scope paths ----

TEST_F(PathsTest, StandaloneDense) {
  auto d = dense(4);
  (*d)(ones({2, 3}));
  EXPECT_THAT(paths(d->variables()), ElementsAre("dense/kernel", "dense/bias"));
  // Built under a name scope: the layer records it as its parent.
  auto e = dense(4);
  {
    NameScope s("outer");
    (*e)(Input({3}, 2));
  }
  EXPECT_THAT(paths(e->variables()), ElementsAre("outer/dense_1/kernel", "outer/dense_1/bias"));
  EXPECT_EQ(e->path(), "outer/dense_1");
}

class MyModel : public Model {
 public:
  explicit MyModel(bool named) {
    d1 = track("d1", named ? dense(4, "d1") : dense(4));
    d2 = track("d2", named ? dense(2, "d2") : dense(2));
  }
  Tensor call(const Tensor& x) override { return (*d2)((*d1)(x)); }
  std::shared_ptr<Dense> d1, d2;
};

TEST_F(PathsTest, SubclassedModelWithAutomaticName) {
  auto m = std::make_shared<MyModel>(true);
  EXPECT_EQ(m->name(), "my_model");
  (*m)(ones({2, 3}));
  EXPECT_THAT(paths(m->variables()), ElementsAre("my_model/d1/kernel", "my_model/d1/bias",
                                                 "my_model/d2/kernel", "my_model/d2/bias"));
  auto unnamed = std::make_shared<MyModel>(false);
  EXPECT_EQ(unnamed->name(), "my_model_1");
  (*unnamed)(Input({3}, 2));
  EXPECT_THAT(paths(unnamed->variables()),
              ElementsAre("my_model_1/dense/kernel", "my_model_1/dense/bias",
                          "my_model_1/dense_1/kernel", "my_model_1/dense_1/bias"));
}

TEST_F(PathsTest, SubclassedModelUnnamedDensesInAFreshSession) {
  auto m = std::make_shared<MyModel>(false);
  (*m)(ones({2, 3}));
  EXPECT_THAT(paths(m->variables()),
              ElementsAre("my_model/dense/kernel", "my_model/dense/bias", "my_model/dense_1/kernel",
                          "my_model/dense_1/bias"));
}

TEST_F(PathsTest, FunctionalModelUsesLayerNamesOnly) {
  Tensor in = Input({3}, 2);
  Tensor out = (*dense(2, "d2"))((*dense(4, "d1"))(in));
  auto f = Model::functional(in, out);
  EXPECT_EQ(f->name(), "functional");
  EXPECT_THAT(paths(f->variables()), ElementsAre("d1/kernel", "d1/bias", "d2/kernel", "d2/bias"));
  EXPECT_EQ(Model::functional(in, out)->name(), "functional_1");
}

std::shared_ptr<Sequential> seq(std::vector<std::shared_ptr<Layer>> layers, std::string name,
                                std::optional<Shape> input_shape = std::nullopt) {
  return std::make_shared<Sequential>(
      std::move(layers), SequentialOptions{.name = std::move(name), .input_shape = input_shape});
}

TEST_F(PathsTest, SequentialBuiltWithAnInputOrOnItsFirstCall) {
  auto with_input = seq({dense(4, "d1"), dense(2, "d2")}, "", Shape{3});
  EXPECT_EQ(with_input->name(), "sequential");
  EXPECT_THAT(paths(with_input->variables()),
              ElementsAre("sequential/d1/kernel", "sequential/d1/bias", "sequential/d2/kernel",
                          "sequential/d2/bias"));
  clear_session();
  auto on_call = seq({dense(4), dense(2)}, "");
  (*on_call)(ones({2, 3}));
  EXPECT_THAT(paths(on_call->variables()),
              ElementsAre("sequential/dense/kernel", "sequential/dense/bias",
                          "sequential/dense_1/kernel", "sequential/dense_1/bias"));
}

class InnerBlock : public Model {
 public:
  InnerBlock() { d1 = track("dense", dense(4, "d1")); }
  Tensor call(const Tensor& x) override { return (*d1)(x); }
  std::shared_ptr<Dense> d1;
};

class OuterModel : public Model {
 public:
  OuterModel() { block = track("block", std::make_shared<InnerBlock>()); }
  Tensor call(const Tensor& x) override { return (*block)(x); }
  std::shared_ptr<InnerBlock> block;
};

TEST_F(PathsTest, NestedSubclassedModels) {
  auto m = std::make_shared<OuterModel>();
  EXPECT_EQ(m->name(), "outer_model");
  EXPECT_EQ(m->block->name(), "inner_block");
  (*m)(ones({2, 3}));
  EXPECT_THAT(paths(m->variables()),
              ElementsAre("outer_model/inner_block/d1/kernel", "outer_model/inner_block/d1/bias"));
}

TEST_F(PathsTest, FunctionalModelReusedInsideAnotherModelKeepsItsPaths) {
  Tensor in = Input({3}, 2);
  Tensor out = (*dense(4, "d1"))(in);
  auto inner = Model::functional(in, out);
  auto outer = seq({inner, dense(2, "d2")}, "outer");
  (*outer)(ones({2, 3}));
  EXPECT_THAT(paths(outer->variables()),
              ElementsAre("d1/kernel", "d1/bias", "outer/d2/kernel", "outer/d2/bias"));
}

TEST_F(PathsTest, UnbuiltSequentialFirstCalledInAFunctionalGraph) {
  auto s = seq({dense(4, "d1")}, "");
  Tensor in = Input({3}, 2);
  Tensor mid = (*s)(in);
  ASSERT_EQ(mid.producer(), s);  // the model's output keeps its producer
  Tensor out = (*dense(2, "d2"))(mid);
  auto f = Model::functional(in, out);
  EXPECT_THAT(paths(f->variables()),
              ElementsAre("sequential/d1/kernel", "sequential/d1/bias", "d2/kernel", "d2/bias"));
  Tensor y = (*f)(ones({2, 3}));
  EXPECT_EQ(y.shape(), (Shape{2, 2}));
}

TEST_F(PathsTest, SequentialNestedInASequential) {
  auto outer = seq({seq({dense(4, "d1")}, "inner")}, "outer");
  (*outer)(ones({2, 3}));
  EXPECT_THAT(paths(outer->variables()),
              ElementsAre("outer/inner/d1/kernel", "outer/inner/d1/bias"));
  clear_session();
  // An inner Sequential built already (with its input shape) keeps its own paths.
  auto outer2 = seq({seq({dense(4, "d1")}, "inner", Shape{3})}, "outer");
  (*outer2)(ones({2, 3}));
  EXPECT_THAT(paths(outer2->variables()), ElementsAre("inner/d1/kernel", "inner/d1/bias"));
}

TEST_F(PathsTest, Conv2DEmbeddingLayerNormalization) {
  auto conv = std::make_shared<Conv2D>(5, Conv2DOptions{.kernel_size = {3, 2}});
  (*conv)(Input({8, 8, 3}, 1));
  EXPECT_THAT(paths(conv->variables()), ElementsAre("conv2d/kernel", "conv2d/bias"));
  EXPECT_EQ(conv->kernel()->shape(), (Shape{3, 2, 3, 5}));
  EXPECT_EQ(conv->bias()->shape(), (Shape{5}));
  auto emb = std::make_shared<Embedding>(10, 4);
  (*emb)(Input({6}, 1));
  EXPECT_THAT(paths(emb->variables()), ElementsAre("embedding/embeddings"));
  EXPECT_EQ(emb->embeddings()->shape(), (Shape{10, 4}));
  auto ln = std::make_shared<LayerNormalization>();
  (*ln)(Input({6}, 1));
  EXPECT_THAT(paths(ln->variables()),
              ElementsAre("layer_normalization/gamma", "layer_normalization/beta"));
}

class DropModel : public Model {
 public:
  DropModel() {
    d1 = track("d1", dense(4, "d1"));
    dropout = track("dropout", std::make_shared<Dropout>(0.5, DropoutOptions{.seed = 1}));
    d2 = track("d2", dense(2, "d2"));
  }
  Tensor call(const Tensor& x) override { return (*d2)((*dropout)((*d1)(x))); }
  std::shared_ptr<Dense> d1, d2;
  std::shared_ptr<Dropout> dropout;
};

TEST_F(PathsTest, DropoutSeedGeneratorIsCreatedInTheConstructorWithoutParent) {
  auto m = std::make_shared<DropModel>();
  (*m)(ones({2, 3}));
  // Keras' Layer.variables order: own, then each tracked layer's, recursively.
  EXPECT_THAT(paths(m->variables()), ElementsAre("drop_model/d1/kernel", "drop_model/d1/bias",
                                                 "seed_generator/seed_generator_state",
                                                 "drop_model/d2/kernel", "drop_model/d2/bias"));
}

// A plain layer that builds an inner layer in its build(), and adds one in its constructor.
class InnerLayer : public Layer {
 public:
  InnerLayer(std::string name, bool weight_in_constructor) : Layer("", std::move(name)) {
    if (weight_in_constructor) w_ = add_weight({.name = "inner", .shape = {2}});
  }
  Shape compute_output_shape(const Shape& s) const override { return s; }
  VariablePtr w_;

 protected:
  void build(const Shape&) override {
    if (!w_) w_ = add_weight({.name = "inner", .shape = {2}});
  }
  Array call(const Array& x) override { return distribute_tensor(x, x.layout()); }
};

class TrainingLayer : public Layer {
 public:
  TrainingLayer() : Layer("", "") {
    built_in_build = track("inner_layer", std::make_shared<InnerLayer>("inner_layer", false));
    built_in_ctor = track("ctor_layer", std::make_shared<InnerLayer>("ctor_layer", true));
  }
  Shape compute_output_shape(const Shape& s) const override { return s; }
  std::shared_ptr<InnerLayer> built_in_build, built_in_ctor;

 protected:
  void build(const Shape& s) override {
    built_in_build->maybe_build(s);
    built_in_ctor->maybe_build(s);
  }
  Array call(const Array& x) override { return distribute_tensor(x, x.layout()); }
};

TEST_F(PathsTest, WeightsBuiltInANestedBuildGetTheParentPrefixConstructorWeightsDoNot) {
  auto t = std::make_shared<TrainingLayer>();
  EXPECT_EQ(t->name(), "training_layer");
  (*t)(ones({2, 2}));
  EXPECT_EQ(t->built_in_build->w_->path(), "training_layer/inner_layer/inner");
  EXPECT_EQ(t->built_in_ctor->w_->path(), "ctor_layer/inner");
  EXPECT_THAT(paths(t->variables()),
              ElementsAre("training_layer/inner_layer/inner", "ctor_layer/inner"));
}

TEST_F(PathsTest, OutputRelayoutKeysAreLayerPathSlashOutput) {
  LayoutMap map(mesh_, MatchMode::kFullmatch);
  map["dense/output"] = {"data", "model"};
  map["my_model/d1/output"] = {"data", "model"};
  auto mp = std::make_shared<ModelParallel>(map);
  DistributionScope scope = mp->scope();
  auto d = dense(8);
  Tensor y = (*d)(mp->distribute_input(HostTensor(DType::kF32, {4, 3})));
  EXPECT_EQ(y.value().layout(), TensorLayout({"data", "model"}, mesh_));
  auto m = std::make_shared<MyModel>(true);
  (*m)(mp->distribute_input(HostTensor(DType::kF32, {4, 3})));
  EXPECT_EQ(m->d1->path(), "my_model/d1");
}

// ---- §C.2 Keras 2 object paths ----

TEST_F(PathsTest, Keras2SubclassedWithDropoutMapsRngStateToTheEmptyKey) {
  LayoutMap map(mesh_, MatchMode::kFirst);
  map["d1.kernel"] = {None, "model"};
  map["d2.bias"] = {"data"};
  std::shared_ptr<DropModel> m;
  {
    LayoutMapScope scope = map.scope();
    m = std::make_shared<DropModel>();
  }
  (*m)(Input({3}, 2));
  EXPECT_THAT(object_paths(m->variables()),
              ElementsAre("d1.kernel", "d1.bias", "dropout.seed_generator.seed_generator_state",
                          "d2.kernel", "d2.bias"));
  const VariablePtr& state = m->dropout->seed_generator()->state();
  EXPECT_EQ(state->layout_key(), "");
  EXPECT_EQ(state->layout(), TensorLayout({None}, mesh_));  // default replicated layout
  EXPECT_EQ(m->d1->kernel()->layout(), TensorLayout({None, "model"}, mesh_));
  EXPECT_EQ(m->d2->bias()->layout(), TensorLayout({"data"}, mesh_));
  // A rule matching the empty string applies to the RNG state, as in Keras 2 (a bare "" key
  // would match every path: re.match("", p) succeeds for any p).
  LayoutMap rng(mesh_, MatchMode::kFirst);
  rng["^$"] = {"data"};
  clear_session();
  {
    LayoutMapScope scope = rng.scope();
    m = std::make_shared<DropModel>();
  }
  (*m)(Input({3}, 2));
  EXPECT_EQ(m->dropout->seed_generator()->state()->layout(), TensorLayout({"data"}, mesh_));
  EXPECT_EQ(m->d1->kernel()->layout(), TensorLayout({None, None}, mesh_));
}

TEST_F(PathsTest, Keras2FunctionalAndSequentialAreKeyedByLayerName) {
  LayoutMap map(mesh_, MatchMode::kFirst);
  map["d1.kernel"] = {None, "model"};
  std::shared_ptr<Model> f;
  std::shared_ptr<Sequential> s;
  {
    LayoutMapScope scope = map.scope();
    Tensor in = Input({3}, 2);
    f = Model::functional(in, (*dense(2, "d2"))((*dense(4, "d1"))(in)));
    s = seq({dense(4, "d1"), dense(2, "d2")}, "", Shape{3});
  }
  EXPECT_THAT(object_paths(f->variables()),
              ElementsAre("d1.kernel", "d1.bias", "d2.kernel", "d2.bias"));
  EXPECT_THAT(object_paths(s->variables()),
              ElementsAre("d1.kernel", "d1.bias", "d2.kernel", "d2.bias"));
  EXPECT_EQ(f->variables()[0]->layout(), TensorLayout({None, "model"}, mesh_));
  EXPECT_EQ(s->variables()[0]->layout(), TensorLayout({None, "model"}, mesh_));
}

class Keras2Block : public Model {
 public:
  Keras2Block() { d = track("dense", dense(4)); }
  Tensor call(const Tensor& x) override { return (*d)(x); }
  std::shared_ptr<Dense> d;
};

class Keras2Outer : public Model {
 public:
  Keras2Outer() {
    block = track("block", std::make_shared<Keras2Block>());
    blocks = track_list("blocks", std::vector<std::shared_ptr<Dense>>{dense(4), dense(4)});
  }
  Tensor call(const Tensor& x) override { return (*blocks[1])((*blocks[0])((*block)(x))); }
  std::shared_ptr<Keras2Block> block;
  std::vector<std::shared_ptr<Dense>> blocks;
};

TEST_F(PathsTest, Keras2NestedAttributesAndLists) {
  LayoutMap map(mesh_, MatchMode::kFirst);
  map["block.dense.kernel"] = {None, "model"};
  map["blocks.1.kernel"] = {"model", None};
  std::shared_ptr<Keras2Outer> m;
  {
    LayoutMapScope scope = map.scope();
    m = std::make_shared<Keras2Outer>();
  }
  (*m)(Input({4}, 2));
  EXPECT_THAT(object_paths(m->variables()),
              ElementsAre("block.dense.kernel", "block.dense.bias", "blocks.0.kernel",
                          "blocks.0.bias", "blocks.1.kernel", "blocks.1.bias"));
  EXPECT_EQ(m->block->d->kernel()->layout(), TensorLayout({None, "model"}, mesh_));
  EXPECT_EQ(m->blocks[1]->kernel()->layout(), TensorLayout({"model", None}, mesh_));
}

TEST_F(PathsTest, Keras2FunctionalReusedInAnotherModelKeepsInnerKeys) {
  LayoutMap map(mesh_, MatchMode::kFirst);
  map["d1.kernel"] = {None, "model"};
  std::shared_ptr<Model> inner, outer;
  {
    LayoutMapScope scope = map.scope();
    Tensor in = Input({3}, 2);
    inner = Model::functional(in, (*dense(4, "d1"))(in));
    Tensor in2 = Input({3}, 2);
    outer = Model::functional(in2, (*dense(2, "d2"))((*inner)(in2)));
  }
  EXPECT_THAT(object_paths(outer->variables()),
              ElementsAre("d1.kernel", "d1.bias", "d2.kernel", "d2.bias"));
  EXPECT_EQ(outer->variables()[0]->layout(), TensorLayout({None, "model"}, mesh_));
}

// A custom layer keeping its weight "kernel" under the attribute `_weight`.
class SubclassLayer : public Layer {
 public:
  SubclassLayer() : Layer("", "") {}
  Shape compute_output_shape(const Shape& s) const override { return s; }

 protected:
  void build(const Shape& s) override {
    add_weight({.name = "kernel", .shape = {s.back()}}, "_weight");
  }
  Array call(const Array& x) override { return distribute_tensor(x, x.layout()); }
};

TEST_F(PathsTest, Keras2AttributeNameIsTheKeyNotTheVariableName) {
  LayoutMap map(mesh_, MatchMode::kFirst);
  map["subclass_layer._weight"] = {"model"};
  std::shared_ptr<Model> f;
  {
    LayoutMapScope scope = map.scope();
    Tensor in = Input({8}, 2);
    f = Model::functional(in, (*std::make_shared<SubclassLayer>())(in));
  }
  const VariablePtr v = f->variables().at(0);
  EXPECT_EQ(v->name(), "kernel");
  EXPECT_EQ(v->object_path(), "subclass_layer._weight");
  EXPECT_EQ(v->path(), "subclass_layer/kernel");
  EXPECT_EQ(v->layout(), TensorLayout({"model"}, mesh_));
}

TEST_F(PathsTest, Keras2Conv2DAndEmbeddingInFunctionalModels) {
  LayoutMap map(mesh_, MatchMode::kFirst);
  std::shared_ptr<Model> f, g;
  {
    LayoutMapScope scope = map.scope();
    Tensor in = Input({8, 8, 3}, 1);
    f = Model::functional(in, (*std::make_shared<Conv2D>(4))(in));
    Tensor ids = Input({5}, 1);
    g = Model::functional(ids, (*std::make_shared<Embedding>(10, 4))(ids));
  }
  EXPECT_THAT(object_paths(f->variables()), ElementsAre("conv2d.kernel", "conv2d.bias"));
  EXPECT_THAT(object_paths(g->variables()), ElementsAre("embedding.embeddings"));
}

}  // namespace
}  // namespace meshlayout
