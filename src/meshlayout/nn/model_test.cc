#include "meshlayout/nn/model.h"
#include "meshlayout/nn/layers/core/dense.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/layout_map/layout_map_scope.h"

namespace meshlayout {
namespace {

using ::testing::HasSubstr;

class ModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    set_device_count(8);
    clear_session();
  }
  void TearDown() override { reset_device_count(); }
  DeviceMesh mesh_ = DeviceMesh::from_string("mesh[data=2,model=4]");
};

// A transformer MLP block, Megatron-style: up-projection column-parallel, down row-parallel.
class MlpBlock : public Model {
 public:
  MlpBlock() : Model("mlp_block") {
    up = track("up", std::make_shared<Dense>(64, DenseOptions{.activation = Activation::kGelu}));
    down = track("down", std::make_shared<Dense>(16));
  }
  Tensor call(const Tensor& x) override { return (*down)((*up)(x)); }
  std::shared_ptr<Dense> up, down;
};

std::vector<double> dense_reference(const std::vector<double>& x, int64_t rows, int64_t k,
                                    const HostTensor& w, const HostTensor& b, bool gelu) {
  const int64_t n = w.shape()[1];
  std::vector<double> y(static_cast<size_t>(rows * n));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < n; ++c) {
      double s = b.data_as<float>()[c];
      for (int64_t i = 0; i < k; ++i)
        s += x[static_cast<size_t>(r * k + i)] * w.data_as<float>()[i * n + c];
      y[static_cast<size_t>(r * n + c)] = gelu ? 0.5 * s * (1 + std::erf(s / std::sqrt(2.0))) : s;
    }
  }
  return y;
}

TEST_F(ModelTest, MegatronMlpRunsShardedAndMatchesAFloat64Reference) {
  LayoutMap rules(mesh_);
  rules["up.kernel"] = {None, "model"};  // column-parallel
  rules["up.bias"] = {"model"};
  rules["down.kernel"] = {"model", None};  // row-parallel: partial sums, all-reduced
  std::shared_ptr<MlpBlock> block;
  {
    LayoutMapScope scope = rules.scope();
    block = std::make_shared<MlpBlock>();
  }
  HostTensor x = HostTensor::random(DType::kF32, {8, 16}, 11);
  Tensor y = (*block)(distribute_tensor(x, TensorLayout({"data", None}, mesh_)));
  EXPECT_EQ(block->up->kernel()->layout(), TensorLayout({None, "model"}, mesh_));
  EXPECT_EQ(block->down->kernel()->layout(), TensorLayout({"model", None}, mesh_));
  EXPECT_EQ(block->down->bias()->layout(), TensorLayout({None}, mesh_));  // no rule: replicated
  EXPECT_EQ(block->up->kernel()->path(), "mlp_block/dense/kernel");
  HostTensor got = y.value().gather();

  std::vector<double> xd(x.data_as<float>(), x.data_as<float>() + x.num_elements());
  auto h = dense_reference(xd, 8, 16, block->up->kernel()->value().gather(),
                           block->up->bias()->value().gather(), true);
  auto want = dense_reference(h, 8, 64, block->down->kernel()->value().gather(),
                              block->down->bias()->value().gather(), false);
  ASSERT_EQ(got.shape(), (Shape{8, 16}));
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(got.data_as<float>()[i], want[i], 1e-5 * std::max(1.0, std::abs(want[i]))) << i;
  }
}

TEST_F(ModelTest, AmbiguousRuleIsRefusedBeforeAnyMemoryIsAllocated) {
  auto rt = default_runtime();
  LayoutMap rules(mesh_);  // search mode: two hits are an error
  rules["kernel"] = {None, "model"};
  rules["up.*"] = {"model", None};
  std::shared_ptr<MlpBlock> block;
  {
    LayoutMapScope scope = rules.scope();
    block = std::make_shared<MlpBlock>();
  }
  std::vector<int64_t> before;
  for (VirtualDevice* d : rt->local_devices()) before.push_back(d->memory().stats().allocations);
  HostTensor x(DType::kF32, {8, 16});
  Array input = distribute_tensor(x, TensorLayout({None, None}, mesh_));
  for (size_t i = 0; i < before.size(); ++i)
    before[i] = rt->local_devices()[i]->memory().stats().allocations;
  try {
    (*block)(std::move(input));
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(),
                 "variable 'up.kernel' with shape (16, 64): Path 'up.kernel' matches multiple "
                 "layout specification keys: ['kernel', 'up.*']. Please make sure each "
                 "tensor/variable path only matches at most one layout specification key in the "
                 "LayoutMap.");
  }
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_EQ(rt->local_devices()[i]->memory().stats().allocations, before[i]);
  }
}

TEST_F(ModelTest, LayoutOfTheWrongRankNamesVariableShapeRuleAndLayout) {
  LayoutMap rules(mesh_);
  rules["down.kernel"] = {"model"};
  std::shared_ptr<MlpBlock> block;
  {
    LayoutMapScope scope = rules.scope();
    block = std::make_shared<MlpBlock>();
  }
  try {
    (*block)(
        distribute_tensor(HostTensor(DType::kF32, {8, 16}), TensorLayout({None, None}, mesh_)));
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(),
                 "variable 'down.kernel' with shape (64, 16) does not fit "
                 "layout[model]@mesh[data=2,model=4]: the layout has 1 dimension, the tensor has 2 "
                 "[from rule 0 ('down.kernel')]");
  }
}

class Blocks : public Model {
 public:
  Blocks() : Model("blocks_model") {
    blocks = track_list("blocks", std::vector<std::shared_ptr<Dense>>{std::make_shared<Dense>(4),
                                                                      std::make_shared<Dense>(4)});
  }
  Tensor call(const Tensor& x) override { return (*blocks[1])((*blocks[0])(x)); }
  std::vector<std::shared_ptr<Dense>> blocks;
};

TEST_F(ModelTest, ListsOfLayersAndAutomaticNamesGiveKerasPaths) {
  LayoutMap rules(mesh_, MatchMode::kFirst);
  rules["blocks.1.kernel"] = {None, "model"};
  std::shared_ptr<Blocks> m;
  {
    LayoutMapScope scope = rules.scope();
    m = std::make_shared<Blocks>();
  }
  (*m)(distribute_tensor(HostTensor(DType::kF32, {2, 4}), TensorLayout({None, None}, mesh_)));
  EXPECT_EQ(m->blocks[0]->name(), "dense");
  EXPECT_EQ(m->blocks[1]->name(), "dense_1");
  EXPECT_EQ(m->blocks[0]->kernel()->object_path(), "blocks.0.kernel");
  EXPECT_EQ(m->blocks[1]->kernel()->path(), "blocks_model/dense_1/kernel");
  EXPECT_EQ(m->blocks[1]->kernel()->layout(), TensorLayout({None, "model"}, mesh_));
  EXPECT_EQ(m->blocks[0]->kernel()->layout(), TensorLayout({None, None}, mesh_));
  EXPECT_EQ(m->variables().size(), 4u);
}

TEST_F(ModelTest, WeightsOutsideAScopeAreMaterialisedAtOnce) {
  auto d = std::make_shared<Dense>(3);
  (*d)(Input({5}, 2));
  EXPECT_FALSE(d->kernel()->is_lazy());
  EXPECT_EQ(d->kernel()->layout()->device_mesh()->size(), 1);
}

}  // namespace
}  // namespace meshlayout
