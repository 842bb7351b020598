// attention and the rotary embedding against float64 references written from the formulas
// (HF LlamaAttention / keras GroupedQueryAttention), on layouts that split batch and heads,
// uneven and replicated key/value heads, a split sequence (gathered), a cache's valid length
// and a key padding mask; the same in float64 (F64 inputs computed in double) to 1e-12.
#include "meshlayout/ops/attention.h"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "meshlayout/core/errors.h"

namespace meshlayout {
namespace {

struct Case {
  int64_t B, T, S, Hq, Hkv, D;
};

// Element i of an F32 or F64 host tensor as a double.
double element(const HostTensor& x, int64_t i) {
  return x.dtype() == DType::kF64 ? x.data_as<double>()[i] : x.data_as<float>()[i];
}

double at(const HostTensor& x, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
  const Shape& s = x.shape();
  return element(x, ((i0 * s[1] + i1) * s[2] + i2) * s[3] + i3);
}

// The F32 tensor's values as F64 (exactly).
HostTensor widened(const HostTensor& x) {
  HostTensor out(DType::kF64, x.shape());
  for (int64_t i = 0; i < x.num_elements(); ++i) out.data_as<double>()[i] = x.data_as<float>()[i];
  return out;
}

// softmax(q kᵀ / sqrt(D)) v in double, head h using kv head h / (Hq / Hkv).
std::vector<double> reference_attention(const HostTensor& q, const HostTensor& k,
                                        const HostTensor& v, const AttentionOptions& o,
                                        const std::vector<int>* mask) {
  const int64_t B = q.shape()[0], T = q.shape()[1], H = q.shape()[2], D = q.shape()[3];
  const int64_t S = k.shape()[1], Hkv = k.shape()[2];
  const int64_t L = o.key_length < 0 ? S : o.key_length;
  std::vector<double> out(static_cast<size_t>(B * T * H * D), 0.0);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t h = 0; h < H; ++h) {
        const int64_t j = h / (H / Hkv);
        std::vector<double> w(static_cast<size_t>(L), 0.0);
        double m = -INFINITY;
        for (int64_t s = 0; s < L; ++s) {
          const bool keep = (!o.causal || s <= t + o.query_offset) &&
                            (o.sliding_window == 0 || s > t + o.query_offset - o.sliding_window) &&
                            (!mask || (*mask)[static_cast<size_t>(b * S + s)] != 0);
          if (!keep) {
            w[static_cast<size_t>(s)] = -INFINITY;
            continue;
          }
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += at(q, b, t, h, d) * at(k, b, s, j, d);
          w[static_cast<size_t>(s)] = dot / std::sqrt(static_cast<double>(D));
          if (o.logit_soft_cap > 0) {
            w[static_cast<size_t>(s)] =
                o.logit_soft_cap * std::tanh(w[static_cast<size_t>(s)] / o.logit_soft_cap);
          }
          m = std::max(m, w[static_cast<size_t>(s)]);
        }
        if (m == -INFINITY) continue;
        double sum = 0;
        for (double& x : w) sum += (x = std::exp(x - m));
        for (int64_t d = 0; d < D; ++d) {
          double acc = 0;
          for (int64_t s = 0; s < L; ++s)
            acc += w[static_cast<size_t>(s)] / sum * at(v, b, s, j, d);
          out[static_cast<size_t>(((b * T + t) * H + h) * D + d)] = acc;
        }
      }
    }
  }
  return out;
}

// F32 results within 1e-5, F64 ones within 1e-12 (relative, plus as much absolute).
void expect_close(const HostTensor& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(static_cast<size_t>(num_elements(got.shape())), want.size()) << what;
  const double tolerance = got.dtype() == DType::kF64 ? 1e-12 : 1e-5;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(element(got, static_cast<int64_t>(i)), want[i], tolerance * (1 + std::abs(want[i])))
        << what << " at " << i;
  }
}

struct LayoutCase {
  std::vector<DimSharding> q, kv;
};

template <typename F>
std::string attention_error(F&& f) {
  try {
    f();
  } catch (const ValueError& e) {
    return e.what();
  }
  return "(no ValueError)";
}

::testing::AssertionResult testing_has(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << text << "\" lacks \"" << part << "\"";
}

