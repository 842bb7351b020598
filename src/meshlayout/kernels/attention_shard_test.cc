// attention_shard_test.cc — attention_shard_forward's CPU implementation (kernels/attention.h)
// equals attention_head_forward run for each (batch row, head) of the shard, bit for bit, F32
// and F64: causal prefill with grouped-query heads, decoding against a cache (query_offset,
// key_length < S), a sliding window, soft-capping, key masks of every dtype, a shard holding a
// slice of the heads, rows that see no key. Runs everywhere (no GPU needed).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "meshlayout/array/array.h"
#include "meshlayout/kernels/attention.h"

namespace meshlayout {
namespace {

struct Case {
  std::string name;
  int64_t B, T, S, L, Hq, Hkv, D;
  int64_t head_offset = 0, local_heads = -1;  // the shard's query heads (-1: all)
  AttentionMasking masking{};
  bool with_mask = false;
  DType mask_dtype = DType::kI32;
};

template <typename T>
Array::Shard shard_over(std::vector<T>& data, Box box) {
  return Array::Shard{
      0, 0, std::move(box),
      DeviceBuffer::borrowed(reinterpret_cast<std::byte*>(data.data()), data.size() * sizeof(T))};
}

template <typename E>
std::vector<E> random_vector(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<E> v(n);
  for (E& x : v) x = static_cast<E>(u(rng));
  return v;
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
  std::vector<E> q = random_vector<E>(static_cast<size_t>(qbox.num_elements()), seed);
  std::vector<E> k = random_vector<E>(static_cast<size_t>(kvbox.num_elements()), seed + 1);
  std::vector<E> v = random_vector<E>(static_cast<size_t>(kvbox.num_elements()), seed + 2);
  const size_t msize = dtype_size(c.mask_dtype);
  std::vector<uint8_t> mask(static_cast<size_t>(c.B * c.S) * msize, 0);
  std::mt19937_64 rng(seed + 3);
  for (int64_t i = 0; i < c.B * c.S; ++i) {
    const int64_t keep = (c.B > 1 && i >= (c.B - 1) * c.S) || rng() % 4 == 0 ? 0 : 1;
    std::memcpy(mask.data() + static_cast<size_t>(i) * msize, &keep, msize);  // little end
  }
  const DType dtype = sizeof(E) == 4 ? DType::kF32 : DType::kF64;
  std::vector<E> by_head(q.size(), E(0)), by_shard(q.size(), E(0));
  Array::Shard oh = shard_over(by_head, qbox), os = shard_over(by_shard, qbox);
  Array::Shard qs = shard_over(q, qbox), ks = shard_over(k, kvbox), vs = shard_over(v, kvbox),
               ms = shard_over(mask, mbox);
  const AttentionShardForward args{.out = &os,
                                   .q = &qs,
                                   .k = &ks,
                                   .v = &vs,
                                   .key_mask = c.with_mask ? &ms : nullptr,
                                   .mask_dtype = c.mask_dtype,
                                   .T = c.T,
                                   .S = c.S,
                                   .L = c.L,
                                   .r = r,
                                   .D = c.D,
                                   .scale = 1.0 / std::sqrt(static_cast<double>(c.D)),
                                   .masking = c.masking,
                                   .dtype = dtype};
  attention_shard_forward(DeviceKind::kCpu, args);
  for (int64_t b = 0; b < c.B; ++b) {
    for (int64_t h = 0; h < lh; ++h) {
      AttentionHeadForward head = attention_head_task(args, b, h);
      head.out = &oh;
      EXPECT_EQ(head.b, b);
      EXPECT_EQ(head.h, h);
      attention_head_forward(DeviceKind::kCpu, head);
    }
  }
  EXPECT_EQ(std::memcmp(by_head.data(), by_shard.data(), by_head.size() * sizeof(E)), 0);
  double norm = 0;
  for (E x : by_shard) norm += std::abs(static_cast<double>(x));
  EXPECT_GT(norm, 0) << "the output is all zeros";
}

std::vector<Case> cases() {
  return {
      {.name = "causal prefill, GQA 8/2",
       .B = 2,
       .T = 37,
       .S = 37,
       .L = 37,
       .Hq = 8,
       .Hkv = 2,
       .D = 16},
      {.name = "decode one row",
       .B = 3,
       .T = 1,
       .S = 50,
       .L = 41,
       .Hq = 4,
       .Hkv = 2,
       .D = 8,
       .masking = {.causal = true, .query_offset = 40}},
      {.name = "window, soft cap, I64 mask",
       .B = 2,
       .T = 19,
       .S = 19,
       .L = 19,
       .Hq = 2,
       .Hkv = 1,
       .D = 12,
       .masking = {.causal = true, .sliding_window = 5, .logit_soft_cap = 3.0},
       .with_mask = true,
       .mask_dtype = DType::kI64},
      {.name = "non-causal, U8 mask, key_length < S",
       .B = 2,
       .T = 7,
       .S = 13,
       .L = 10,
       .Hq = 2,
       .Hkv = 2,
       .D = 5,
       .masking = {.causal = false},
       .with_mask = true,
       .mask_dtype = DType::kU8},
      {.name = "BOOL mask",
       .B = 1,
       .T = 6,
       .S = 6,
       .L = 6,
       .Hq = 3,
       .Hkv = 1,
       .D = 4,
       .with_mask = true,
       .mask_dtype = DType::kBool},
      {.name = "I32 mask, query heads [2, 6) of 8",
       .B = 2,
       .T = 9,
       .S = 9,
       .L = 9,
       .Hq = 8,
       .Hkv = 2,
       .D = 16,
       .head_offset = 2,
       .local_heads = 4,
       .with_mask = true},
      {.name = "rows that see no key",
       .B = 1,
       .T = 9,
       .S = 5,
       .L = 5,
       .Hq = 2,
       .Hkv = 2,
       .D = 8,
       .masking = {.causal = true, .query_offset = -3}},
  };
}

TEST(AttentionShardForwardTest, CpuEqualsThePerHeadLoopBitForBit) {
  uint64_t seed = 77;
  for (const Case& c : cases()) {
    check_case<float>(c, seed += 10);
    check_case<double>(c, seed += 10);
  }
}

}  // namespace
}  // namespace meshlayout
