// Optimizer formulas against a float64 reference over several steps, Keras variable paths and
// order, and the options' errors. Layouts of the slots: optimizer_layout_test.cc; apply's
// checks of the gradients: optimizer_apply_test.cc.
#include <gtest/gtest.h>

#include "meshlayout/core/errors.h"
#include "meshlayout/nn/nn_test_util.h"
#include "meshlayout/testing/test_util.h"
#include "meshlayout/train/optimizer_test_util.h"
#include "meshlayout/train/optimizers.h"

namespace meshlayout {
namespace {

class OptimizerTest : public NnTest {
 protected:
  std::vector<VariablePtr> make_vars(DType dtype = DType::kF32) {
    return make_dense_vars(mesh_, dtype);
  }

  // Uneven splits: kernel (5, 7) over ('data', 'model') (blocks 3+2 by 2+2+2+1), bias (7,)
  // over 'model', scale (3, 4) replicated, under the scope "dense".
  std::vector<VariablePtr> make_uneven_vars(DType dtype) {
    return make_random_vars("dense",
                            {{"kernel", {5, 7}, TensorLayout({"data", "model"}, mesh_)},
                             {"bias", {7}, TensorLayout({"model"}, mesh_)},
                             {"scale", {3, 4}, TensorLayout({None, None}, mesh_)}},
                            dtype);
  }

  // Rank 3 (Adafactor factors the last two dimensions): (3, 6, 8) over (None, 'data', 'model'),
  // (4, 5, 6) over ('data', None, 'model') (6 by 4: uneven), bias (9,) over 'data' (uneven).
  std::vector<VariablePtr> make_rank3_vars(DType dtype) {
    return make_random_vars("dense",
                            {{"kernel", {3, 6, 8}, TensorLayout({None, "data", "model"}, mesh_)},
                             {"kernel2", {4, 5, 6}, TensorLayout({"data", None, "model"}, mesh_)},
                             {"bias", {9}, TensorLayout({"data"}, mesh_)}},
                            dtype);
  }