TEST(AttentionTest, MatchesFloat64OnEveryLayout) {
  DeviceMesh mesh({2, 4}, {"batch", "model"});
  const Case cases[] = {
      {2, 5, 5, 8, 8, 4}, {2, 5, 5, 8, 2, 4}, {4, 3, 7, 4, 4, 6}, {2, 6, 6, 6, 3, 2}};
  const LayoutCase layouts[] = {
      {{"batch", None, "model", None}, {"batch", None, "model", None}},  // Megatron heads + data
      {{None, None, "model", None}, {None, None, "model", None}},
      {{None, "model", None, None}, {None, None, None, "model"}},  // sequence split: gathered
      {{None, None, None, None}, {"batch", "model", None, None}},
      {{"batch", None, None, "model"}, {None, None, "model", None}},
  };
  for (const Case& c : cases) {
    for (const DType dtype : {DType::kF32, DType::kF64}) {
      HostTensor q = HostTensor::random(DType::kF32, {c.B, c.T, c.Hq, c.D}, 1);
      HostTensor k = HostTensor::random(DType::kF32, {c.B, c.S, c.Hkv, c.D}, 2);
      HostTensor v = HostTensor::random(DType::kF32, {c.B, c.S, c.Hkv, c.D}, 3);
      if (dtype == DType::kF64) q = widened(q), k = widened(k), v = widened(v);
      for (const LayoutCase& l : layouts) {
        const Array qa = distribute_tensor(q, TensorLayout(l.q, mesh));
        const Array ka = distribute_tensor(k, TensorLayout(l.kv, mesh));
        const Array va = distribute_tensor(v, TensorLayout(l.kv, mesh));
        for (const bool causal : {true, false}) {
          const AttentionOptions o{.causal = causal};
          const Array out = attention(qa, ka, va, o);
          EXPECT_EQ(out.layout().axes()[0], l.q[0]);
          EXPECT_EQ(out.dtype(), dtype);
          expect_close(out.gather(), reference_attention(q, k, v, o, nullptr),
                       fmt::format("{} Hq {} Hkv {} q {} causal {}", dtype_name(dtype), c.Hq, c.Hkv,
                                   TensorLayout(l.q, mesh).to_string(), causal));
        }
      }
    }
  }
}

TEST(AttentionTest, KeyValueHeadsThatDoNotDivideTheAxisAreReplicated) {
  DeviceMesh mesh({2, 4}, {"batch", "model"});
  bool replicated = false;
  // 8 query heads, 2 KV heads on a 4-way axis (keras-hub #1613): the KV heads go whole.
  const TensorLayout q({"batch", None, "model", None}, mesh);
  EXPECT_EQ(attention_kv_layout(q, 8, 2, &replicated),
            TensorLayout({"batch", None, None, None}, mesh));
  EXPECT_TRUE(replicated);
  EXPECT_EQ(attention_kv_layout(q, 8, 4, &replicated),
            TensorLayout({"batch", None, "model", None}, mesh));
  EXPECT_FALSE(replicated);
}

TEST(AttentionTest, CacheLengthOffsetAndPaddingMask) {
  for (const DType dtype : {DType::kF32, DType::kF64}) {
    SCOPED_TRACE(dtype_name(dtype));
    DeviceMesh mesh({2, 4}, {"batch", "model"});
    HostTensor q = HostTensor::random(DType::kF32, {2, 1, 4, 8}, 4);
    HostTensor k = HostTensor::random(DType::kF32, {2, 10, 2, 8}, 5);
    HostTensor v = HostTensor::random(DType::kF32, {2, 10, 2, 8}, 6);
    if (dtype == DType::kF64) q = widened(q), k = widened(k), v = widened(v);
    const TensorLayout hl({"batch", None, "model", None}, mesh);
    const Array qa = distribute_tensor(q, hl), ka = distribute_tensor(k, hl),
                va = distribute_tensor(v, hl);
    const AttentionOptions step{.causal = true, .query_offset = 6, .key_length = 7};
    expect_close(attention(qa, ka, va, step).gather(), reference_attention(q, k, v, step, nullptr),
                 "step");
    // Padding: row 0 attends keys 0..3, row 1 none (zeros).
    std::vector<int> mask(20, 0);
    for (int s = 0; s < 4; ++s) mask[static_cast<size_t>(s)] = 1;
    HostTensor m(DType::kI32, {2, 10});
    std::copy(mask.begin(), mask.end(), reinterpret_cast<int32_t*>(m.data()));
    const Array ma = distribute_tensor(m, TensorLayout({None, "model"}, mesh));
    const AttentionOptions padded{.causal = false, .key_mask = &ma};
    expect_close(attention(qa, ka, va, padded).gather(),
                 reference_attention(q, k, v, padded, &mask), "mask");
  }
}

