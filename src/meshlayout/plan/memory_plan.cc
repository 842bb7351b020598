// memory_plan.cc — see memory_plan.h.
#include "meshlayout/plan/memory_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "meshlayout/core/byte_size.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/layout/shard_geometry.h"
#include "meshlayout/models/hf_llama_config.h"
#include "meshlayout/ops/attention.h"
#include "meshlayout/ops/matmul_plan.h"
#include "meshlayout/plan/step_memory.h"

namespace meshlayout {
namespace {

using PerDevice = std::vector<uint64_t>;  // bytes by mesh position

PerDevice& operator+=(PerDevice& a, const PerDevice& b) {
  for (size_t i = 0; i < a.size(); ++i) a[i] += b[i];
  return a;
}
PerDevice operator*(uint64_t k, PerDevice a) {
  for (uint64_t& x : a) x *= k;
  return a;
}

// Each device's bytes of a tensor of `shape` in `layout`.
PerDevice shard_bytes(const TensorLayout& layout, const Shape& shape, size_t element_size) {
  const ShardGeometry g(layout, shape);
  PerDevice out(static_cast<size_t>(layout.device_mesh()->size()));
  for (size_t p = 0; p < out.size(); ++p) {
    out[p] = static_cast<uint64_t>(g.box(static_cast<int64_t>(p)).num_elements()) * element_size;
  }
  return out;
}

int64_t axes_size(const DimSharding& d, const DeviceMesh& mesh) {
  int64_t n = 1;
  for (const std::string& a : d.axes()) n *= mesh.axis_size(a);
  return n;
}

// The sharding of dimensions (a, b) of sizes (n, _) read as one dimension, as reshaped_view
// does without a copy: a's when b is whole and a splits evenly; else whole (resharded first).
DimSharding merged(const DimSharding& a, const DimSharding& b, int64_t n, const DeviceMesh& mesh) {
  if (b.is_sharded()) return !a.is_sharded() ? DimSharding() : DimSharding();
  return n % axes_size(a, mesh) == 0 ? a : DimSharding();
}

// A rule's layout of `path`, or replicated.
TensorLayout layout_of(const LayoutMap& map, const std::string& path, int rank,
                       const DeviceMesh& mesh) {
  if (path.empty()) return TensorLayout::replicated(rank, mesh);
  std::optional<TensorLayout> l = map.get(path);
  if (!l || l->rank() != rank) return TensorLayout::replicated(rank, mesh);
  return TensorLayout(l->axes(), mesh);
}

// One projection of the step: x (B, T, k) times the kernel read as a (k, n) matrix.
struct Projection {
  TensorLayout out = TensorLayout::replicated(0);
  PerDevice out_bytes, reshard;  // the output's bytes, the kernel's reshard (if any)
  std::string reshard_layout;
};

Projection project(const TensorLayout& x, int64_t B, int64_t T, int64_t k, const TensorLayout& w,
                   int64_t n, size_t es) {
  const DeviceMesh& mesh = *x.device_mesh();
  const ShardGeometry gx(x, {B, T, k}), gw(w, {k, n});
  const MatmulPlan plan = plan_matmul(gx, gw, es == 8 ? DType::kF64 : DType::kF32, mesh.size());
  Projection p{.out = plan.output_layout,
               .out_bytes = shard_bytes(plan.output_layout, {B, T, n}, es),
               .reshard = PerDevice(static_cast<size_t>(mesh.size()))};
  if (plan.reshard_w) {
    p.reshard = shard_bytes(plan.w_layout, {k, n}, es);
    p.reshard_layout = plan.w_layout.to_string();
  }
  return p;
}

}  // namespace

Recompute parse_recompute(std::string_view text) {
  if (text == "none") return Recompute::kNone;
  if (text == "attention") return Recompute::kAttention;
  if (text == "block") return Recompute::kBlock;
  throw ValueError(
      fmt::format("--recompute {} is not one of none, attention, block", quote(std::string(text))));
}

std::string_view recompute_name(Recompute recompute) {
  switch (recompute) {
    case Recompute::kNone:
      return "none";
    case Recompute::kAttention:
      return "attention";
    case Recompute::kBlock:
      return "block";
  }
  return "?";
}

DecoderShapes decoder_shapes(const LlamaConfig& config) {
  const bool gemma = config.gemma();
  const std::string block = gemma ? "decoder_block_0/" : "transformer_layer_0/";
  const std::string attention = block + (gemma ? "attention/" : "self_attention/");
  return DecoderShapes{
      .layers = config.num_hidden_layers,
      .hidden = config.hidden_size,
      .intermediate = config.intermediate_size,
      .heads = config.num_attention_heads,
      .kv_heads = config.num_key_value_heads,
      .head_dim = config.head_dim,
      .vocab = config.vocab_size,
      .dtype_size = 4,
      .kernel_heads_first = gemma,
      .post_norms = config.post_norms(),
      .qk_norm = config.qk_norm(),
      .block_prefix = gemma ? "decoder_block_" : "transformer_layer_",
      .query = attention + "query/kernel",
      .key = attention + "key/kernel",
      .value = attention + "value/kernel",
      .output = attention + "attention_output/kernel",
      .gate = block + (gemma ? "ffw_gating/kernel" : "feedforward_gate_dense/kernel"),
      .up = block + (gemma ? "ffw_gating_2/kernel" : "feedforward_intermediate_dense/kernel"),
      .down = block + (gemma ? "ffw_linear/kernel" : "feedforward_output_dense/kernel"),
      .attention_norm =
          block + (gemma ? "pre_attention_norm/scale" : "self_attention_layernorm/scale"),
      .feedforward_norm = block + (gemma ? "pre_ffw_norm/scale" : "feedforward_layernorm/scale"),
      .embeddings = "token_embedding/embeddings",
      .reverse = config.tie_word_embeddings ? "" : "token_embedding/reverse_embeddings",
      .final_norm = gemma ? "final_normalization/scale" : "sequence_output_layernorm/scale",
      .expert_layers =
          [&] {
            std::vector<int64_t> out;
            for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
              if (config.sparse_layer(i)) out.push_back(i);
            }
            return out;
          }(),
      .expert_blocks =
          [&] {
            std::vector<std::string> out;
            if (config.shared_expert_intermediate_size > 0) return out;  // not replayed: a note
            for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
              if (config.sparse_layer(i)) {
                out.push_back(fmt::format("{}{}/{}/",
                                          gemma ? "decoder_block_" : "transformer_layer_", i,
                                          config.sparse_block_name(i)));
              }
            }
            return out;
          }(),
      .experts = config.num_experts,
      .top_k = config.num_experts_per_tok,
      .expert_intermediate = config.moe() ? config.expert_intermediate_size() : 0};
}

