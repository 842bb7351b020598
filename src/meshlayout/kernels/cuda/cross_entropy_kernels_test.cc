// cross_entropy_kernels_test.cc — cross_entropy_kernels.cu against cpu/cross_entropy.cc on the
// same random inputs: the first-round statistics of a class block in the middle of y_pred (sparse
// and categorical, from logits and probabilities, label smoothing, I32/I64 labels, F32/F64
// predictions and targets) with the failures they report (bad labels, non-finite predictions),
// the second round, the summed and per-row losses and the gradient. Statistics are doubles
// computed in double: 1e-12 relative; F32 gradients 1e-6.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "meshlayout/kernels/cross_entropy.h"
#include "meshlayout/kernels/cuda/layer_kernels_test_util.h"

namespace meshlayout::testing_cuda {
namespace {

constexpr DeviceKind kCpu = DeviceKind::kCpu;
constexpr DeviceKind kCuda = DeviceKind::kCuda;

// y_pred (3, 5, 40); this shard holds rows [1, 3) × [0, 5) and classes [10, 23).
const Shape kPredShape{3, 5, 40};
const Box kPredBox{{1, 0, 10}, {2, 5, 13}};
const Box kLabelBox{{1, 0}, {2, 5}};
constexpr int64_t kRows = 10, kClasses = 13, kV = 40, kK = 3;

struct SpecCase {
  const char* name;
  CrossEntropySpec spec;
};
const SpecCase kSpecs[] = {
    {"sparse from logits", {.sparse = true, .from_logits = true, .smoothing = 0}},
    {"sparse probabilities", {.sparse = true, .from_logits = false, .smoothing = 0}},
    {"categorical from logits", {.sparse = false, .from_logits = true, .smoothing = 0}},
    {"categorical from logits, smoothing 0.1",
     {.sparse = false, .from_logits = true, .smoothing = 0.1}},
    {"categorical probabilities", {.sparse = false, .from_logits = false, .smoothing = 0}},
    {"categorical probabilities, smoothing 0.2",
     {.sparse = false, .from_logits = false, .smoothing = 0.2}}};

// Raw bytes of the targets: labels (I32 or I64) in [0, 40), a third of them in the shard's
// classes, or categorical targets (F32 or F64) in [0, 1).
std::vector<uint8_t> make_targets(bool sparse, DType dtype, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int64_t n = sparse ? kRows : kRows * kClasses;
  std::vector<uint8_t> bytes(static_cast<size_t>(n) * dtype_size(dtype));
  for (int64_t i = 0; i < n; ++i) {
    uint8_t* at = bytes.data() + static_cast<size_t>(i) * dtype_size(dtype);
    if (sparse) {
      const int64_t label = i % 3 == 0 ? 10 + static_cast<int64_t>(rng() % kClasses)
                                       : static_cast<int64_t>(rng() % kV);
      if (dtype == DType::kI32) {
        const auto l = static_cast<int32_t>(label);
        std::memcpy(at, &l, sizeof l);
      } else {
        std::memcpy(at, &label, sizeof label);
      }
    } else {
      const double t = static_cast<double>(rng() % 1000) / 1000.0;
      if (dtype == DType::kF32) {
        const auto f = static_cast<float>(t);
        std::memcpy(at, &f, sizeof f);
      } else {
        std::memcpy(at, &t, sizeof t);
      }
    }
  }
  return bytes;
}

void expect_same_failure(const std::optional<CrossEntropyFailure>& gpu,
                         const std::optional<CrossEntropyFailure>& cpu, const std::string& what) {
  ASSERT_EQ(gpu.has_value(), cpu.has_value()) << what;
  if (!cpu) return;
  EXPECT_EQ(gpu->kind, cpu->kind) << what;
  EXPECT_EQ(gpu->flat, cpu->flat) << what;
  EXPECT_EQ(gpu->at, cpu->at) << what;
  EXPECT_EQ(gpu->label, cpu->label) << what;
  EXPECT_TRUE(gpu->value == cpu->value || (std::isnan(gpu->value) && std::isnan(cpu->value)))
      << what << ": value " << gpu->value << " vs " << cpu->value;
}

// First round on both kinds; `poison` writes bad labels / non-finite predictions first.
template <typename T>
void check_stats(const SpecCase& sc, DType target_dtype, int poison, uint64_t seed) {
  const CrossEntropySpec& spec = sc.spec;
  const std::string what = std::string(sc.name) + (sizeof(T) == 4 ? " F32 " : " F64 ") +
                           std::string(dtype_name(target_dtype)) + " poison " +
                           std::to_string(poison);
  std::vector<T> pred =
      spec.from_logits ? random_values<T>(static_cast<size_t>(kRows * kClasses), seed, -4, 4)
                       : random_values<T>(static_cast<size_t>(kRows * kClasses), seed, 0.01, 1);
  std::vector<uint8_t> targets = make_targets(spec.sparse, target_dtype, seed + 1);
  if (poison >= 1) {  // a NaN at (row 2, class 5) and an infinity at (row 1, class 12)
    pred[2 * kClasses + 5] = std::numeric_limits<T>::quiet_NaN();
    pred[1 * kClasses + 12] = std::numeric_limits<T>::infinity();
  }
  if (poison >= 2 && spec.sparse) {  // bad labels at rows 7 and 3
    const int64_t bad[2] = {7, 3}, value[2] = {40, -1};
    for (int i = 0; i < 2; ++i) {
      uint8_t* at = targets.data() + static_cast<size_t>(bad[i]) * dtype_size(target_dtype);
      if (target_dtype == DType::kI32) {
        const auto l = static_cast<int32_t>(value[i]);
        std::memcpy(at, &l, sizeof l);
      } else {
        std::memcpy(at, &value[i], sizeof value[i]);
      }
    }
  }
  const Box tbox = spec.sparse ? kLabelBox : kPredBox;
  const Box sbox{{0, 0}, {kRows, spec.width()}};
  std::vector<double> cpu_stats(static_cast<size_t>(kRows * spec.width()), -7.0);
  GpuBlock gp(pred), gt(targets), gs(cpu_stats.size() * sizeof(double));
  struct Run {
    DeviceKind kind;
    Array::Shard pred, targets, stats;
    std::optional<CrossEntropyFailure> failure;
  } runs[] = {{kCpu, host_shard(pred, kPredBox), host_shard(targets, tbox),
               host_shard(cpu_stats, sbox), std::nullopt},
              {kCuda, gp.shard(kPredBox), gt.shard(tbox), gs.shard(sbox), std::nullopt}};
  for (Run& r : runs) {
    cross_entropy_stats(r.kind, {.pred = &r.pred,
                                 .targets = &r.targets,
                                 .stats = &r.stats,
                                 .spec = spec,
                                 .pred_shape = &kPredShape,
                                 .pred_dtype = dtype_of<T>(),
                                 .target_dtype = target_dtype,
                                 .failure = &r.failure});
  }
  const Run &cpu = runs[0], &gpu = runs[1];
  expect_near_cpu(gs.download<double>(), cpu_stats, 1e-12, what + " statistics");
  expect_same_failure(gpu.failure, cpu.failure, what + " failure");
  if (poison >= 1) {
    EXPECT_TRUE(cpu.failure.has_value()) << what;
  }
}

// The (F64 predictions?, targets' dtype) pairs a spec runs in, in order: labels I32 and I64
// (sparse) or targets F32 and F64 (categorical), under F32 then F64 predictions.
std::vector<std::pair<bool, DType>> target_dtypes(const CrossEntropySpec& spec) {
  const DType a = spec.sparse ? DType::kI32 : DType::kF32;
  const DType b = spec.sparse ? DType::kI64 : DType::kF64;
  return {{false, a}, {false, b}, {true, a}, {true, b}};
}

TEST(CudaCrossEntropyKernelsTest, Stats) {
  MESHLAYOUT_REQUIRE_GPU();
  uint64_t seed = 1;
  for (const SpecCase& sc : kSpecs) {
    for (int poison : {0, 1, 2}) {
      for (const auto& [f64_pred, target_dtype] : target_dtypes(sc.spec)) {
        if (f64_pred) {
          check_stats<double>(sc, target_dtype, poison, seed++);
        } else {
          check_stats<float>(sc, target_dtype, poison, seed++);
        }
      }
    }
  }
}

// Gathered statistics of kK blocks per row, as the first (and second) rounds would give them.
std::vector<double> make_stats1(const CrossEntropySpec& spec, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<double> s(static_cast<size_t>(kRows * kK * spec.width()));
  for (size_t i = 0; i < s.size(); i += static_cast<size_t>(spec.width())) {
    if (spec.from_logits) {  // max, Σ exp(x − max), Σ t, Σ t·x
      s[i] = 2 * u(rng) - 1;
      s[i + 1] = 1 + 9 * u(rng);
      s[i + 2] = u(rng) / kK;
      s[i + 3] = u(rng) - 0.5;
    } else {  // Σ p, p[label] or Σ t
      s[i] = 0.4 + u(rng);
      s[i + 1] = 0.3 * u(rng);
    }
  }
  return s;
}

std::vector<double> make_stats2(uint64_t seed) {
  return random_values<double>(static_cast<size_t>(kRows * kK * 2), seed, 0.1, 2);
}

TEST(CudaCrossEntropyKernelsTest, Stats2) {
  MESHLAYOUT_REQUIRE_GPU();
  uint64_t seed = 100;
  for (const SpecCase& sc : kSpecs) {
    if (!sc.spec.two_rounds()) continue;
    for (DType pred_dtype : {DType::kF32, DType::kF64}) {
      for (DType target_dtype : {DType::kF32, DType::kF64}) {
        const std::string what = std::string(sc.name) + " " + std::string(dtype_name(pred_dtype)) +
                                 " targets " + std::string(dtype_name(target_dtype));
        std::vector<double> pred64 =
            random_values<double>(static_cast<size_t>(kRows * kClasses), seed++, 0.001, 1);
        std::vector<float> pred32(pred64.begin(), pred64.end());
        std::vector<uint8_t> targets = make_targets(false, target_dtype, seed++);
        std::vector<double> s1 = make_stats1(sc.spec, seed++);
        std::vector<double> cpu_out(static_cast<size_t>(kRows * 2), -7.0);
        const Box s1box{{0, 0, 0}, {kRows, kK, 2}}, obox{{0, 0}, {kRows, 2}};
        GpuBlock gp32(pred32), gp64(pred64), gt(targets), gs1(s1),
            go(cpu_out.size() * sizeof(double));
        const bool f32 = pred_dtype == DType::kF32;
        struct Run {
          DeviceKind kind;
          Array::Shard pred, targets, stats1, out;
        } runs[] = {
            {kCpu, f32 ? host_shard(pred32, kPredBox) : host_shard(pred64, kPredBox),
             host_shard(targets, kPredBox), host_shard(s1, s1box), host_shard(cpu_out, obox)},
            {kCuda, f32 ? gp32.shard(kPredBox) : gp64.shard(kPredBox), gt.shard(kPredBox),
             gs1.shard(s1box), go.shard(obox)}};
        for (Run& r : runs) {
          cross_entropy_stats2(r.kind, {.pred = &r.pred,
                                        .targets = &r.targets,
                                        .stats1 = &r.stats1,
                                        .out = &r.out,
                                        .spec = sc.spec,
                                        .k = kK,
                                        .classes = kV,
                                        .pred_dtype = pred_dtype,
                                        .target_dtype = target_dtype});
        }
        expect_near_cpu(go.download<double>(), cpu_out, 1e-12, what);
      }
    }
  }
}

TEST(CudaCrossEntropyKernelsTest, LossSumAndRowLosses) {
  MESHLAYOUT_REQUIRE_GPU();
  uint64_t seed = 200;
  for (const SpecCase& sc : kSpecs) {
    const std::string what = sc.name;
    std::vector<double> s1 = make_stats1(sc.spec, seed++), s2 = make_stats2(seed++);
    const Box s1box{{0, 0, 0}, {kRows, kK, sc.spec.width()}}, s2box{{0, 0, 0}, {kRows, kK, 2}};
    const Box obox{{1, 0}, {2, 5}};  // one loss per row
    std::vector<double> cpu64(kRows, -7.0);
    std::vector<float> cpu32(kRows, -7.0f);
    GpuBlock gs1(s1), gs2(s2), go64(kRows * sizeof(double)), go32(kRows * sizeof(float));
    const bool two = sc.spec.two_rounds();
    struct Run {
      DeviceKind kind;
      Array::Shard stats1, stats2, out64, out32;
      double total;
    } runs[] = {
        {kCpu, host_shard(s1, s1box), host_shard(s2, s2box), host_shard(cpu64, obox),
         host_shard(cpu32, obox), 0.25},
        {kCuda, gs1.shard(s1box), gs2.shard(s2box), go64.shard(obox), go32.shard(obox), 0.25}};
    for (Run& r : runs) {
      Array::Shard* stats2 = two ? &r.stats2 : nullptr;
      cross_entropy_loss_sum(
          r.kind,
          {.stats1 = &r.stats1, .stats2 = stats2, .spec = sc.spec, .k = kK, .total = &r.total});
      for (auto [out, dtype] :
           {std::pair{&r.out64, DType::kF64}, std::pair{&r.out32, DType::kF32}}) {
        cross_entropy_row_losses(r.kind, {.out = out,
                                          .stats1 = &r.stats1,
                                          .stats2 = stats2,
                                          .spec = sc.spec,
                                          .k = kK,
                                          .dtype = dtype});
      }
    }
    const double cpu_total = runs[0].total, gpu_total = runs[1].total;
    EXPECT_NEAR(gpu_total, cpu_total, 1e-12 * std::abs(cpu_total)) << what;
    expect_near_cpu(go64.download<double>(), cpu64, 1e-12, what + " row losses F64");
    expect_near_cpu(go32.download<float>(), cpu32, 1e-6, what + " row losses F32");
  }
}

template <typename T>
void check_grad(const SpecCase& sc, DType target_dtype, uint64_t seed) {
  const std::string what = std::string(sc.name) + (sizeof(T) == 4 ? " F32 " : " F64 ") +
                           std::string(dtype_name(target_dtype));
  const CrossEntropySpec& spec = sc.spec;
  std::vector<T> pred =
      spec.from_logits ? random_values<T>(static_cast<size_t>(kRows * kClasses), seed, -4, 4)
                       : random_values<T>(static_cast<size_t>(kRows * kClasses), seed, 0.01, 1);
  std::vector<uint8_t> targets = make_targets(spec.sparse, target_dtype, seed + 1);
  std::vector<double> s1 = make_stats1(spec, seed + 2), s2 = make_stats2(seed + 3);
  const Box tbox = spec.sparse ? kLabelBox : kPredBox;
  const Box s1box{{0, 0, 0}, {kRows, kK, spec.width()}}, s2box{{0, 0, 0}, {kRows, kK, 2}};
  const bool two = spec.two_rounds();
  std::vector<T> cpu_grad(pred.size(), T(-7));
  GpuBlock gg(pred.size() * sizeof(T)), gp(pred), gt(targets), gs1(s1), gs2(s2);
  struct Run {
    DeviceKind kind;
    Array::Shard grad, pred, targets, stats1, stats2;
  } runs[] = {{kCpu, host_shard(cpu_grad, kPredBox), host_shard(pred, kPredBox),
               host_shard(targets, tbox), host_shard(s1, s1box), host_shard(s2, s2box)},
              {kCuda, gg.shard(kPredBox), gp.shard(kPredBox), gt.shard(tbox), gs1.shard(s1box),
               gs2.shard(s2box)}};
  for (Run& r : runs) {
    cross_entropy_grad(r.kind, {.grad = &r.grad,
                                .pred = &r.pred,
                                .targets = &r.targets,
                                .stats1 = &r.stats1,
                                .stats2 = two ? &r.stats2 : nullptr,
                                .spec = spec,
                                .k = kK,
                                .classes = kV,
                                .pred_dtype = dtype_of<T>(),
                                .target_dtype = target_dtype,
                                .coef = 0.37});
  }
  expect_near_cpu(gg.download<T>(), cpu_grad, tolerance<T>(), what);
}

TEST(CudaCrossEntropyKernelsTest, Grad) {
  MESHLAYOUT_REQUIRE_GPU();
  uint64_t seed = 300;
  for (const SpecCase& sc : kSpecs) {
    const DType a = sc.spec.sparse ? DType::kI32 : DType::kF32;
    const DType b = sc.spec.sparse ? DType::kI64 : DType::kF64;
    check_grad<float>(sc, a, seed += 5);
    check_grad<double>(sc, b, seed += 5);
  }
}

}  // namespace
}  // namespace meshlayout::testing_cuda