// A causal attention runs its query rows in blocks of 32 (kCausalBlock) and skips the keys a
// block cannot see: sequences of several blocks (an uneven last one), with a cache offset
// (keys visible past the block), a padding mask, and a block whose rows see nothing.
TEST(AttentionTest, CausalQueryBlocksMatchFloat64) {
  for (const DType dtype : {DType::kF32, DType::kF64}) {
    SCOPED_TRACE(dtype_name(dtype));
    DeviceMesh mesh({2, 4}, {"batch", "model"});
    HostTensor q = HostTensor::random(DType::kF32, {2, 75, 4, 8}, 11);
    HostTensor k = HostTensor::random(DType::kF32, {2, 90, 2, 8}, 12);
    HostTensor v = HostTensor::random(DType::kF32, {2, 90, 2, 8}, 13);
    if (dtype == DType::kF64) q = widened(q), k = widened(k), v = widened(v);
    const TensorLayout hl({"batch", None, "model", None}, mesh);
    const Array qa = distribute_tensor(q, hl), ka = distribute_tensor(k, hl),
                va = distribute_tensor(v, hl);
    for (const int64_t offset : {0, 9, 15}) {
      const AttentionOptions o{.causal = true, .query_offset = offset, .key_length = 75 + offset};
      expect_close(attention(qa, ka, va, o).gather(), reference_attention(q, k, v, o, nullptr),
                   fmt::format("offset {}", offset));
    }
    // Row 0 sees keys 40.. only (padding before): its first block of queries (0..31) sees nothing.
    std::vector<int> mask(180, 0);
    for (int b = 0; b < 2; ++b) {
      for (int s = b == 0 ? 40 : 0; s < 90; ++s) mask[static_cast<size_t>(b * 90 + s)] = 1;
    }
    HostTensor m(DType::kI32, {2, 90});
    std::copy(mask.begin(), mask.end(), reinterpret_cast<int32_t*>(m.data()));
    const Array ma = distribute_tensor(m, TensorLayout({None, "model"}, mesh));
    const AttentionOptions masked{.causal = true, .key_length = 75, .key_mask = &ma};
    expect_close(attention(qa, ka, va, masked).gather(),
                 reference_attention(q, k, v, masked, &mask), "mask");
  }
}

TEST(AttentionTest, BadShapesAreNamed) {
  DeviceMesh mesh({8}, {"x"});
  const TensorLayout r4 = TensorLayout::replicated(4, mesh);
  const Array q = distribute_tensor(HostTensor::random(DType::kF32, {1, 2, 3, 4}, 1), r4);
  const Array k = distribute_tensor(HostTensor::random(DType::kF32, {1, 2, 2, 4}, 1), r4);
  try {
    (void)attention(q, k, k);
    FAIL() << "3 query heads over 2 kv heads";
  } catch (const ValueError& e) {
    EXPECT_NE(
        std::string(e.what()).find("query heads (3) must be a multiple of the key/value heads (2)"),
        std::string::npos)
        << e.what();
  }
  EXPECT_THROW((void)attention(q, q, q, {.key_length = 3}), ValueError);
}

TEST(AttentionTest, MixedOrNonFloatDtypesAreNamed) {
  DeviceMesh mesh({8}, {"x"});
  const TensorLayout r4 = TensorLayout::replicated(4, mesh);
  const HostTensor h = HostTensor::random(DType::kF32, {1, 2, 2, 4}, 1);
  const Array f32 = distribute_tensor(h, r4), f64 = distribute_tensor(widened(h), r4);
  EXPECT_TRUE(testing_has(attention_error([&] { (void)attention(f64, f32, f64); }),
                          "runs on F32 or F64, one dtype for all, got q F64, k F32, v F64"));
  const Array i32 = distribute_tensor(HostTensor(DType::kI32, {1, 2, 2, 4}), r4);
  EXPECT_TRUE(testing_has(attention_error([&] { (void)attention(i32, i32, i32); }),
                          "got q I32, k I32, v I32"));
  EXPECT_TRUE(testing_has(attention_error([&] { (void)apply_rotary_embedding(i32, 0, 1e4); }),
                          "needs an F32 or F64 (batch, seq, heads, head_dim) tensor"));
}

