#include "meshlayout/models/random_llama.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <map>

#include "meshlayout/core/errors.h"
#include "meshlayout/io/array_io.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/models/hf_llama_checkpoint.h"
#include "meshlayout/models/llama.h"

namespace meshlayout {

void write_random_hf_llama(const std::string& dir, const LlamaConfig& config,
                           const RandomLlamaOptions& options) {
  if (!std::isfinite(options.kernel_scale)) {
    throw ValueError(fmt::format("write_random_hf_llama: kernel_scale must be finite, got {}",
                                 options.kernel_scale));
  }
  const DeviceMesh one({1}, {"model"}, std::vector<std::string>{list_devices()[0]});
  LlamaModel model(config, LayoutMap(one));
  std::map<std::string, Array> scaled;
  for (const auto& [path, array] : model.variables_by_path()) {
    HostTensor t = array->gather();
    if (path.ends_with("/bias")) {  // biases start at zero: draw them, so that they matter
      uint64_t seed = 1469598103934665603ull;  // FNV-1a of the path: the same on every run
      for (const char c : path) seed = (seed ^ static_cast<unsigned char>(c)) * 1099511628211ull;
      t = HostTensor::random(DType::kF32, t.shape(), seed);
      float* p = t.data_as<float>();
      for (int64_t i = 0; i < t.num_elements(); ++i) p[i] *= 0.5f;
    }
    if (path.find("/scale") == std::string::npos && options.kernel_scale != 1) {
      float* p = t.data_as<float>();
      for (int64_t i = 0; i < t.num_elements(); ++i) p[i] *= options.kernel_scale;
    }
    scaled.emplace(path, distribute_tensor(
                             t, TensorLayout::replicated(static_cast<int>(t.shape().size()), one)));
  }
  std::map<std::string, const Array*> arrays;
  for (const auto& [path, array] : scaled) arrays.emplace(path, &array);
  std::filesystem::create_directories(dir);
  save_hf_llama(dir, model.config(), arrays, options.file_dtype, options.num_shards);
}

HostTensor random_token_rows(int64_t rows, int64_t columns, int64_t vocab, uint64_t seed) {
  if (rows < 1 || columns < 1 || vocab < 1) {
    throw ValueError(
        fmt::format("random_token_rows needs positive sizes, got rows {}, columns {}, vocab {}",
                    rows, columns, vocab));
  }
  HostTensor out(DType::kI32, {rows, columns});
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;  // splitmix64
  for (int64_t i = 0; i < rows * columns; ++i) {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    out.data_as<int32_t>()[i] =
        static_cast<int32_t>((z ^ (z >> 31)) % static_cast<uint64_t>(vocab));
  }
  return out;
}

void write_token_file(const std::string& path, const HostTensor& tokens) {
  if (tokens.dtype() != DType::kI32 || tokens.shape().size() != 2) {
    throw ValueError(fmt::format("write_token_file needs I32 rows of rank 2, got {} {}",
                                 dtype_name(tokens.dtype()), shape_to_string(tokens.shape())));
  }
  const std::vector<std::string> devices = list_devices();
  const DeviceMesh first({1}, {"x"}, std::vector<std::string>{devices.front()});
  const Array array = distribute_tensor(tokens, TensorLayout::replicated(2, first));
  const NamedArray named[] = {{"tokens", &array}};
  save_arrays(path, named);
}

}  // namespace meshlayout
