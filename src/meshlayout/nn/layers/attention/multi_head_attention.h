// multi_head_attention.h — keras.layers.MultiHeadAttention (self-attention) with grouped
// key/value heads (keras GroupedQueryAttention / keras-hub LlamaAttention), optional rotary
// position embedding, and a key/value cache for generation.
//
// Sub-layers are EinsumDense, named as Keras names them: `query` (d, heads, head_dim), `key` and
// `value` (d, kv_heads, head_dim), `attention_output` (heads, head_dim, d), each with a bias
// when use_bias (Keras' MHA default; keras-hub's Llama has none). Keras 3 paths:
// "multi_head_attention/query/kernel"; Keras 2 attribute keys: "_query_dense", "_key_dense",
// "_value_dense", "_output_dense" (multi_head_attention._query_dense.kernel).
//
// Sharded (Megatron): with q/k/v kernels split on heads over an axis and the output kernel on
// its heads, every device projects its own heads (column-parallel, no communication), runs
// attention for them (ops/attention.h), and the output projection is row-parallel: partial
// sums completed by one reduction. Other layouts are resharded the cheapest way by the ops.
// Key/value heads that do not split like the query heads are replicated over the head axes.
//
// Example:
//   auto attn = std::make_shared<MultiHeadAttention>(MultiHeadAttentionOptions{
//       .num_heads = 8, .key_dim = 64, .num_key_value_heads = 2, .use_bias = false,
//       .rope_theta = 10000.0, .name = "self_attention"});
//   Tensor y = (*attn)(x);                                   // causal self-attention
//   KVCache cache;                                           // generation:
//   Array y0 = attn->call_cached(prompt, cache, 0, /*max_length=*/64);
//   Array y1 = attn->call_cached(next_token, cache, prompt_len, 64);
//   KVCache padded{.padding = {2, 0}};   // row 0 left-padded by 2: masked, positions shifted
//   Gradients grads;                                         // training (uncached):
//   Array dx = attn->backward(x, dy, grads);                 //
//   grads.find(*attn->query()->kernel())
#pragma once

#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "meshlayout/nn/layers/core/einsum_dense.h"
#include "meshlayout/nn/layers/normalization/rms_normalization.h"
#include "meshlayout/ops/attention.h"

namespace meshlayout {

struct MultiHeadAttentionOptions {
  int64_t num_heads = 0;
  int64_t key_dim = 0;              // head_dim
  int64_t num_key_value_heads = 0;  // 0: num_heads (plain MHA); fewer: grouped-query attention
  bool use_bias = true;
  /// With use_bias, whether attention_output has one too (Qwen 2 has q/k/v biases only).
  bool use_output_bias = true;
  bool causal = true;                             // use_causal_mask
  double rope_theta = 0.0;                        // > 0: rotary embedding of q and k (rotate-half)
  std::optional<Llama3RopeScaling> rope_scaling;  // Llama 3's frequency rescaling
  double rope_linear_factor = 1.0;                // "linear" rope scaling (Gemma 3's global)
  int64_t sliding_window = 0;  // > 0: each query sees at most this many keys (Mistral)
  /// > 0: each query and key head is RMS-normalised over head_dim with this epsilon before the
  /// rotary embedding (Qwen 3's q_norm/k_norm): sub-layers `query_dense_layernorm` and
  /// `key_dense_layernorm`, scale (head_dim,) each.
  double qk_norm_epsilon = 0.0;
  /// Gemma 3's head norms instead: named `query_norm` / `key_norm`, times (1 + scale).
  bool gemma_qk_norm = false;
  /// The scores' scale; 0: 1 / sqrt(key_dim) (Gemma: query_pre_attn_scalar^(−1/2)).
  double attention_scale = 0.0;
  /// > 0: Gemma 2's attention logit soft-capping (ops/attention.h's logit_soft_cap).
  double logit_soft_cap = 0.0;
  /// keras-hub's Gemma stores the q/k/v kernels heads first: "btd,ndh->btnh", kernel
  /// (heads, d, head_dim), instead of "btd,dnh->btnh" (d, heads, head_dim).
  bool kernel_heads_first = false;
  std::string name;  // automatic ("multi_head_attention", …) when empty
  Initializer kernel_initializer = Initializer::glorot_uniform();
};

/// Keys and values seen so far, per layer: (batch, max_length, kv_heads, head_dim) each, laid
/// out like the heads (attention_kv_layout), allocated once and written in place per step.
struct KVCache {
  std::optional<Array> key, value;
  int64_t length = 0;  // positions filled
  /// Left-padded batches (models/generation.h), set before the first call: row b's first
  /// padding[b] slots hold no token, so every query masks them, and the token in slot s of row b
  /// is at position s − padding[b] (its rotary angle). Empty: no padding.
  std::vector<int64_t> padding;
  /// (batch, max_length) U8, 0 on the padding slots: made with the cache from `padding`.
  std::optional<Array> key_mask;
};

class MultiHeadAttention : public Layer {
 public:
  /// ValueError for non-positive heads or key_dim, or heads not a multiple of kv heads.
  explicit MultiHeadAttention(MultiHeadAttentionOptions options);
  const std::shared_ptr<EinsumDense>& query() const { return query_; }
  const std::shared_ptr<EinsumDense>& key() const { return key_; }
  const std::shared_ptr<EinsumDense>& value() const { return value_; }
  const std::shared_ptr<EinsumDense>& attention_output() const { return output_; }
  /// The query and key heads' RMS normalisations (qk_norm_epsilon > 0), else null.
  const std::shared_ptr<RMSNormalization>& query_norm() const { return query_norm_; }
  const std::shared_ptr<RMSNormalization>& key_norm() const { return key_norm_; }
  Shape compute_output_shape(const Shape& input_shape) const override { return input_shape; }

