// attention_backward_kernels_test.cc — attention_backward_kernels.cu's attention_head_backward
// against the CPU's on the same random q, k, v, d_out (F32 and F64), one op call per (batch row,
// key/value head of the shard) as ops/attention_backward.cc makes them: causal with
// grouped-query heads, a query offset with key_length < S (zeros for keys past it), a sliding
// window, soft-capping with a key mask (a fully masked batch row), non-causal with U8/BOOL masks,
// a dq shard holding a slice of the heads (partial dk/dv), rows that see no key, no key at all,
// and a key count whose rows need the global scratch. dq, dk and dv are compared.
//
// F64: 1e-12. F32: 2e-6 against the CPU F64 op on the same (float) inputs, 2e-5 against the CPU
// F32 op (1e-4 past 10,000 keys): both compute P and dS in float, and dS = scale·P·(dP − δ)
// cancels, so F32 carries a few float roundings of dP more than a plain sum does.
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
  int64_t head_offset = 0, local_heads = -1;  // dq's query heads (-1: all)
  double scale = 0;                           // 0: 1/sqrt(D)
  AttentionMasking masking{};
  bool with_mask = false;
  DType mask_dtype = DType::kI32;
};

// About one key in five masked; every key of the last batch row masked when B > 1.
std::vector<uint8_t> make_mask(int64_t B, int64_t S, DType dtype, uint64_t seed) {
  const size_t size = dtype_size(dtype);
  std::vector<uint8_t> bytes(static_cast<size_t>(B * S) * size, 0);
  std::mt19937_64 rng(seed);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t s = 0; s < S; ++s) {
      const int64_t v = (B == 1 || b < B - 1) && rng() % 5 != 0 ? 1 : 0;
      std::memcpy(bytes.data() + static_cast<size_t>(b * S + s) * size, &v, size);
    }
  }
  return bytes;
}

// The op's arguments but for the shards and the dtype.
struct Shards {
  Array::Shard *dq, *dk, *dv;
  const Array::Shard *q, *d_out, *k, *v, *mask;
};