namespace {

void check_options(const MemoryPlanOptions& o) {
  if (o.batch < 0 || o.seq < 0 || o.cache_length < 0) {
    throw ValueError(
        fmt::format("--batch, --seq and --cache-length must be >= 0, got {}, {} and {}", o.batch,
                    o.seq, o.cache_length));
  }
  if ((o.batch > 0) != (o.seq > 0) && o.cache_length == 0) {
    throw ValueError(fmt::format(
        "activations need both --batch and --seq, got --batch {} and --seq {}", o.batch, o.seq));
  }
  if (o.seq > 0 && o.batch > 0 && !o.optimizer) {
    throw ValueError(
        "activations of a training step need --optimizer (its gradients and slots "
        "are live with them)");
  }
  if ((o.seq > 0 || o.cache_length > 0) && !o.shapes) {
    throw ValueError(
        "activations and the key/value cache need the model's shapes: plan a Hugging Face model "
        "directory (config.json beside the weights)");
  }
  if (o.cache_length > 0 && o.batch < 1) {
    throw ValueError(fmt::format("the key/value cache of {} positions needs --batch (its rows)",
                                 o.cache_length));
  }
}

}  // namespace

namespace {

// Each device's key/value cache of `s` for `batch` rows of `length` positions, laid out as
// attention lays it out for generation's replicated tokens (attention_kv_layout of q's).
PerDevice plan_cache(const DecoderShapes& s, const LayoutMap& map, const DeviceMesh& mesh,
                     int64_t batch, int64_t length) {
  const size_t es = s.dtype_size;
  const int64_t d = s.hidden, HD = s.heads * s.head_dim;
  const auto kernel = [&](const std::string& path, int64_t heads) {
    const TensorLayout l = layout_of(map, path, 3, mesh);
    const auto& a = l.axes();
    const DimSharding& in = s.kernel_heads_first ? a[1] : a[0];
    const DimSharding& h = s.kernel_heads_first ? a[0] : a[1];
    return TensorLayout({in, merged(h, a[2], heads, mesh)}, mesh);
  };
  const auto layer_cache = [&](const TensorLayout& x) {
    const Projection q = project(x, batch, 1, d, kernel(s.query, s.heads), HD, es);
    const DimSharding heads = merged(q.out.axes()[2], DimSharding(), s.heads, mesh);
    const TensorLayout q4({q.out.axes()[0], None, heads, None}, mesh);
    const TensorLayout kv = attention_kv_layout(q4, s.heads, s.kv_heads);
    return 2 * shard_bytes(kv, {batch, length, s.kv_heads, s.head_dim}, es);
  };
  // Generation feeds replicated tokens; later blocks see the previous block's output layout.
  const TensorLayout x0 = TensorLayout::replicated(3, mesh);
  PerDevice out = layer_cache(x0);
  if (s.layers > 1) {
    const TensorLayout l = layout_of(map, s.output, 3, mesh);
    const TensorLayout out_k({merged(l.axes()[0], l.axes()[1], s.heads, mesh), l.axes()[2]}, mesh);
    const Projection q = project(x0, batch, 1, d, kernel(s.query, s.heads), HD, es);
    const Projection o = project(q.out, batch, 1, HD, out_k, d, es);
    const Projection g =
        project(o.out, batch, 1, d, layout_of(map, s.gate, 2, mesh), s.intermediate, es);
    const Projection down =
        project(g.out, batch, 1, s.intermediate, layout_of(map, s.down, 2, mesh), d, es);
    out += static_cast<uint64_t>(s.layers - 1) * layer_cache(down.out);
  }
  return out;
}

}  // namespace

