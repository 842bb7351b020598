// The values fill_box writes: any box equals the slice of the whole tensor (property test),
// every SIMD level writes the same bytes, values follow NOTE [Initializer streams] (checked
// against an element-by-element reference), golden values, and the statistics of each
// distribution.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "meshlayout/init/fill_kernels.h"
#include "meshlayout/init/init_test_util.h"
#include "meshlayout/init/initializers.h"
#include "meshlayout/init/philox.h"
#include "meshlayout/layout/box_ops.h"
#include "meshlayout/layout/devices.h"

namespace meshlayout {
namespace {

using testing::decode;
using testing::fill;
using testing::float_dtypes;
using testing::whole;

std::vector<Initializer> every_initializer() {
  std::vector<Initializer> inits;
  for (const std::string& name : Initializer::names())
    inits.push_back(Initializer::from_name(name));
  inits.push_back(Initializer::constant(3));  // fits every dtype
  inits.push_back(Initializer::random_uniform({.minval = -3, .maxval = 7, .seed = 5}));
  inits.push_back(Initializer::random_normal({.mean = 1, .stddev = 2, .seed = 6}));
  inits.push_back(Initializer::truncated_normal({.mean = -1, .stddev = 0.5}));
  inits.push_back(
      Initializer::variance_scaling({.scale = 2,
                                     .mode = FanMode::kFanOut,
                                     .distribution = VarianceDistribution::kUntruncatedNormal}));
  inits.push_back(Initializer::variance_scaling(
      {.scale = 0.5, .mode = FanMode::kFanAvg, .distribution = VarianceDistribution::kUniform}));
  return inits;
}

std::vector<std::byte> slice(const std::vector<std::byte>& all, const Shape& shape, const Box& box,
                             size_t element_size) {
  std::vector<std::byte> out(static_cast<size_t>(box.num_elements()) * element_size);
  if (!out.empty()) copy_box(all.data(), whole(shape), out.data(), box, box, element_size);
  return out;
}

// ---- Layout independence ----

TEST(FillBoxTest, AnyBoxEqualsTheSliceOfTheWholeTensor) {
  const uint64_t seed = testing::test_seed(20241122);
  RecordProperty("MESHLAYOUT_TEST_SEED", std::to_string(seed));
  SCOPED_TRACE("MESHLAYOUT_TEST_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  auto below = [&](int64_t n) { return static_cast<int64_t>(rng() % static_cast<uint64_t>(n)); };
  const std::vector<Initializer> inits = every_initializer();
  for (int iter = 0; iter < 400; ++iter) {
    const size_t rank = static_cast<size_t>(below(5));
    Shape shape(rank);
    for (int64_t& e : shape) e = below(8);
    if (rank > 0 && below(3) == 0) shape.back() = 1 + below(1300);  // long runs: chunks, groups
    if (rank > 1 && below(4) == 0) shape.front() = 0;
    Box box{Shape(rank), Shape(rank)};
    for (size_t d = 0; d < rank; ++d) {
      box.offset[d] = below(shape[d] + 1);
      box.shape[d] = below(shape[d] - box.offset[d] + 1);
      if (below(3) == 0) {  // often whole dimensions, so runs merge
        box.offset[d] = 0;
        box.shape[d] = shape[d];
      }
    }
    const Initializer& init = inits[static_cast<size_t>(below(static_cast<int64_t>(inits.size())))];
    // orthogonal needs rank >= 2 and computes the whole matrix: small ones only here.
    if (init.kind() == InitializerKind::kOrthogonal && (rank < 2 || num_elements(shape) > 4096)) {
      continue;
    }
    const std::vector<DType>& dtypes = init.is_random() ? float_dtypes() : testing::all_dtypes();
    const DType dtype = dtypes[static_cast<size_t>(below(static_cast<int64_t>(dtypes.size())))];
    const uint64_t key = rng();
    SCOPED_TRACE(fmt::format("iteration {}: {} {} box {} of {}", iter, init.to_string(),
                             dtype_name(dtype), box.to_string(), shape_to_string(shape)));
    const auto all = fill(init, shape, whole(shape), dtype, key);
    ASSERT_EQ(fill(init, shape, box, dtype, key), slice(all, shape, box, dtype_size(dtype)));
  }
}

// What a device holds under real shard geometry equals the slice of the unsharded tensor.
TEST(FillBoxTest, EveryDeviceOfEveryLayoutHoldsItsSliceOfTheUnshardedInit) {
  set_device_count(8);
  const DeviceMesh mesh({2, 4}, {"data", "model"});
  const std::vector<std::string> layouts = {"data,model",        "model,data", "None,model",
                                            "(data,model),None", "None,None",  "data,None"};
  const Shape shape{13, 7};  // uneven on every split
  for (const Initializer& init : {Initializer::glorot_normal(), Initializer::random_uniform(),
                                  Initializer::orthogonal(1.5)}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      const auto all = fill(init, shape, whole(shape), dtype, variable_key("d1.kernel"));
      for (const std::string& text : layouts) {
        const ShardGeometry g(
            TensorLayout::from_string("layout[" + text + "]").with_device_mesh(mesh), shape);
        for (int64_t p = 0; p < mesh.size(); ++p) {
          const Box box = g.box(p);
          EXPECT_EQ(fill(init, shape, box, dtype, variable_key("d1.kernel")),
                    slice(all, shape, box, dtype_size(dtype)))
              << text << " device " << p << " box " << box.to_string();
        }
      }
    }
  }
  reset_device_count();
}

// Every vector width writes the same bytes (all copies of the kernels are used somewhere).
TEST(FillBoxTest, EverySimdLevelWritesTheSameBytes) {
  using internal_init::Sampler;
  const auto levels = internal_init::supported_simd_levels();
  for (Sampler sampler : {Sampler::kUniform, Sampler::kNormal, Sampler::kTruncatedNormal}) {
    for (DType dtype : float_dtypes()) {
      for (uint64_t first : {uint64_t{0}, uint64_t{12345}, (uint64_t{1} << 32) - 100}) {
        for (size_t n : {size_t{1}, size_t{7}, size_t{100}, size_t{513}, size_t{3000}}) {
          const internal_init::SamplerSpec spec{
              .sampler = sampler, .dtype = dtype, .a = -0.5, .b = 2.0, .key = 0xC0FFEE + n};
          std::vector<std::byte> want(n * dtype_size(dtype));
          internal_init::fill_run(internal_init::SimdLevel::kPortable, spec, first, n, want.data());
          for (auto level : levels) {
            std::vector<std::byte> got(want.size() + 1, std::byte{0x5A});  // + 1: guard byte
            internal_init::fill_run(level, spec, first, n, got.data());
            ASSERT_EQ(got.back(), std::byte{0x5A}) << "wrote past the end";
            got.pop_back();
            ASSERT_EQ(got, want) << internal_init::simd_level_name(level) << " sampler "
                                 << static_cast<int>(sampler) << " " << dtype_name(dtype)
                                 << " first " << first << " n " << n;
          }
        }
      }
    }
  }
}

// ---- The values themselves ----

// Element g computed from its Philox block with libm in double: checks the kernels compute
// what NOTE [Initializer streams] says. Uniform values must match exactly.
struct Reference {
  uint64_t key;
  PhiloxBlock block(uint64_t g, uint64_t attempt = 0) const {
    return philox4x32_10(philox_counter(g, attempt), philox_key(key));
  }
  float uniform_f32(uint64_t g, float lo, float hi) const {
    return lo + (hi - lo) * (static_cast<float>(block(g)[0] >> 8) * 0x1p-24f);
  }
  double uniform_f64(uint64_t g, double lo, double hi) const {
    const PhiloxBlock b = block(g);
    const uint64_t bits53 = (uint64_t{b[0] >> 6} << 27) | (b[1] >> 5);
    return lo + (hi - lo) * (static_cast<double>(bits53) * 0x1p-53);
  }
  double normal_f32(uint64_t g, uint64_t attempt = 0) const {  // float inputs, exact math
    const PhiloxBlock b = block(g, attempt);
    const double u1 = ((b[0] >> 8) + 1) * 0x1p-24, u2 = (b[1] >> 8) * 0x1p-24;
    return std::sqrt(-2 * std::log(u1)) * std::cos(2 * M_PI * u2);
  }
  double normal_f64(uint64_t g, uint64_t attempt = 0) const {
    const PhiloxBlock b = block(g, attempt);
    const double u1 = 1 - static_cast<double>((uint64_t{b[0] >> 6} << 27) | (b[1] >> 5)) * 0x1p-53;
    const double u2 = static_cast<double>((uint64_t{b[2] >> 6} << 27) | (b[3] >> 5)) * 0x1p-53;
    return std::sqrt(-2 * std::log(u1)) * std::cos(2 * M_PI * u2);
  }
};

TEST(FillBoxTest, ValuesFollowTheDocumentedStreams) {
  // A 1-D tensor of 2^33 elements; the box straddles index 2^32, where the counter's second
  // word changes.
  const Shape shape{int64_t{1} << 33};
  const Box box{{(int64_t{1} << 32) - 700}, {1500}};
  const uint64_t first = static_cast<uint64_t>(box.offset[0]);
  const uint64_t vkey = variable_key("block/kernel");
  const Reference ref{init_key(9, vkey)};

  const auto u32 = decode(fill(Initializer::random_uniform({.minval = -2, .maxval = 3, .seed = 9}),
                               shape, box, DType::kF32, vkey),
                          DType::kF32);
  const auto u64 = decode(fill(Initializer::random_uniform({.minval = -2, .maxval = 3, .seed = 9}),
                               shape, box, DType::kF64, vkey),
                          DType::kF64);
  const auto n32 = decode(fill(Initializer::random_normal({.mean = 0, .stddev = 1, .seed = 9}),
                               shape, box, DType::kF32, vkey),
                          DType::kF32);
  const auto n64 = decode(fill(Initializer::random_normal({.mean = 0, .stddev = 1, .seed = 9}),
                               shape, box, DType::kF64, vkey),
                          DType::kF64);
  const auto t32 = decode(fill(Initializer::truncated_normal({.mean = 0, .stddev = 1, .seed = 9}),
                               shape, box, DType::kF32, vkey),
                          DType::kF32);
  const auto t64 = decode(fill(Initializer::truncated_normal({.mean = 0, .stddev = 1, .seed = 9}),
                               shape, box, DType::kF64, vkey),
                          DType::kF64);
  int redrawn = 0;
  for (size_t i = 0; i < u32.size(); ++i) {
    const uint64_t g = first + i;
    ASSERT_EQ(u32[i], ref.uniform_f32(g, -2, 3)) << g;
    ASSERT_EQ(u64[i], ref.uniform_f64(g, -2, 3)) << g;
    ASSERT_NEAR(n32[i], ref.normal_f32(g), 2e-6 * std::max(1.0, std::fabs(n32[i]))) << g;
    ASSERT_NEAR(n64[i], ref.normal_f64(g), 1e-13) << g;
    uint64_t a32 = 0, a64 = 0;  // the first attempt whose |z| <= 2
    while (std::fabs(ref.normal_f32(g, a32)) > 2) ++a32;
    while (std::fabs(ref.normal_f64(g, a64)) > 2) ++a64;
    redrawn += a32 > 0;
    if (std::fabs(std::fabs(ref.normal_f32(g, a32)) - 2) > 1e-5) {  // clear of the boundary
      ASSERT_NEAR(t32[i], ref.normal_f32(g, a32), 2e-6) << g;
    }
    ASSERT_NEAR(t64[i], ref.normal_f64(g, a64), 1e-13) << g;
  }
  EXPECT_GT(redrawn, 30);  // ~4.55% of 1500
}

constexpr const char* kGoldenHashes =
    "random_uniform F32 82c60d1c3080462a\n"
    "random_uniform F64 f72df8d8199e80eb\n"
    "random_uniform BF16 695adc2949bca420\n"
    "random_uniform F16 149d1bded8213b3f\n"
    "random_normal F32 ca2dd9d8eddc4fba\n"
    "random_normal F64 fe174c97b7a0df21\n"
    "random_normal BF16 d932f01f4143c222\n"
    "random_normal F16 38e5e433b87bf9e4\n"
    "truncated_normal F32 2d34b82ae3febefc\n"
    "truncated_normal F64 ba2b006659cc354c\n"
    "truncated_normal BF16 d8c4bd0fb3686937\n"
    "truncated_normal F16 df5f9c03b3c50f9a\n"
    "variance_scaling F32 f8021cd1e1268414\n"
    "variance_scaling F64 a112b8270ad5b996\n"
    "variance_scaling BF16 bbfae373baff0cbd\n"
    "variance_scaling F16 715877e5186a8bbd\n"
    "glorot_uniform F32 b25fe73e8b37c918\n"
    "glorot_uniform F64 a24bdb7da8826085\n"
    "glorot_uniform BF16 5727aa837791dc01\n"
    "glorot_uniform F16 3f97ef71833d17ff\n"
    "glorot_normal F32 dfcd120db5bf85b1\n"
    "glorot_normal F64 ca584aedc510b3d5\n"
    "glorot_normal BF16 6b188ea2b9390935\n"
    "glorot_normal F16 db0f0f2435e06d61\n"
    "he_uniform F32 46113159e057d8eb\n"
    "he_uniform F64 40f7f89714a356cb\n"
    "he_uniform BF16 de8424fe74b9fd13\n"
    "he_uniform F16 3f9dfd0dd5a38897\n"
    "he_normal F32 f722b50dcf0fc9ec\n"
    "he_normal F64 679b021cc712a623\n"
    "he_normal BF16 0cba8b110bb8d136\n"
    "he_normal F16 819485aa1948fc01\n"
    "lecun_uniform F32 73088a6c8350b703\n"
    "lecun_uniform F64 fdcace78f8357949\n"
    "lecun_uniform BF16 c415a6448e28be62\n"
    "lecun_uniform F16 842a18e2ff013299\n"
    "lecun_normal F32 f8021cd1e1268414\n"
    "lecun_normal F64 a112b8270ad5b996\n"
    "lecun_normal BF16 bbfae373baff0cbd\n"
    "lecun_normal F16 715877e5186a8bbd\n"
    "orthogonal F32 502579ffb4241a86\n"
    "orthogonal F64 ddd89ca28431a979\n"
    "orthogonal BF16 7c741e3455598221\n"
    "orthogonal F16 5ff70062fdf8cf8f\n";

// Pins the streams: any change here changes every model initialised with meshlayout. The
// first values are spelled out; the hashes (FNV-1a 64 of the bytes) cover a (48, 80) tensor of
// each random initializer in each floating dtype.
TEST(FillBoxTest, GoldenValues) {
  const uint64_t vkey = variable_key("dense/kernel");
  EXPECT_EQ(init_key(0, vkey), 9844642315791224540u);
  auto first3 = [&](const Initializer& init) {
    const auto bytes = fill(init, {4, 3}, Box{{1, 0}, {1, 3}}, DType::kF32, vkey);
    std::vector<uint32_t> out(3);
    std::memcpy(out.data(), bytes.data(), bytes.size());
    return out;
  };
  EXPECT_EQ(first3(Initializer::glorot_uniform()),
            (std::vector<uint32_t>{1053697348, 3188865824, 1043188504}));
  EXPECT_EQ(first3(Initializer::random_normal({.seed = 42})),
            (std::vector<uint32_t>{3181109231, 3180545809, 3177462215}));

  const Shape shape{48, 80};  // fan_in != fan_out: the modes differ
  std::string actual;
  for (const std::string& name : Initializer::names()) {
    const Initializer init = Initializer::from_name(name);
    if (!init.is_random()) continue;
    for (DType dtype : float_dtypes()) {
      const auto bytes = fill(init, shape, whole(shape), dtype, vkey);
      actual +=
          fmt::format("{} {} {:016x}\n", name, dtype_name(dtype),
                      variable_key({reinterpret_cast<const char*>(bytes.data()), bytes.size()}));
    }
  }
  EXPECT_EQ(actual, kGoldenHashes);
}

TEST(FillBoxTest, RankZeroAndEmptyBoxes) {
  const auto scalar =
      fill(Initializer::random_uniform({.minval = 10, .maxval = 11}), {}, Box{}, DType::kF64);
  ASSERT_EQ(scalar.size(), 8u);
  const double v = decode(scalar, DType::kF64)[0];
  EXPECT_GE(v, 10.0);
  EXPECT_LT(v, 11.0);
  EXPECT_EQ(decode(fill(Initializer::constant(4), {}, Box{}, DType::kI16), DType::kI16),
            std::vector<double>{4});
  std::byte untouched{0x11};
  fill_box(Initializer::he_normal(), {4, 0}, whole({4, 0}), DType::kF32, &untouched, 1);
  fill_box(Initializer::he_normal(), {4, 5}, Box{{2, 1}, {0, 3}}, DType::kF32, &untouched, 1);
  EXPECT_EQ(untouched, std::byte{0x11});
}

// ---- Statistics ----

struct Moments {
  double mean = 0, stddev = 0, min = 0, max = 0;
};

Moments moments(const std::vector<double>& x) {
  Moments m;
  m.mean = std::accumulate(x.begin(), x.end(), 0.0) / static_cast<double>(x.size());
  double ss = 0;
  for (double v : x) ss += (v - m.mean) * (v - m.mean);
  m.stddev = std::sqrt(ss / static_cast<double>(x.size()));
  m.min = *std::min_element(x.begin(), x.end());
  m.max = *std::max_element(x.begin(), x.end());
  return m;
}

constexpr double kTruncatedStddevFactor = 0.87962566103423978;  // stddev of N(0,1) | |z| <= 2

TEST(StatisticsTest, UniformNormalAndTruncatedNormal) {
  const Shape shape{1 << 20};
  const double n = static_cast<double>(shape[0]);
  for (DType dtype : float_dtypes()) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    const Moments u = moments(decode(
        fill(Initializer::random_uniform({.minval = 2, .maxval = 6}), shape, whole(shape), dtype),
        dtype));
    EXPECT_NEAR(u.mean, 4.0,
                5 * (4 / std::sqrt(12.0)) / std::sqrt(n) + 0.01 * (dtype == DType::kBF16));
    EXPECT_NEAR(u.stddev, 4 / std::sqrt(12.0), 0.005);
    EXPECT_GE(u.min, 2.0);
    EXPECT_LE(u.max, 6.0);

    const Moments z = moments(decode(
        fill(Initializer::random_normal({.mean = 1, .stddev = 3}), shape, whole(shape), dtype),
        dtype));
    EXPECT_NEAR(z.mean, 1.0, 5 * 3 / std::sqrt(n));
    EXPECT_NEAR(z.stddev, 3.0, 0.01 * 3);
    EXPECT_LT(z.min, 1 - 4 * 3.0);  // tails exist: P(|z| > 4) * 2^20 ~ 66 draws
    EXPECT_GT(z.max, 1 + 4 * 3.0);

    const Moments t = moments(decode(
        fill(Initializer::truncated_normal({.mean = 0, .stddev = 0.5}), shape, whole(shape), dtype),
        dtype));
    EXPECT_NEAR(t.mean, 0.0, 5 * 0.5 / std::sqrt(n));
    EXPECT_NEAR(t.stddev, 0.5 * kTruncatedStddevFactor, 0.01 * 0.5);
    const double bound = 2 * 0.5 *
                         (dtype == DType::kBF16  ? 1 + 0x1p-8
                          : dtype == DType::kF16 ? 1 + 0x1p-11
                                                 : 1);
    EXPECT_GE(t.min, -bound);
    EXPECT_LE(t.max, bound);
    EXPECT_LT(t.min, -0.99);  // the range is used up to the bound
    EXPECT_GT(t.max, 0.99);
  }
}

TEST(StatisticsTest, VarianceScalingStddevWithinTwoPercent) {
  struct Case {
    Initializer init;
    Shape shape;
    double expected_stddev;
  };
  const Shape dense{512, 1024}, conv{3, 3, 64, 128};  // conv: fan_in 576, fan_out 1152
  const std::vector<Case> cases = {
      {Initializer::glorot_uniform(), dense, std::sqrt(2.0 / (512 + 1024))},
      {Initializer::glorot_normal(), dense, std::sqrt(2.0 / (512 + 1024))},
      {Initializer::he_uniform(), dense, std::sqrt(2.0 / 512)},
      {Initializer::he_normal(), conv, std::sqrt(2.0 / 576)},
      {Initializer::lecun_uniform(), conv, std::sqrt(1.0 / 576)},
      {Initializer::lecun_normal(), dense, std::sqrt(1.0 / 512)},
      {Initializer::variance_scaling({.scale = 3,
                                      .mode = FanMode::kFanOut,
                                      .distribution = VarianceDistribution::kUntruncatedNormal}),
       conv, std::sqrt(3.0 / 1152)},
      {Initializer::variance_scaling({.scale = 0.5, .mode = FanMode::kFanAvg}), conv,
       std::sqrt(0.5 / 864)},
  };
  for (const Case& c : cases) {
    for (DType dtype : {DType::kF32, DType::kF64, DType::kBF16}) {
      SCOPED_TRACE(c.init.to_string() + " " + std::string(dtype_name(dtype)));
      const Moments m = moments(decode(fill(c.init, c.shape, whole(c.shape), dtype), dtype));
      EXPECT_NEAR(m.stddev, c.expected_stddev, 0.02 * c.expected_stddev);
      EXPECT_NEAR(m.mean, 0.0, 0.01 * c.expected_stddev);
      if (c.init.distribution() == VarianceDistribution::kUniform) {
        EXPECT_LE(m.max, std::sqrt(3.0) * c.expected_stddev * (1 + 0x1p-8));
      }
    }
  }
}

}  // namespace
}  // namespace meshlayout
