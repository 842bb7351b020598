#include "meshlayout/nn/layers/attention/multi_head_attention.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/kernels/memory.h"
#include "meshlayout/ops/attention.h"
#include "meshlayout/ops/attention_backward.h"
#include "meshlayout/ops/elementwise.h"

namespace meshlayout {
namespace {

// Writes `rows` (batch, t, kv_heads, head_dim) into `cache` (batch, max, kv_heads, head_dim) at
// positions [start, start + t), device by device (rows resharded to the cache's layout first,
// with the sequence whole).
void write_rows(const Array& rows, Array& cache, int64_t start) {
  const Array in = distribute_tensor(rows, cache.layout());
  const int64_t t = rows.shape()[1], max = cache.shape()[1];
  const DeviceKind kind = kind_of(cache);
  cache.runtime().pool().parallel_for(cache.local_shards().size(), [&](size_t i) {
    Array::Shard& c = cache.local_shards()[i];
    const Array::Shard& r = *in.shard_at(c.position);
    const int64_t row_bytes = num_elements({c.box.shape[2], c.box.shape[3]}) *
                              static_cast<int64_t>(dtype_size(cache.dtype()));
    if (row_bytes == 0) return;
    copy_runs(kind, {.dst = &c,
                     .dst_offset = static_cast<size_t>(start * row_bytes),
                     .dst_stride = static_cast<size_t>(max * row_bytes),
                     .src = &r,
                     .src_stride = static_cast<size_t>(t * row_bytes),
                     .runs = c.box.shape[0],
                     .run_bytes = static_cast<size_t>(t * row_bytes)});
  });
}

}  // namespace

MultiHeadAttention::MultiHeadAttention(MultiHeadAttentionOptions options)
    : Layer("multi_head_attention", options.name), options_(std::move(options)) {
  if (options_.num_key_value_heads == 0) options_.num_key_value_heads = options_.num_heads;
  if (options_.num_heads < 1 || options_.key_dim < 1 || options_.num_key_value_heads < 1 ||
      options_.num_heads % options_.num_key_value_heads != 0) {
    throw ValueError(
        fmt::format("MultiHeadAttention needs num_heads >= 1, key_dim >= 1 and num_heads "
                    "a multiple of num_key_value_heads, got num_heads={}, key_dim={}, "
                    "num_key_value_heads={}",
                    options_.num_heads, options_.key_dim, options_.num_key_value_heads));
  }
  if (options_.rope_theta != 0.0 && (!(options_.rope_theta > 0) || options_.key_dim % 2 != 0)) {
    throw ValueError(
        fmt::format("MultiHeadAttention rotary embedding needs rope_theta > 0 and an "
                    "even key_dim, got rope_theta={}, key_dim={}",
                    options_.rope_theta, options_.key_dim));
  }
  const auto projection = [&](const char* name, int64_t heads) {
    return std::make_shared<EinsumDense>(
        options_.kernel_heads_first ? "btd,ndh->btnh" : "btd,dnh->btnh",
        Shape{-1, heads, options_.key_dim},
        EinsumDenseOptions{.name = name,
                           .bias_axes = options_.use_bias ? "nh" : "",
                           .kernel_initializer = options_.kernel_initializer});
  };
  if (options_.rope_theta > 0) rope().validate();
  if (options_.sliding_window < 0) {
    throw ValueError(
        fmt::format("MultiHeadAttention sliding_window must be >= 0 (0: no window), got {}",
                    options_.sliding_window));
  }
  if (!(options_.attention_scale >= 0) || !std::isfinite(options_.attention_scale) ||
      !(options_.logit_soft_cap >= 0) || !std::isfinite(options_.logit_soft_cap)) {
    throw ValueError(fmt::format(
        "MultiHeadAttention attention_scale and logit_soft_cap must be >= 0 (0: the default "
        "1/sqrt(key_dim), no cap), got {} and {}",
        options_.attention_scale, options_.logit_soft_cap));
  }
  if (!(options_.qk_norm_epsilon >= 0) || !std::isfinite(options_.qk_norm_epsilon)) {
    throw ValueError(fmt::format(
        "MultiHeadAttention qk_norm_epsilon must be >= 0 (0: no query/key norm), got {}",
        options_.qk_norm_epsilon));
  }
  // Qwen 3's head norms (query_dense_layernorm, ones) or Gemma 3's (query_norm, 1 + zeros).
  const auto head_norm = [&](const std::string& which) {
    const bool gemma = options_.gemma_qk_norm;
    return std::make_shared<RMSNormalization>(RMSNormalizationOptions{
        .name = which + (gemma ? "_norm" : "_dense_layernorm"),
        .epsilon = options_.qk_norm_epsilon,
        .scale_initializer = gemma ? Initializer::zeros() : Initializer::ones(),
        .unit_offset = gemma});
  };
  query_ = track("_query_dense", projection("query", options_.num_heads));
  if (options_.qk_norm_epsilon > 0) {
    query_norm_ = track("_query_dense_layer_norm", head_norm("query"));
  }
  key_ = track("_key_dense", projection("key", options_.num_key_value_heads));
  if (options_.qk_norm_epsilon > 0) {
    key_norm_ = track("_key_dense_layer_norm", head_norm("key"));
  }
  value_ = track("_value_dense", projection("value", options_.num_key_value_heads));
}

void MultiHeadAttention::build(const Shape& input_shape) {
  if (input_shape.size() != 3) {
    throw ValueError(
        fmt::format("MultiHeadAttention layer {} needs inputs (batch, seq, features), "
                    "got shape {}",
                    quote(name()), shape_to_string(input_shape)));
  }
  output_ = track(
      "_output_dense",
      std::make_shared<EinsumDense>(
          "btnh,nhd->btd", Shape{-1, input_shape[2]},
          EinsumDenseOptions{.name = "attention_output",
                             .bias_axes = options_.use_bias && options_.use_output_bias ? "d" : "",
                             .kernel_initializer = options_.kernel_initializer}));
  query_->maybe_build(input_shape);
  key_->maybe_build(input_shape);
  value_->maybe_build(input_shape);
  if (query_norm_) {
    query_norm_->maybe_build(
        {input_shape[0], input_shape[1], options_.num_heads, options_.key_dim});
    key_norm_->maybe_build(
        {input_shape[0], input_shape[1], options_.num_key_value_heads, options_.key_dim});
  }
  output_->maybe_build({input_shape[0], input_shape[1], options_.num_heads, options_.key_dim});
}

Array MultiHeadAttention::call(const Array& x) { return attend(x, nullptr, 0, 0); }

Array MultiHeadAttention::call_cached(const Array& x, KVCache& cache, int64_t start,
                                      int64_t max_length) {
  if (x.shape().size() != 3 || start != cache.length || start < 0 || max_length < 1 ||
      start + x.shape()[1] > max_length) {
    throw ValueError(
        fmt::format("MultiHeadAttention layer {}: cannot attend {} at positions {}..{} with "
                    "a cache of {} filled positions and max_length {}",
                    quote(name()), shape_to_string(x.shape()), start,
                    start + (x.shape().size() == 3 ? x.shape()[1] : 0), cache.length, max_length));
  }
  NameScope scope = open_name_scope();
  maybe_build(x.shape());
  return attend(x, &cache, start, max_length);
}

Array MultiHeadAttention::call_plus(const Array& x, const Array& residual, KVCache* cache,
                                    int64_t start, int64_t max_length) {
  if (cache != nullptr) {
    if (x.shape().size() != 3 || start != cache->length || start < 0 || max_length < 1 ||
        start + x.shape()[1] > max_length) {
      call_cached(x, *cache, start, max_length);  // throws its ValueError
    }
  }
  NameScope scope = open_name_scope();
  maybe_build(x.shape());
  return attend(x, cache, start, max_length, &residual);
}

Array MultiHeadAttention::attend(const Array& x, KVCache* cache, int64_t start, int64_t max_length,
                                 const Array* residual) {
  const int64_t t = x.shape()[1];
  std::vector<int64_t> row_starts;  // left padding: row b's slot s is at position s - padding[b]
  if (cache != nullptr && !cache->padding.empty()) {
    if (static_cast<int64_t>(cache->padding.size()) != x.shape()[0]) {
      throw ValueError(
          fmt::format("MultiHeadAttention layer {}: the cache's padding has {} rows, the batch {}",
                      quote(name()), cache->padding.size(), x.shape()[0]));
    }
    for (const int64_t p : cache->padding) {
      if (p < 0 || p >= max_length) {
        throw ValueError(
            fmt::format("MultiHeadAttention layer {}: a row's padding must be in [0, {}) "
                        "(max_length), got {}",
                        quote(name()), max_length, p));
      }
      row_starts.push_back(start - p);
    }
  }
  auto [q, k] = project_query_key(x, start, row_starts);
  Array v = value_->call_on(x);
  Array o = [&] {
    if (cache == nullptr) return attention(q, k, v, attention_options());
    const TensorLayout q_layout({q.layout().axes()[0], None, q.layout().axes()[2], None}, q.mesh());
    const TensorLayout kv_layout =
        attention_kv_layout(q_layout, options_.num_heads, options_.num_key_value_heads);
    if (!cache->key || !(cache->key->layout() == kv_layout) ||
        cache->key->shape()[1] != max_length || cache->key->dtype() != k.dtype()) {
      if (start != 0) {
        throw ValueError(
            fmt::format("MultiHeadAttention layer {}: the cache was laid out as {} but "
                        "this step needs {}",
                        quote(name()), cache->key ? cache->key->layout().to_string() : "nothing",
                        kv_layout.to_string()));
      }
      const Shape shape{x.shape()[0], max_length, options_.num_key_value_heads, options_.key_dim};
      // The cache holds k and v in the compute dtype (the layer's: F32 or F64).
      cache->key.emplace(allocate_agreed(kv_layout, shape, k.dtype(), q.runtime_ptr()));
      cache->value.emplace(allocate_agreed(kv_layout, shape, v.dtype(), q.runtime_ptr()));
      cache->key_mask.reset();
      if (!row_starts.empty()) {
        HostTensor mask(DType::kU8, {x.shape()[0], max_length});
        for (int64_t b = 0; b < x.shape()[0]; ++b) {
          for (int64_t s = 0; s < max_length; ++s) {
            mask.data_as<uint8_t>()[b * max_length + s] =
                s >= cache->padding[static_cast<size_t>(b)] ? 1 : 0;
          }
        }
        cache->key_mask.emplace(
            distribute_tensor(mask, TensorLayout({kv_layout.axes()[0], None}, q.mesh())));
      }
    }
    write_rows(k, *cache->key, start);
    write_rows(v, *cache->value, start);
    cache->length = start + t;
    AttentionOptions cached = attention_options();
    cached.query_offset = start;
    cached.key_length = start + t;
    if (cache->key_mask) cached.key_mask = &*cache->key_mask;
    return attention(q, *cache->key, *cache->value, cached);
  }();
  return residual != nullptr ? output_->call_plus(o, *residual) : output_->call_on(o);
}

std::pair<Array, Array> MultiHeadAttention::project_query_key(const Array& x, int64_t start,
                                                              std::span<const int64_t> row_starts) {
  Array q = query_->call_on(x);
  Array k = key_->call_on(x);
  if (query_norm_) {
    q = query_norm_->call_on(q);
    k = key_norm_->call_on(k);
  }
  if (options_.rope_theta > 0 && !row_starts.empty()) {
    q = apply_rotary_embedding(std::move(q), row_starts, rope());
    k = apply_rotary_embedding(std::move(k), row_starts, rope());
  } else if (options_.rope_theta > 0) {
    q = apply_rotary_embedding(std::move(q), start, rope());
    k = apply_rotary_embedding(std::move(k), start, rope());
  }
  return {std::move(q), std::move(k)};
}

Array MultiHeadAttention::backward(const Array& x, const Array& dy, Gradients& grads) {
  if (!output_ || !built()) {
    throw FailedPreconditionError(
        fmt::format("MultiHeadAttention layer {} is not built: call it before "
                    "its backward",
                    quote(name())));
  }
  const int64_t features = query_->kernel()->shape()[options_.kernel_heads_first ? 1 : 0];
  const DType dtype = query_->kernel()->dtype();
  if (x.shape().size() != 3 || x.dtype() != dtype || x.shape()[2] != features) {
    throw ValueError(
        fmt::format("backward of MultiHeadAttention layer {}: x must be {} (batch, seq, {}), "
                    "got {} {}",
                    quote(name()), dtype_name(dtype), features, dtype_name(x.dtype()),
                    shape_to_string(x.shape())));
  }
  if (dy.shape() != x.shape() || dy.dtype() != dtype) {
    throw ValueError(
        fmt::format("backward of MultiHeadAttention layer {}: dy must be {} of the output's "
                    "shape {}, got {} {}",
                    quote(name()), dtype_name(dtype), shape_to_string(x.shape()),
                    dtype_name(dy.dtype()), shape_to_string(dy.shape())));
  }
  NameScope scope = open_name_scope();
  // The forward again (attend without a cache), keeping what the backward needs.
  std::optional<Array> q_projected, k_projected;  // before the head norms (their backward's x)
  Array q = query_->call_on(x);
  Array k = key_->call_on(x);
  if (query_norm_) {
    q_projected.emplace(std::move(q));
    k_projected.emplace(std::move(k));
    q = query_norm_->call_on(*q_projected);
    k = key_norm_->call_on(*k_projected);
  }
  const Array v = value_->call_on(x);
  const bool rotary = options_.rope_theta > 0;
  if (rotary) {
    q = apply_rotary_embedding(std::move(q), 0, rope());
    k = apply_rotary_embedding(std::move(k), 0, rope());
  }
  const AttentionOptions options = attention_options();
  const Array d_o = [&] {
    const Array o = attention(q, k, v, options);
    return output_->backward(o, dy, grads);
  }();
  AttentionGrads g = attention_backward(q, k, v, d_o, options);
  if (rotary) {
    g.dq = apply_rotary_embedding_backward(std::move(g.dq), 0, rope());
    g.dk = apply_rotary_embedding_backward(std::move(g.dk), 0, rope());
  }
  if (query_norm_) {
    g.dq = query_norm_->backward(*q_projected, g.dq, grads);
    g.dk = key_norm_->backward(*k_projected, g.dk, grads);
  }
  Array dx = query_->backward(x, g.dq, grads);
  dx = add(std::move(dx), key_->backward(x, g.dk, grads));
  return add(std::move(dx), value_->backward(x, g.dv, grads));
}

}  // namespace meshlayout
