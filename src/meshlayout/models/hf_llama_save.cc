// save_hf_llama (declared in hf_llama_checkpoint.h): keras-hub variables → a Hugging Face
// Llama checkpoint directory. Every tensor is gathered; process 0 transposes it back to the HF
// shape and writes the files, each atomically (save_arrays for the safetensors files, a
// temporary file and rename for the JSON ones).
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/io/array_io.h"
#include "meshlayout/io/save_target.h"
#include "meshlayout/models/hf_llama_checkpoint.h"
#include "meshlayout/models/hf_permute.h"

namespace meshlayout {
namespace {

namespace fs = std::filesystem;

// Writes `text` to `path` through a temporary file in the same directory and a rename.
void write_text_atomically(const fs::path& path, const std::string& text) {
  const std::string tmp = temporary_save_name(path, make_save_token());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw Error(fmt::format("creating {} failed: {}", quote(tmp), std::strerror(errno)));
  }
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw Error(fmt::format("writing {} failed: {}", quote(tmp), std::strerror(err)));
    }
    done += static_cast<size_t>(n);
  }
  const bool synced = ::fdatasync(fd) == 0;
  const int err = errno;
  if (::close(fd) != 0 || !synced || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const int why = synced ? errno : err;
    ::unlink(tmp.c_str());
    throw Error(fmt::format("writing {} failed: {}", quote(path.string()), std::strerror(why)));
  }
}

// Slice `index` of a stacked variable's first dimension, (1, …).
HostTensor stack_slice(const HostTensor& whole, int64_t index) {
  Shape shape = whole.shape();
  const size_t bytes = whole.num_bytes() / static_cast<size_t>(shape[0]);
  shape[0] = 1;
  HostTensor out(whole.dtype(), shape);
  std::memcpy(out.data(), whole.data() + static_cast<size_t>(index) * bytes, bytes);
  return out;
}

// The HF tensor of mapping `m` in `file_dtype`, from the whole keras variable (a slice's).
HostTensor to_hf_tensor(const HostTensor& keras, const HfWeightMapping& m, DType file_dtype) {
  const HostTensor* source = &keras;
  HostTensor narrowed;  // F64 variables: rounded to F32 first
  if (keras.dtype() == DType::kF64) {
    narrowed = HostTensor(DType::kF32, keras.shape());
    convert_floats(keras.data(), DType::kF64, narrowed.data(), DType::kF32,
                   static_cast<size_t>(keras.num_elements()));
    source = &narrowed;
  }
  // keras dim i = view dim perm[i], so view dim j = keras dim inverse[j].
  std::vector<int> inverse(m.perm.size());
  for (size_t i = 0; i < m.perm.size(); ++i)
    inverse[static_cast<size_t>(m.perm[i])] = static_cast<int>(i);
  HostTensor view(DType::kF32, m.view_shape);
  hf_internal::permute_to_f32(source->data(), source->dtype(), m.keras_shape, inverse,
                              view.data_as<float>(), hf_internal::row_major_strides(m.view_shape));
  HostTensor out(file_dtype, m.hf_shape);
  convert_floats(view.data(), DType::kF32, out.data(), file_dtype,
                 static_cast<size_t>(view.num_elements()));
  return out;
}

// Process 0's part: the safetensors file(s), the index when sharded, config.json.
void write_checkpoint(const fs::path& dir, const LlamaConfig& config,
                      const std::vector<HfWeightMapping>& mappings,
                      const std::vector<HostTensor>& tensors, int num_shards) {
  fs::create_directories(dir);
  // Consecutive tensors (HF order) per file, split by bytes; empty files are dropped.
  uint64_t total = 0;
  for (const HostTensor& t : tensors) total += t.num_bytes();
  std::vector<int> shard_of(tensors.size());
  std::set<int> used;
  uint64_t before = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const uint64_t slot = total == 0 ? 0 : before * static_cast<uint64_t>(num_shards) / total;
    shard_of[i] = static_cast<int>(std::min<uint64_t>(slot, static_cast<uint64_t>(num_shards - 1)));
    used.insert(shard_of[i]);
    before += tensors[i].num_bytes();
  }
  const int files = static_cast<int>(used.size());
  std::map<int, int> renumber;
  for (int s : used) renumber.emplace(s, static_cast<int>(renumber.size()));

  // One device of a private runtime holds the tensors save_arrays writes.
  auto local = Runtime::single_process(1);
  DeviceMesh mesh({1}, {"file"}, std::vector<std::string>{"cpu:0"});
  nlohmann::json weight_map = nlohmann::json::object();
  for (int f = 0; f < files; ++f) {
    const std::string name = num_shards == 1
                                 ? std::string("model.safetensors")
                                 : fmt::format("model-{:05d}-of-{:05d}.safetensors", f + 1, files);
    std::vector<Array> arrays;
    std::vector<NamedArray> named;
    arrays.reserve(tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (renumber.at(shard_of[i]) != f) continue;
      const TensorLayout replicated(std::vector<DimSharding>(tensors[i].shape().size(), None),
                                    mesh);
      arrays.push_back(distribute_tensor(tensors[i], replicated, {.runtime = local}));
      named.push_back(NamedArray{mappings[i].hf_name, &arrays.back()});
      weight_map[mappings[i].hf_name] = name;
    }
    save_arrays((dir / name).string(), named, {.metadata = {{"format", "pt"}}});
  }
  const fs::path index = dir / "model.safetensors.index.json";
  const fs::path single = dir / "model.safetensors";
  if (num_shards > 1) {
    nlohmann::ordered_json j;
    j["metadata"] = {{"total_size", total}};
    j["weight_map"] = weight_map;  // sorted by tensor name, as transformers writes it
    write_text_atomically(index, j.dump(2) + "\n");
  }
  write_text_atomically(dir / "config.json", config.to_json());
  // Checkpoint::open(dir) prefers the index: a stale entry file of the other form goes.
  std::error_code ignored;
  fs::remove(num_shards > 1 ? single : index, ignored);
}

}  // namespace

