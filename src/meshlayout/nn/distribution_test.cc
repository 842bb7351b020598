#include "meshlayout/nn/distribution.h"
#include "meshlayout/nn/layers/core/dense.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/nn/model.h"
#include "meshlayout/nn/nn_test_util.h"

namespace meshlayout {
namespace {

using ::testing::HasSubstr;

class DistributionTest : public NnTest {};

std::shared_ptr<Sequential> two_dense() {
  return std::make_shared<Sequential>(
      std::vector<std::shared_ptr<Layer>>{std::make_shared<Dense>(16, DenseOptions{.name = "d1"}),
                                          std::make_shared<Dense>(8, DenseOptions{.name = "d2"})},
      SequentialOptions{.input_shape = Shape{12}});
}

TEST_F(DistributionTest, DataParallelReplicatesVariablesAndSplitsTheBatch) {
  auto dp = std::make_shared<DataParallel>();
  EXPECT_EQ(dp->device_mesh().to_string(), "mesh[batch=8]");
  EXPECT_EQ(dp->batch_dim_name(), "batch");
  std::shared_ptr<Sequential> model;
  {
    DistributionScope scope = dp->scope();
    model = two_dense();
  }
  const auto d1 = std::dynamic_pointer_cast<Dense>(model->layers()[0]);
  EXPECT_EQ(d1->kernel()->layout(), TensorLayout({None, None}, dp->device_mesh()));
  EXPECT_EQ(d1->kernel()->path(), "sequential/d1/kernel");
  Array x = dp->distribute_input(HostTensor::random(DType::kF32, {16, 12}, 1));
  EXPECT_EQ(x.layout(), TensorLayout({"batch", None}, dp->device_mesh()));
  Tensor y = (*model)(std::move(x));
  EXPECT_EQ(y.shape(), (Shape{16, 8}));
}

TEST_F(DistributionTest, ModelParallelKeysVariablesByKeras3PathsAndRelayoutsOutputs) {
  LayoutMap layout_map(mesh_, MatchMode::kFullmatch);
  layout_map[".*/d1/kernel"] = {None, "model"};
  layout_map[".*/d2/kernel"] = {"model", None};
  layout_map["sequential/d1/output"] = {"data", "model"};
  auto mp = std::make_shared<ModelParallel>(layout_map, "data");
  set_distribution(mp);  // the global distribution
  std::shared_ptr<Sequential> model = two_dense();
  set_distribution(nullptr);
  const auto d1 = std::dynamic_pointer_cast<Dense>(model->layers()[0]);
  const auto d2 = std::dynamic_pointer_cast<Dense>(model->layers()[1]);
  EXPECT_EQ(d1->kernel()->layout(), TensorLayout({None, "model"}, mesh_));
  EXPECT_EQ(d2->kernel()->layout(), TensorLayout({"model", None}, mesh_));
  EXPECT_EQ(d1->bias()->layout(), TensorLayout({None}, mesh_));
  HostTensor host = HostTensor::random(DType::kF32, {4, 12}, 2);
  {
    DistributionScope scope = mp->scope();
    Tensor h = (*d1)(mp->distribute_input(host));
    EXPECT_EQ(h.value().layout(), TensorLayout({"data", "model"}, mesh_));  // the output key
  }
  EXPECT_EQ(mp->get_data_layout({4, 12}), TensorLayout({"data", None}, mesh_));
}

TEST_F(DistributionTest, ScopesNestAndOverrideTheGlobalDistribution) {
  auto a = std::make_shared<DataParallel>();
  LayoutMap map(mesh_);
  auto b = std::make_shared<ModelParallel>(map);
  set_distribution(a);
  EXPECT_EQ(distribution(), a);
  {
    DistributionScope scope = b->scope();
    EXPECT_EQ(distribution(), b);
  }
  EXPECT_EQ(distribution(), a);
  EXPECT_EQ(b->batch_dim_name(), "data");
}

TEST_F(DistributionTest, BadArgumentsAreRefused) {
  try {
    ModelParallel mp{LayoutMap()};
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(),
                 "ModelParallel needs a LayoutMap with a device mesh: LayoutMap(device_mesh)");
  }
  try {
    ModelParallel mp(LayoutMap(mesh_), "batch");
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(),
                 "batch_dim_name 'batch' is not an axis of mesh[data=2,model=4]; its axes "
                 "are ['data', 'model']");
  }
}

TEST_F(DistributionTest, AmbiguousKeras3RuleNamesTheVariablePath) {
  LayoutMap layout_map(mesh_);  // search mode
  layout_map["d1"] = {None, "model"};
  layout_map["kernel"] = {"model", None};
  auto mp = std::make_shared<ModelParallel>(layout_map);
  DistributionScope scope = mp->scope();
  try {
    two_dense();
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("variable 'sequential/d1/kernel' with shape (12, 16): Path "
                                    "'sequential/d1/kernel' matches multiple layout "
                                    "specification keys: ['d1', 'kernel']"));
  }
}

}  // namespace
}  // namespace meshlayout
