// llama.h — a Llama-class decoder (keras-hub LlamaBackbone + LlamaCausalLM) born sharded, with
// the last-position logits and key/value caches that generation (generation.h) drives.
//
// Variables carry keras-hub's Keras 3 paths, with no model prefix (the backbone is functional
// in keras-hub), so keras-hub's get_layout_map rules and Hugging Face checkpoints
// (hf_llama_checkpoint.h) address them directly:
//   token_embedding/embeddings (V, d), token_embedding/reverse_embeddings (d, V) when untied,
//   transformer_layer_{i}/self_attention/{query,key,value}/kernel (d, heads, head_dim),
//   transformer_layer_{i}/self_attention/attention_output/kernel (heads, head_dim, d),
//   transformer_layer_{i}/{self_attention_layernorm,feedforward_layernorm}/scale (d,),
//   transformer_layer_{i}/feedforward_{gate,intermediate}_dense/kernel (d, ff),
//   transformer_layer_{i}/feedforward_output_dense/kernel (ff, d), sequence_output_layernorm/scale.
// Each variable's layout is rules[path] (a ModelParallel over `rules`), else replicated on the
// rules' mesh; every layout is checked before anything is allocated, then each device fills
// only its box. Block: h = x + attn(norm(x)); y = h + down(silu(gate(n)) · up(n)), n = norm(h)
// (RMSNorm with config.rms_norm_eps, RoPE with config.rope_theta, grouped key/value heads).
// The same block serves every family LlamaConfig reads (hf_llama_config.h): Llama 3's rope
// scaling, q/k/v (and o) biases at self_attention/{query,key,value,attention_output}/bias,
// Qwen 3's head norms at self_attention/{query,key}_dense_layernorm/scale, Mistral's window.
//
// Example:
//   LayoutMap rules = llama_layout_map(mesh, "model", "batch");   // keras-hub's rules
//   LlamaModel model(config, rules);
//   load_hf_llama(HfLlamaCheckpoint::open(dir), model.variables_by_path());
//   Array logits = model.logits(tokens);                           // (batch, seq, vocab)
//   GenerateResult r = generate(model, {{5, 17, 42}}, {.max_new_tokens = 8});   // generation.h
//   LlamaModel f64(config, rules, {.dtype = DType::kF64});   // weights, activations, gradients,
//                                                             // optimizer slots all in float64
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "meshlayout/layout_map/layout_map.h"
#include "meshlayout/models/family_layout_maps.h"
#include "meshlayout/models/hf_llama_config.h"
#include "meshlayout/nn/distribution.h"
#include "meshlayout/nn/layers/attention/multi_head_attention.h"
#include "meshlayout/nn/layers/core/gated_feed_forward.h"
#include "meshlayout/nn/layers/core/reversible_embedding.h"
#include "meshlayout/nn/layers/moe/sparse_moe.h"
#include "meshlayout/nn/layers/normalization/rms_normalization.h"
#include "meshlayout/nn/model.h"

namespace meshlayout {

/// One keras-hub LlamaTransformerDecoder block, named transformer_layer_{i}.
class LlamaDecoderLayer : public Layer {
 public:
  LlamaDecoderLayer(const LlamaConfig& config, int64_t index);
  Shape compute_output_shape(const Shape& input_shape) const override { return input_shape; }
  /// The block on x (batch, seq, d); with a cache, at positions start… (see MultiHeadAttention).
  Array forward(const Array& x, KVCache* cache, int64_t start, int64_t max_length);
  const std::shared_ptr<MultiHeadAttention>& self_attention() const { return attention_; }
  /// The mixture of experts of a sparse layer (LlamaConfig::sparse_layer), else null.
  const std::shared_ptr<SparseMoe>& sparse_moe() const { return moe_; }

  /// What backward_saved needs from the forward, in the activations' layouts.
  struct Saved {
    std::optional<Array> h;               // x + attention(norm(x))
    GatedFeedForward::Saved feedforward;  // its projections before the SwiGLU gate
    SparseMoe::Saved moe;                 // a sparse layer's router choice
    // With post norms (Gemma 2): the attention's and the feed-forward's outputs before them.
    std::optional<Array> attention_out, feedforward_out;
  };
  /// The block's forward (as call) keeping `saved`. Collective.
  Array forward_for_training(const Array& x, Saved& saved);
  /// dL/dx in x's layout given the block's input x, its `saved` and dy; accumulates the
  /// gradient of every weight of the block. Recomputes the two norms and the attention. A sparse
  /// layer adds router_probs_grad to its router's dL/dp (the auxiliary loss). Collective.
  Array backward_saved(const Array& x, const Saved& saved, const Array& dy, Gradients& grads,
                       const std::vector<double>* router_probs_grad = nullptr);
  /// Layer::backward: forward_for_training then backward_saved.
  Array backward(const Array& x, const Array& dy, Gradients& grads) override;

 protected:
  void build(const Shape& input_shape) override;
  Array call(const Array& x) override { return forward(x, nullptr, 0, 0); }

