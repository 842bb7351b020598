#include "meshlayout/models/random_llama.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <limits>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/models/hf_llama_checkpoint.h"
#include "meshlayout/models/llama.h"

namespace meshlayout {
namespace {

namespace fs = std::filesystem;

LlamaConfig small_config() {
  return LlamaConfig{.vocab_size = 32,
                     .hidden_size = 8,
                     .intermediate_size = 16,
                     .num_hidden_layers = 2,
                     .num_attention_heads = 2,
                     .num_key_value_heads = 1,
                     .head_dim = 4,
                     .max_position_embeddings = 16};
}

class RandomLlamaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    set_device_count(2);
    clear_session();
    dir_ = fs::temp_directory_path() / fmt::format("random_llama_test_{}", ::getpid());
    fs::remove_all(dir_);
  }
  void TearDown() override {
    fs::remove_all(dir_);
    reset_device_count();
  }
  fs::path dir_;
};

// The directory opens as a checkpoint of that config; kernels are the model's initial values
// times the scale (rounded to the file dtype), norm scales stay 1.
TEST_F(RandomLlamaTest, WritesTheModelsInitialWeightsScaled) {
  const LlamaConfig config = small_config();
  write_random_hf_llama(dir_.string(), config,
                        {.kernel_scale = 8, .file_dtype = DType::kF32, .num_shards = 2});
  HfLlamaCheckpoint ckpt = HfLlamaCheckpoint::open(dir_.string());
  EXPECT_EQ(ckpt.config().hidden_size, 8);
  EXPECT_EQ(ckpt.checkpoint().files().size(), 2u);

  clear_session();  // the same session state draws the same initial weights
  const DeviceMesh one({1}, {"model"}, std::vector<std::string>{list_devices()[0]});
  LlamaModel fresh(config, LayoutMap(one));
  LlamaModel loaded(config, LayoutMap(one));
  load_hf_llama(ckpt, loaded.variables_by_path());
  auto want_vars = fresh.variables_by_path();
  for (const auto& [path, array] : loaded.variables_by_path()) {
    const HostTensor got = array->gather();
    const HostTensor init = want_vars.at(path)->gather();
    const bool is_scale = path.find("/scale") != std::string::npos;
    for (int64_t i = 0; i < got.num_elements(); ++i) {
      const float want = is_scale ? 1.0f : 8.0f * init.data_as<float>()[i];
      ASSERT_EQ(got.data_as<float>()[i], want) << path << " element " << i;
    }
  }
}

TEST_F(RandomLlamaTest, RefusesANonFiniteScaleAndABadConfig) {
  try {
    write_random_hf_llama(dir_.string(), small_config(),
                          {.kernel_scale = std::numeric_limits<float>::infinity()});
    FAIL() << "an infinite scale was accepted";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("kernel_scale must be finite, got inf"), std::string::npos)
        << e.what();
  }
  LlamaConfig bad = small_config();
  bad.num_key_value_heads = 3;  // does not divide 2 heads
  EXPECT_THROW(write_random_hf_llama(dir_.string(), bad), ValueError);
  EXPECT_FALSE(fs::exists(dir_ / "config.json"));
}

}  // namespace
}  // namespace meshlayout
