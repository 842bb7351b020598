#include "meshlayout/models/random_llama.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <map>

#include "meshlayout/core/errors.h"
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
    if (path.find("/scale") == std::string::npos && options.kernel_scale != 1) {
      float* p = t.data_as<float>();
      for (int64_t i = 0; i < t.num_elements(); ++i) p[i] *= options.kernel_scale;
    }
    scaled.emplace(path, distribute_tensor(t, TensorLayout::replicated(static_cast<int>(t.shape().size()), one)));
  }
  std::map<std::string, const Array*> arrays;
  for (const auto& [path, array] : scaled) arrays.emplace(path, &array);
  std::filesystem::create_directories(dir);
  save_hf_llama(dir, model.config(), arrays, options.file_dtype, options.num_shards);
}

}  // namespace meshlayout