 private:
  std::shared_ptr<RMSNormalization> attention_norm_, feedforward_norm_;
  // Gemma 2's post-attention and post-feed-forward norms (null otherwise).
  std::shared_ptr<RMSNormalization> post_attention_norm_, post_feedforward_norm_;
  std::shared_ptr<MultiHeadAttention> attention_;
  // SwiGLU, flat: its feedforward_{gate,intermediate,output}_dense are tracked by the block.
  std::shared_ptr<GatedFeedForward> feedforward_;
  // A sparse layer's mixture of experts instead (feedforward_ null).
  std::shared_ptr<SparseMoe> moe_;
};

struct LlamaOptions {
  /// The dtype of every weight and of the computation (forward, backward, loss, and so the
  /// optimizer's slots): F32 or F64. The model's layers are built under a FloatxScope of it
  /// (floatx.h), whatever floatx() is outside.
  DType dtype = DType::kF32;
};

/// keras-hub's LlamaCausalLM as a Model (name "llama_causal_lm"): trained by the Trainer
/// (compile/fit/evaluate/predict; sparse_categorical_crossentropy from logits takes the fused
/// path below), summarised by summary(). Its variables keep keras-hub's paths (no model prefix).
class LlamaModel : public Model {
 public:
  /// Builds every variable under `rules` (lazy, then materialised together: all layouts checked
  /// first). config.validate()'s ValueError for a bad config; ValueError naming the variable for
  /// a rule that does not fit it, or naming options.dtype unless it is F32 or F64.
  LlamaModel(const LlamaConfig& config, const LayoutMap& rules, const LlamaOptions& options = {});

  const LlamaConfig& config() const { return config_; }
  /// The weights' and the computation's dtype (LlamaOptions::dtype).
  DType dtype() const { return dtype_; }
  const DeviceMesh& mesh() const { return mesh_; }
  // distribution() (Model's): the ModelParallel of the rules; its data layout splits a batch
  // over the mesh's first axis.
  /// Every variable, keyed by its keras-hub path (load_hf_llama's targets).
  std::map<std::string, Array*> variables_by_path();
  // variables() (Layer's): every variable in keras-hub's order.

  /// Hidden states after the final norm: tokens (batch, seq) I32 → (batch, seq, d). Collective.
  /// With caches (one per layer), positions start… are appended to them.
  Array hidden_states(const Array& tokens, std::vector<KVCache>* caches = nullptr,
                      int64_t start = 0, int64_t max_length = 0);
  /// Logits (batch, seq, vocab) of tokens. Collective.
  Array logits(const Array& tokens);
  /// The mean sparse categorical cross-entropy of logits(inputs) against targets (batch, seq)
  /// over every position, as every process sees it. Collective.
  double loss(const Array& inputs, const Array& targets);
  /// The same loss (a mixture of experts with output_router_logits: plus router_aux_loss_coef
  /// times transformers' load-balancing loss over every sparse layer's router), and its
  /// gradient for every variable accumulated into `grads` (each in its
  /// variable's layout, summed over the data-parallel replicas; a tied table gets the lookup's
  /// and the output projection's parts). Keeps each block's input and feed-forward activations
  /// until its backward; recomputes the norms and the attention. Collective.
  double loss_and_gradients(const Array& inputs, const Array& targets, Gradients& grads);
  /// Logits of the last position only, (batch, 1, vocab), appending to the caches.
  Array last_logits(const Array& tokens, std::vector<KVCache>& caches, int64_t start,
                    int64_t max_length);

  // Model: the call gives logits; tokens (batch, seq) → (batch, seq, vocab).
  Tensor call(const Tensor& x) override;
  Shape compute_output_shape(const Shape& input_shape) const override;
  /// dlogits (batch, seq, vocab) → every variable's gradient, as loss_and_gradients does after
  /// its loss; returns the (empty) gradient of the integer tokens. Collective.
  Array backward(const Array& tokens, const Array& dlogits, Gradients& grads) override;
  /// loss_and_gradients for sparse_categorical_crossentropy from logits (the loss it computes);
  /// std::nullopt for every other loss (the Trainer then goes through call and backward).
  std::optional<double> fused_loss_and_gradients(const Array& x, const Array& y,
                                                 const CompiledLoss& loss,
                                                 Gradients& grads) override;

 private:
  LlamaConfig config_;
  DType dtype_;
  DeviceMesh mesh_;
  std::shared_ptr<ReversibleEmbedding> embedding_;
  std::vector<std::shared_ptr<LlamaDecoderLayer>> blocks_;
  std::shared_ptr<RMSNormalization> final_norm_;

  // The embeddings of tokens (Gemma: times sqrt(hidden_size) in the model's dtype).
  Array embed(const Array& tokens);
  double embedding_scale() const;
  // Gemma 2's final-logit soft-capping of logits (as they are otherwise).
  Array capped(Array logits) const;

  // The training forward keeping each block's input and what its backward needs, then `top`
  // (given the final hidden states f and the reverse kernel) returns dL/df and accumulates the
  // output projection's gradient; then the blocks' backward from the top and the lookup's.
  // Returns the lookup's (empty) token gradient.
  // With aux_loss, a mixture of experts' load-balancing loss (times its coefficient) is stored
  // there and its gradient joins the routers'.
  Array forward_backward(const Array& tokens,
                         const std::function<Array(const Array& f, const Array& kernel)>& top,
                         Gradients& grads, double* aux_loss = nullptr);
};

}  // namespace meshlayout
