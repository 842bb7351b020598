// HfLlamaCheckpoint::open and load_hf_llama (the weight mapping is in hf_llama_mapping.cc,
// save_hf_llama in hf_llama_save.cc).
#include "meshlayout/models/hf_llama_checkpoint.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <exception>
#include <filesystem>
#include <set>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/kernels/device_kind.h"
#include "meshlayout/kernels/hf_checkpoint.h"
#include "meshlayout/layout/box_ops.h"
#include "meshlayout/models/hf_permute.h"

namespace meshlayout {
namespace hf_internal {

std::vector<int64_t> row_major_strides(const Shape& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (size_t d = shape.size(); d > 1; --d) strides[d - 2] = strides[d - 1] * shape[d - 1];
  return strides;
}

void permute_to_f32(const std::byte* src, DType src_dtype, const Shape& src_shape,
                    std::span<const int> perm, float* dst, std::span<const int64_t> dst_strides) {
  permute_to_f32_host(src, src_dtype, src_shape, perm, dst, dst_strides);
}

}  // namespace hf_internal

namespace {

// At most 10 names, then how many more.
std::string list_names(const std::vector<std::string>& names) {
  std::vector<std::string> shown;
  for (size_t i = 0; i < names.size() && i < 10; ++i) shown.push_back(quote(names[i]));
  std::string text = join(shown, ", ");
  if (names.size() > 10) text += fmt::format(" and {} more", names.size() - 10);
  return text;
}

bool is_identity(const std::vector<int>& perm) {
  for (size_t i = 0; i < perm.size(); ++i) {
    if (perm[i] != static_cast<int>(i)) return false;
  }
  return true;
}

// config.json's num_hidden_layers sizes the mapping list (9 records a layer) and the model;
// a value the checkpoint cannot back ("num_hidden_layers": 1000000000) must be refused before
// anything is built from it, not after growing to all memory.
void check_layer_count(const LlamaConfig& config, const Checkpoint& ckpt, const std::string& dir) {
  std::set<int64_t> layers;
  constexpr std::string_view kPrefix = "model.layers.";
  for (const auto& [file, info] : ckpt.tensors()) {
    const std::string_view name = info->name;
    if (!name.starts_with(kPrefix)) continue;
    int64_t index = 0;
    const char* begin = name.data() + kPrefix.size();
    const auto [end, ec] = std::from_chars(begin, name.data() + name.size(), index);
    if (ec == std::errc() && end != begin && *end == '.') layers.insert(index);
  }
  if (config.num_hidden_layers > static_cast<int64_t>(layers.size())) {
    throw ValueError(fmt::format(
        "config.json of Llama checkpoint {} says num_hidden_layers = {}, but the checkpoint holds "
        "the tensors of {} layer(s){}: config.json and the weights disagree",
        quote(dir), config.num_hidden_layers, layers.size(),
        layers.empty() ? std::string()
                       : fmt::format(" (model.layers.{} to model.layers.{})", *layers.begin(),
                                     *layers.rbegin())));
  }
}

// A NaN or infinite weight makes every logit NaN: generation then printed token 0 forever and
// exited 0. Each process checks the shards it loaded (in parallel; one pass over memory it
// just wrote) and names the first bad tensor and element; load_hf_llama agrees the failure.
void refuse_non_finite_weights(const HfLlamaCheckpoint& checkpoint,
                               const std::vector<std::pair<size_t, Array*>>& work,
                               ThreadPool& pool) {
  struct Check {
    size_t mapping;
    const Array* array;
    const Array::Shard* shard;
  };
  std::vector<Check> checks;
  std::set<const Array*> seen;  // a stacked variable is checked once
  for (const auto& [mapping, array] : work) {
    if (!seen.insert(array).second) continue;
    for (const Array::Shard& shard : array->local_shards())
      checks.push_back({mapping, array, &shard});
  }
  std::vector<int64_t> first_bad(checks.size(), -1);
  std::vector<float> bad_value(checks.size());
  pool.parallel_for(checks.size(), [&](size_t i) {
    find_non_finite(kind_of(*checks[i].array),
                    {.shard = checks[i].shard, .first = &first_bad[i], .value = &bad_value[i]});
  });
  for (size_t i = 0; i < checks.size(); ++i) {
    if (first_bad[i] < 0) continue;
    const HfWeightMapping& m = checkpoint.mappings()[checks[i].mapping];
    const Box& box = checks[i].shard->box;
    // The element's index in the Keras variable.
    std::vector<int64_t> index(box.shape.size());
    int64_t rest = first_bad[i];
    for (size_t d = box.shape.size(); d-- > 0;) {
      index[d] = box.offset[d] + rest % box.shape[d];
      rest /= box.shape[d];
    }
    const float value = bad_value[i];
    throw ValueError(fmt::format(
        "tensor {} in Llama checkpoint {} holds a non-finite value ({} at index {} of {}): a model "
        "with "
        "NaN or infinite weights computes only NaN; the checkpoint is corrupt or was saved from a "
        "diverged run",
        quote(m.hf_name), quote(checkpoint.path()), value, repr_ints(index), quote(m.keras_path)));
  }
}

}  // namespace

const HfWeightMapping* HfLlamaCheckpoint::find(std::string_view keras_path) const {
  for (const HfWeightMapping& m : mappings_) {
    if (m.keras_path == keras_path) return &m;
  }
  return nullptr;
}

std::vector<size_t> HfLlamaCheckpoint::find_all(std::string_view keras_path) const {
  std::vector<size_t> out;
  for (size_t i = 0; i < mappings_.size(); ++i) {
    if (mappings_[i].keras_path == keras_path) out.push_back(i);
  }
  return out;
}

HfLlamaCheckpoint HfLlamaCheckpoint::open(const std::string& dir) {
  LlamaConfig config =
      LlamaConfig::from_file((std::filesystem::path(dir) / "config.json").string());
  HfLlamaCheckpoint h(dir, config, Checkpoint::open(dir));
  check_layer_count(config, h.checkpoint_, dir);
  h.mappings_ = hf_llama_weight_mappings(config);
  const Checkpoint& ckpt = h.checkpoint_;

  std::vector<std::string> missing;
  std::set<std::string_view> expected;
  for (const HfWeightMapping& m : h.mappings_) {
    expected.insert(m.hf_name);
    if (ckpt.find(m.hf_name).second == nullptr) missing.push_back(m.hf_name);
  }
  if (!missing.empty()) {
    throw NotFoundError(
        fmt::format("Llama checkpoint {} lacks {} of the {} tensors its config.json implies: {}",
                    quote(dir), missing.size(), h.mappings_.size(), list_names(missing)));
  }
  std::vector<std::string> unexpected;
  for (const auto& [file, info] : ckpt.tensors()) {
    if (expected.contains(info->name)) continue;
    if (info->name.ends_with("rotary_emb.inv_freq")) {
      h.ignored_.push_back(info->name + " (a RoPE buffer; recomputed from rope_theta)");
    } else if (info->name == "lm_head.weight" && config.tie_word_embeddings) {
      h.ignored_.push_back(info->name +
                           " (tie_word_embeddings is true: the output projection "
                           "is token_embedding/embeddings transposed)");
    } else {
      unexpected.push_back(info->name);
    }
  }
  if (!unexpected.empty()) {
    throw ValueError(fmt::format(
        "Llama checkpoint {} holds {} tensor(s) a LlamaForCausalLM of its config.json does not "
        "have: {} (expected model.embed_tokens.weight, model.layers.{{0..{}}}.*, model.norm."
        "weight{})",
        quote(dir), unexpected.size(), list_names(unexpected), config.num_hidden_layers - 1,
        config.tie_word_embeddings ? "" : ", lm_head.weight"));
  }
  for (const HfWeightMapping& m : h.mappings_) {
    const auto [file, info] = ckpt.find(m.hf_name);
    if (info->shape != m.hf_shape) {
      throw ValueError(fmt::format(
          "tensor {} in Llama checkpoint {} has shape {}, but config.json implies {}: {}",
          quote(m.hf_name), quote(dir), shape_to_string(info->shape), shape_to_string(m.hf_shape),
          m.hf_shape_fields));
    }
    if (!info->dtype || !(*info->dtype == DType::kF32 || *info->dtype == DType::kBF16 ||
                          *info->dtype == DType::kF16)) {
      throw ValueError(
          fmt::format("tensor {} in Llama checkpoint {} has dtype {}, expected "
                      "F32, BF16 or F16",
                      quote(m.hf_name), quote(dir), info->dtype_name));
    }
    TensorInfo view = *info;
    view.shape = m.view_shape;  // the same bytes, row-major: a free reshape
    h.files_.push_back(file);
    h.views_.push_back(std::move(view));
  }
  return h;
}

std::vector<TensorInfo> keras_variable_infos(const HfLlamaCheckpoint& checkpoint) {
  std::vector<TensorInfo> infos;
  uint64_t offset = 0;
  for (const HfWeightMapping& m : checkpoint.mappings()) {
    if (m.stack_index > 0) continue;  // a stacked variable once, whole
    TensorInfo t;
    t.name = m.keras_path;
    t.dtype_name = "F32";
    t.dtype = DType::kF32;
    t.element_size = 4;
    t.shape = m.variable_shape();
    t.begin = offset;
    t.end = offset + static_cast<uint64_t>(num_elements(t.shape)) * 4;
    offset = t.end;
    infos.push_back(std::move(t));
  }
  return infos;
}

HfLoadReport load_hf_llama(const HfLlamaCheckpoint& checkpoint,
                           const std::map<std::string, Array*>& targets,
                           const HfLoadOptions& options) {
  HfLoadReport report;
  report.ignored_tensors = checkpoint.ignored_tensors();
  if (targets.empty()) return report;

  // Checks on replicated metadata: every process reaches the same verdict.
  std::shared_ptr<Runtime> runtime;
  std::vector<std::pair<size_t, Array*>> work;  // mapping index, target
  for (const auto& [path, array] : targets) {
    const std::vector<size_t> indices = checkpoint.find_all(path);
    const HfWeightMapping* m = indices.empty() ? nullptr : &checkpoint.mappings()[indices[0]];
    if (m == nullptr) {
      throw ValueError(fmt::format(
          "{} is not a variable of this Llama ({} layers, {}tied embeddings); variables are "
          "named like 'token_embedding/embeddings', 'transformer_layer_0/self_attention/query/"
          "kernel', 'sequence_output_layernorm/scale'",
          quote(path), checkpoint.config().num_hidden_layers,
          checkpoint.config().tie_word_embeddings ? "" : "un"));
    }
    if (array == nullptr) throw ValueError(fmt::format("the target of {} is null", quote(path)));
    if (array->shape() != m->variable_shape() || array->dtype() != DType::kF32) {
      throw ValueError(fmt::format("the target of {} is {} {}, expected F32 {} (from {} {} {})",
                                   quote(path), dtype_name(array->dtype()),
                                   shape_to_string(array->shape()),
                                   shape_to_string(m->variable_shape()), quote(m->hf_name),
                                   shape_to_string(m->hf_shape), m->hf_shape_fields));
    }
    if (runtime && array->runtime_ptr() != runtime) {
      throw ValueError(
          "the targets of load_hf_llama live on different runtimes; one call "
          "handles the arrays of one runtime");
    }
    runtime = array->runtime_ptr();
    for (size_t index : indices) work.emplace_back(index, array);
  }
  report.tensors_loaded = static_cast<int64_t>(work.size());

  // One piece per distinct local box (split when it needs more staging than allowed); local
  // replicas of a box are copied from the shard that reads it.
  struct Piece {
    size_t mapping;
    Array::Shard* shard;
    Box keras_box;           // inside shard->box
    Box view_box;            // the same region in the file's (view) coordinates
    uint64_t staging_bytes;  // 0: read straight into the shard
    std::byte* target;       // the shard's own bytes when read straight into it
    DeviceKind kind;
  };
  struct Copy {
    const Array::Shard* from;
    Array::Shard* to;
    DeviceKind kind;
  };
  std::vector<Piece> pieces;
  std::vector<Copy> copies;
  std::set<std::pair<const Array::Shard*, Array::Shard*>> copied;  // a stacked variable's once
  std::map<int64_t, std::vector<size_t>> by_device;  // device id → its pieces, in order
  for (const auto& [index, array] : work) {
    const HfWeightMapping& m = checkpoint.mappings()[index];
    const TensorInfo& view = checkpoint.view_info(index);
    const bool same_layout = is_identity(m.perm) && *view.dtype == DType::kF32;
    const DeviceKind kind = kind_of(*array);
    const int64_t max_elements =
        std::max<int64_t>(1, static_cast<int64_t>(options.max_piece_bytes / view.element_size));
    std::vector<const Array::Shard*> readers;
    for (Array::Shard& shard : array->local_shards()) {
      if (shard.box.empty()) continue;
      auto same = std::find_if(readers.begin(), readers.end(),
                               [&](const Array::Shard* r) { return r->box == shard.box; });
      if (same != readers.end()) {
        if (copied.emplace(*same, &shard).second) copies.push_back({*same, &shard, kind});
        continue;
      }
      readers.push_back(&shard);
      // A stacked variable's slice: the part of the shard in slice stack_index.
      Box region = shard.box;
      if (m.stack_index >= 0) {
        const int64_t lo = std::max(region.offset[0], m.stack_index);
        const int64_t hi = std::min(region.offset[0] + region.shape[0], m.stack_index + 1);
        if (hi <= lo) continue;
        region.offset[0] = lo;
        region.shape[0] = hi - lo;
      }
      // Read straight into the shard where its memory is host-addressable (CPU).
      std::byte* target = nullptr;
      if (same_layout && m.stack_index < 0) {
        shard_host_bytes(kind, {.shard = &shard, .bytes = &target});
      }
      const bool direct = target != nullptr;
      report.box_bytes += static_cast<uint64_t>(region.num_elements()) * view.element_size;
      std::vector<Box> parts = direct ? std::vector<Box>{region} : split_box(region, max_elements);
      for (Box& part : parts) {
        // In the mapping's own (slice) coordinates, then the file's.
        const int64_t first = m.stack_index < 0 ? 0 : m.stack_index;
        Box view_box{Shape(part.shape.size()), Shape(part.shape.size())};
        for (size_t i = 0; i < m.perm.size(); ++i) {
          view_box.offset[static_cast<size_t>(m.perm[i])] = part.offset[i] - (i == 0 ? first : 0);
          view_box.shape[static_cast<size_t>(m.perm[i])] = part.shape[i];
        }
        const uint64_t staging =
            direct ? 0 : static_cast<uint64_t>(part.num_elements()) * view.element_size;
        report.max_piece_bytes = std::max(report.max_piece_bytes, staging);
        by_device[shard.device_id].push_back(pieces.size());
        pieces.push_back(
            Piece{index, &shard, std::move(part), std::move(view_box), staging, target, kind});
      }
    }
  }

  // Rounds: each device takes its next pieces up to max_piece_bytes of staging (at least one);
  // the round's reads run as one batch over the pool, then the staged pieces are converted and
  // transposed into their shards in parallel, and their staging is freed.
  std::exception_ptr error;
  try {
    ThreadPool& pool = runtime->pool();
    std::map<int64_t, size_t> next;  // device id → its first piece not yet read
    while (true) {
      std::vector<size_t> round;
      for (const auto& [device, list] : by_device) {
        size_t& k = next[device];
        uint64_t staged = 0;
        for (; k < list.size(); ++k) {
          const uint64_t bytes = pieces[list[k]].staging_bytes;
          if (staged > 0 && staged + bytes > options.max_piece_bytes) break;
          staged += bytes;
          round.push_back(list[k]);
        }
      }
      if (round.empty()) break;
      ReadBatch batch;
      std::vector<DeviceBuffer> staging(round.size());
      for (size_t r = 0; r < round.size(); ++r) {
        const Piece& p = pieces[round[r]];
        std::byte* dst = p.target;
        if (p.staging_bytes > 0) {
          // Files are read into host memory: a CPU device's own account, the runtime's host
          // staging account for a device the host cannot address (a GPU's shard is filled
          // from it by hf_permute_into_shard).
          MemoryAccount& account = p.kind == DeviceKind::kCpu
                                       ? runtime->device(p.shard->device_id).memory()
                                       : runtime->staging();
          staging[r] = DeviceBuffer(account, static_cast<size_t>(p.staging_bytes));
          dst = staging[r].data();
        }
        batch.add(checkpoint.file(p.mapping), checkpoint.view_info(p.mapping), p.view_box, dst);
      }
      report.bytes_read += batch.bytes();
      batch.run({.pool = &pool});
      pool.parallel_for(round.size(), [&](size_t r) {
        const Piece& p = pieces[round[r]];
        if (p.staging_bytes == 0) return;
        hf_permute_into_shard(p.kind, {.staging = staging[r].data(),
                                       .src_dtype = *checkpoint.view_info(p.mapping).dtype,
                                       .view_shape = &p.view_box.shape,
                                       .perm = checkpoint.mappings()[p.mapping].perm,
                                       .dst = p.shard,
                                       .region = &p.keras_box});
        staging[r] = DeviceBuffer();
      });
    }
    pool.parallel_for(copies.size(), [&](size_t i) {
      copy_replica_shard(copies[i].kind, {.dst = copies[i].to, .src = copies[i].from});
    });
    if (options.refuse_non_finite) refuse_non_finite_weights(checkpoint, work, pool);
  } catch (...) {
    error = std::current_exception();
  }
  agree_on_failure(runtime->comm(), error);  // every process throws the first failure, or none
  return report;
}

}  // namespace meshlayout