MemoryPlan plan_memory(const CheckpointPlan& plan, const LayoutMap& map,
                       const MemoryPlanOptions& options) {
  check_options(options);
  const DeviceMesh& mesh = plan.mesh;
  const size_t n = static_cast<size_t>(mesh.size());
  MemoryPlan out{.options = options};
  out.devices.resize(n);
  for (size_t p = 0; p < n; ++p) out.devices[p].weights = plan.device_bytes[p];
  if (options.optimizer) {
    out.training = plan_training(plan, map, *options.optimizer);
    for (size_t p = 0; p < n; ++p) {
      out.devices[p].gradients = out.training->devices[p].gradients;
      out.devices[p].slots = out.training->devices[p].slots;
    }
  }
  PerDevice training(n);
  for (size_t p = 0; p < n; ++p) {
    const DeviceMemoryPlan& d = out.devices[p];
    training[p] = d.weights + d.gradients + d.slots;
  }
  if (options.batch > 0 && options.seq > 0) {
    const StepMemory step = replay_training_step(*options.shapes, map, mesh, options.batch,
                                                 options.seq, options.recompute);
    out.peak_phase = step.peak_phase;
    if (!step.experts_left_out.empty()) {
      out.notes.push_back(fmt::format(
          "the mixture-of-experts feed-forward of {} block(s) is not in the activations (router "
          "logits, dispatched and combined tokens: neither replayed for this family (Qwen 2 "
          "MoE's shared expert) nor given by a DecoderShapes::expert_activations hook)",
          step.experts_left_out.size()));
    }
    if (step.experts_worst_case) {
      out.notes.push_back(
          "the experts split the tokens' own mesh axes (all-to-all dispatch): each device is "
          "planned to receive every token of its group for its experts, the worst case of "
          "routing (uniform routing sends it about top_k / (expert blocks) of them)");
    } else if (!options.shapes->expert_blocks.empty()) {
      out.notes.push_back(
          "mixture of experts: the activations do not depend on the routing here (tokens and "
          "experts on different mesh axes; the experts' per-token intermediates are kernel "
          "scratch, not device memory)");
    }
    out.largest_reshard = step.largest_reshard_text;
    for (size_t p = 0; p < n; ++p) {
      DeviceMemoryPlan& d = out.devices[p];
      d.activations = step.peak[p] - step.gradients_at_peak[p];
      d.gradients_at_peak = step.gradients_at_peak[p];
      d.reshard_temp = step.largest_reshard[p];
      training[p] = std::max(training[p], d.weights + d.slots + step.peak[p]);
    }
  }
  if (options.cache_length > 0) {
    const PerDevice cache =
        plan_cache(*options.shapes, map, mesh, options.batch, options.cache_length);
    for (size_t p = 0; p < n; ++p) out.devices[p].cache = cache[p];
  }
  for (size_t p = 0; p < n; ++p) {
    DeviceMemoryPlan& d = out.devices[p];
    d.peak = std::max(training[p], d.weights + d.cache);
    d.fits = !options.device_memory || d.peak <= *options.device_memory;
  }
  return out;
}

