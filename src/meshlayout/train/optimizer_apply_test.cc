// Optimizer::apply (optimizer_apply.cc): the iteration and learning-rate variables follow the
// steps, null gradients are skipped (but not all of them), gradients of another shape, layout
// or count are refused naming the variable and both sides before anything is built, and
// non-trainable or unknown variables are refused. The update formulas: optimizer_test.cc.
#include <gtest/gtest.h>

#include "meshlayout/core/errors.h"
#include "meshlayout/nn/nn_test_util.h"
#include "meshlayout/testing/test_util.h"
#include "meshlayout/train/optimizer_test_util.h"
#include "meshlayout/train/optimizers.h"

namespace meshlayout {
namespace {

class OptimizerApplyTest : public NnTest {};

TEST_F(OptimizerApplyTest, IterationAndLearningRateVariablesFollowTheSteps) {
  std::vector<VariablePtr> vars = make_dense_vars(mesh_);
  SGD opt({.learning_rate = 0.5});
  Array g0 = distribute_tensor(test_gradient({6, 8}, DType::kF32, 0, 0), vars[0]->value().layout());
  Array g1 = distribute_tensor(test_gradient({8}, DType::kF32, 0, 1), vars[1]->value().layout());
  const Array* gp[] = {&g0, &g1};
  opt.apply(gp, vars);
  opt.set_learning_rate(0.25);
  opt.apply(gp, vars);
  EXPECT_EQ(opt.iterations(), 2);
  EXPECT_EQ(opt.variables()[0]->value().gather().data_as<int32_t>()[0], 2);
  EXPECT_EQ(opt.variables()[1]->value().gather().data_as<float>()[0], 0.25f);
  EXPECT_EQ(opt.learning_rate(), 0.25);
}

TEST_F(OptimizerApplyTest, NullGradientsAreSkipped) {
  std::vector<VariablePtr> vars = make_dense_vars(mesh_);
  const std::vector<double> bias_before = to_doubles(vars[1]->value().gather());
  const std::vector<double> kernel_before = to_doubles(vars[0]->value().gather());
  Adam opt;
  Array g0 = distribute_tensor(test_gradient({6, 8}, DType::kF32, 0, 0), vars[0]->value().layout());
  const Array* gp[] = {&g0, nullptr};
  opt.apply(gp, vars);
  EXPECT_EQ(to_doubles(vars[1]->value().gather()), bias_before);
  EXPECT_NE(to_doubles(vars[0]->value().gather()), kernel_before);
  EXPECT_EQ(opt.variables().size(), 6u);  // built with every variable given
  const Array* none[] = {nullptr, nullptr};
  EXPECT_THROW(opt.apply(none, vars), ValueError);
}

TEST_F(OptimizerApplyTest, GradientMismatchesNameTheVariableAndBothSides) {
  std::vector<VariablePtr> vars = make_dense_vars(mesh_);
  Adam opt;
  Array bias_grad =
      distribute_tensor(test_gradient({8}, DType::kF32, 0, 1), vars[1]->value().layout());
  Array wrong_shape = distribute_tensor(test_gradient({6, 4}, DType::kF32, 0, 0),
                                        TensorLayout({None, "model"}, mesh_));
  const Array* gp[] = {&wrong_shape, &bias_grad};
  std::string msg = testing::ErrorMessage([&] { opt.apply(gp, vars); });
  EXPECT_NE(msg.find("'dense/kernel'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(6, 8)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(6, 4)"), std::string::npos) << msg;
  Array wrong_layout = distribute_tensor(test_gradient({6, 8}, DType::kF32, 0, 0),
                                         TensorLayout({"data", None}, mesh_));
  const Array* gl[] = {&wrong_layout, &bias_grad};
  msg = testing::ErrorMessage([&] { opt.apply(gl, vars); });
  EXPECT_NE(msg.find("layout[None,model]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("layout[data,None]"), std::string::npos) << msg;
  EXPECT_FALSE(opt.built()) << "checks come before build";
  EXPECT_EQ(opt.iterations(), 0);
  const Array* one[] = {&bias_grad};
  EXPECT_THROW(opt.apply(one, vars), ValueError);
}

TEST_F(OptimizerApplyTest, NonTrainableAndUnknownVariablesAreRefused) {
  std::vector<VariablePtr> vars = make_dense_vars(mesh_);
  Array g0 = distribute_tensor(test_gradient({6, 8}, DType::kF32, 0, 0), vars[0]->value().layout());
  Array g1 = distribute_tensor(test_gradient({8}, DType::kF32, 0, 1), vars[1]->value().layout());
  const Array* gp[] = {&g0, &g1};
  vars[1]->set_trainable(false);
  SGD opt;
  std::string msg = testing::ErrorMessage([&] { opt.apply(gp, vars); });
  EXPECT_NE(msg.find("'dense/bias' is not trainable"), std::string::npos) << msg;
  vars[1]->set_trainable(true);
  const Array* first[] = {&g0};
  opt.apply(first, std::span<const VariablePtr>(vars).first(1));
  const Array* second[] = {&g1};
  EXPECT_THROW(opt.apply(second, std::span<const VariablePtr>(vars).subspan(1)), NotFoundError);
}

}  // namespace
}  // namespace meshlayout
