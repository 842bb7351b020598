// optimizer_kernels_test.cc — the CUDA optimizer kernels (optimizer_kernels.cu) against their CPU
// implementations on the same random inputs: optimizer_prepare and the SGD, Adam/AdamW, RMSprop,
// Adagrad and Lion updates, for F32 and F64 variables with F32 and F64 gradients, every
// preparation option (clipvalue, clipnorm's (multiplier, divisor), decoupled weight decay, and
// combinations), every option of the params structs, shapes 1×1, 7×13, 257×33 and an empty box,
// several steps in a row (the slots carry over). Every result is compared BIT FOR BIT: the CUDA
// kernels round each operation as the CPU does (no FMA) and compute the per-step scalars on the
// host with the CPU's expressions. The prepared gradient's GPU block starts poisoned (0xFF = NaN),
// so an element left unwritten shows as a difference; θ and the slots are read-modify-write.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "meshlayout/core/errors.h"
#include "meshlayout/kernels/adagrad_update.h"
#include "meshlayout/kernels/adam_update.h"
#include "meshlayout/kernels/cuda/cuda_test_util.h"
#include "meshlayout/kernels/lion_update.h"
#include "meshlayout/kernels/optimizer.h"
#include "meshlayout/kernels/rmsprop_update.h"
#include "meshlayout/kernels/sgd_update.h"

namespace meshlayout {
namespace {

using testing_cuda::GpuBlock;
using testing_cuda::host_shard;
using testing_cuda::random_values;

constexpr DeviceKind kCpu = DeviceKind::kCpu;
constexpr DeviceKind kCuda = DeviceKind::kCuda;

template <typename T>
constexpr DType dtype_of() {
  return sizeof(T) == 4 ? DType::kF32 : DType::kF64;
}

// The preparation options of one case.
struct Prep {
  std::string name;
  std::optional<double> clipvalue;
  std::optional<std::pair<double, double>> norm_clip;
  std::optional<double> weight_decay;
};

std::vector<Prep> all_preps() {
  return {{"plain", std::nullopt, std::nullopt, std::nullopt},
          {"clipvalue", 0.3, std::nullopt, std::nullopt},
          {"norm_clip", std::nullopt, std::pair{0.5, 1.7}, std::nullopt},
          {"global_clip", std::nullopt, std::pair{0.37, 1.0}, std::nullopt},
          {"weight_decay", std::nullopt, std::nullopt, 0.04},
          {"clipvalue+wd", 0.3, std::nullopt, 0.04},
          {"norm_clip+wd", std::nullopt, std::pair{0.5, 1.7}, 0.004},
          {"clipvalue+norm_clip", 0.2, std::pair{0.5, 1.7}, std::nullopt}};
}

std::vector<Box> all_boxes() {
  return {Box{{0, 0}, {1, 1}}, Box{{3, 0}, {7, 13}}, Box{{0, 0}, {257, 33}}, Box{{0, 0}, {0, 5}}};
}

// Bit-for-bit equality of the GPU's values with the CPU's, naming the first difference.
template <typename T>
void expect_same_bits(const std::vector<T>& gpu, const std::vector<T>& cpu,
                      const std::string& what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  for (size_t i = 0; i < cpu.size(); ++i) {
    if (std::memcmp(&gpu[i], &cpu[i], sizeof(T)) != 0) {
      ADD_FAILURE() << what << ": element " << i << " of " << cpu.size() << ": GPU " << gpu[i]
                    << ", CPU " << cpu[i];
      return;
    }
  }
}

// An array (θ or a slot) on both sides: host values for the CPU op, a GPU copy for the CUDA op.
template <typename T>
struct Both {
  std::vector<T> host;
  std::unique_ptr<GpuBlock> gpu;
  Both(std::vector<T> values) : host(std::move(values)), gpu(std::make_unique<GpuBlock>(host)) {}
  Array::Shard cpu_shard(const Box& box) { return host_shard(host, box); }
  Array::Shard gpu_shard(const Box& box) { return gpu->shard(box); }
  void expect_same(const std::string& what) { expect_same_bits(gpu->download<T>(), host, what); }
};

// The step of both sides for one iteration: the gradient (G elements) on both, the shards.
template <typename T, typename G>
struct StepInputs {
  std::vector<G> grad_host;
  GpuBlock grad_gpu;
  Array::Shard cpu_theta, gpu_theta, cpu_grad, gpu_grad;
  std::vector<Array::Shard> cpu_slots, gpu_slots;
  std::vector<Array::Shard*> cpu_slot_ptrs, gpu_slot_ptrs;

  StepInputs(Both<T>& theta, std::vector<Both<T>>& slots, const Box& box, uint64_t seed)
      : grad_host(random_values<G>(static_cast<size_t>(box.num_elements()), seed, -2.0, 2.0)),
        grad_gpu(grad_host),
        cpu_theta(theta.cpu_shard(box)),
        gpu_theta(theta.gpu_shard(box)),
        cpu_grad(host_shard(grad_host, box)),
        gpu_grad(grad_gpu.shard(box)) {
    for (Both<T>& s : slots) {
      cpu_slots.push_back(s.cpu_shard(box));
      gpu_slots.push_back(s.gpu_shard(box));
    }
    for (size_t i = 0; i < slots.size(); ++i) {
      cpu_slot_ptrs.push_back(&cpu_slots[i]);
      gpu_slot_ptrs.push_back(&gpu_slots[i]);
    }
  }

