// memory_plan.h — `meshlayout plan --batch N --seq N …`: everything a device would hold to
// train or serve a model, from the tensors' shapes and the rules alone (nothing allocated):
// its shards of the weights, gradients and optimizer slots (training_plan.h), the activations
// of one training step (the forward's saved tensors and the backward's working set, with or
// without recomputing each block), the key/value cache of generation, the temporaries of the
// largest reshard the step makes, the peak, and whether it fits a device memory.
//
// Weights, gradients and slots come from the model's variable list (the shape and layout of
// every tensor, whatever the family: a mixture-of-experts model's expert tensors need no code
// here). The activations and the cache depend on the batch and the sequence, not on any
// variable: they come from the family's DecoderShapes and the layouts its kernels' rules give
// the projections' outputs (matmul_plan.h, as the step computes them). Mixtral's and Qwen 3
// MoE's sparse blocks are replayed as SparseMoe runs them (moe_replay.h: router logits and
// choice, operand copies, the experts' partial sums; exact where tokens and experts are on
// different mesh axes, the worst case of routing where the experts split the tokens' own axes,
// and MemoryPlan::notes says so); another family adds its routed activations through
// DecoderShapes::expert_activations. Qwen 2 MoE's shared expert is not replayed (a note).
//
// Example:
//   MemoryPlan m = plan_memory(plan, map, {.optimizer = adam.get(), .batch = 8, .seq = 2048,
//                                          .cache_length = 4096,
//                                          .shapes = decoder_shapes(config),
//                                          .device_memory = uint64_t{80} << 30});
//   m.devices[3].peak;   // the most the device at mesh position 3 holds at once
//   m.devices[3].fits;   // peak <= 80 GiB
//   out << render_memory_text(m, plan.mesh);
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "meshlayout/plan/checkpoint_plan.h"
#include "meshlayout/plan/training_plan.h"

