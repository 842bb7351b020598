// attention_kernels_test.cc — attention_kernels.cu's attention_head_forward against the CPU's on
// the same random q, k, v (F32 and F64), one op call per (batch row, local head) as
// ops/attention.cc makes them: causal prefill with grouped-query heads (8 query / 2 key-value),
// decoding one row and a few rows against a cache (query_offset, key_length < S), a sliding
// window, soft-capping, key masks of every dtype (I32, I64, U8, BOOL) with a fully masked batch
// row, non-causal attention, shards holding a slice of the heads, rows that see no key, and key
// counts whose scores need the opt-in shared memory or the global scratch.
//
// F32 results are held to the CPU F64 op on the same (float) inputs at 1e-6 (the GPU sums in
// double), and to the CPU F32 op at 1e-5 (1e-4 past 10,000 keys): the CPU's float BLAS sums over
// the keys carry about √L·2⁻²⁴ of their own.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "meshlayout/kernels/attention.h"
#include "meshlayout/kernels/cuda/layer_kernels_test_util.h"

namespace meshlayout::testing_cuda {
namespace {

struct Case {
  std::string name;
  int64_t B, T, S, L, Hq, Hkv, D;
  int64_t head_offset = 0, local_heads = -1;  // the shard's query heads (-1: all)
  double scale = 0;                           // 0: 1/sqrt(D)
  AttentionMasking masking{};
  bool with_mask = false;
  DType mask_dtype = DType::kI32;
};

// A (B, S) key mask of `dtype` (I32, I64, U8 or BOOL): about one key in five masked, every key of
// the last batch row masked when B > 1 (its rows attend nothing: zeros).
std::vector<uint8_t> make_mask(int64_t B, int64_t S, DType dtype, uint64_t seed) {
  const size_t size = dtype_size(dtype);
  std::vector<uint8_t> bytes(static_cast<size_t>(B * S) * size, 0);
  std::mt19937_64 rng(seed);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t s = 0; s < S; ++s) {
      const bool keep = (B == 1 || b < B - 1) && rng() % 5 != 0;
      const int64_t v = keep ? 1 : 0;
      std::memcpy(bytes.data() + static_cast<size_t>(b * S + s) * size, &v, size);  // little end
    }
  }
  return bytes;
}

// Runs the op for every (batch row, local head) of the shard on `kind` over the given shards.
void run_heads(DeviceKind kind, const Case& c, Array::Shard* out, const Array::Shard* q,
               const Array::Shard* k, const Array::Shard* v, const Array::Shard* mask,
               int64_t local_heads, DType dtype) {
  const double scale = c.scale != 0 ? c.scale : 1.0 / std::sqrt(static_cast<double>(c.D));
  for (int64_t b = 0; b < c.B; ++b) {
    for (int64_t h = 0; h < local_heads; ++h) {
      attention_head_forward(kind, {.out = out,
                                    .q = q,
                                    .k = k,
                                    .v = v,
                                    .key_mask = mask,
                                    .mask_dtype = c.mask_dtype,
                                    .b = b,
                                    .h = h,
                                    .T = c.T,
                                    .S = c.S,
                                    .L = c.L,
                                    .r = c.Hq / c.Hkv,
                                    .D = c.D,
                                    .scale = scale,
                                    .masking = c.masking,
                                    .dtype = dtype});
    }
  }
}

