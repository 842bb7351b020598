// hf_llama_checkpoint.h — Hugging Face Llama checkpoints (config.json + model.safetensors, or
// a sharded model.safetensors.index.json) loaded into, and saved from, the keras-hub
// LlamaBackbone variables (`token_embedding/embeddings`, `transformer_layer_0/self_attention/
// query/kernel`, …), as distributed Arrays of any layout.
//
// hf_llama_weight_mappings() says how each HF tensor becomes a keras-hub variable: reshape
// (free, row-major) to a view, then transpose. load_hf_llama reads, for every local shard,
// exactly the bytes of its box (mapped back through the transpose into the file's
// coordinates), one piece at a time per device, converts BF16/F16 to F32 and transposes into
// the shard; replicas in one process are read once.
//
// Example:
//   HfLlamaCheckpoint ckpt = HfLlamaCheckpoint::open("llama-dir");   // validated, no data read
//   Array q = Array::allocate(TensorLayout({"model", "batch", None}, mesh),
//                             ckpt.find("transformer_layer_0/self_attention/query/kernel")
//                                 ->keras_shape, DType::kF32);
//   HfLoadReport r = load_hf_llama(ckpt, {{"transformer_layer_0/self_attention/query/kernel",
//   &q}});
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "meshlayout/array/array.h"
#include "meshlayout/io/safetensors_file.h"
#include "meshlayout/models/hf_llama_config.h"

namespace meshlayout {

/// The HF tensor `hf_name` of shape `hf_shape`, reshaped (row-major, no data movement) to
/// `view_shape`, then transposed by `perm` (keras dim i = view dim perm[i]), is the keras-hub
/// variable `keras_path` of shape `keras_shape`.
struct HfWeightMapping {
  std::string keras_path;
  std::string hf_name;
  Shape hf_shape;
  Shape view_shape;
  std::vector<int> perm;
  Shape keras_shape;
  /// The config fields hf_shape comes from, for messages: "(num_attention_heads*head_dim,
  /// hidden_size)".
  std::string hf_shape_fields;
  /// A stacked variable (a mixture of experts' (E, d, F) kernels): this HF tensor is slice
  /// stack_index of its first dimension (keras_shape is the slice's, 1 × …), and stacked_shape
  /// the whole variable's. -1: the mapping is the whole variable.
  int64_t stack_index = -1;
  Shape stacked_shape;
  /// The keras variable's shape: keras_shape, or stacked_shape for a slice.
  const Shape& variable_shape() const { return stack_index < 0 ? keras_shape : stacked_shape; }
};

/// Every weight of a LlamaForCausalLM of `config`, in HF order (embeddings, layer by layer,
/// final norm, lm_head when not tied). A mixture of experts' expert e is one mapping per HF
/// tensor into slice e of the stacked variable (stack_index). Validates `config` first.
std::vector<HfWeightMapping> hf_llama_weight_mappings(const LlamaConfig& config);

/// A Hugging Face Llama checkpoint directory, opened and checked against its config.json.
class HfLlamaCheckpoint {
 public:
  /// Reads `dir`/config.json and the safetensors header(s) (Checkpoint::open), and checks,
  /// before any tensor data is read: every mapped tensor is present (NotFoundError listing the
  /// missing names); no tensor is unexpected (ValueError listing them; `*.rotary_emb.inv_freq`
  /// buffers, and `lm_head.weight` of a tied model, are ignored); every shape is the one
  /// config.json implies (ValueError naming the tensor, both shapes and the config fields);
  /// every dtype is F32, BF16 or F16 (ValueError naming the tensor and dtype).
  /// NotFoundError naming the path when config.json is missing.
  static HfLlamaCheckpoint open(const std::string& dir);

