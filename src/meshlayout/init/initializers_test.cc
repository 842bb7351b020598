// Initializer values, names, text forms, errors, fans, variable keys and seeds.
// fill_box_test.cc covers the values fill_box writes.
#include "meshlayout/init/initializers.h"

#include <gtest/gtest.h>

#include <limits>
#include <sstream>
#include <type_traits>

#include "meshlayout/init/init_test_util.h"

namespace meshlayout {
namespace {

using testing::all_dtypes;
using testing::decode;
using testing::fill;
using testing::value_error;
using testing::whole;

static_assert(std::is_nothrow_copy_constructible_v<Initializer>);
static_assert(std::is_default_constructible_v<Initializer>);

TEST(InitializerTest, NamesFollowKindOrder) {
  const std::vector<std::string> want = {"zeros",
                                         "ones",
                                         "constant",
                                         "random_uniform",
                                         "random_normal",
                                         "truncated_normal",
                                         "variance_scaling",
                                         "glorot_uniform",
                                         "glorot_normal",
                                         "he_uniform",
                                         "he_normal",
                                         "lecun_uniform",
                                         "lecun_normal",
                                         "orthogonal"};
  EXPECT_EQ(Initializer::names(), want);
  for (size_t i = 0; i < want.size(); ++i) {
    const Initializer init = Initializer::from_name(want[i]);
    EXPECT_EQ(init.kind(), static_cast<InitializerKind>(i));
    EXPECT_EQ(init.name(), want[i]);
    EXPECT_EQ(init.is_random(), i >= 3) << want[i];
    EXPECT_EQ(init.is_variance_scaling(), i >= 6 && i <= 12) << want[i];
  }
}

TEST(InitializerTest, DefaultsAreKeras) {
  const Initializer u = Initializer::random_uniform();
  EXPECT_EQ(u.minval(), -0.05);
  EXPECT_EQ(u.maxval(), 0.05);
  EXPECT_EQ(u.seed(), std::nullopt);
  for (const Initializer& n : {Initializer::random_normal(), Initializer::truncated_normal()}) {
    EXPECT_EQ(n.mean(), 0.0);
    EXPECT_EQ(n.stddev(), 0.05);
  }
  const Initializer vs = Initializer::variance_scaling();
  EXPECT_EQ(vs.scale(), 1.0);
  EXPECT_EQ(vs.mode(), FanMode::kFanIn);
  EXPECT_EQ(vs.distribution(), VarianceDistribution::kTruncatedNormal);
  EXPECT_EQ(Initializer::constant(0).value(), 0.0);
  EXPECT_EQ(Initializer(), Initializer::zeros());

  struct Named {
    Initializer init;
    double scale;
    FanMode mode;
    VarianceDistribution distribution;
  };
  const Named named[] = {
      {Initializer::glorot_uniform(), 1, FanMode::kFanAvg, VarianceDistribution::kUniform},
      {Initializer::glorot_normal(), 1, FanMode::kFanAvg, VarianceDistribution::kTruncatedNormal},
      {Initializer::he_uniform(), 2, FanMode::kFanIn, VarianceDistribution::kUniform},
      {Initializer::he_normal(), 2, FanMode::kFanIn, VarianceDistribution::kTruncatedNormal},
      {Initializer::lecun_uniform(), 1, FanMode::kFanIn, VarianceDistribution::kUniform},
      {Initializer::lecun_normal(), 1, FanMode::kFanIn, VarianceDistribution::kTruncatedNormal},
  };
  for (const Named& n : named) {
    SCOPED_TRACE(n.init.to_string());
    EXPECT_EQ(n.init.scale(), n.scale);
    EXPECT_EQ(n.init.mode(), n.mode);
    EXPECT_EQ(n.init.distribution(), n.distribution);
  }
}

TEST(InitializerTest, AcceptsKerasClassNamesAndAliases) {
  EXPECT_EQ(Initializer::from_name("GlorotUniform"), Initializer::glorot_uniform());
  EXPECT_EQ(Initializer::from_name("TruncatedNormal"), Initializer::truncated_normal());
  EXPECT_EQ(Initializer::from_name("VarianceScaling"), Initializer::variance_scaling());
  EXPECT_EQ(Initializer::from_name("Zeros"), Initializer::zeros());
  EXPECT_EQ(Initializer::from_name("uniform"), Initializer::random_uniform());
  EXPECT_EQ(Initializer::from_name("normal"), Initializer::random_normal());
  EXPECT_EQ(Initializer::from_name("one"), Initializer::ones());
  EXPECT_EQ(Initializer::from_name("zero"), Initializer::zeros());
}

TEST(InitializerTest, UnknownNameListsTheValidOnes) {
  EXPECT_EQ(
      value_error([] { Initializer::from_name("glorot_unifrom"); }),
      "unknown initializer 'glorot_unifrom'; expected one of ['zeros', 'ones', "
      "'constant', 'random_uniform', 'random_normal', 'truncated_normal', "
      "'variance_scaling', 'glorot_uniform', 'glorot_normal', 'he_uniform', "
      "'he_normal', 'lecun_uniform', 'lecun_normal', 'orthogonal'] (Keras class names such as "
      "'GlorotUniform' work too)");
  // from_name takes names only; from_string takes arguments.
  EXPECT_NE(value_error([] { Initializer::from_name("zeros()"); }), "");
}

TEST(InitializerTest, ToStringGoldens) {
  EXPECT_EQ(Initializer::zeros().to_string(), "zeros");
  EXPECT_EQ(Initializer::ones().to_string(), "ones");
  EXPECT_EQ(Initializer::constant(0.5).to_string(), "constant(value=0.5)");
  EXPECT_EQ(Initializer::constant(3).to_string(), "constant(value=3.0)");
  EXPECT_EQ(Initializer::random_uniform().to_string(), "random_uniform(minval=-0.05, maxval=0.05)");
  EXPECT_EQ(Initializer::random_uniform({.minval = -1, .maxval = 1, .seed = 42}).to_string(),
            "random_uniform(minval=-1.0, maxval=1.0, seed=42)");
  EXPECT_EQ(Initializer::truncated_normal({.stddev = 0.02}).to_string(),
            "truncated_normal(mean=0.0, stddev=0.02)");
  EXPECT_EQ(
      Initializer::variance_scaling(
          {.scale = 2, .mode = FanMode::kFanOut, .distribution = VarianceDistribution::kUniform})
          .to_string(),
      "variance_scaling(scale=2.0, mode='fan_out', distribution='uniform')");
  EXPECT_EQ(Initializer::glorot_uniform().to_string(), "glorot_uniform");
  EXPECT_EQ(Initializer::he_normal(7).to_string(), "he_normal(seed=7)");
  std::ostringstream os;
  os << Initializer::lecun_normal();
  EXPECT_EQ(os.str(), "lecun_normal");
}

TEST(InitializerTest, FromStringRoundTrips) {
  const std::vector<Initializer> inits = {
      Initializer::zeros(),
      Initializer::ones(),
      Initializer::constant(-2.25),
      Initializer::constant(1e-300),
      Initializer::random_uniform({.minval = -0.1, .maxval = 0.3, .seed = 18446744073709551615u}),
      Initializer::random_normal({.mean = 1, .stddev = 0.1}),
      Initializer::truncated_normal({.mean = -1e10, .stddev = 3, .seed = 0}),
      Initializer::variance_scaling({.scale = 0.1,
                                     .mode = FanMode::kFanAvg,
                                     .distribution = VarianceDistribution::kUntruncatedNormal,
                                     .seed = 9}),
      Initializer::glorot_uniform(),
      Initializer::glorot_normal(1),
      Initializer::he_uniform(2),
      Initializer::he_normal(),
      Initializer::lecun_uniform(),
      Initializer::lecun_normal(5),
  };
  for (const Initializer& init : inits) {
    EXPECT_EQ(Initializer::from_string(init.to_string()), init) << init.to_string();
  }
  EXPECT_EQ(Initializer::from_string("  random_normal( stddev = 0.02 ,seed=7 ) "),
            Initializer::random_normal({.stddev = 0.02, .seed = 7}));
  EXPECT_EQ(Initializer::from_string("variance_scaling(mode=\"fan_avg\", distribution='normal')"),
            Initializer::variance_scaling({.mode = FanMode::kFanAvg}));
  EXPECT_EQ(Initializer::from_string("GlorotUniform(seed=None)"), Initializer::glorot_uniform());
  EXPECT_EQ(Initializer::from_string("glorot_uniform()"), Initializer::glorot_uniform());
}

TEST(InitializerTest, FromStringRejectsBadArguments) {
  EXPECT_EQ(value_error([] { Initializer::from_string("random_normal(stdev=1)"); }),
            "initializer 'random_normal' has no argument 'stdev'; its arguments are ['mean', "
            "'stddev', 'seed']");
  EXPECT_EQ(value_error([] { Initializer::from_string("zeros(seed=1)"); }),
            "initializer 'zeros' has no argument 'seed'; its arguments are []");
  EXPECT_EQ(value_error([] { Initializer::from_string("random_uniform(minval=low)"); }),
            "initializer text 'random_uniform(minval=low)': argument 'minval' must be a number, "
            "got low");
  EXPECT_EQ(value_error([] { Initializer::from_string("he_normal(seed=-1)"); }),
            "initializer text 'he_normal(seed=-1)': argument 'seed' must be None or an integer "
            "in [0, 2^64), got -1");
  EXPECT_EQ(value_error([] { Initializer::from_string("variance_scaling(mode='fan_inn')"); }),
            "variance_scaling argument 'mode' is 'fan_inn'; expected one of ['fan_in', "
            "'fan_out', 'fan_avg']");
  EXPECT_EQ(value_error([] { Initializer::from_string("constant(value=1"); }),
            "initializer text 'constant(value=1' has no closing ')'; expected the form "
            "'name(argument=value, …)'");
  EXPECT_EQ(value_error([] { Initializer::from_string("constant(value=1, value=2)"); }),
            "initializer text 'constant(value=1, value=2)': argument 'value' is given twice");
  EXPECT_EQ(value_error([] { Initializer::from_string("constant(1)"); }),
            "initializer text 'constant(1)': expected keyword arguments written name=value, as "
            "in 'random_uniform(minval=-1.0, maxval=1.0)'");
}

TEST(InitializerTest, RejectsInvalidParameters) {
  EXPECT_EQ(value_error([] { Initializer::random_uniform({.minval = 1, .maxval = 0}); }),
            "random_uniform needs minval <= maxval, got minval=1.0, maxval=0.0");
  EXPECT_EQ(value_error([] {
              Initializer::random_uniform({.maxval = std::numeric_limits<double>::infinity()});
            }),
            "random_uniform needs a finite maxval, got maxval=inf");
  EXPECT_EQ(value_error([] { Initializer::truncated_normal({.stddev = -0.5}); }),
            "truncated_normal needs stddev >= 0, got stddev=-0.5");
  EXPECT_EQ(value_error([] { Initializer::variance_scaling({.scale = 0}); }),
            "variance_scaling needs a finite scale > 0, got scale=0.0");
}

TEST(InitializerTest, WithSeedAndEquality) {
  const Initializer a = Initializer::glorot_uniform();
  EXPECT_EQ(a.with_seed(3), Initializer::glorot_uniform(3));
  EXPECT_NE(a.with_seed(3), a);
  EXPECT_EQ(a.with_seed(3).with_seed(std::nullopt), a);
  EXPECT_EQ(Initializer::ones().with_seed(3), Initializer::ones());  // not random: no seed
  // A named form is not its variance_scaling spelling, as in Keras (different classes).
  EXPECT_NE(Initializer::he_normal(),
            Initializer::variance_scaling({.scale = 2, .mode = FanMode::kFanIn}));
}

TEST(FansTest, MatchKerasComputeFans) {
  EXPECT_EQ(compute_fans({}), (Fans{1, 1}));
  EXPECT_EQ(compute_fans({7}), (Fans{7, 7}));
  EXPECT_EQ(compute_fans({784, 128}), (Fans{784, 128}));
  EXPECT_EQ(compute_fans({5, 16, 32}), (Fans{80, 160}));                    // conv1d kernel
  EXPECT_EQ(compute_fans({3, 3, 16, 32}), (Fans{3 * 3 * 16, 3 * 3 * 32}));  // conv2d kernel
  EXPECT_EQ(compute_fans({2, 3, 3, 8, 4}), (Fans{144, 72}));
  EXPECT_EQ(compute_fans({0, 4}), (Fans{0, 4}));
}

TEST(VariableKeyTest, IsFnv1a64) {
  // Published FNV-1a 64-bit test vectors (Fowler/Noll/Vo reference test suite).
  EXPECT_EQ(variable_key(""), 0xcbf29ce484222325u);
  EXPECT_EQ(variable_key("a"), 0xaf63dc4c8601ec8cu);
  EXPECT_EQ(variable_key("foobar"), 0x85944171f73967e8u);
  EXPECT_NE(variable_key("d1.kernel"), variable_key("d2.kernel"));
}

TEST(SeedTest, InitKeyMixesSeedAndVariable) {
  EXPECT_NE(init_key(0, variable_key("a")), init_key(0, variable_key("b")));
  EXPECT_NE(init_key(0, 5), init_key(1, 5));
  EXPECT_NE(init_key(5, 0), init_key(0, 5));
  set_global_seed(77);
  EXPECT_EQ(init_key(std::nullopt, 5), init_key(77, 5));
  set_global_seed(0);
  EXPECT_EQ(init_key(std::nullopt, 5), init_key(0, 5));
  EXPECT_EQ(global_seed(), 0u);
}

TEST(SeedTest, VariablesWithTheSameSeedDiffer) {
  const Shape shape{64, 32};
  for (const std::string& name : Initializer::names()) {
    const Initializer init = Initializer::from_name(name);
    if (!init.is_random()) continue;
    SCOPED_TRACE(name);
    const auto a = fill(init, shape, whole(shape), DType::kF32, variable_key("d1.kernel"));
    const auto b = fill(init, shape, whole(shape), DType::kF32, variable_key("d2.kernel"));
    const auto again = fill(init, shape, whole(shape), DType::kF32, variable_key("d1.kernel"));
    EXPECT_EQ(a, again);
    const auto da = decode(a, DType::kF32), db = decode(b, DType::kF32);
    int equal = 0;
    for (size_t i = 0; i < da.size(); ++i) equal += da[i] == db[i];
    EXPECT_LT(equal, 3) << "of " << da.size();
  }
}

TEST(SeedTest, GlobalSeedDrivesUnseededInitializersOnly) {
  const Shape shape{16, 16};
  const Initializer unseeded = Initializer::he_uniform();
  const Initializer seeded = Initializer::he_uniform(123);
  const auto u0 = fill(unseeded, shape, whole(shape), DType::kF32);
  const auto s0 = fill(seeded, shape, whole(shape), DType::kF32);
  set_global_seed(123);
  const auto u1 = fill(unseeded, shape, whole(shape), DType::kF32);
  const auto s1 = fill(seeded, shape, whole(shape), DType::kF32);
  set_global_seed(0);
  EXPECT_NE(u0, u1);
  EXPECT_EQ(s0, s1);
  EXPECT_EQ(u1, s0);  // global seed 123 == seed 123
  EXPECT_NE(fill(Initializer::he_uniform(124), shape, whole(shape), DType::kF32), s0);
}

TEST(FillBoxTest, RandomInitializerOnNonFloatingDtypeIsAValueError) {
  EXPECT_EQ(value_error([] {
              fill(Initializer::glorot_uniform(), {4, 4}, whole({4, 4}), DType::kI32);
            }),
            "initializer 'glorot_uniform' cannot fill dtype I32: random initializers need a "
            "floating dtype (F32, F64, BF16 or F16)");
  EXPECT_EQ(value_error([] {
              fill(Initializer::random_uniform({.seed = 1}), {3}, whole({3}), DType::kBool);
            }),
            "initializer 'random_uniform(minval=-0.05, maxval=0.05, seed=1)' cannot fill dtype "
            "BOOL: random initializers need a floating dtype (F32, F64, BF16 or F16)");
  // Also for an empty box: the verdict does not depend on the shard.
  EXPECT_NE(value_error([] { fill(Initializer::he_normal(), {0}, whole({0}), DType::kU8); }), "");
}

TEST(FillBoxTest, ZerosOnesConstantsForEveryDtype) {
  const Shape shape{3, 5};
  for (DType dtype : all_dtypes()) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    EXPECT_EQ(decode(fill(Initializer::zeros(), shape, whole(shape), dtype), dtype),
              std::vector<double>(15, 0.0));
    EXPECT_EQ(decode(fill(Initializer::ones(), shape, whole(shape), dtype), dtype),
              std::vector<double>(15, 1.0));
    const double c = dtype == DType::kBool ? 1.0 : dtype == DType::kU8 ? 200.0 : -7.0;
    EXPECT_EQ(decode(fill(Initializer::constant(c), shape, Box{{1, 2}, {2, 3}}, dtype), dtype),
              std::vector<double>(6, c));
  }
  EXPECT_EQ(decode(fill(Initializer::constant(0.1), {2}, whole({2}), DType::kBF16), DType::kBF16),
            std::vector<double>(2, float_from_bf16(bf16_from_float(0.1f))));
  EXPECT_EQ(decode(fill(Initializer::constant(-3), {1}, whole({1}), DType::kBool), DType::kBool),
            std::vector<double>(1, 1.0));
  EXPECT_EQ(decode(fill(Initializer::constant(-9.2e18), {2}, whole({2}), DType::kI64), DType::kI64),
            std::vector<double>(2, -9.2e18));
}

TEST(FillBoxTest, ConstantMustFitIntegerDtypes) {
  EXPECT_EQ(value_error([] { fill(Initializer::constant(0.5), {2}, whole({2}), DType::kI32); }),
            "'constant(value=0.5)' cannot be stored in dtype I32: it takes integral values in "
            "[-2147483648, 2147483647]");
  EXPECT_EQ(value_error([] { fill(Initializer::constant(256), {2}, whole({2}), DType::kU8); }),
            "'constant(value=256.0)' cannot be stored in dtype U8: it takes integral values in "
            "[0, 255]");
  EXPECT_EQ(value_error([] { fill(Initializer::constant(0x1p63), {1}, whole({1}), DType::kI64); }),
            "'constant(value=9.223372036854776e+18)' cannot be stored in dtype I64: it takes "
            "integral values in [-9223372036854775808, 9223372036854775807]");
  EXPECT_NE(value_error([] { fill(Initializer::constant(-129), {1}, whole({1}), DType::kI8); }),
            "");
}

TEST(FillBoxTest, RejectsBoxesOutsideTheTensor) {
  EXPECT_EQ(value_error([] {
              fill(Initializer::ones(), {8, 6}, Box{{0}, {4}}, DType::kF32);
            }),
            "box [0:4] has rank 1 but the tensor shape (8, 6) has rank 2");
  EXPECT_EQ(value_error([] {
              fill(Initializer::he_uniform(), {8, 5}, Box{{0, 2}, {4, 4}}, DType::kF32);
            }),
            "box [0:4, 2:6] does not fit in a tensor of shape (8, 5): dimension 1 spans [2, 6) "
            "of [0, 5)");
  EXPECT_NE(value_error([] { fill(Initializer::ones(), {8}, Box{{-1}, {2}}, DType::kF32); }), "");
}

}  // namespace
}  // namespace meshlayout