// Mistral's sliding window (Hugging Face: key s visible from query position p when
// p − window < s <= p): prefill in several causal blocks, a decode step at an offset with a cache,
// and a window wider than the sequence (the plain causal result), F32 and F64, on head- and
// batch-split layouts.
TEST(AttentionTest, SlidingWindowMatchesFloat64) {
  for (const DType dtype : {DType::kF32, DType::kF64}) {
    SCOPED_TRACE(dtype_name(dtype));
    DeviceMesh mesh({2, 4}, {"batch", "model"});
    HostTensor q = HostTensor::random(DType::kF32, {2, 70, 4, 8}, 21);
    HostTensor k = HostTensor::random(DType::kF32, {2, 80, 2, 8}, 22);
    HostTensor v = HostTensor::random(DType::kF32, {2, 80, 2, 8}, 23);
    if (dtype == DType::kF64) q = widened(q), k = widened(k), v = widened(v);
    for (const TensorLayout& hl : {TensorLayout({"batch", None, "model", None}, mesh),
                                   TensorLayout({None, "model", None, None}, mesh)}) {
      const Array qa = distribute_tensor(q, hl), ka = distribute_tensor(k, hl),
                  va = distribute_tensor(v, hl);
      for (const int64_t window : {1, 5, 40, 200}) {
        for (const int64_t offset : {0, 10}) {
          const AttentionOptions o{.causal = true,
                                   .query_offset = offset,
                                   .key_length = 70 + offset,
                                   .sliding_window = window};
          expect_close(attention(qa, ka, va, o).gather(), reference_attention(q, k, v, o, nullptr),
                       fmt::format("{} window {} offset {}", hl.to_string(), window, offset));
        }
      }
    }
    // Gemma 2: the window with the scores soft-capped (a cap small enough to bite).
    for (const double cap : {0.5, 3.0}) {
      const TensorLayout hl({"batch", None, "model", None}, mesh);
      const Array qa = distribute_tensor(q, hl), ka = distribute_tensor(k, hl),
                  va = distribute_tensor(v, hl);
      const AttentionOptions o{
          .causal = true, .key_length = 70, .sliding_window = 9, .logit_soft_cap = cap};
      expect_close(attention(qa, ka, va, o).gather(), reference_attention(q, k, v, o, nullptr),
                   fmt::format("soft cap {}", cap));
    }
    const AttentionOptions wide{.causal = true, .key_length = 70, .sliding_window = 200};
    const AttentionOptions plain{.causal = true, .key_length = 70};
    const TensorLayout hl({"batch", None, "model", None}, mesh);
    const Array qa = distribute_tensor(q, hl), ka = distribute_tensor(k, hl),
                va = distribute_tensor(v, hl);
    const HostTensor a = attention(qa, ka, va, wide).gather(),
                     b = attention(qa, ka, va, plain).gather();
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.num_bytes()), 0) << "a window wider than T";
  }
  DeviceMesh mesh({2, 4}, {"batch", "model"});
  const Array x = distribute_tensor(HostTensor::random(DType::kF32, {1, 3, 2, 4}, 1),
                                    TensorLayout({None, None, None, None}, mesh));
  EXPECT_TRUE(testing_has(attention_error([&] { attention(x, x, x, {.sliding_window = -2}); }),
                          "sliding_window must be >= 0 (0: no window), got -2"));
  EXPECT_TRUE(testing_has(attention_error([&] { attention(x, x, x, {.logit_soft_cap = -1}); }),
                          "logit_soft_cap must be >= 0 (0: none), got -1"));
}