  OptimizerShardStep step(bool gpu, const Prep& prep, int iteration) {
    return OptimizerShardStep{.theta = gpu ? &gpu_theta : &cpu_theta,
                              .dtype = dtype_of<T>(),
                              .grad = gpu ? &gpu_grad : &cpu_grad,
                              .grad_dtype = dtype_of<G>(),
                              .slots = gpu ? gpu_slot_ptrs : cpu_slot_ptrs,
                              .lr = 0.01f + 0.003f * static_cast<float>(iteration),
                              .iterations = iteration,
                              .clipvalue = prep.clipvalue,
                              .norm_clip = prep.norm_clip,
                              .weight_decay = prep.weight_decay};
  }
};

constexpr int kSteps = 3;

// Runs `op` with `params` on CPU and CUDA for kSteps steps from the same θ and slots (slot i
// drawn uniform in slot_ranges[i]), comparing θ and every slot after each step.
template <typename T, typename G, typename Params, typename Op>
void check_update(const Op& op, const Params& params,
                  const std::vector<std::pair<double, double>>& slot_ranges,
                  const std::string& label) {
  uint64_t seed = 100;
  for (const Box& box : all_boxes()) {
    const size_t n = static_cast<size_t>(box.num_elements());
    for (const Prep& prep : all_preps()) {
      const std::string where = label + " " + std::string(dtype_name(dtype_of<T>())) + " grad " +
                                std::string(dtype_name(dtype_of<G>())) + " box " + box.to_string() +
                                " " + prep.name;
      SCOPED_TRACE(where);
      Both<T> theta(random_values<T>(n, ++seed));
      std::vector<Both<T>> slots;
      slots.reserve(slot_ranges.size());
      for (const auto& [lo, hi] : slot_ranges)
        slots.emplace_back(random_values<T>(n, ++seed, lo, hi));
      for (int it = 0; it < kSteps; ++it) {
        StepInputs<T, G> in(theta, slots, box, ++seed);
        op(kCpu, OptimizerUpdate<Params>{in.step(false, prep, it), params});
        op(kCuda, OptimizerUpdate<Params>{in.step(true, prep, it), params});
        const std::string at = " after step " + std::to_string(it);
        theta.expect_same("theta" + at);
        for (size_t i = 0; i < slots.size(); ++i)
          slots[i].expect_same("slot " + std::to_string(i) + at);
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
}

// check_update for the four (variable, gradient) dtype pairs.
template <typename Params, typename Op>
void check_all_dtypes(const Op& op, const Params& params,
                      const std::vector<std::pair<double, double>>& slot_ranges,
                      const std::string& label) {
  check_update<float, float>(op, params, slot_ranges, label);
  check_update<float, double>(op, params, slot_ranges, label);
  check_update<double, double>(op, params, slot_ranges, label);
  check_update<double, float>(op, params, slot_ranges, label);
}

template <typename T, typename G>
void check_prepare() {
  uint64_t seed = 7;
  for (const Box& box : all_boxes()) {
    const size_t n = static_cast<size_t>(box.num_elements());
    for (const Prep& prep : all_preps()) {
      SCOPED_TRACE(std::string(dtype_name(dtype_of<T>())) + " grad " +
                   std::string(dtype_name(dtype_of<G>())) + " box " + box.to_string() + " " +
                   prep.name);
      Both<T> theta(random_values<T>(n, ++seed));
      std::vector<Both<T>> no_slots;
      for (int it = 0; it < 2; ++it) {
        StepInputs<T, G> in(theta, no_slots, box, ++seed);
        std::vector<T> cpu_prepared(n, T(-7));
        GpuBlock gpu_prepared(n * sizeof(T));  // poisoned
        Array::Shard cp = host_shard(cpu_prepared, box), gp = gpu_prepared.shard(box);
        optimizer_prepare(kCpu, {.step = in.step(false, prep, it), .prepared = &cp});
        optimizer_prepare(kCuda, {.step = in.step(true, prep, it), .prepared = &gp});
        const std::string at = " after step " + std::to_string(it);
        expect_same_bits(gpu_prepared.download<T>(), cpu_prepared, "prepared" + at);
        theta.expect_same("theta" + at);
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
}

TEST(CudaOptimizerKernelsTest, PrepareMatchesCpuBitForBit) {
  MESHLAYOUT_REQUIRE_GPU();
  check_prepare<float, float>();
  check_prepare<float, double>();
  check_prepare<double, double>();
  check_prepare<double, float>();
}

TEST(CudaOptimizerKernelsTest, SgdMatchesCpuBitForBit) {
  MESHLAYOUT_REQUIRE_GPU();
  check_all_dtypes(sgd_update, SgdParams{0.0, false}, {}, "sgd");
  check_all_dtypes(sgd_update, SgdParams{0.9, false}, {{-1.0, 1.0}}, "sgd momentum");
  check_all_dtypes(sgd_update, SgdParams{0.9, true}, {{-1.0, 1.0}}, "sgd nesterov");
}

TEST(CudaOptimizerKernelsTest, AdamMatchesCpuBitForBit) {
  MESHLAYOUT_REQUIRE_GPU();
  // v_hat drawn in v's range, so max(v_hat, v) takes either side.
  check_all_dtypes(adam_update, AdamParams{0.9, 0.999, 1e-7, false}, {{-0.1, 0.1}, {0.0, 0.1}},
                   "adam");
  check_all_dtypes(adam_update, AdamParams{0.8, 0.95, 1e-3, true},
                   {{-0.1, 0.1}, {0.0, 0.1}, {0.0, 0.1}}, "adam amsgrad");
}

TEST(CudaOptimizerKernelsTest, RmspropMatchesCpuBitForBit) {
  MESHLAYOUT_REQUIRE_GPU();
  // velocity ≥ average_gradient² (centered's denominator stays positive).
  check_all_dtypes(rmsprop_update, RmspropParams{0.9, 0.0, 1e-7, false}, {{0.5, 1.0}}, "rmsprop");
  check_all_dtypes(rmsprop_update, RmspropParams{0.9, 0.5, 1e-7, false}, {{0.5, 1.0}, {-0.1, 0.1}},
                   "rmsprop momentum");
  check_all_dtypes(rmsprop_update, RmspropParams{0.8, 0.0, 1e-6, true}, {{0.5, 1.0}, {-0.1, 0.1}},
                   "rmsprop centered");
  check_all_dtypes(rmsprop_update, RmspropParams{0.8, 0.5, 1e-6, true},
                   {{0.5, 1.0}, {-0.1, 0.1}, {-0.1, 0.1}}, "rmsprop momentum centered");
}

TEST(CudaOptimizerKernelsTest, AdagradMatchesCpuBitForBit) {
  MESHLAYOUT_REQUIRE_GPU();
  check_all_dtypes(adagrad_update, AdagradParams{1e-7}, {{0.0, 1.0}}, "adagrad");
}

TEST(CudaOptimizerKernelsTest, LionMatchesCpuBitForBit) {
  MESHLAYOUT_REQUIRE_GPU();
  check_all_dtypes(lion_update, LionParams{0.9, 0.99}, {{-1.0, 1.0}}, "lion");
  // Momentum and gradient of zero: sign(0) = 0 leaves θ as it is.
  std::vector<float> zeros(5, 0.0f);
  Both<float> theta(random_values<float>(5, 3)), m(zeros);
  GpuBlock g(zeros);
  const Box box{{0}, {5}};
  Array::Shard ct = theta.cpu_shard(box), gt = theta.gpu_shard(box);
  Array::Shard cm = m.cpu_shard(box), gm = m.gpu_shard(box);
  Array::Shard cg = host_shard(zeros, box), gg = g.shard(box);
  Array::Shard* cslots[] = {&cm};
  Array::Shard* gslots[] = {&gm};
  const auto step = [&](Array::Shard* t, Array::Shard* gr, std::span<Array::Shard* const> s) {
    return OptimizerShardStep{.theta = t,
                              .dtype = DType::kF32,
                              .grad = gr,
                              .grad_dtype = DType::kF32,
                              .slots = s,
                              .lr = 0.1f,
                              .iterations = 0};
  };
  lion_update(kCpu, {step(&ct, &cg, cslots), LionParams{0.9, 0.99}});
  lion_update(kCuda, {step(&gt, &gg, gslots), LionParams{0.9, 0.99}});
  theta.expect_same("theta");
  m.expect_same("m");
}

// Needs no GPU: the dtype and slot checks run before any CUDA call.
TEST(CudaOptimizerKernelsTest, RejectsOtherDtypesAndMissingSlots) {
  std::vector<float> x(4, 1.0f);
  Array::Shard shard = host_shard(x, Box{{0}, {4}});
  Array::Shard* one_slot[] = {&shard};
  OptimizerShardStep step{.theta = &shard,
                          .dtype = DType::kBF16,
                          .grad = &shard,
                          .grad_dtype = DType::kF32,
                          .slots = one_slot,
                          .lr = 0.1f,
                          .iterations = 0};
  EXPECT_THROW(sgd_update(kCuda, {step, SgdParams{0.0, false}}), ValueError);
  step.dtype = DType::kF32;
  EXPECT_THROW(adam_update(kCuda, {step, AdamParams{0.9, 0.999, 1e-7, false}}), ValueError);
  step.grad_dtype = DType::kI32;
  EXPECT_THROW(optimizer_prepare(kCuda, {.step = step, .prepared = &shard}), ValueError);
}

}  // namespace
}  // namespace meshlayout
