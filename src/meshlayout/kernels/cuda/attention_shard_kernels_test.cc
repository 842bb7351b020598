// attention_shard_kernels_test.cc — attention_shard_kernels.cu's attention_shard_forward (every
// (batch row, head) of a shard in one op) against the CPU op on the same random q, k, v: the
// flash kernel (F32 prefill: a Llama-3-8B-shaped 2048-token causal shard with 32 query / 8
// key-value heads of 128 dims, odd sizes, several tiles with a partial last one, a sliding window
// that skips key tiles, soft-capping, key masks of every dtype, a batch of three rows with
// different key lengths, shards holding a slice of the heads, rows that see no key), the row
// kernel (decoding one or a few rows against a cache, long caches split across blocks and
// combined, head_dim 200, every F64 case) and the per-head fallback (head_dim 600).
//
// F32 results are held to the CPU F32 op at 1e-5 and to the CPU F64 op on the same (float) inputs
// at 1e-6 (the GPU sums in double); F64 results to the CPU F64 op at 1e-12. Every output element
// must be written (GpuBlock poisons with NaN). PrefillTiming prints the shard op's time next to
// the per-head loop's on the Llama shape (no expectation on speed).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "meshlayout/kernels/attention.h"
#include "meshlayout/kernels/cpu/blas.h"
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
  std::vector<int64_t> key_lengths = {};  // per batch row: keys [0, n) kept (a mask), else random
};

// A (B, S) key mask of `dtype`: batch row b keeps keys [0, key_lengths[b]) when given, else about
// four keys in five, every key of the last batch row masked when B > 1 (its rows get zeros).
std::vector<uint8_t> make_mask(const Case& c, uint64_t seed) {
  const size_t size = dtype_size(c.mask_dtype);
  std::vector<uint8_t> bytes(static_cast<size_t>(c.B * c.S) * size, 0);
  std::mt19937_64 rng(seed);
  for (int64_t b = 0; b < c.B; ++b) {
    for (int64_t s = 0; s < c.S; ++s) {
      const bool keep = c.key_lengths.empty() ? (c.B == 1 || b < c.B - 1) && rng() % 5 != 0
                                              : s < c.key_lengths[static_cast<size_t>(b)];
      const int64_t v = keep ? 1 : 0;
      std::memcpy(bytes.data() + static_cast<size_t>(b * c.S + s) * size, &v, size);
    }
  }
  return bytes;
}

AttentionShardForward shard_args(const Case& c, Array::Shard* out, const Array::Shard* q,
                                 const Array::Shard* k, const Array::Shard* v,
                                 const Array::Shard* mask, DType dtype) {
  return {.out = out,
          .q = q,
          .k = k,
          .v = v,
          .key_mask = mask,
          .mask_dtype = c.mask_dtype,
          .T = c.T,
          .S = c.S,
          .L = c.L,
          .r = c.Hq / c.Hkv,
          .D = c.D,
          .scale = c.scale != 0 ? c.scale : 1.0 / std::sqrt(static_cast<double>(c.D)),
          .masking = c.masking,
          .dtype = dtype};
}

// The CPU op's (batch row, head) tasks on several threads (the large cases take a while).
void run_cpu(const AttentionShardForward& a) {
  cpu_kernels::use_single_threaded_blas();
  const int64_t nb = a.out->box.shape[0], nh = a.out->box.shape[2], tasks = nb * nh;
  const int64_t workers =
      std::max<int64_t>(1, std::min<int64_t>(tasks, std::thread::hardware_concurrency()));
  std::vector<std::thread> threads;
  for (int64_t w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      for (int64_t n = w; n < tasks; n += workers) {
        attention_head_forward(DeviceKind::kCpu, attention_head_task(a, n / nh, n % nh));
      }
    });
  }
  for (std::thread& t : threads) t.join();
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
  std::vector<uint8_t> mask = c.with_mask ? make_mask(c, seed + 3) : std::vector<uint8_t>(1, 0);
  const DType dtype = dtype_of<E>();

  std::vector<E> cpu_out(q.size(), E(0));
  Array::Shard co = host_shard(cpu_out, qbox), cq = host_shard(q, qbox), ck = host_shard(k, kvbox),
               cv = host_shard(v, kvbox), cm = host_shard(mask, mbox);
  const Array::Shard* cpu_mask = c.with_mask ? &cm : nullptr;
  run_cpu(shard_args(c, &co, &cq, &ck, &cv, cpu_mask, dtype));

  GpuBlock go(q.size() * sizeof(E)), gq(q), gk(k), gv(v), gm(mask);
  Array::Shard dout = go.shard(qbox), dq = gq.shard(qbox), dk = gk.shard(kvbox),
               dv = gv.shard(kvbox), dm = gm.shard(mbox);
  attention_shard_forward(DeviceKind::kCuda,
                          shard_args(c, &dout, &dq, &dk, &dv, c.with_mask ? &dm : nullptr, dtype));
  const std::vector<E> got = go.download<E>();

  if constexpr (sizeof(E) == 8) {
    expect_near_cpu(got, cpu_out, 1e-12, "vs the CPU F64 op");
  } else {
    expect_near_cpu(got, cpu_out, 1e-5, "vs the CPU F32 op");
    // The same float inputs through the CPU's F64 op: the GPU's own error.
    std::vector<double> q64(q.begin(), q.end()), k64(k.begin(), k.end()), v64(v.begin(), v.end());
    std::vector<double> ref(q.size(), 0.0);
    Array::Shard ro = host_shard(ref, qbox), rq = host_shard(q64, qbox),
                 rk = host_shard(k64, kvbox), rv = host_shard(v64, kvbox);
    run_cpu(shard_args(c, &ro, &rq, &rk, &rv, cpu_mask, DType::kF64));
    const std::vector<double> got64(got.begin(), got.end());
    expect_near_cpu(got64, ref, 1e-6, "vs the CPU F64 op on the same inputs");
  }
}