template <typename E>
void check_case(const Case& c, uint64_t seed) {
  SCOPED_TRACE(c.name + (sizeof(E) == 4 ? " F32" : " F64"));
  const int64_t r = c.Hq / c.Hkv;
  const int64_t lh = c.local_heads < 0 ? c.Hq : c.local_heads;
  // The key/value shard holds the groups of the shard's query heads (kv_layout's aligned blocks)
  // or every key/value head.
  const bool aligned = c.head_offset % r == 0 && lh % r == 0;
  const int64_t kv0 = aligned ? c.head_offset / r : 0, nkv = aligned ? lh / r : c.Hkv;
  const Box qbox{{0, 0, c.head_offset, 0}, {c.B, c.T, lh, c.D}};
  const Box kvbox{{0, 0, kv0, 0}, {c.B, c.S, nkv, c.D}};
  const Box mbox{{0, 0}, {c.B, c.S}};
  std::vector<E> q = random_values<E>(static_cast<size_t>(qbox.num_elements()), seed, -1, 1);
  std::vector<E> k = random_values<E>(static_cast<size_t>(kvbox.num_elements()), seed + 1, -1, 1);
  std::vector<E> v = random_values<E>(static_cast<size_t>(kvbox.num_elements()), seed + 2, -1, 1);
  std::vector<uint8_t> mask =
      c.with_mask ? make_mask(c.B, c.S, c.mask_dtype, seed + 3) : std::vector<uint8_t>(1, 0);
  const DType dtype = dtype_of<E>();

  std::vector<E> cpu_out(q.size(), E(0));
  Array::Shard co = host_shard(cpu_out, qbox), cq = host_shard(q, qbox), ck = host_shard(k, kvbox),
               cv = host_shard(v, kvbox), cm = host_shard(mask, mbox);
  run_heads(DeviceKind::kCpu, c, &co, &cq, &ck, &cv, c.with_mask ? &cm : nullptr, lh, dtype);

  GpuBlock go(q.size() * sizeof(E)), gq(q), gk(k), gv(v), gm(mask);
  Array::Shard dout = go.shard(qbox), dq = gq.shard(qbox), dk = gk.shard(kvbox),
               dv = gv.shard(kvbox), dm = gm.shard(mbox);
  run_heads(DeviceKind::kCuda, c, &dout, &dq, &dk, &dv, c.with_mask ? &dm : nullptr, lh, dtype);
  const std::vector<E> got = go.download<E>();

  if constexpr (sizeof(E) == 8) {
    expect_near_cpu(got, cpu_out, 1e-12, "vs the CPU F64 op");
  } else {
    expect_near_cpu(got, cpu_out, c.L > 10000 ? 1e-4 : 1e-5, "vs the CPU F32 op");
    // The same float inputs through the CPU's F64 op: the GPU's own error.
    std::vector<double> q64(q.begin(), q.end()), k64(k.begin(), k.end()), v64(v.begin(), v.end());
    std::vector<double> ref(q.size(), 0.0);
    Array::Shard ro = host_shard(ref, qbox), rq = host_shard(q64, qbox),
                 rk = host_shard(k64, kvbox), rv = host_shard(v64, kvbox);
    run_heads(DeviceKind::kCpu, c, &ro, &rq, &rk, &rv, c.with_mask ? &cm : nullptr, lh,
              DType::kF64);
    const std::vector<double> got64(got.begin(), got.end());
    expect_near_cpu(got64, ref, 1e-6, "vs the CPU F64 op on the same inputs");
  }
}