  // Runs `steps` steps of `kind` with `options` on make_vars() and checks values and slots.
  void check_against_reference(const std::string& kind, const OptimizerOptions& options,
                               DType dtype = DType::kF32, std::vector<std::string> exclude = {},
                               int set = 0) {
    SCOPED_TRACE(kind);
    SCOPED_TRACE(fmt::format("variable set {}", set));
    std::vector<VariablePtr> vars = set == 2   ? make_rank3_vars(dtype)
                                    : set == 1 ? make_uneven_vars(dtype)
                                               : make_vars(dtype);
    std::vector<RefVar> ref_vars;
    for (const VariablePtr& v : vars)
      ref_vars.push_back({to_doubles(v->value().gather()), v->name(), {}, v->shape()});
    auto opt = make_optimizer(kind, options);
    if (!exclude.empty()) opt->exclude_from_weight_decay(exclude);
    RefOptimizer ref(kind, options, exclude);
    const double tol = dtype == DType::kF32 ? 2e-5 : 1e-12;
    for (int step = 0; step < 6; ++step) {
      std::vector<Array> grads;
      std::vector<std::vector<double>> ref_grads;
      for (size_t i = 0; i < vars.size(); ++i) {
        HostTensor g = test_gradient(vars[i]->shape(), dtype, step, static_cast<int>(i));
        ref_grads.push_back(to_doubles(g));
        grads.push_back(distribute_tensor(g, vars[i]->value().layout()));
      }
      std::vector<const Array*> gp;
      for (const Array& g : grads) gp.push_back(&g);
      opt->apply(gp, vars);
      ref.step(ref_vars, ref_grads);
      EXPECT_EQ(opt->iterations(), step + 1);
      for (size_t i = 0; i < vars.size(); ++i) {
        EXPECT_LT(max_rel_error(to_doubles(vars[i]->value().gather()), ref_vars[i].theta), tol)
            << vars[i]->path() << " step " << step;
        std::vector<VariablePtr> slots = opt->slots_of(*vars[i]);
        ASSERT_EQ(slots.size(), ref_vars[i].slots.size());
        for (size_t s = 0; s < slots.size(); ++s) {
          EXPECT_LT(max_rel_error(to_doubles(slots[s]->value().gather()), ref_vars[i].slots[s]),
                    tol)
              << slots[s]->path() << " step " << step;
        }
      }
    }
    EXPECT_EQ(opt->variables()[0]->value().gather().data_as<int32_t>()[0], 6);
  }
};

TEST_F(OptimizerTest, SgdMatchesTheReference) {
  check_against_reference("sgd", {});
  check_against_reference("sgd", {.learning_rate = 0.05, .momentum = 0.9});
  check_against_reference("sgd", {.learning_rate = 0.05, .momentum = 0.9, .nesterov = true});
  check_against_reference("sgd", {.weight_decay = 0.1, .momentum = 0.5});
  check_against_reference("sgd", {.clipvalue = 0.5, .momentum = 0.3});
  check_against_reference("sgd", {.momentum = 0.9, .nesterov = true}, DType::kF64);
}

TEST_F(OptimizerTest, AdamMatchesTheReference) {
  check_against_reference("adam", {});
  check_against_reference("adam", {.learning_rate = 0.01, .amsgrad = true});
  check_against_reference("adam", {.weight_decay = 0.05});
  check_against_reference("adam", {.clipnorm = 1.0});
  check_against_reference("adam", {.global_clipnorm = 0.7, .beta_1 = 0.8, .epsilon = 1e-3});
  check_against_reference("adam", {.learning_rate = 0.01, .amsgrad = true}, DType::kF64);
}

TEST_F(OptimizerTest, AdamWMatchesTheReference) {
  check_against_reference("adamw", {});
  check_against_reference("adamw", {.learning_rate = 0.01, .weight_decay = 0.1});
  check_against_reference("adamw", {.learning_rate = 0.01, .weight_decay = 0.1}, DType::kF32,
                          {"bias"});
  check_against_reference("adamw", {.learning_rate = 0.01, .weight_decay = 0.1}, DType::kF64);
}

std::vector<std::string> paths(const Optimizer& opt) {
  std::vector<std::string> out;
  for (const VariablePtr& v : opt.variables()) out.push_back(v->path());
  return out;
}

TEST_F(OptimizerTest, RmspropMatchesTheReference) {
  check_against_reference("rmsprop", {});
  check_against_reference("rmsprop", {}, DType::kF32, {}, true);
  check_against_reference("rmsprop", {.learning_rate = 0.01, .momentum = 0.9});
  check_against_reference("rmsprop",
                          {.learning_rate = 0.01, .arguments = {{"centered", true}, {"rho", 0.8}}},
                          DType::kF32, {}, true);
  check_against_reference(
      "rmsprop",
      {.learning_rate = 0.01, .momentum = 0.5, .epsilon = 1e-3, .arguments = {{"centered", true}}},
      DType::kF64, {}, true);
  check_against_reference("rmsprop", {.weight_decay = 0.1, .clipnorm = 1.0, .momentum = 0.3});
  check_against_reference("rmsprop", {.global_clipnorm = 0.7}, DType::kF64);
}

TEST_F(OptimizerTest, AdagradMatchesTheReference) {
  check_against_reference("adagrad", {});
  check_against_reference("adagrad", {}, DType::kF32, {}, true);
  check_against_reference(
      "adagrad", {.learning_rate = 0.05, .arguments = {{"initial_accumulator_value", 0.5}}},
      DType::kF64, {}, true);
  check_against_reference(
      "adagrad",
      {.learning_rate = 0.05, .epsilon = 1e-3, .arguments = {{"initial_accumulator_value", 0.0}}});
  check_against_reference("adagrad", {.weight_decay = 0.1, .clipvalue = 0.5}, DType::kF32,
                          {"bias"});
}

TEST_F(OptimizerTest, LionMatchesTheReference) {
  check_against_reference("lion", {});
  check_against_reference("lion", {}, DType::kF32, {}, true);
  check_against_reference("lion", {.learning_rate = 0.01, .beta_1 = 0.5, .beta_2 = 0.9},
                          DType::kF64, {}, true);
  check_against_reference("lion", {.weight_decay = 0.5, .global_clipnorm = 1.0});
  check_against_reference("lion", {.learning_rate = 0.01, .clipnorm = 0.5, .beta_1 = 1.0},
                          DType::kF64);
}

// Slots, their paths and order as Keras: RMSprop makes each slot for every variable before the
// next; Adagrad's accumulator starts at initial_accumulator_value; each slot in its variable's
// layout.
TEST_F(OptimizerTest, NewOptimizersHaveKerasPathsAndLayouts) {
  std::vector<VariablePtr> vars = make_vars();
  auto rms = make_optimizer("rmsprop", {.name = stable_optimizer_name("rmsprop"),
                                        .momentum = 0.9,
                                        .arguments = {{"centered", true}}});
  rms->build(vars);
  EXPECT_EQ(paths(*rms),
            (std::vector<std::string>{
                "rmsprop/iteration", "rmsprop/learning_rate", "rmsprop/dense_kernel_velocity",
                "rmsprop/dense_bias_velocity", "rmsprop/dense_kernel_momentum",
                "rmsprop/dense_bias_momentum", "rmsprop/dense_kernel_average_gradient",
                "rmsprop/dense_bias_average_gradient"}));
  auto plain = make_optimizer("RMSprop", {.name = "r"});
  plain->build(vars);
  EXPECT_EQ(paths(*plain),
            (std::vector<std::string>{"r/iteration", "r/learning_rate", "r/dense_kernel_velocity",
                                      "r/dense_bias_velocity"}));
  auto adagrad = make_optimizer("Adagrad", {.name = stable_optimizer_name("adagrad"),
                                            .arguments = {{"initial_accumulator_value", 0.25}}});
  adagrad->build(vars);
  EXPECT_EQ(paths(*adagrad), (std::vector<std::string>{"adagrad/iteration", "adagrad/learning_rate",
                                                       "adagrad/dense_kernel_accumulator",
                                                       "adagrad/dense_bias_accumulator"}));
  for (double x : to_doubles(adagrad->slots_of(*vars[0])[0]->value().gather())) EXPECT_EQ(x, 0.25);
  auto lion = make_optimizer("LION", {.name = stable_optimizer_name("lion")});
  lion->build(vars);
  EXPECT_EQ(paths(*lion),
            (std::vector<std::string>{"lion/iteration", "lion/learning_rate",
                                      "lion/dense_kernel_momentum", "lion/dense_bias_momentum"}));
  for (const Optimizer* opt : {rms.get(), adagrad.get(), lion.get()}) {
    for (const VariablePtr& v : vars) {
      for (const VariablePtr& slot : opt->slots_of(*v)) {
        EXPECT_EQ(slot->value().layout(), v->value().layout()) << slot->path();
        EXPECT_EQ(slot->dtype(), v->dtype()) << slot->path();
      }
    }
  }
  // Without a name: auto_name of the Keras class (to_snake_case("RMSprop") is "rm_sprop").
  clear_session();
  EXPECT_EQ(RMSprop().name(), "rm_sprop");
  EXPECT_EQ(Adagrad().name(), "adagrad");
  EXPECT_EQ(Lion().name(), "lion");
  EXPECT_EQ(stable_optimizer_name("RMSPROP"), "rmsprop");
  EXPECT_EQ(RMSprop({.momentum = 0.5}).options().momentum, 0.5);
  EXPECT_EQ(Lion().options().beta_2, 0.99);
  EXPECT_EQ(Adagrad().options().initial_accumulator_value, 0.1);
}

TEST_F(OptimizerTest, NewOptimizersCheckTheirArguments) {
  std::string msg = testing::ErrorMessage([] { RMSprop({.arguments = {{"rho", 1.5}}}); });
  EXPECT_NE(msg.find("rho=1.5"), std::string::npos) << msg;
  msg = testing::ErrorMessage([] { RMSprop({.momentum = -0.5}); });
  EXPECT_NE(msg.find("momentum=-0.5"), std::string::npos) << msg;
  msg = testing::ErrorMessage([] {
    make_optimizer("rmsprop", {.beta_1 = 0.5, .arguments = {{"nesterov_x", true}}});
  });
  EXPECT_NE(msg.find("Argument(s) not recognized by RMSprop: beta_1=0.5, nesterov_x=true"),
            std::string::npos)
      << msg;
  msg = testing::ErrorMessage([] {
    make_optimizer("rmsprop", {.arguments = {{"centered", 1.0}}});
  });
  EXPECT_NE(msg.find("`centered` must be a bool"), std::string::npos) << msg;
  msg = testing::ErrorMessage([] { make_optimizer("rmsprop", {.arguments = {{"rho", true}}}); });
  EXPECT_NE(msg.find("`rho` must be a float. Received: rho=true"), std::string::npos) << msg;
  msg = testing::ErrorMessage([] {
    Adagrad({.arguments = {{"initial_accumulator_value", -1.0}}});
  });
  EXPECT_NE(msg.find("initial_accumulator_value=-1"), std::string::npos) << msg;
  msg = testing::ErrorMessage([] { Adagrad({.momentum = 0.9}); });
  EXPECT_NE(msg.find("Argument(s) not recognized by Adagrad: momentum=0.9"), std::string::npos)
      << msg;
  msg = testing::ErrorMessage([] { Lion({.beta_1 = 0.0}); });
  EXPECT_NE(msg.find("beta_1=0"), std::string::npos) << msg;
  msg = testing::ErrorMessage([] { Lion({.beta_2 = 1.5}); });
  EXPECT_NE(msg.find("beta_2=1.5"), std::string::npos) << msg;
  msg = testing::ErrorMessage([] { Lion({.epsilon = 1e-3}); });
  EXPECT_NE(msg.find("Argument(s) not recognized by Lion: epsilon=0.001"), std::string::npos)
      << msg;
  msg = testing::ErrorMessage([] { Adam({.beta_1 = 0.5, .arguments = {{"beta_1", 0.6}}}); });
  EXPECT_NE(msg.find("`beta_1` is given twice"), std::string::npos) << msg;
  // Adam's own options come from the arguments too; one not recognised names its class.
  EXPECT_EQ(Adam({.arguments = {{"amsgrad", true}}}).amsgrad(), true);
  msg = testing::ErrorMessage([] { AdamW({.arguments = {{"rho", 0.9}}}); });
  EXPECT_NE(msg.find("Argument(s) not recognized by AdamW: rho=0.9"), std::string::npos) << msg;
}

// Adafactor's row and column means cross sharded dimensions (the kernel's columns over 'model',
// both dimensions unevenly, rank 3 with the factored rows over 'data'), its RMS spans every
// shard; rank < 2 variables are not factored.
TEST_F(OptimizerTest, AdafactorMatchesTheReference) {
  for (int set : {0, 1, 2}) {
    check_against_reference("adafactor", {}, DType::kF32, {}, set);
    check_against_reference("adafactor",
                            {.learning_rate = 0.05, .arguments = {{"clip_threshold", 0.3}}},
                            DType::kF64, {}, set);
  }
  check_against_reference("adafactor",
                          {.learning_rate = 2.0,
                           .weight_decay = 0.01,
                           .arguments = {{"epsilon_2", 0.5}, {"beta_2_decay", -0.5}}},
                          DType::kF64, {"bias"}, 2);
  check_against_reference("adafactor",
                          {.learning_rate = 2.0,
                           .global_clipnorm = 1.0,
                           .arguments = {{"relative_step", false}, {"epsilon_1", 1e-3}}},
                          DType::kF32, {}, 1);
}

TEST_F(OptimizerTest, AdafactorSlotsFollowTheVariableLayout) {
  std::vector<VariablePtr> vars = make_rank3_vars(DType::kF32);
  auto opt = make_optimizer("Adafactor", {.name = stable_optimizer_name("adafactor")});
  opt->build(vars);
  EXPECT_EQ(paths(*opt),
            (std::vector<std::string>{"adafactor/iteration", "adafactor/learning_rate",
                                      "adafactor/dense_kernel_r", "adafactor/dense_kernel_c",
                                      "adafactor/dense_kernel_velocity",
                                      "adafactor/dense_kernel2_r", "adafactor/dense_kernel2_c",
                                      "adafactor/dense_kernel2_velocity", "adafactor/dense_bias_r",
                                      "adafactor/dense_bias_c", "adafactor/dense_bias_velocity"}));
  std::vector<VariablePtr> k = opt->slots_of(*vars[0]);
  EXPECT_EQ(k[0]->shape(), (Shape{3, 6}));
  EXPECT_EQ(k[0]->value().layout(), TensorLayout({None, "data"}, mesh_));
  EXPECT_EQ(k[1]->shape(), (Shape{3, 8}));
  EXPECT_EQ(k[1]->value().layout(), TensorLayout({None, "model"}, mesh_));
  EXPECT_EQ(k[2]->value().layout(), vars[0]->value().layout());
  std::vector<VariablePtr> k2 = opt->slots_of(*vars[1]);
  EXPECT_EQ(k2[0]->value().layout(), TensorLayout({"data", None}, mesh_));
  EXPECT_EQ(k2[1]->value().layout(), TensorLayout({"data", "model"}, mesh_));
  std::vector<VariablePtr> b = opt->slots_of(*vars[2]);
  EXPECT_EQ(b[0]->shape(), Shape{});
  EXPECT_EQ(b[1]->shape(), Shape{});
  EXPECT_EQ(b[2]->value().layout(), vars[2]->value().layout());
  // slot_bytes_per_device counts the factored slots' own boxes: device 0 holds kernel r (3, 3),
  // c (3, 2), velocity (3, 3, 2); kernel2 r (2, 5), c (2, 2), velocity (2, 5, 2); bias 2
  // scalars and (5,) — in float32.
  std::vector<SlotFootprint> f;
  for (const VariablePtr& v : vars) f.push_back({v->shape(), v->dtype(), v->value().layout()});
  EXPECT_EQ(opt->slot_bytes_per_device(f).at(0), 4 * ((9 + 6 + 18) + (10 + 4 + 20) + (2 + 5)));
  // ZeRO-1 and bad arguments are refused, naming the value.
  std::string msg = testing::ErrorMessage([] { Adafactor({.shard_slots_over = "data"}); });
  EXPECT_NE(msg.find("shard_slots_over='data'"), std::string::npos) << msg;
  msg = testing::ErrorMessage([] { Adafactor({.arguments = {{"clip_threshold", 0.0}}}); });
  EXPECT_NE(msg.find("clip_threshold=0"), std::string::npos) << msg;
  msg = testing::ErrorMessage([] { Adafactor({.arguments = {{"beta_2_decay", 0.5}}}); });
  EXPECT_NE(msg.find("beta_2_decay=0.5"), std::string::npos) << msg;
  msg = testing::ErrorMessage([] { Adafactor({.epsilon = 1e-7}); });
  EXPECT_NE(msg.find("Argument(s) not recognized by Adafactor: epsilon=1e-07"), std::string::npos)
      << msg;
  EXPECT_EQ(Adafactor().options().epsilon_1, 1e-30);
}

// One element, one step, by hand: the decay uses the pre-update θ and comes first.
TEST_F(OptimizerTest, AdamWDecaysThePreUpdateValueFirst) {
  auto v = std::make_shared<Variable>(VariableSpec{
      .name = "w", .shape = {1}, .dtype = DType::kF64, .initializer = Initializer::constant(2.0)});
  v->materialize(TensorLayout({None}, mesh_));
  AdamW opt({.learning_rate = 0.1, .weight_decay = 0.5});
  Array g =
      distribute_tensor(test_gradient({1}, DType::kF64, 0, 1), v->value().layout());  // 1.5 sin 0.7
  const double grad = to_doubles(g.gather())[0];
  const Array* gp[] = {&g};
  VariablePtr vp[] = {v};
  opt.apply(gp, vp);
  const double lr = static_cast<float>(0.1);
  const double m = 0.1 * grad, vel = 0.001 * grad * grad;
  const double adam = lr * std::sqrt(1 - 0.999) / (1 - 0.9) * m / (std::sqrt(vel) + 1e-7);
  const double decay_first = 2.0 - 2.0 * 0.5 * lr - adam;
  const double decay_after = (2.0 - adam) * (1 - 0.5 * lr);
  const double got = to_doubles(v->value().gather())[0];
  EXPECT_NEAR(got, decay_first, 1e-12);
  EXPECT_GT(std::abs(got - decay_after), 1e-3);
}

TEST_F(OptimizerTest, VariablePathsAndOrderAreKeras) {
  std::vector<VariablePtr> vars = make_vars();
  Adam adam;
  EXPECT_EQ(paths(adam), (std::vector<std::string>{"adam/iteration", "adam/learning_rate"}));
  adam.build(vars);
  EXPECT_EQ(paths(adam),
            (std::vector<std::string>{"adam/iteration", "adam/learning_rate",
                                      "adam/dense_kernel_momentum", "adam/dense_kernel_velocity",
                                      "adam/dense_bias_momentum", "adam/dense_bias_velocity"}));
  Adam ams({.amsgrad = true});  // the second Adam of the session: "adam_1" (Keras >= 3.15)
  ams.build(vars);
  EXPECT_EQ(paths(ams), (std::vector<std::string>{
                            "adam_1/iteration", "adam_1/learning_rate",
                            "adam_1/dense_kernel_momentum", "adam_1/dense_kernel_velocity",
                            "adam_1/dense_bias_momentum", "adam_1/dense_bias_velocity",
                            "adam_1/dense_kernel_velocity_hat", "adam_1/dense_bias_velocity_hat"}));
  SGD plain;
  plain.build(vars);
  EXPECT_EQ(paths(plain), (std::vector<std::string>{"sgd/iteration", "sgd/learning_rate"}));
  SGD momentum({.name = "sgd_m", .momentum = 0.9});
  momentum.build(vars);
  EXPECT_EQ(paths(momentum),
            (std::vector<std::string>{"sgd_m/iteration", "sgd_m/learning_rate",
                                      "sgd_m/dense_kernel_momentum", "sgd_m/dense_bias_momentum"}));
  AdamW adamw;
  EXPECT_EQ(paths(adamw)[0], "adam_w/iteration");  // auto_name("AdamW")
  EXPECT_EQ(adamw.weight_decay(), 0.004);
  // iteration is an int, non-trainable; learning_rate the F32 value; slots zeros, non-trainable.
  const std::vector<VariablePtr> all = adam.variables();
  EXPECT_EQ(all[0]->dtype(), DType::kI32);
  EXPECT_FALSE(all[0]->trainable());
  EXPECT_EQ(all[1]->value().gather().data_as<float>()[0], 0.001f);
  for (size_t i = 2; i < all.size(); ++i) {
    EXPECT_FALSE(all[i]->trainable());
    for (double x : to_doubles(all[i]->value().gather())) EXPECT_EQ(x, 0.0);
  }
  // build is once only, as Keras.
  adam.build(vars);
  EXPECT_EQ(adam.variables().size(), 6u);
}

TEST_F(OptimizerTest, ArgumentErrors) {
  std::string msg = testing::ErrorMessage([] { Adam({.clipnorm = 1.0, .clipvalue = 0.5}); });
  EXPECT_NE(msg.find("Only one of `clipnorm`, `clipvalue` and `global_clipnorm`"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("clipvalue=0.5"), std::string::npos) << msg;
  msg = testing::ErrorMessage([] { SGD({.momentum = 1.5}); });
  EXPECT_NE(msg.find("momentum=1.5"), std::string::npos) << msg;
  EXPECT_THROW(SGD({.momentum = -0.1}), ValueError);
  msg = testing::ErrorMessage([] { make_optimizer("nadam"); });
  EXPECT_NE(msg.find("'nadam'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'adafactor', 'adagrad', 'adam', 'adamw', 'lion', 'rmsprop', 'sgd'"),
            std::string::npos)
      << msg;
  msg = testing::ErrorMessage([] { make_optimizer("sgd", {.beta_1 = 0.5}); });
  EXPECT_NE(msg.find("beta_1=0.5"), std::string::npos) << msg;
  EXPECT_THROW(make_optimizer("adam", {.momentum = 0.9}), ValueError);
  EXPECT_THROW(Adam({.name = "a/b"}), ValueError);
  clear_session();  // the failed constructions above took numbers, as in Keras
  EXPECT_EQ(make_optimizer("AdamW")->name(), "adam_w");
  EXPECT_EQ(make_optimizer("sgd")->name(), "sgd");
  EXPECT_THROW(Adam().exclude_from_weight_decay({"("}), ValueError);
}

// Keras >= 3.15 (keras PR #22972, optimizer_test.py test_optimizer_auto_naming): optimizers
// without a name are numbered as layers are, by one process-wide counter per name.
TEST_F(OptimizerTest, OptimizersWithoutANameAreNumberedAsKeras) {
  Adam adam_1;
  Adam adam_2;
  SGD sgd_1;
  SGD sgd_2;
  AdamW adamw_1;
  AdamW adamw_2;
  EXPECT_EQ(adam_1.name(), "adam");
  EXPECT_EQ(adam_2.name(), "adam_1");
  EXPECT_EQ(sgd_1.name(), "sgd");
  EXPECT_EQ(sgd_2.name(), "sgd_1");
  EXPECT_EQ(adamw_1.name(), "adam_w");
  EXPECT_EQ(adamw_2.name(), "adam_w_1");
  EXPECT_EQ(adam_2.variables()[0]->path(), "adam_1/iteration");
  // An explicit name takes no number and may repeat; make_optimizer (keras.optimizers.get)
  // numbers as the constructors.
  EXPECT_EQ(Adam({.name = "my_adam"}).name(), "my_adam");
  EXPECT_EQ(Adam({.name = "adam"}).name(), "adam");
  EXPECT_EQ(make_optimizer("adam")->name(), "adam_2");
  EXPECT_EQ(make_optimizer("ADAMW")->name(), "adam_w_2");
  // One counter per name, shared with layers (keras naming.uniquify).
  EXPECT_EQ(auto_name("Adam"), "adam_3");
  EXPECT_EQ(auto_name("dense"), "dense");
  // Arguments a class does not take are refused before a number is taken (as Keras'
  // "Argument(s) not recognized"); a value refused after it (momentum) takes one.
  EXPECT_THROW(SGD({.beta_1 = 0.5}), ValueError);
  EXPECT_THROW(SGD({.momentum = 2.0}), ValueError);
  EXPECT_EQ(SGD().name(), "sgd_3");
  // clear_session() starts every counter again.
  clear_session();
  EXPECT_EQ(Adam().name(), "adam");
  EXPECT_EQ(make_optimizer("sgd")->name(), "sgd");
}

// State saved under an optimizer's paths must load into an optimizer made in another process,
// whatever that process made before: stable_optimizer_name gives Keras <= 3.14's fixed names.
TEST_F(OptimizerTest, StableNamesDoNotDependOnWhatTheProcessMadeBefore) {
  EXPECT_EQ(stable_optimizer_name("sgd"), "SGD");
  EXPECT_EQ(stable_optimizer_name("Adam"), "adam");
  EXPECT_EQ(stable_optimizer_name("adamw"), "adamw");
  try {
    stable_optimizer_name("nadam");
    ADD_FAILURE() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("'nadam'"), std::string::npos) << e.what();
  }
  std::vector<VariablePtr> vars = make_vars();
  auto first = make_optimizer("adamw", {.name = stable_optimizer_name("adamw")});
  AdamW unnamed;  // takes a number, not the stable name's
  auto second = make_optimizer("adamw", {.name = stable_optimizer_name("adamw")});
  first->build(vars);
  second->build(vars);
  EXPECT_EQ(unnamed.name(), "adam_w");
  EXPECT_EQ(paths(*first), paths(*second));
  EXPECT_EQ(paths(*second)[2], "adamw/dense_kernel_momentum");
}

}  // namespace
}  // namespace meshlayout