  /// Self-attention of x (batch, seq, d) at positions start, start+1, … over the cache's keys
  /// then x's: writes x's keys and values into `cache` at [start, start + seq) (allocating it
  /// for `max_length` positions on first use) and returns (batch, seq, d). ValueError if
  /// start != cache.length or the positions pass max_length.
  Array call_cached(const Array& x, KVCache& cache, int64_t start, int64_t max_length);
  /// attention(x) + residual (a pre-norm block's h = x + attn(norm(x))), the residual fused into
  /// the output projection (EinsumDense::call_plus); with a cache as call_cached, without as
  /// a call. Collective. Errors as those and for a residual not of x's shape.
  Array call_plus(const Array& x, const Array& residual, KVCache* cache = nullptr,
                  int64_t start = 0, int64_t max_length = 0);

  /// The backward of an uncached self-attention call (Layer::backward): recomputes the q, k, v
  /// projections (and RoPE) and the attention from x, then backpropagates through the output
  /// projection, attention (ops/attention_backward.h: GQA sums, replicated KV heads' partial
  /// sums over the head axes), RoPE and the three projections (EinsumDense::backward: kernel and
  /// bias gradients in their variables' layouts into `grads`). Returns dL/dx in x's layout: the
  /// sum of the three projections' input gradients. Collective.
  /// \error FailedPreconditionError if not built; ValueError naming the shapes if x is not of the
  ///   layer's dtype (F32 or F64) and (batch, seq, features) of the built features, or dy not x's.
  Array backward(const Array& x, const Array& dy, Gradients& grads) override;

 protected:
  void build(const Shape& input_shape) override;
  Array call(const Array& x) override;

 private:
  Array attend(const Array& x, KVCache* cache, int64_t start, int64_t max_length,
               const Array* residual = nullptr);
  // q and k projected (and head-normalised, rotated at positions start…, or row b at
  // row_starts[b]… when given) from x.
  std::pair<Array, Array> project_query_key(const Array& x, int64_t start,
                                            std::span<const int64_t> row_starts = {});
  Rope rope() const {
    Rope r(options_.rope_theta, options_.rope_scaling);
    r.linear_factor = options_.rope_linear_factor;
    return r;
  }
  AttentionOptions attention_options() const {
    return {.causal = options_.causal,
            .scale = options_.attention_scale,
            .sliding_window = options_.sliding_window,
            .logit_soft_cap = options_.logit_soft_cap};
  }
  MultiHeadAttentionOptions options_;
  std::shared_ptr<EinsumDense> query_, key_, value_, output_;
  std::shared_ptr<RMSNormalization> query_norm_, key_norm_;
};

}  // namespace meshlayout
