#include "meshlayout/models/llama.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/shape.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/kernels/memory.h"
#include "meshlayout/nn/distribution.h"
#include "meshlayout/nn/floatx.h"
#include "meshlayout/nn/materialize.h"
#include "meshlayout/ops/cross_entropy.h"
#include "meshlayout/ops/elementwise.h"
#include "meshlayout/ops/matmul.h"
#include "meshlayout/ops/matmul_backward.h"
#include "meshlayout/ops/scalar_ops.h"

namespace meshlayout {
namespace {

// h (batch, seq, d) → its last position (batch, 1, d), the sequence gathered first if split.
Array last_position(const Array& h) {
  std::vector<DimSharding> axes = h.layout().axes();
  axes[1] = DimSharding();
  const TensorLayout layout(axes, h.mesh());
  std::optional<Array> moved;
  const Array& src = h.layout() == layout ? h : moved.emplace(distribute_tensor(h, layout));
  const int64_t T = h.shape()[1];
  Array out = allocate_agreed(layout, {h.shape()[0], 1, h.shape()[2]}, h.dtype(), h.runtime_ptr());
  const DeviceKind kind = kind_of(out);
  out.runtime().pool().parallel_for(out.local_shards().size(), [&](size_t i) {
    Array::Shard& d = out.local_shards()[i];
    const int64_t row = d.box.shape[2] * static_cast<int64_t>(dtype_size(h.dtype()));
    // Row b of the output is row T - 1 of sequence b.
    copy_runs(kind, {.dst = &d,
                     .dst_stride = static_cast<size_t>(row),
                     .src = src.shard_at(d.position),
                     .src_offset = static_cast<size_t>((T - 1) * row),
                     .src_stride = static_cast<size_t>(T * row),
                     .runs = d.box.shape[0],
                     .run_bytes = static_cast<size_t>(row)});
  });
  return out;
}

}  // namespace

LlamaDecoderLayer::LlamaDecoderLayer(const LlamaConfig& config, int64_t index)
    : Layer(config.gemma() ? "gemma_decoder_block" : "llama_transformer_decoder",
            std::string(config.gemma() ? "decoder_block_" : "transformer_layer_") +
                std::to_string(index)) {
  // keras-hub's names: LlamaTransformerDecoder's, or GemmaDecoderBlock's (RMSNorm times
  // 1 + scale, the scale starting at zero; GeGLU; q/k/v kernels heads first).
  const bool gemma = config.gemma();
  const auto norm = [&](const char* name) {
    return track(name, std::make_shared<RMSNormalization>(RMSNormalizationOptions{
                           .name = name,
                           .epsilon = config.rms_norm_eps,
                           .scale_initializer = gemma ? Initializer::zeros() : Initializer::ones(),
                           .unit_offset = gemma}));
  };
  attention_norm_ = norm(gemma ? "pre_attention_norm" : "self_attention_layernorm");
  const char* attention_name = gemma ? "attention" : "self_attention";
  attention_ =
      track(attention_name, std::make_shared<MultiHeadAttention>(MultiHeadAttentionOptions{
                                .num_heads = config.num_attention_heads,
                                .key_dim = config.head_dim,
                                .num_key_value_heads = config.num_key_value_heads,
                                .use_bias = config.qkv_bias(),
                                .use_output_bias = config.output_bias(),
                                .causal = true,
                                .rope_theta = config.rope_of_layer(index).theta,
                                .rope_scaling = config.rope_of_layer(index).llama3,
                                .rope_linear_factor = config.rope_of_layer(index).linear_factor,
                                .sliding_window = config.window_of_layer(index),
                                .qk_norm_epsilon = config.qk_norm() ? config.rms_norm_eps : 0.0,
                                .gemma_qk_norm = gemma,
                                .attention_scale = config.attention_scale(),
                                .logit_soft_cap = config.attn_logit_softcapping,
                                .kernel_heads_first = gemma,
                                .name = attention_name}));
  if (config.post_norms()) post_attention_norm_ = norm("post_attention_norm");
  feedforward_norm_ = norm(gemma ? "pre_ffw_norm" : "feedforward_layernorm");
  if (config.sparse_layer(index)) {
    const std::string block = config.sparse_block_name(index);
    moe_ = track(block, std::make_shared<SparseMoe>(SparseMoeOptions{
                            .name = block,
                            .num_experts = config.num_experts,
                            .top_k = config.num_experts_per_tok,
                            .intermediate_dim = config.expert_intermediate_size(),
                            .normalize_top_k = config.norm_topk_prob,
                            .shared_intermediate_dim = config.shared_expert_intermediate_size,
                            .hidden_dim = config.hidden_size}));
    return;
  }
  feedforward_ = std::make_shared<GatedFeedForward>(
      config.intermediate_size, config.hidden_size,
      GatedFeedForwardOptions{
          .name = "feedforward",
          .activation = gemma ? GatedActivation::kGeluTanh : GatedActivation::kSilu,
          .gate_name = gemma ? "ffw_gating" : "feedforward_gate_dense",
          .up_name = gemma ? "ffw_gating_2" : "feedforward_intermediate_dense",
          .down_name = gemma ? "ffw_linear" : "feedforward_output_dense",
          .flat = true});
  track(gemma ? "ffw_gating" : "feedforward_gate_dense", feedforward_->gate());
  track(gemma ? "ffw_gating_2" : "feedforward_intermediate_dense", feedforward_->up());
  track(gemma ? "ffw_linear" : "feedforward_output_dense", feedforward_->down());
  if (config.post_norms()) post_feedforward_norm_ = norm("post_ffw_norm");
}

void LlamaDecoderLayer::build(const Shape& input_shape) {
  attention_norm_->maybe_build(input_shape);
  attention_->maybe_build(input_shape);
  if (post_attention_norm_) post_attention_norm_->maybe_build(input_shape);
  feedforward_norm_->maybe_build(input_shape);
  if (moe_) {
    moe_->maybe_build(input_shape);
    return;
  }
  feedforward_->maybe_build(input_shape);
  if (post_feedforward_norm_) post_feedforward_norm_->maybe_build(input_shape);
}

Array LlamaDecoderLayer::forward(const Array& x, KVCache* cache, int64_t start,
                                 int64_t max_length) {
  NameScope scope = open_name_scope();
  const Array n = attention_norm_->call_on(x);
  if (post_attention_norm_) {  // Gemma 2: h = x + post(attn(n)); y = h + post(ff(pre(h)))
    const Array a =
        cache ? attention_->call_cached(n, *cache, start, max_length) : attention_->call_on(n);
    const Array h = add(post_attention_norm_->call_on(a), x);
    const Array f = feedforward_->forward(feedforward_norm_->call_on(h));
    return add(post_feedforward_norm_->call_on(f), h);
  }
  // The residual sums and the gating are computed into the fresh outputs they consume.
  const Array h = attention_->call_plus(n, x, cache, start, max_length);
  const Array m = feedforward_norm_->call_on(h);
  if (moe_) return add(moe_->forward(m), h);
  // The residual is fused into the down projection: with a row-parallel kernel it joins one
  // partial sum per block instead of being added to every replica of the output.
  return feedforward_->forward(m, &h);
}

Array LlamaDecoderLayer::forward_for_training(const Array& x, Saved& saved) {
  NameScope scope = open_name_scope();
  if (post_attention_norm_) {  // Gemma 2, keeping the attention's and the block's outputs
    saved.attention_out.emplace(attention_->call_on(attention_norm_->call_on(x)));
    saved.h.emplace(add(post_attention_norm_->call_on(*saved.attention_out), x));
    const Array m = feedforward_norm_->call_on(*saved.h);
    saved.feedforward_out.emplace(feedforward_->forward_for_training(m, saved.feedforward));
    return add(post_feedforward_norm_->call_on(*saved.feedforward_out), *saved.h);
  }
  saved.h.emplace(attention_->call_plus(attention_norm_->call_on(x), x));
  const Array m = feedforward_norm_->call_on(*saved.h);
  if (moe_) return add(moe_->forward(m, &saved.moe), *saved.h);
  return add(feedforward_->forward_for_training(m, saved.feedforward), *saved.h);
}

Array LlamaDecoderLayer::backward_saved(const Array& x, const Saved& saved, const Array& dy,
                                        Gradients& grads,
                                        const std::vector<double>* router_probs_grad) {
  NameScope scope = open_name_scope();
  const Array& h = *saved.h;
  if (post_attention_norm_) {
    // y = h + post_ff(f), f = ff(m), m = pre_ff(h).
    const Array df = post_feedforward_norm_->backward(*saved.feedforward_out, dy, grads);
    const Array m = feedforward_norm_->call_on(h);
    const Array dm = feedforward_->backward_saved(m, saved.feedforward, df, grads);
    const Array dh = add(feedforward_norm_->backward(h, dm, grads), dy);
    // h = x + post_attn(a), a = attn(n), n = pre(x).
    const Array da = post_attention_norm_->backward(*saved.attention_out, dh, grads);
    const Array n = attention_norm_->call_on(x);
    const Array dn = attention_->backward(n, da, grads);
    return add(attention_norm_->backward(x, dn, grads), dh);
  }
  // y = h + ff(m), m = norm(h).
  const Array m = feedforward_norm_->call_on(h);
  const Array dm = moe_ ? moe_->backward_saved(m, saved.moe, dy, grads, router_probs_grad)
                        : feedforward_->backward_saved(m, saved.feedforward, dy, grads);
  // h = x + attn(n), n = norm(x).
  const Array dh = add(feedforward_norm_->backward(h, dm, grads), dy);
  const Array n = attention_norm_->call_on(x);
  const Array dn = attention_->backward(n, dh, grads);
  return add(attention_norm_->backward(x, dn, grads), dh);
}

Array LlamaDecoderLayer::backward(const Array& x, const Array& dy, Gradients& grads) {
  Saved saved;
  forward_for_training(x, saved);
  return backward_saved(x, saved, dy, grads);
}

LlamaModel::LlamaModel(const LlamaConfig& config, const LayoutMap& rules,
                       const LlamaOptions& options)
    : Model("", "llama_causal_lm"),
      config_(config),
      dtype_(options.dtype),
      mesh_(*rules.device_mesh()) {
  config_.validate();
  if (dtype_ != DType::kF32 && dtype_ != DType::kF64) {
    throw ValueError(
        fmt::format("LlamaModel runs in F32 or F64, got dtype {}", dtype_name(dtype_)));
  }
  auto distribution = std::make_shared<ModelParallel>(rules);
  layout_map_ = rules;
  distribution_ = distribution;
  {
    DistributionScope scope(distribution);  // variables are lazy until every layout is known
    FloatxScope floatx_scope(dtype_);       // every layer, and so every weight, in dtype_
    const Shape tokens{1, 1}, hidden{1, 1, config_.hidden_size};
    embedding_ = track("token_embedding", std::make_shared<ReversibleEmbedding>(
                                              config_.vocab_size, config_.hidden_size,
                                              config_.tie_word_embeddings, "token_embedding"));
    embedding_->maybe_build(tokens);
    for (int64_t i = 0; i < config_.num_hidden_layers; ++i) {
      blocks_.push_back(
          track(std::string(config_.gemma() ? "decoder_block_" : "transformer_layer_") +
                    std::to_string(i),
                std::make_shared<LlamaDecoderLayer>(config_, i)));
      blocks_.back()->maybe_build(hidden);
    }
    const char* final_name = config_.gemma() ? "final_normalization" : "sequence_output_layernorm";
    final_norm_ =
        track(final_name,
              std::make_shared<RMSNormalization>(RMSNormalizationOptions{
                  .name = final_name,
                  .epsilon = config_.rms_norm_eps,
                  .scale_initializer = config_.gemma() ? Initializer::zeros() : Initializer::ones(),
                  .unit_offset = config_.gemma()}));
    final_norm_->maybe_build(hidden);
  }
  std::vector<KeyedVariable> keyed = keyed_variables(*embedding_, embedding_->name());
  for (const auto& layer : blocks_) {
    std::vector<KeyedVariable> more = keyed_variables(*layer, layer->name());
    keyed.insert(keyed.end(), more.begin(), more.end());
  }
  std::vector<KeyedVariable> norm = keyed_variables(*final_norm_, final_norm_->name());
  keyed.insert(keyed.end(), norm.begin(), norm.end());
  materialize_lazy(keyed, std::nullopt, distribution);
  output_shape_ = Shape{1, 1, config_.vocab_size};
  set_built();
}

std::map<std::string, Array*> LlamaModel::variables_by_path() {
  std::map<std::string, Array*> out;
  for (const VariablePtr& v : variables()) out[v->path()] = &v->mutable_value();
  return out;
}

Array LlamaModel::hidden_states(const Array& tokens, std::vector<KVCache>* caches, int64_t start,
                                int64_t max_length) {
  if (caches && caches->size() != blocks_.size()) caches->resize(blocks_.size());
  Array x = embed(tokens);
  for (size_t i = 0; i < blocks_.size(); ++i) {
    x = blocks_[i]->forward(x, caches ? &(*caches)[i] : nullptr, start, max_length);
  }
  return final_norm_->call_on(x);
}

Array LlamaModel::forward_backward(
    const Array& tokens, const std::function<Array(const Array& f, const Array& kernel)>& top,
    Gradients& grads, double* aux_loss) {
  // Forward, keeping each block's input and what its backward needs (sharded like the
  // activations: nothing whole).
  std::vector<Array> xs;
  std::vector<LlamaDecoderLayer::Saved> saved(blocks_.size());
  xs.reserve(blocks_.size() + 1);
  xs.push_back(embed(tokens));
  for (size_t i = 0; i < blocks_.size(); ++i)
    xs.push_back(blocks_[i]->forward_for_training(xs.back(), saved[i]));
  const Array f = final_norm_->call_on(xs.back());
  // transformers' load_balancing_loss_func over the routers of every sparse layer (their tokens
  // concatenated): E · Σ_e (choices of e / N) · (Σ p_e / N), linear in p given the choice.
  std::optional<std::vector<double>> probs_grad;
  if (aux_loss && config_.moe() && config_.output_router_logits) {
    const size_t experts = static_cast<size_t>(config_.num_experts);
    std::vector<double> counts(experts), prob_sums(experts);
    double tokens_seen = 0;
    for (const LlamaDecoderLayer::Saved& s : saved) {
      if (!s.moe.routing) continue;
      const ExpertStatistics stats = expert_statistics(*s.moe.routing);
      for (size_t e = 0; e < experts; ++e) {
        counts[e] += stats.counts[e];
        prob_sums[e] += stats.prob_sums[e];
      }
      tokens_seen += static_cast<double>(stats.tokens);
    }
    double aux = 0;
    probs_grad.emplace(experts);
    const double coef = config_.router_aux_loss_coef, n = tokens_seen;
    for (size_t e = 0; e < experts; ++e) {
      aux += counts[e] / n * (prob_sums[e] / n);
      (*probs_grad)[e] = coef * static_cast<double>(experts) * counts[e] / (n * n);
    }
    *aux_loss = coef * static_cast<double>(experts) * aux;
  }
  std::optional<Array> transposed_table;  // tied: made once for the forward and the backward
  const Array& reverse_kernel = embedding_->reverse_kernel(transposed_table);
  // Backward, block by block from the top, freeing each block's activations as it goes.
  Array dx = final_norm_->backward(xs.back(), top(f, reverse_kernel), grads);
  for (size_t i = blocks_.size(); i-- > 0;) {
    dx =
        blocks_[i]->backward_saved(xs[i], saved[i], dx, grads, probs_grad ? &*probs_grad : nullptr);
    saved[i] = {};
    xs.pop_back();
  }
  if (config_.gemma()) dx = scale(std::move(dx), embedding_scale());  // d(e·s)/de = s
  return embedding_->backward(tokens, dx, grads);
}

Array LlamaModel::embed(const Array& tokens) {
  Array x = embedding_->call_on(tokens);
  if (!config_.gemma()) return x;
  return scale(std::move(x), embedding_scale());
}

double LlamaModel::embedding_scale() const {
  // keras-hub's Gemma: x · cast(sqrt(hidden_dim), x.dtype); Hugging Face's the same normalizer.
  const double s = std::sqrt(static_cast<double>(config_.hidden_size));
  return dtype_ == DType::kF32 ? static_cast<double>(static_cast<float>(s)) : s;
}

Array LlamaModel::capped(Array logits) const {
  if (config_.final_logit_softcapping <= 0) return logits;
  return soft_cap(logits, config_.final_logit_softcapping);
}

double LlamaModel::loss_and_gradients(const Array& inputs, const Array& targets, Gradients& grads) {
  double loss = 0, aux_loss = 0;
  forward_backward(
      inputs,
      [&](const Array& f, const Array& kernel) {
        const Array logits = capped(matmul(f, kernel));
        CrossEntropyResult ce = sparse_categorical_crossentropy_with_grad(logits, targets);
        loss = ce.loss;
        if (config_.final_logit_softcapping > 0) {
          ce.dlogits = soft_cap_backward(logits, ce.dlogits, config_.final_logit_softcapping);
        }
        return embedding_->reverse_backward(f, ce.dlogits, grads, &kernel);
      },
      grads, &aux_loss);
  return loss + aux_loss;
}

Array LlamaModel::backward(const Array& tokens, const Array& dlogits, Gradients& grads) {
  return forward_backward(
      tokens,
      [&](const Array& f, const Array& kernel) {
        if (config_.final_logit_softcapping <= 0) {
          return embedding_->reverse_backward(f, dlogits, grads, &kernel);
        }
        const Array d_uncapped =
            soft_cap_backward(capped(matmul(f, kernel)), dlogits, config_.final_logit_softcapping);
        return embedding_->reverse_backward(f, d_uncapped, grads, &kernel);
      },
      grads);
}

std::optional<double> LlamaModel::fused_loss_and_gradients(const Array& x, const Array& y,
                                                           const CompiledLoss& loss,
                                                           Gradients& grads) {
  if (loss.name != "sparse_categorical_crossentropy" || !loss.from_logits) return std::nullopt;
  return loss_and_gradients(x, y, grads);
}

Tensor LlamaModel::call(const Tensor& x) {
  if (x.is_symbolic()) return Tensor::symbolic(compute_output_shape(x.shape()));
  return Tensor(logits(x.value()));
}

Shape LlamaModel::compute_output_shape(const Shape& input_shape) const {
  if (input_shape.size() != 2) {
    throw ValueError(fmt::format("{} takes token ids of shape (batch, seq), got shape {}",
                                 quote(name()), shape_to_string(input_shape)));
  }
  return Shape{input_shape[0], input_shape[1], config_.vocab_size};
}

double LlamaModel::loss(const Array& inputs, const Array& targets) {
  return sparse_categorical_crossentropy(logits(inputs), targets);
}

Array LlamaModel::logits(const Array& tokens) {
  return capped(embedding_->reverse(hidden_states(tokens)));
}

Array LlamaModel::last_logits(const Array& tokens, std::vector<KVCache>& caches, int64_t start,
                              int64_t max_length) {
  return capped(
      embedding_->reverse(last_position(hidden_states(tokens, &caches, start, max_length))));
}

}  // namespace meshlayout