namespace meshlayout {

struct LlamaConfig;

/// What one device holds, by kind (bytes). The table of `plan --batch` and the bar chart of
/// `plan --html` read these.
struct DeviceMemoryPlan {
  uint64_t weights = 0;      // its shards of every weight, in the dtype the model holds them
  uint64_t gradients = 0;    // one per trained weight, in the weight's layout (training)
  uint64_t slots = 0;        // the optimizer's slots (Adafactor factored, ZeRO-1 sharded)
  uint64_t activations = 0;  // the training step's activations at its peak (saved + working)
  uint64_t cache = 0;        // the key/value cache of generation (every layer, k and v)
  /// The largest single reshard of the step (the target shard it allocates while the source
  /// lives): a part of `activations` when it falls at the peak, shown on its own.
  uint64_t reshard_temp = 0;
  /// The most held at once: the larger of training — weights + slots + activations + the
  /// gradients made by the activations' peak (the backward frees activations as gradients
  /// appear), at least weights + gradients + slots — and generation, weights + cache.
  uint64_t peak = 0;
  uint64_t gradients_at_peak = 0;  // the part of `gradients` live at the activations' peak
  bool fits = true;                // peak <= the device memory (true when none was given)
};

/// What the backward recomputes instead of keeping from the forward.
///   none       every block keeps its input, norms, q, k, v, attention output, h and the
///              feed-forward's gate and up projections;
///   attention  the Llama's own backward (llama.h): it keeps the block's input, h and the
///              gate and up projections, recomputing the two norms and the attention;
///   block      only each block's input is kept; the backward recomputes the whole block.
enum class Recompute { kNone, kAttention, kBlock };
/// "none", "attention", "block"; ValueError naming the text otherwise.
Recompute parse_recompute(std::string_view text);
std::string_view recompute_name(Recompute recompute);

/// Optional per-device bytes a mixture-of-experts block adds to the activations: the router's
/// logits and the tokens dispatched to and combined from its experts. The hook receives the
/// batch, sequence and the device's mesh position; it returns {saved per block, working set}.
/// (A dense family leaves it empty.)
struct ExpertActivationBytes {
  uint64_t saved_per_block = 0, working = 0;
};
using ExpertActivationHook =
    std::function<ExpertActivationBytes(int64_t batch, int64_t seq, int64_t position)>;

/// The shapes of a decoder's activations, and where its block-0 kernels are in the variable
/// list (their rules decide the activations' layouts).
struct DecoderShapes {
  int64_t layers = 0, hidden = 0, intermediate = 0, heads = 0, kv_heads = 0, head_dim = 0,
          vocab = 0;
  size_t dtype_size = 4;            // the computation's dtype (F32)
  bool kernel_heads_first = false;  // q/k/v kernels (heads, d, head_dim) as Gemma's
  bool post_norms = false;          // Gemma 2's post norms (not replayed: see memory_plan.cc)
  bool qk_norm = false;             // Qwen 3's query and key head norms
  // Paths of block 0's kernels and norms ("transformer_layer_0/…"), of the embeddings (reverse
  // empty when tied) and of the final norm; block_prefix + i names block i.
  std::string block_prefix, query, key, value, output, gate, up, down, attention_norm,
      feedforward_norm, embeddings, reverse, final_norm;
  /// Blocks whose feed-forward is a mixture of experts (LlamaConfig::sparse_layer). Their
  /// feed-forward is replayed as SparseMoe's (moe_replay.h) when expert_blocks names their
  /// sparse blocks, else its activations are expert_activations'; with neither they are left
  /// out and MemoryPlan::notes says so.
  std::vector<int64_t> expert_layers;
  /// Per expert layer, its sparse block's path ("transformer_layer_1/mixtral_sparse_moe_block_1/"),
  /// and the experts, each token's top-k and the experts' hidden size F.
  std::vector<std::string> expert_blocks;
  int64_t experts = 0, top_k = 0, expert_intermediate = 0;
  ExpertActivationHook expert_activations;  // another family's: see ExpertActivationBytes
};

/// The DecoderShapes of a LlamaModel of `config` (every family hf_llama_config.h reads).
DecoderShapes decoder_shapes(const LlamaConfig& config);

struct MemoryPlanOptions {
  /// Gradients and slots when set (and the training step's activations need it).
  const Optimizer* optimizer = nullptr;
  /// Global batch (rows) and sequence length of a training step: activations when both > 0.
  int64_t batch = 0, seq = 0;
  /// Key/value cache positions (generate's prompt + new tokens) for `batch` rows; 0: none.
  int64_t cache_length = 0;
  Recompute recompute = Recompute::kAttention;
  /// Needed for activations and the cache.
  std::optional<DecoderShapes> shapes;
  std::optional<uint64_t> device_memory;  // the fits column
};

struct MemoryPlan {
  MemoryPlanOptions options;  // as given (shapes kept for the report)
  std::optional<TrainingPlan> training;
  std::vector<DeviceMemoryPlan> devices;  // by mesh position
  /// Where the activations peak on the device with the largest peak: "top of the backward",
  /// "backward of block i", "embedding backward"; empty without activations.
  std::string peak_phase;
  /// The reshard behind reshard_temp ("…/feedforward_gate_dense/kernel to layout[…]"), or empty.
  std::string largest_reshard;
  /// What the plan leaves out (a mixture of experts' activations without a hook).
  std::vector<std::string> notes;
};

/// The memory plan of `plan`'s tensors under `map` (the map the plan was made with).
/// ValueError for batch/seq/cache_length < 0, activations (batch and seq) without an
/// optimizer or without shapes, or a cache without shapes or batch.
MemoryPlan plan_memory(const CheckpointPlan& plan, const LayoutMap& map,
                       const MemoryPlanOptions& options);

/// The per-device table: weights, grads, slots, activations, cache, reshard temp, peak, fits?;
/// then the largest peak and, with a device memory, how many devices it fits.
std::string render_memory_text(const MemoryPlan& memory, const DeviceMesh& mesh);

/// {"batch", "seq", "cache_length", "recompute", "device_memory" (null if none), "peak_phase",
///  "largest_reshard", "notes", "devices": [{"device", "weights", "gradients", "slots",
///  "activations", "cache", "reshard_temp", "gradients_at_peak", "peak", "fits"}], "max_peak",
///  "all_fit"}
nlohmann::json memory_json(const MemoryPlan& memory, const DeviceMesh& mesh);

}  // namespace meshlayout
