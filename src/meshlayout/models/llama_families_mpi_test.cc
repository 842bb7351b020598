// The Llama-style families under mpirun (np 2 and 4): each family's small model (random weights,
// biases and norms written in Hugging Face format; each process writes its own copy of the same
// tensors) loaded sharded over every process's devices under keras-hub rules and Megatron rules
// with split biases and head norms; logits within 1e-4 of the float64 Hugging Face-equation
// reference and greedy tokens equal to the reference's.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "meshlayout/models/generation.h"
#include "meshlayout/models/hf_decoder_reference.h"
#include "meshlayout/models/hf_llama_test_util.h"
#include "meshlayout/models/llama.h"
#include "meshlayout/models/llama_families_test_util.h"
#include "meshlayout/models/llama_test_util.h"
#include "meshlayout/runtime/runtime.h"

namespace meshlayout {
namespace {

TEST(LlamaFamiliesMpiTest, ShardedAcrossProcessesMatchesTheHuggingFaceEquations) {
  auto rt = default_runtime();
  const int64_t n = rt->global_device_count();
  ASSERT_EQ(n % 2, 0);
  const DeviceMesh mesh({2, n / 2}, {"batch", "model"});
  const std::filesystem::path root = std::filesystem::temp_directory_path() /
                                     ("meshlayout_families_mpi_" + std::to_string(::getpid()));
  const std::vector<int32_t> tokens = {3, 17, 42, 5, 9, 1, 0, 63, 30, 8, 11, 2, 7, 60};  // (2, 7)
  uint64_t seed = 11;
  for (const testing::Family& f : testing::families()) {
    SCOPED_TRACE(f.what);
    const auto hf = testing::random_hf_tensors(f.config, seed += 100);
    const std::filesystem::path dir = root / std::to_string(seed);
    testing::write_hf_by_hand(dir, f.config, hf);
    const HfLlamaCheckpoint checkpoint = HfLlamaCheckpoint::open(dir.string());
    const std::vector<double> want = testing::hf_reference_logits(f.config, hf, tokens, 2, 7);
    const std::vector<int32_t> greedy = testing::hf_reference_greedy(f.config, hf, {3, 17, 42}, 4);
    LayoutMap megatron = testing::megatron_rules(mesh);
    megatron["(query|key|value)/bias"] = TensorLayout({"model", None});
    megatron["dense_layernorm/scale"] = TensorLayout({"model"});
    for (const bool keras_hub : {true, false}) {
      SCOPED_TRACE(keras_hub ? "keras-hub" : "Megatron");
      clear_session();
      LlamaModel model(f.config,
                       keras_hub ? family_layout_map(f.config, mesh, "model", "batch") : megatron);
      (void)load_hf_llama(checkpoint, model.variables_by_path());
      HostTensor t(DType::kI32, {2, 7});
      std::copy(tokens.begin(), tokens.end(), t.data_as<int32_t>());
      const HostTensor logits =
          model.logits(distribute_tensor(t, TensorLayout({"batch", None}, mesh))).gather();
      EXPECT_LT(testing::max_relative_error(logits, want), 1e-4);
      EXPECT_EQ(generate(model, {{3, 17, 42}}, {.max_new_tokens = 4}).tokens[0], greedy);
    }
  }
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace meshlayout