// Llama 3's rope_scaling, written from Hugging Face's _compute_llama3_parameters: the three
// bands of wavelengths (kept, divided by the factor, blended), then the rotation by them.
TEST(RotaryEmbeddingTest, Llama3ScalingMatchesHuggingFaceFormula) {
  const Llama3RopeScaling scaling{.factor = 8.0,
                                  .low_freq_factor = 1.0,
                                  .high_freq_factor = 4.0,
                                  .original_max_position_embeddings = 64};
  const Rope rope(500000.0, scaling);
  const int64_t D = 32;
  const std::vector<double> got = rope.inverse_frequencies(D);
  ASSERT_EQ(got.size(), 16u);
  int kept = 0, divided = 0, blended = 0;
  for (int64_t i = 0; i < 16; ++i) {
    const double f = 1.0 / std::pow(500000.0, static_cast<double>(2 * i) / D);
    const double wavelength = 2 * M_PI / f;
    double want = f;
    if (wavelength > 64.0 / 1.0) {
      want = f / 8.0, ++divided;
    } else if (wavelength >= 64.0 / 4.0) {
      const double smooth = (64.0 / wavelength - 1.0) / (4.0 - 1.0);
      want = (1 - smooth) * f / 8.0 + smooth * f, ++blended;
    } else {
      ++kept;
    }
    EXPECT_NEAR(got[static_cast<size_t>(i)], want, 1e-15 * want) << i;
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(blended, 0);
  // Without scaling the frequencies are theta^(-2i/D) exactly (the pre-scaling code's values).
  const std::vector<double> plain = Rope(10000.0).inverse_frequencies(8);
  for (int64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(plain[static_cast<size_t>(i)], std::pow(10000.0, -2.0 * static_cast<double>(i) / 8));
  }
  // The rotation uses them: position 5 of a one-head vector.
  DeviceMesh mesh({2, 4}, {"batch", "model"});
  HostTensor x = widened(HostTensor::random(DType::kF32, {1, 6, 1, D}, 3));
  const HostTensor y =
      apply_rotary_embedding(distribute_tensor(x, TensorLayout({None, "model", None, None}, mesh)),
                             0, rope)
          .gather();
  for (int64_t i = 0; i < D; ++i) {
    const int64_t j = i % 16;
    const double angle = 5.0 * got[static_cast<size_t>(j)];
    const double rotated = i < 16 ? -at(x, 0, 5, 0, i + 16) : at(x, 0, 5, 0, i - 16);
    EXPECT_NEAR(at(y, 0, 5, 0, i), at(x, 0, 5, 0, i) * std::cos(angle) + rotated * std::sin(angle),
                1e-12);
  }
  // Bad scalings are named.
  EXPECT_TRUE(
      testing_has(attention_error([] { Rope(1e4, Llama3RopeScaling{.factor = 0.5}).validate(); }),
                  "factor >= 1, got factor=0.5"));
  EXPECT_TRUE(testing_has(
      attention_error([] {
        Rope(1e4, Llama3RopeScaling{.low_freq_factor = 4, .high_freq_factor = 1}).validate();
      }),
      "low_freq_factor=4 and high_freq_factor=1"));
  EXPECT_TRUE(testing_has(attention_error([] { Rope(-1.0).validate(); }), "theta > 0, got -1"));
}

TEST(RotaryEmbeddingTest, RotateHalfMatchesFloat64) {
  for (const DType dtype : {DType::kF32, DType::kF64}) {
    SCOPED_TRACE(dtype_name(dtype));
    DeviceMesh mesh({2, 4}, {"batch", "model"});
    HostTensor x = HostTensor::random(DType::kF32, {2, 5, 4, 8}, 9);
    if (dtype == DType::kF64) x = widened(x);
    for (const TensorLayout& l : {TensorLayout({"batch", "model", None, None}, mesh),
                                  TensorLayout({None, None, "model", "batch"}, mesh)}) {
      // The copying form, and the in-place one (a temporary: head_dim whole in the first layout,
      // split in the second, where it falls back to the copy).
      const Array input = distribute_tensor(x, l);
      const Array copied = apply_rotary_embedding(input, /*start_position=*/3, 10000.0);
      const Array y =
          apply_rotary_embedding(distribute_tensor(x, l), /*start_position=*/3, 10000.0);
      std::vector<double> want(static_cast<size_t>(num_elements(x.shape())));
      for (int64_t b = 0; b < 2; ++b) {
        for (int64_t t = 0; t < 5; ++t) {
          for (int64_t h = 0; h < 4; ++h) {
            for (int64_t i = 0; i < 8; ++i) {
              const int64_t j = i % 4;
              const double angle =
                  static_cast<double>(3 + t) / std::pow(10000.0, 2.0 * static_cast<double>(j) / 8);
              const double rotated = i < 4 ? -at(x, b, t, h, i + 4) : at(x, b, t, h, i - 4);
              want[static_cast<size_t>(((b * 5 + t) * 4 + h) * 8 + i)] =
                  at(x, b, t, h, i) * std::cos(angle) + rotated * std::sin(angle);
            }
          }
        }
      }
      expect_close(y.gather(), want, l.to_string());
      expect_close(copied.gather(), want, l.to_string() + " (copy)");
      std::vector<double> unchanged(static_cast<size_t>(x.num_elements()));
      for (int64_t i = 0; i < x.num_elements(); ++i)
        unchanged[static_cast<size_t>(i)] = element(x, i);
      expect_close(input.gather(), unchanged, l.to_string() + " (input unchanged)");
    }
  }
}

}  // namespace
}  // namespace meshlayout