std::string render_memory_text(const MemoryPlan& memory, const DeviceMesh& mesh) {
  const MemoryPlanOptions& o = memory.options;
  std::string out = "\nmemory per device";
  std::vector<std::string> what;
  if (o.batch > 0 && o.seq > 0) {
    what.push_back(fmt::format("training step of batch {} x seq {}, recompute {}", o.batch, o.seq,
                               recompute_name(o.recompute)));
  }
  if (o.cache_length > 0) {
    what.push_back(fmt::format("key/value cache of {} x {} positions", o.batch, o.cache_length));
  }
  if (o.device_memory)
    what.push_back(fmt::format("device memory {}", format_bytes(*o.device_memory)));
  out += what.empty() ? ":\n" : fmt::format(" ({}):\n", fmt::join(what, "; "));
  size_t width = 6;
  for (const std::string& d : mesh.devices()) width = std::max(width, d.size());
  const auto row = [&](std::string_view device, const std::array<std::string, 8>& c) {
    return fmt::format("  {:<{}}  {:>10}  {:>10}  {:>10}  {:>11}  {:>10}  {:>12}  {:>10}  {:>5}\n",
                       device, width, c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]);
  };
  out += row("device", {"weights", "grads", "slots", "activations", "cache", "reshard temp", "peak",
                        "fits?"});
  uint64_t most = 0;
  size_t most_at = 0, fitting = 0;
  for (size_t p = 0; p < memory.devices.size(); ++p) {
    const DeviceMemoryPlan& d = memory.devices[p];
    out += row(mesh.devices()[p],
               {format_bytes(d.weights), format_bytes(d.gradients), format_bytes(d.slots),
                format_bytes(d.activations), format_bytes(d.cache), format_bytes(d.reshard_temp),
                format_bytes(d.peak), o.device_memory ? (d.fits ? "yes" : "NO") : "-"});
    if (d.peak > most) most = d.peak, most_at = p;
    fitting += d.fits ? 1 : 0;
  }
  out += fmt::format("  the largest peak, {} ({} bytes), is on {}", format_bytes(most), most,
                     memory.devices.empty() ? std::string("-") : mesh.devices()[most_at]);
  if (!memory.peak_phase.empty())
    out += fmt::format(", activations peaking at the {}", memory.peak_phase);
  out += "\n";
  for (const std::string& note : memory.notes) out += fmt::format("  note: {}\n", note);
  if (!memory.largest_reshard.empty()) {
    out += fmt::format("  largest reshard of the step: {}\n", memory.largest_reshard);
  }
  if (o.device_memory) {
    out += fitting == memory.devices.size()
               ? fmt::format("  fits: every device's peak is within {}\n",
                             format_bytes(*o.device_memory))
               : fmt::format("  does NOT fit: {} of {} devices exceed {}\n",
                             memory.devices.size() - fitting, memory.devices.size(),
                             format_bytes(*o.device_memory));
  }
  if (o.batch > 0 && o.seq > 0) {
    out +=
        "  (peak: weights + slots + activations + the gradients made by then, or weights + "
        "cache; the reshard temp is a part of the activations)\n";
  }
  return out;
}

nlohmann::json memory_json(const MemoryPlan& memory, const DeviceMesh& mesh) {
  nlohmann::json devices = nlohmann::json::array();
  uint64_t most = 0;
  bool all_fit = true;
  for (size_t p = 0; p < memory.devices.size(); ++p) {
    const DeviceMemoryPlan& d = memory.devices[p];
    devices.push_back({{"device", mesh.devices()[p]},
                       {"weights", d.weights},
                       {"gradients", d.gradients},
                       {"slots", d.slots},
                       {"activations", d.activations},
                       {"cache", d.cache},
                       {"reshard_temp", d.reshard_temp},
                       {"gradients_at_peak", d.gradients_at_peak},
                       {"peak", d.peak},
                       {"fits", d.fits}});
    most = std::max(most, d.peak);
    all_fit = all_fit && d.fits;
  }
  const MemoryPlanOptions& o = memory.options;
  return {{"batch", o.batch},
          {"seq", o.seq},
          {"cache_length", o.cache_length},
          {"recompute", recompute_name(o.recompute)},
          {"device_memory", o.device_memory ? nlohmann::json(*o.device_memory) : nullptr},
          {"peak_phase", memory.peak_phase},
          {"largest_reshard", memory.largest_reshard},
          {"notes", memory.notes},
          {"devices", devices},
          {"max_peak", most},
          {"all_fit", all_fit}};
}

}  // namespace meshlayout