  const std::string& path() const { return path_; }
  const LlamaConfig& config() const { return config_; }
  const Checkpoint& checkpoint() const { return checkpoint_; }
  const std::vector<HfWeightMapping>& mappings() const { return mappings_; }
  /// The mapping of keras variable `keras_path` (a stacked variable's first slice), or nullptr.
  const HfWeightMapping* find(std::string_view keras_path) const;
  /// The indices (into mappings()) of every mapping of `keras_path`: one, or a stacked
  /// variable's slices in order; empty when it is not a variable.
  std::vector<size_t> find_all(std::string_view keras_path) const;
  /// File tensors that are not loaded, each with the reason: "lm_head.weight (tied …)".
  const std::vector<std::string>& ignored_tensors() const { return ignored_; }

  /// The file holding mapping `index`'s tensor, and its header entry with the view shape (the
  /// same bytes, seen as view_shape).
  const SafetensorsFile& file(size_t index) const { return *files_[index]; }
  const TensorInfo& view_info(size_t index) const { return views_[index]; }

 private:
  HfLlamaCheckpoint(std::string path, LlamaConfig config, Checkpoint checkpoint)
      : path_(std::move(path)), config_(std::move(config)), checkpoint_(std::move(checkpoint)) {}
  std::string path_;
  LlamaConfig config_;
  Checkpoint checkpoint_;
  std::vector<HfWeightMapping> mappings_;
  std::vector<const SafetensorsFile*> files_;
  std::vector<TensorInfo> views_;
  std::vector<std::string> ignored_;
};

/// The model's variables as header entries: Keras paths and shapes, F32 as LlamaModel holds
/// them (data offsets back to back). What plans match rules against, as generate and train do.
std::vector<TensorInfo> keras_variable_infos(const HfLlamaCheckpoint& checkpoint);

struct HfLoadOptions {
  /// Staging a device holds at once for tensors that are transposed or converted: a box
  /// larger than this is read in pieces (split along its outer dimensions).
  uint64_t max_piece_bytes = uint64_t{64} << 20;
  /// A NaN or infinite weight is a ValueError naming the tensor and the element (checked on
  /// the loaded shards; agreed across processes).
  bool refuse_non_finite = true;
};

struct HfLoadReport {
  int64_t tensors_loaded = 0;    // targets filled
  uint64_t bytes_read = 0;       // tensor bytes this process read from the files
  uint64_t box_bytes = 0;        // bytes of this process's distinct boxes, in the files' dtypes
  uint64_t max_piece_bytes = 0;  // the largest staging piece (0: all read directly)
  std::vector<std::string> ignored_tensors;  // as HfLlamaCheckpoint::ignored_tensors()
};

/// Fills `targets` (keras path → allocated F32 Array of the mapping's keras_shape, any layout
/// and mesh, all on one runtime) from `checkpoint`; targets may be any subset of the
/// variables. Collective over the arrays' runtime (every process passes the same paths).
/// ValueError naming a path that is not a variable of this config (with an example of the
/// valid ones), or a wrong shape or dtype, before anything is read. Each process reads only
/// its devices' boxes; a read failure in any process is thrown by all.
HfLoadReport load_hf_llama(const HfLlamaCheckpoint& checkpoint,
                           const std::map<std::string, Array*>& targets,
                           const HfLoadOptions& options = {});

/// Writes `dir`/config.json and the weights in HF naming, shapes and `file_dtype` (F32, BF16
/// or F16; rounding to nearest even): one model.safetensors when `num_shards` is 1, else up to
/// `num_shards` files model-0000k-of-0000n.safetensors (split by bytes, in HF order) and
/// model.safetensors.index.json ({"metadata": {"total_size": N}, "weight_map": {…}}). A stale
/// entry file of the other form in `dir` is removed, so Checkpoint::open(dir) finds this one.
/// `by_keras_path` must hold every variable of `config` (floating Arrays of keras_shape);
/// ValueError naming the missing, unknown or mis-shaped path otherwise.
/// A tool for small (demo, test) models: every tensor is gathered whole into every process
/// and process 0 writes the files (each atomically) while the others wait. Collective.
void save_hf_llama(const std::string& dir, const LlamaConfig& config,
                   const std::map<std::string, const Array*>& by_keras_path,
                   DType file_dtype = DType::kF32, int num_shards = 1);

}  // namespace meshlayout