void run_heads(DeviceKind kind, const Case& c, const Shards& sh, int64_t kv0, int64_t nkv,
               DType dtype) {
  const double scale = c.scale != 0 ? c.scale : 1.0 / std::sqrt(static_cast<double>(c.D));
  for (int64_t b = 0; b < c.B; ++b) {
    for (int64_t j = kv0; j < kv0 + nkv; ++j) {
      attention_head_backward(kind, {.dq = sh.dq,
                                     .dk = sh.dk,
                                     .dv = sh.dv,
                                     .q = sh.q,
                                     .d_out = sh.d_out,
                                     .k = sh.k,
                                     .v = sh.v,
                                     .key_mask = sh.mask,
                                     .mask_dtype = c.mask_dtype,
                                     .b = b,
                                     .j = j,
                                     .T = c.T,
                                     .S = c.S,
                                     .D = c.D,
                                     .L = c.L,
                                     .r = c.Hq / c.Hkv,
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
  const bool aligned = c.head_offset % r == 0 && lh % r == 0;
  const int64_t kv0 = aligned ? c.head_offset / r : 0, nkv = aligned ? lh / r : c.Hkv;
  const Box qbox{{0, 0, c.head_offset, 0}, {c.B, c.T, lh, c.D}};
  const Box kvbox{{0, 0, kv0, 0}, {c.B, c.S, nkv, c.D}};
  const Box mbox{{0, 0}, {c.B, c.S}};
  const size_t nq = static_cast<size_t>(qbox.num_elements());
  const size_t nk = static_cast<size_t>(kvbox.num_elements());
  std::vector<E> q = random_values<E>(nq, seed), dout = random_values<E>(nq, seed + 1);
  std::vector<E> k = random_values<E>(nk, seed + 2), v = random_values<E>(nk, seed + 3);
  std::vector<uint8_t> mask =
      c.with_mask ? make_mask(c.B, c.S, c.mask_dtype, seed + 4) : std::vector<uint8_t>(1, 0);

  std::vector<E> cdq(nq, E(0)), cdk(nk, E(0)), cdv(nk, E(0));
  Array::Shard hdq = host_shard(cdq, qbox), hdk = host_shard(cdk, kvbox),
               hdv = host_shard(cdv, kvbox), hq = host_shard(q, qbox), hdo = host_shard(dout, qbox),
               hk = host_shard(k, kvbox), hv = host_shard(v, kvbox), hm = host_shard(mask, mbox);
  run_heads(DeviceKind::kCpu, c,
            {&hdq, &hdk, &hdv, &hq, &hdo, &hk, &hv, c.with_mask ? &hm : nullptr}, kv0, nkv,
            dtype_of<E>());

  GpuBlock gdq(nq * sizeof(E)), gdk(nk * sizeof(E)), gdv(nk * sizeof(E)), gq(q), gdo(dout), gk(k),
      gv(v), gm(mask);
  Array::Shard ddq = gdq.shard(qbox), ddk = gdk.shard(kvbox), ddv = gdv.shard(kvbox),
               dq = gq.shard(qbox), ddo = gdo.shard(qbox), dk = gk.shard(kvbox),
               dv = gv.shard(kvbox), dm = gm.shard(mbox);
  run_heads(DeviceKind::kCuda, c,
            {&ddq, &ddk, &ddv, &dq, &ddo, &dk, &dv, c.with_mask ? &dm : nullptr}, kv0, nkv,
            dtype_of<E>());
  const std::vector<E> got_dq = gdq.download<E>(), got_dk = gdk.download<E>(),
                       got_dv = gdv.download<E>();

  if constexpr (sizeof(E) == 8) {
    expect_near_cpu(got_dq, cdq, 1e-12, "dq");
    expect_near_cpu(got_dk, cdk, 1e-12, "dk");
    expect_near_cpu(got_dv, cdv, 1e-12, "dv");
  } else {
    const double tol = c.L > 10000 ? 1e-4 : 2e-5;
    expect_near_cpu(got_dq, cdq, tol, "dq vs the CPU F32 op");
    expect_near_cpu(got_dk, cdk, tol, "dk vs the CPU F32 op");
    expect_near_cpu(got_dv, cdv, tol, "dv vs the CPU F32 op");
    // The same float inputs through the CPU's F64 op: the GPU's own error.
    std::vector<double> q64(q.begin(), q.end()), do64(dout.begin(), dout.end()),
        k64(k.begin(), k.end()), v64(v.begin(), v.end());
    std::vector<double> rdq(nq, 0.0), rdk(nk, 0.0), rdv(nk, 0.0);
    Array::Shard sdq = host_shard(rdq, qbox), sdk = host_shard(rdk, kvbox),
                 sdv = host_shard(rdv, kvbox), sq = host_shard(q64, qbox),
                 sdo = host_shard(do64, qbox), sk = host_shard(k64, kvbox),
                 sv = host_shard(v64, kvbox);
    run_heads(DeviceKind::kCpu, c,
              {&sdq, &sdk, &sdv, &sq, &sdo, &sk, &sv, c.with_mask ? &hm : nullptr}, kv0, nkv,
              DType::kF64);
    expect_near_cpu(std::vector<double>(got_dq.begin(), got_dq.end()), rdq, 2e-6, "dq vs F64");
    expect_near_cpu(std::vector<double>(got_dk.begin(), got_dk.end()), rdk, 2e-6, "dk vs F64");
    expect_near_cpu(std::vector<double>(got_dv.begin(), got_dv.end()), rdv, 2e-6, "dv vs F64");
  }
}

std::vector<Case> cases() {
  std::vector<Case> out;
  out.push_back(
      {.name = "causal, GQA 8/2", .B = 2, .T = 29, .S = 29, .L = 29, .Hq = 8, .Hkv = 2, .D = 64});
  out.push_back({.name = "query offset, key_length < S",
                 .B = 2,
                 .T = 3,
                 .S = 50,
                 .L = 44,
                 .Hq = 4,
                 .Hkv = 2,
                 .D = 32,
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
  out.push_back({.name = "dq heads [2, 6) of 8, every kv head",
                 .B = 2,
                 .T = 9,
                 .S = 9,
                 .L = 9,
                 .Hq = 8,
                 .Hkv = 2,
                 .D = 16,
                 .head_offset = 2,
                 .local_heads = 4});
  out.push_back({.name = "dq heads [4, 8) with kv head 1",
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
  out.push_back({.name = "rows that see no key",
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
  out.push_back({.name = "head_dim 300 (two passes of key_kernel)",
                 .B = 1,
                 .T = 4,
                 .S = 6,
                 .L = 6,
                 .Hq = 2,
                 .Hkv = 1,
                 .D = 300});
  out.push_back({.name = "25000 keys (global scratch)",
                 .B = 1,
                 .T = 2,
                 .S = 25000,
                 .L = 25000,
                 .Hq = 2,
                 .Hkv = 1,
                 .D = 16,
                 .masking = {.causal = true, .query_offset = 24998}});
  return out;
}

TEST(CudaAttentionBackwardTest, HeadBackwardF32) {
  MESHLAYOUT_REQUIRE_GPU();
  uint64_t seed = 3000;
  for (const Case& c : cases()) check_case<float>(c, seed += 10);
}

TEST(CudaAttentionBackwardTest, HeadBackwardF64) {
  MESHLAYOUT_REQUIRE_GPU();
  uint64_t seed = 4000;
  for (const Case& c : cases()) check_case<double>(c, seed += 10);
}

}  // namespace
}  // namespace meshlayout::testing_cuda