namespace meshlayout {
namespace {

// Per-row start positions (left-padded generation): row b at positions row_starts[b] + t,
// negative starts included, on layouts splitting the batch (3 rows on 2: uneven), the sequence
// and head_dim; rows that share a start give the scalar overload's values bit for bit.
TEST(RotaryEmbeddingTest, PerRowStartsMatchFloat64) {
  const std::vector<int64_t> starts{-2, 0, 4};
  for (const DType dtype : {DType::kF32, DType::kF64}) {
    SCOPED_TRACE(dtype_name(dtype));
    DeviceMesh mesh({2, 4}, {"batch", "model"});
    HostTensor x = HostTensor::random(DType::kF32, {3, 5, 2, 8}, 11);
    if (dtype == DType::kF64) x = widened(x);
    for (const TensorLayout& l :
         {TensorLayout({"batch", "model", None, None}, mesh),
          TensorLayout({None, None, "model", "batch"}, mesh), TensorLayout::replicated(4, mesh)}) {
      // In place (a temporary) and copying (a named input, left unchanged).
      const Array y = apply_rotary_embedding(distribute_tensor(x, l), starts, 10000.0);
      const Array input = distribute_tensor(x, l);
      const Array copied = apply_rotary_embedding(input, starts, 10000.0);
      std::vector<double> want(static_cast<size_t>(x.num_elements()));
      for (int64_t b = 0; b < 3; ++b) {
        for (int64_t t = 0; t < 5; ++t) {
          for (int64_t h = 0; h < 2; ++h) {
            for (int64_t i = 0; i < 8; ++i) {
              const int64_t j = i % 4;
              const double angle = static_cast<double>(starts[static_cast<size_t>(b)] + t) /
                                   std::pow(10000.0, 2.0 * static_cast<double>(j) / 8);
              const double rotated = i < 4 ? -at(x, b, t, h, i + 4) : at(x, b, t, h, i - 4);
              want[static_cast<size_t>(((b * 5 + t) * 2 + h) * 8 + i)] =
                  at(x, b, t, h, i) * std::cos(angle) + rotated * std::sin(angle);
            }
          }
        }
      }
      expect_close(y.gather(), want, l.to_string());
      expect_close(copied.gather(), want, l.to_string() + " (copy)");
      // Every row at 4: the scalar overload's floats exactly.
      const HostTensor same =
          apply_rotary_embedding(distribute_tensor(x, l), std::vector<int64_t>{4, 4, 4}, 10000.0)
              .gather();
      const HostTensor scalar =
          apply_rotary_embedding(distribute_tensor(x, l), 4, 10000.0).gather();
      EXPECT_EQ(std::memcmp(same.data(), scalar.data(), same.num_bytes()), 0) << l.to_string();
    }
  }
  DeviceMesh mesh({2, 4}, {"batch", "model"});
  const Array x = distribute_tensor(HostTensor::random(DType::kF32, {3, 5, 2, 8}, 11),
                                    TensorLayout::replicated(4, mesh));
  EXPECT_TRUE(testing_has(attention_error([&] {
                            (void)apply_rotary_embedding(x, std::vector<int64_t>{0, 1}, 1e4);
                          }),
                          "one start position per batch row: 3 rows in (3, 5, 2, 8), got 2"));
  EXPECT_TRUE(testing_has(
      attention_error([&] { (void)apply_rotary_embedding(x, std::vector<int64_t>{}, 1e4); }),
      "got none"));
}

}  // namespace
}  // namespace meshlayout