void save_hf_llama(const std::string& dir, const LlamaConfig& config,
                   const std::map<std::string, const Array*>& by_keras_path, DType file_dtype,
                   int num_shards) {
  const std::vector<HfWeightMapping> mappings = hf_llama_weight_mappings(config);
  if (file_dtype != DType::kF32 && file_dtype != DType::kBF16 && file_dtype != DType::kF16) {
    throw ValueError(
        fmt::format("save_hf_llama writes F32, BF16 or F16, not {}", dtype_name(file_dtype)));
  }
  if (num_shards < 1) {
    throw ValueError(fmt::format("num_shards is {}, expected at least 1", num_shards));
  }
  std::set<std::string> known;
  std::vector<std::string> missing;
  for (const HfWeightMapping& m : mappings) {
    if (!known.insert(m.keras_path).second) continue;  // a stacked variable's later slices
    if (!by_keras_path.contains(m.keras_path)) missing.push_back(quote(m.keras_path));
  }
  for (const auto& [path, array] : by_keras_path) {
    if (!known.contains(path)) {
      throw ValueError(fmt::format(
          "{} is not a variable of this Llama ({} layers, {}tied "
          "embeddings)",
          quote(path), config.num_hidden_layers, config.tie_word_embeddings ? "" : "un"));
    }
  }
  if (!missing.empty()) {
    throw ValueError(fmt::format("save_hf_llama needs every variable of the model; missing {}",
                                 join(missing, ", ")));
  }
  std::shared_ptr<Runtime> runtime;
  for (const HfWeightMapping& m : mappings) {
    const Array* a = by_keras_path.at(m.keras_path);
    if (a == nullptr || a->shape() != m.variable_shape() || !is_floating(a->dtype())) {
      throw ValueError(fmt::format(
          "variable {} is {}, expected a floating array of shape {}", quote(m.keras_path),
          a == nullptr ? std::string("null")
                       : fmt::format("{} {}", dtype_name(a->dtype()), shape_to_string(a->shape())),
          shape_to_string(m.variable_shape())));
    }
    if (runtime && a->runtime_ptr() != runtime) {
      throw ValueError("the variables given to save_hf_llama live on different runtimes");
    }
    runtime = a->runtime_ptr();
  }

  const bool writer = runtime->comm().rank() == 0;
  std::vector<HostTensor> tensors(mappings.size());
  std::exception_ptr error;
  HostTensor whole;
  // The stacked variables (experts' kernels) whose slices are interleaved with one another's
  // (expert e's gate, up and down, then e + 1's), each gathered once at its first slice
  // (collective) and kept until its last.
  std::map<std::string, HostTensor> stacked;
  for (size_t i = 0; i < mappings.size(); ++i) {
    const HfWeightMapping& m = mappings[i];
    if (m.stack_index < 0) whole = by_keras_path.at(m.keras_path)->gather();
    if (m.stack_index == 0) stacked[m.keras_path] = by_keras_path.at(m.keras_path)->gather();
    const HostTensor* source = m.stack_index < 0 ? &whole : &stacked.at(m.keras_path);
    HostTensor slice;
    if (m.stack_index >= 0) {
      slice = stack_slice(*source, m.stack_index);
      if (m.stack_index + 1 == m.stacked_shape[0]) stacked.erase(m.keras_path);
      source = &slice;
    }
    if (!writer || error) continue;
    try {
      tensors[i] = to_hf_tensor(*source, m, file_dtype);
    } catch (...) {
      error = std::current_exception();
    }
  }
  if (writer && !error) {
    try {
      write_checkpoint(dir, config, mappings, tensors, num_shards);
    } catch (...) {
      error = std::current_exception();
    }
  }
  agree_on_failure(runtime->comm(), error);  // the others wait here for process 0's files
}

}  // namespace meshlayout