Case llama_prefill() {
  return {.name = "Llama-3-8B prefill 2048, GQA 32/8, head_dim 128",
          .B = 1,
          .T = 2048,
          .S = 2048,
          .L = 2048,
          .Hq = 32,
          .Hkv = 8,
          .D = 128};
}

std::vector<Case> cases() {
  std::vector<Case> out;
  out.push_back(llama_prefill());
  out.push_back({.name = "decode one row at offset 127, 128 keys, GQA 32/8",
                 .B = 1,
                 .T = 1,
                 .S = 128,
                 .L = 128,
                 .Hq = 32,
                 .Hkv = 8,
                 .D = 128,
                 .masking = {.causal = true, .query_offset = 127}});
  out.push_back({.name = "decode two rows, 5000 of 5100 keys (split and combined)",
                 .B = 2,
                 .T = 2,
                 .S = 5100,
                 .L = 5000,
                 .Hq = 8,
                 .Hkv = 2,
                 .D = 64,
                 .masking = {.causal = true, .query_offset = 4998}});
  out.push_back({.name = "decode 3 rows with window 300 and a U8 mask, 3000 keys (split)",
                 .B = 2,
                 .T = 3,
                 .S = 3000,
                 .L = 3000,
                 .Hq = 4,
                 .Hkv = 1,
                 .D = 24,
                 .masking = {.causal = true, .query_offset = 2997, .sliding_window = 300},
                 .with_mask = true,
                 .mask_dtype = DType::kU8});
  out.push_back({.name = "odd sizes T=7, S=13, head_dim 12, causal offset 6",
                 .B = 2,
                 .T = 7,
                 .S = 13,
                 .L = 13,
                 .Hq = 3,
                 .Hkv = 1,
                 .D = 12,
                 .masking = {.causal = true, .query_offset = 6}});
  out.push_back({.name = "odd sizes T=7, S=13, L=11, head_dim 12, non-causal",
                 .B = 1,
                 .T = 7,
                 .S = 13,
                 .L = 11,
                 .Hq = 2,
                 .Hkv = 2,
                 .D = 12,
                 .masking = {.causal = false}});
  out.push_back({.name = "non-causal T=130 (three tiles), S=77, head_dim 5",
                 .B = 1,
                 .T = 130,
                 .S = 77,
                 .L = 77,
                 .Hq = 2,
                 .Hkv = 1,
                 .D = 5,
                 .masking = {.causal = false}});
  out.push_back({.name = "sliding window 17 over 300 rows (key tiles skipped)",
                 .B = 1,
                 .T = 300,
                 .S = 300,
                 .L = 300,
                 .Hq = 4,
                 .Hkv = 2,
                 .D = 32,
                 .masking = {.causal = true, .sliding_window = 17}});
  out.push_back({.name = "soft cap 5, scale 1, window 40, BOOL mask",
                 .B = 2,
                 .T = 150,
                 .S = 150,
                 .L = 150,
                 .Hq = 4,
                 .Hkv = 2,
                 .D = 48,
                 .scale = 1.0,
                 .masking = {.causal = true, .sliding_window = 40, .logit_soft_cap = 5.0},
                 .with_mask = true,
                 .mask_dtype = DType::kBool});
  out.push_back({.name = "soft cap 2, I32 mask, head_dim 96",
                 .B = 2,
                 .T = 19,
                 .S = 19,
                 .L = 19,
                 .Hq = 4,
                 .Hkv = 2,
                 .D = 96,
                 .scale = 1.0,
                 .masking = {.causal = true, .logit_soft_cap = 2.0},
                 .with_mask = true,
                 .mask_dtype = DType::kI32});
  out.push_back({.name = "I64 mask, non-causal, T=70",
                 .B = 3,
                 .T = 70,
                 .S = 90,
                 .L = 90,
                 .Hq = 2,
                 .Hkv = 1,
                 .D = 16,
                 .masking = {.causal = false},
                 .with_mask = true,
                 .mask_dtype = DType::kI64});
  out.push_back({.name = "batch 3 with key lengths 13, 5, 0 (I32 mask), key_length 14 of 16",
                 .B = 3,
                 .T = 9,
                 .S = 16,
                 .L = 14,
                 .Hq = 4,
                 .Hkv = 2,
                 .D = 32,
                 .masking = {.causal = false},
                 .with_mask = true,
                 .mask_dtype = DType::kI32,
                 .key_lengths = {13, 5, 0}});
  out.push_back({.name = "batch 3 decoding with key lengths 100, 37, 1 (U8 mask)",
                 .B = 3,
                 .T = 1,
                 .S = 128,
                 .L = 100,
                 .Hq = 8,
                 .Hkv = 2,
                 .D = 64,
                 .masking = {.causal = true, .query_offset = 99},
                 .with_mask = true,
                 .mask_dtype = DType::kU8,
                 .key_lengths = {100, 37, 1}});
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
  out.push_back({.name = "shard of query heads [4, 8) with kv head 1, offset 3",
                 .B = 1,
                 .T = 70,
                 .S = 73,
                 .L = 73,
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
                 .T = 6,
                 .S = 4,
                 .L = 0,
                 .Hq = 1,
                 .Hkv = 1,
                 .D = 4,
                 .masking = {.causal = false}});
  out.push_back({.name = "1x1: one row, one key, head_dim 1",
                 .B = 1,
                 .T = 1,
                 .S = 1,
                 .L = 1,
                 .Hq = 1,
                 .Hkv = 1,
                 .D = 1});
  out.push_back({.name = "head_dim 200 prefill (row kernel)",
                 .B = 1,
                 .T = 33,
                 .S = 33,
                 .L = 33,
                 .Hq = 2,
                 .Hkv = 1,
                 .D = 200});
  out.push_back({.name = "head_dim 600 (the per-head fallback)",
                 .B = 1,
                 .T = 6,
                 .S = 10,
                 .L = 10,
                 .Hq = 2,
                 .Hkv = 1,
                 .D = 600,
                 .masking = {.causal = true, .query_offset = 4}});
  return out;
}

