#include "meshlayout/ops/matmul_plan.h"

#include <gtest/gtest.h>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"

namespace meshlayout {
namespace {

class MatmulPlanTest : public ::testing::Test {
 protected:
  void SetUp() override { set_device_count(8); }
  void TearDown() override { reset_device_count(); }
  DeviceMesh mesh_{{2, 4}, {"data", "model"}};

  TensorLayout l(const char* text) {
    return TensorLayout::from_string(text).with_device_mesh(mesh_);
  }
  MatmulPlan plan(Shape xs, const char* xl, Shape ws, const char* wl, MatmulOptions o = {},
                  int64_t local_devices = 8) {
    return plan_matmul(ShardGeometry(l(xl), xs), ShardGeometry(l(wl), ws), DType::kF32,
                       local_devices, o);
  }
};

TEST_F(MatmulPlanTest, OutputLayoutTable) {
  EXPECT_EQ(matmul_output_layout(l("data,None"), l("None,None")), l("data,None"));
  EXPECT_EQ(matmul_output_layout(l("None,None"), l("None,model")), l("None,model"));
  EXPECT_EQ(matmul_output_layout(l("data,None"), l("None,model")), l("data,model"));
  EXPECT_EQ(matmul_output_layout(l("data,model"), l("model,None")), l("data,None"));
  EXPECT_EQ(matmul_output_layout(l("None,data"), l("data,model")), l("None,model"));
  EXPECT_EQ(matmul_output_layout(l("data,None,(model)"), l("model,None")), l("data,None,None"));
  // Without a mesh, the result has none either.
  EXPECT_EQ(matmul_output_layout(TensorLayout({"data", None}), TensorLayout({None, "model"})),
            TensorLayout({"data", "model"}));
}

TEST_F(MatmulPlanTest, OutputLayoutRefusesPairsThatNeedAReshard) {
  try {
    matmul_output_layout(l("None,model"), l("None,model"));
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(),
                 "matmul_output_layout: layout[None,model] @ layout[None,model] needs a reshard "
                 "first: x splits K over 'model' but w splits K over None; plan_matmul(x, w) "
                 "shows which reshard matmul makes");
  }
  try {
    matmul_output_layout(l("data,None"), l("None,data"));
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(),
                 "matmul_output_layout: layout[data,None] @ layout[None,data] needs a reshard "
                 "first: axis 'data' splits both x's dimension 0 and w's N dimension; "
                 "plan_matmul(x, w) shows which reshard matmul makes");
  }
  try {
    matmul_output_layout(l("None,(data,model)"), l("model,None"));
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(),
                 "matmul_output_layout: layout[None,(data,model)] @ layout[model,None] needs a "
                 "reshard first: x splits K over ('data', 'model') but w splits K over 'model'; "
                 "plan_matmul(x, w) shows which reshard matmul makes");
  }
  try {
    matmul_output_layout(TensorLayout({None}), l("None,None"));
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(),
                 "matmul_output_layout: x layout layout[None] has rank 1; x needs rank >= 2 "
                 "(..., K)");
  }
}

TEST_F(MatmulPlanTest, PlanTextNamesEveryStep) {
  MatmulPlan p = plan({8, 16}, "data,model", {16, 12}, "model,None");
  EXPECT_EQ(p.to_string(),
            "matmul: x (8, 16) @ w (16, 12) -> (8, 12), F32, on mesh[data=2,model=4]\n"
            "  local products: x layout[data,model] @ w layout[model,None] -> layout[data,None], "
            "partial sums over 'model'\n"
            "  all-reduce over 'model' -> layout[data,None]\n");
  p = plan({8, 16}, "data,model", {16, 12}, "model,None",
           {.output_layout = TensorLayout({{"data", "model"}, None})});
  EXPECT_EQ(p.reduction, MatmulReduction::kReduceScatter);
  EXPECT_EQ(p.to_string(),
            "matmul: x (8, 16) @ w (16, 12) -> (8, 12), F32, on mesh[data=2,model=4]\n"
            "  local products: x layout[data,model] @ w layout[model,None] -> layout[data,None], "
            "partial sums over 'model'\n"
            "  reduce-scatter over 'model' -> layout[(data,model),None]\n");
  p = plan({8, 16}, "data,None", {16, 12}, "None,model");
  EXPECT_EQ(p.to_string(),
            "matmul: x (8, 16) @ w (16, 12) -> (8, 12), F32, on mesh[data=2,model=4]\n"
            "  local products: x layout[data,None] @ w layout[None,model] -> layout[data,model], "
            "no communication\n");
}

