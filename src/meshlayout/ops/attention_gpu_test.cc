// attention_gpu_test.cc — attention() on GPU devices (a 2×4 mesh of virtual GPUs,
// MESHLAYOUT_GPU_DEVICES=8 over the physical GPUs), where ops/attention.cc runs one
// attention_shard_forward per shard, against the same call on CPU devices: batch rows split over
// "batch" and query heads over "model", with key/value heads replicated (4 query heads per
// key/value head over 4 blocks) or split along (2 per head), causal prefill, a sliding window
// with soft-capping and a key mask, decoding one row against a cache (query_offset, key_length
// < S); F32 within 1e-5 of the CPU's F32 result, F64 within 1e-12. Skipped without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>

#include "meshlayout/ops/attention.h"
#include "meshlayout/testing/test_util.h"

namespace meshlayout {
namespace {

class AttentionGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MESHLAYOUT_REQUIRE_GPU();
    setenv(kGpuDevicesEnvVar, "8", 1);
    set_device_count(8);
  }
  void TearDown() override {
    reset_device_count();
    unsetenv(kGpuDevicesEnvVar);
  }
};

struct Case {
  std::string name;
  int64_t T, S, Hq, Hkv, D;
  AttentionOptions options;
  bool with_mask = false;
};

double element(const HostTensor& x, int64_t i) {
  return x.dtype() == DType::kF64 ? x.data_as<double>()[i] : x.data_as<float>()[i];
}

// ‖a − b‖ / ‖b‖, and how many elements are not finite in a (never written, or wrong).
double relative_error(const HostTensor& a, const HostTensor& b, int64_t* non_finite) {
  double num = 0, den = 0;
  *non_finite = 0;
  for (int64_t i = 0; i < b.num_elements(); ++i) {
    const double x = element(a, i), y = element(b, i);
    if (!std::isfinite(x)) ++*non_finite;
    num += (x - y) * (x - y);
    den += y * y;
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

HostTensor run(const DeviceMesh& mesh, const Case& c, const HostTensor& q, const HostTensor& k,
               const HostTensor& v, const HostTensor& mask) {
  const Array qa = distribute_tensor(q, TensorLayout({"batch", None, "model", None}, mesh));
  const Array ka = distribute_tensor(k, TensorLayout({"batch", None, None, None}, mesh));
  const Array va = distribute_tensor(v, TensorLayout({"batch", None, None, None}, mesh));
  const Array ma = distribute_tensor(mask, TensorLayout({"batch", None}, mesh));
  AttentionOptions o = c.options;
  if (c.with_mask) o.key_mask = &ma;
  return attention(qa, ka, va, o).gather();
}

TEST_F(AttentionGpuTest, ShardedHeadsMatchTheCpu) {
  const DeviceMesh cpu_mesh({2, 4}, {"batch", "model"});
  const DeviceMesh gpu_mesh = cpu_mesh.with_device_kind(DeviceKind::kCuda);
  const Case cases[] = {
      {.name = "causal prefill, kv heads replicated",
       .T = 70,
       .S = 70,
       .Hq = 8,
       .Hkv = 2,
       .D = 32,
       .options = {}},
      {.name = "window 9, soft cap 3, key mask, kv heads split",
       .T = 70,
       .S = 70,
       .Hq = 8,
       .Hkv = 4,
       .D = 24,
       .options = {.sliding_window = 9, .logit_soft_cap = 3.0},
       .with_mask = true},
      {.name = "decode one row, key_length 77 of 90, key mask",
       .T = 1,
       .S = 90,
       .Hq = 8,
       .Hkv = 2,
       .D = 64,
       .options = {.query_offset = 76, .key_length = 77},
       .with_mask = true},
  };
  uint64_t seed = 300;
  for (const Case& c : cases) {
    for (DType dtype : {DType::kF32, DType::kF64}) {
      SCOPED_TRACE(c.name + " " + std::string(dtype_name(dtype)));
      const HostTensor q = HostTensor::random(dtype, {2, c.T, c.Hq, c.D}, seed += 10);
      const HostTensor k = HostTensor::random(dtype, {2, c.S, c.Hkv, c.D}, seed + 1);
      const HostTensor v = HostTensor::random(dtype, {2, c.S, c.Hkv, c.D}, seed + 2);
      HostTensor mask(DType::kI32, {2, c.S});
      for (int64_t i = 0; i < 2 * c.S; ++i) mask.data_as<int32_t>()[i] = (i * 7) % 5 != 0;
      const HostTensor want = run(cpu_mesh, c, q, k, v, mask);
      const HostTensor got = run(gpu_mesh, c, q, k, v, mask);
      int64_t non_finite = 0;
      const double err = relative_error(got, want, &non_finite);
      EXPECT_EQ(non_finite, 0);
      EXPECT_LE(err, dtype == DType::kF32 ? 1e-5 : 1e-12);
    }
  }
}

}  // namespace
}  // namespace meshlayout