TEST(CudaAttentionShardKernelsTest, ShardForwardF32) {
  MESHLAYOUT_REQUIRE_GPU();
  uint64_t seed = 5000;
  for (const Case& c : cases()) check_case<float>(c, seed += 10);
}

TEST(CudaAttentionShardKernelsTest, ShardForwardF64) {
  MESHLAYOUT_REQUIRE_GPU();
  uint64_t seed = 6000;
  for (const Case& c : cases()) check_case<double>(c, seed += 10);
}

// The shard op and the per-head loop on the GPU, Llama-3-8B prefill shape (F32): times only.
TEST(CudaAttentionShardKernelsTest, PrefillTiming) {
  MESHLAYOUT_REQUIRE_GPU();
  const Case c = llama_prefill();
  const Box qbox{{0, 0, 0, 0}, {c.B, c.T, c.Hq, c.D}};
  const Box kvbox{{0, 0, 0, 0}, {c.B, c.S, c.Hkv, c.D}};
  std::vector<float> q = random_values<float>(static_cast<size_t>(qbox.num_elements()), 1, -1, 1);
  std::vector<float> k = random_values<float>(static_cast<size_t>(kvbox.num_elements()), 2, -1, 1);
  GpuBlock go(q.size() * sizeof(float)), gq(q), gk(k), gv(k);
  Array::Shard dout = go.shard(qbox), dq = gq.shard(qbox), dk = gk.shard(kvbox),
               dv = gv.shard(kvbox);
  const AttentionShardForward a = shard_args(c, &dout, &dq, &dk, &dv, nullptr, DType::kF32);
  const auto time_ms = [&](auto&& run) {
    run();  // warm-up
    cuda::synchronize_device(0);
    double best = 1e30;
    for (int i = 0; i < 3; ++i) {
      const auto start = std::chrono::steady_clock::now();
      run();
      cuda::synchronize_device(0);
      best = std::min(
          best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                    .count());
    }
    return best;
  };
  const double shard_ms = time_ms([&] { attention_shard_forward(DeviceKind::kCuda, a); });
  const double head_ms = time_ms([&] {
    for (int64_t h = 0; h < c.Hq; ++h) {
      attention_head_forward(DeviceKind::kCuda, attention_head_task(a, 0, h));
    }
  });
  std::cout << "attention prefill 2048 x 32/8 heads x 128 (F32, causal): shard op " << shard_ms
            << " ms, per-head loop " << head_ms << " ms\n";
}

}  // namespace
}  // namespace meshlayout::testing_cuda