std::vector<Case> cases() {
  std::vector<Case> out;
  out.push_back({.name = "causal prefill, GQA 8/2",
                 .B = 2,
                 .T = 37,
                 .S = 37,
                 .L = 37,
                 .Hq = 8,
                 .Hkv = 2,
                 .D = 64});
  out.push_back({.name = "decode one row against a cache",
                 .B = 2,
                 .T = 1,
                 .S = 50,
                 .L = 41,
                 .Hq = 8,
                 .Hkv = 2,
                 .D = 64,
                 .masking = {.causal = true, .query_offset = 40}});
  out.push_back({.name = "decode three rows",
                 .B = 3,
                 .T = 3,
                 .S = 50,
                 .L = 44,
                 .Hq = 8,
                 .Hkv = 2,
                 .D = 64,
                 .masking = {.causal = true, .query_offset = 41}});
  out.push_back({.name = "sliding window 5",
                 .B = 1,
                 .T = 23,
                 .S = 23,
                 .L = 23,
                 .Hq = 4,
                 .Hkv = 4,
                 .D = 16,
                 .masking = {.causal = true, .sliding_window = 5}});
  out.push_back({.name = "decode with a sliding window",
                 .B = 2,
                 .T = 1,
                 .S = 40,
                 .L = 33,
                 .Hq = 4,
                 .Hkv = 1,
                 .D = 24,
                 .masking = {.causal = true, .query_offset = 32, .sliding_window = 7}});
  out.push_back({.name = "soft cap 2, I32 mask",
                 .B = 2,
                 .T = 19,
                 .S = 19,
                 .L = 19,
                 .Hq = 4,
                 .Hkv = 2,
                 .D = 32,
                 .scale = 1.0,
                 .masking = {.causal = true, .logit_soft_cap = 2.0},
                 .with_mask = true,
                 .mask_dtype = DType::kI32});
  out.push_back({.name = "soft cap 50, window 4, I64 mask",
                 .B = 3,
                 .T = 11,
                 .S = 11,
                 .L = 11,
                 .Hq = 2,
                 .Hkv = 1,
                 .D = 8,
                 .scale = 0.7,
                 .masking = {.causal = true, .sliding_window = 4, .logit_soft_cap = 50.0},
                 .with_mask = true,
                 .mask_dtype = DType::kI64});
  out.push_back({.name = "non-causal, U8 mask, key_length < S",
                 .B = 2,
                 .T = 7,
                 .S = 13,
                 .L = 10,
                 .Hq = 2,
                 .Hkv = 1,
                 .D = 8,
                 .masking = {.causal = false},
                 .with_mask = true,
                 .mask_dtype = DType::kU8});
  out.push_back({.name = "non-causal, BOOL mask",
                 .B = 2,
                 .T = 5,
                 .S = 9,
                 .L = 9,
                 .Hq = 3,
                 .Hkv = 3,
                 .D = 5,
                 .masking = {.causal = false},
                 .with_mask = true,
                 .mask_dtype = DType::kBool});
  out.push_back({.name = "shard of query heads [2, 6) of 8, every kv head",
                 .B = 2,
                 .T = 9,
                 .S = 9,
                 .L = 9,
                 .Hq = 8,
                 .Hkv = 2,
                 .D = 16,
                 .head_offset = 2,
                 .local_heads = 4});
  out.push_back({.name = "shard of query heads [4, 8) with kv head 1",
                 .B = 1,
                 .T = 9,
                 .S = 12,
                 .L = 12,
                 .Hq = 8,
                 .Hkv = 2,
                 .D = 16,
                 .head_offset = 4,
                 .local_heads = 4,
                 .masking = {.causal = true, .query_offset = 3}});
  out.push_back({.name = "rows that see no key (negative offset)",
                 .B = 1,
                 .T = 9,
                 .S = 5,
                 .L = 5,
                 .Hq = 2,
                 .Hkv = 2,
                 .D = 8,
                 .masking = {.causal = true, .query_offset = -3}});
  out.push_back({.name = "no keys (key_length 0)",
                 .B = 1,
                 .T = 3,
                 .S = 4,
                 .L = 0,
                 .Hq = 1,
                 .Hkv = 1,
                 .D = 4,
                 .masking = {.causal = false}});
  out.push_back({.name = "20000 keys (opt-in shared memory)",
                 .B = 1,
                 .T = 1,
                 .S = 20000,
                 .L = 20000,
                 .Hq = 2,
                 .Hkv = 1,
                 .D = 16,
                 .masking = {.causal = true, .query_offset = 19999}});
  out.push_back({.name = "41000 keys (global scratch)",
                 .B = 1,
                 .T = 2,
                 .S = 41000,
                 .L = 41000,
                 .Hq = 1,
                 .Hkv = 1,
                 .D = 16,
                 .masking = {.causal = true, .query_offset = 40998}});
  return out;
}

TEST(CudaAttentionKernelsTest, HeadForwardF32) {
  MESHLAYOUT_REQUIRE_GPU();
  uint64_t seed = 1000;
  for (const Case& c : cases()) check_case<float>(c, seed += 10);
}

TEST(CudaAttentionKernelsTest, HeadForwardF64) {
  MESHLAYOUT_REQUIRE_GPU();
  uint64_t seed = 2000;
  for (const Case& c : cases()) check_case<double>(c, seed += 10);
}

}  // namespace
}  // namespace meshlayout::testing_cuda
