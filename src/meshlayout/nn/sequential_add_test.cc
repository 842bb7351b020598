// Sequential::add / pop (keras Sequential.add, pop): a layer added to a built Sequential is
// built on its output under the model's LayoutMap (its Keras 3 path and layout as if it had
// been there from the start: the same outputs as the Sequential built with it); added to an
// unbuilt one it waits for the build; pop restores the output shape; Keras' errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/layout_map/layout_map_scope.h"
#include "meshlayout/nn/layers/core/dense.h"
#include "meshlayout/nn/model.h"

namespace meshlayout {
namespace {

using ::testing::HasSubstr;

class SequentialAddTest : public ::testing::Test {
 protected:
  void SetUp() override {
    set_device_count(8);
    clear_session();
  }
  void TearDown() override { reset_device_count(); }
  DeviceMesh mesh_ = DeviceMesh::from_string("mesh[data=2,model=4]");
  std::shared_ptr<Dense> dense(int64_t units, const std::string& name) {
    return std::make_shared<Dense>(units, DenseOptions{.name = name});
  }
};

TEST_F(SequentialAddTest, AddedLayersBuildUnderTheModelsMapAsIfTheyWereThereFromTheStart) {
  LayoutMap rules(mesh_);
  rules["d2.kernel"] = {"model", None};
  std::shared_ptr<Sequential> grown, whole;
  {
    LayoutMapScope scope = rules.scope();
    grown =
        std::make_shared<Sequential>(std::vector<std::shared_ptr<Layer>>{dense(8, "d1")},
                                     SequentialOptions{.name = "grown", .input_shape = Shape{4}});
  }
  grown->add(dense(3, "d2"));  // outside the scope: the model's recorded map still applies
  ASSERT_EQ(grown->layers().size(), 2u);
  const VariablePtr kernel = grown->layers()[1]->variables()[0];
  EXPECT_EQ(kernel->path(), "grown/d2/kernel");
  EXPECT_EQ(kernel->value().layout(), TensorLayout({"model", None}, mesh_));
  EXPECT_EQ(grown->compute_output_shape({5, 4}), (Shape{5, 3}));
  {
    LayoutMapScope scope = rules.scope();
    clear_session();
    whole = std::make_shared<Sequential>(
        std::vector<std::shared_ptr<Layer>>{dense(8, "d1"), dense(3, "d2")},
        SequentialOptions{.name = "grown", .input_shape = Shape{4}});
  }
  HostTensor x(DType::kF32, {2, 4});
  for (int64_t i = 0; i < 8; ++i) x.data_as<float>()[i] = static_cast<float>(i) / 4 - 1;
  const TensorLayout in({"data", None}, mesh_);
  const HostTensor a = (*grown)(Tensor(distribute_tensor(x, in))).value().gather();
  const HostTensor b = (*whole)(Tensor(distribute_tensor(x, in))).value().gather();
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.num_bytes()), 0);

  EXPECT_EQ(grown->pop()->name(), "d2");
  EXPECT_EQ(grown->compute_output_shape({5, 4}), (Shape{5, 8}));
  EXPECT_EQ(grown->pop()->name(), "d1");
  EXPECT_EQ(grown->compute_output_shape({5, 4}), (Shape{5, 4}));
  try {
    (void)grown->pop();
    ADD_FAILURE() << "popped an empty model";
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(), "There are no layers in the model.");
  }
}

TEST_F(SequentialAddTest, AnUnbuiltModelBuildsWhatWasAddedAtItsFirstCall) {
  std::shared_ptr<Sequential> model;
  {
    LayoutMap rules(mesh_);
    LayoutMapScope scope = rules.scope();
    model = std::make_shared<Sequential>(std::vector<std::shared_ptr<Layer>>{});
  }
  model->add(dense(2, "a"));
  model->add(dense(1, "b"));
  EXPECT_FALSE(model->built());
  const Tensor y = (*model)(Tensor(
      distribute_tensor(HostTensor(DType::kF32, {3, 5}), TensorLayout::replicated(2, mesh_))));
  EXPECT_EQ(y.value().shape(), (Shape{3, 1}));
  EXPECT_EQ(model->variables().size(), 4u);
}

TEST_F(SequentialAddTest, KerasErrors) {
  auto model = std::make_shared<Sequential>(std::vector<std::shared_ptr<Layer>>{dense(2, "a")},
                                            SequentialOptions{.input_shape = Shape{4}});
  try {
    model->add(dense(3, "a"));
    ADD_FAILURE() << "a second layer named a was added";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("should have unique names. Name 'a' is already"));
  }
  EXPECT_THROW(model->add(nullptr), ValueError);
  // A layer that cannot take the model's output leaves the model as it was.
  auto bad = std::make_shared<Dense>(
      2, DenseOptions{.name = "bad", .kernel_layout = TensorLayout({"model", None, None}, mesh_)});
  EXPECT_ANY_THROW(model->add(bad));
  EXPECT_EQ(model->layers().size(), 1u);
}

}  // namespace
}  // namespace meshlayout