TEST_F(MatmulPlanTest, ReshardsTheOperandThatMovesFewerBytes) {
  // Replicated x @ row-sharded w. Small output: slicing x moves nothing and the all-reduce of
  // a (4, 256) output is cheaper than gathering w.
  MatmulPlan small = plan({4, 16}, "None,None", {16, 256}, "model,None");
  EXPECT_TRUE(small.reshard_x);
  EXPECT_FALSE(small.reshard_w);
  EXPECT_EQ(small.x_reshard_bytes, 0);
  EXPECT_EQ(small.x_layout, l("None,model"));
  EXPECT_EQ(small.reduction, MatmulReduction::kAllReduce);
  // Large output: gathering w (3/4 of 16 KiB per device) is cheaper than the all-reduce.
  MatmulPlan large = plan({64, 16}, "None,None", {16, 256}, "model,None");
  EXPECT_FALSE(large.reshard_x);
  EXPECT_TRUE(large.reshard_w);
  EXPECT_EQ(large.w_layout, l("None,None"));
  EXPECT_EQ(large.w_reshard_bytes, 8 * 3 * 4 * 256 * 4);
  EXPECT_EQ(large.reduction, MatmulReduction::kNone);
  EXPECT_EQ(large.to_string(),
            "matmul: x (64, 16) @ w (16, 256) -> (64, 256), F32, on mesh[data=2,model=4]\n"
            "  reshard w -> layout[None,None] (moves 98304 bytes)\n"
            "  local products: x layout[None,None] @ w layout[None,None] -> layout[None,None], "
            "no communication\n");
  // An axis on both x's batch and w's N: the smaller operand is replicated over it.
  MatmulPlan conflict = plan({64, 8}, "data,None", {8, 8}, "None,data");
  EXPECT_TRUE(conflict.reshard_w);
  EXPECT_FALSE(conflict.reshard_x);
  EXPECT_EQ(conflict.w_layout, l("None,None"));
}

TEST_F(MatmulPlanTest, AllReduceAcrossMoreThanTwoProcessesRunsInTwoSteps) {
  DeviceMesh flat({8}, {"x"});
  auto g = [&](const char* text, Shape s) {
    return ShardGeometry(TensorLayout::from_string(text).with_device_mesh(flat), s);
  };
  // 1 process: in-process sums; 2 processes: direct; 4 processes: reduce-scatter + all-gather.
  EXPECT_FALSE(plan_matmul(g("None,x", {8, 16}), g("x,None", {16, 8}), DType::kF32, 8)
                   .all_reduce_in_two_steps);
  EXPECT_FALSE(plan_matmul(g("None,x", {8, 16}), g("x,None", {16, 8}), DType::kF32, 4)
                   .all_reduce_in_two_steps);
  MatmulPlan p = plan_matmul(g("None,x", {8, 16}), g("x,None", {16, 8}), DType::kF32, 2);
  EXPECT_TRUE(p.all_reduce_in_two_steps);
  EXPECT_EQ(p.scatter_layout, TensorLayout({"x", None}, flat));
  EXPECT_EQ(p.to_string(),
            "matmul: x (8, 16) @ w (16, 8) -> (8, 8), F32, on mesh[x=8]\n"
            "  local products: x layout[None,x] @ w layout[x,None] -> layout[None,None], partial "
            "sums over 'x'\n"
            "  all-reduce over 'x' in two steps: reduce-scatter into layout[x,None], then "
            "all-gather -> layout[None,None]\n");
  // mesh[data=2,model=4] over 4 processes: a 'model' group spans 2 processes, direct.
  EXPECT_FALSE(plan({8, 16}, "data,model", {16, 12}, "model,None", {}, 2).all_reduce_in_two_steps);
}

}  // namespace
}  // namespace meshlayout
