// The Llama under mpirun (np 2 and 4): logits match the float64 reference and greedy tokens
// equal the replicated run's, under Megatron and keras-hub 2-D rules on all devices.
#include <gtest/gtest.h>

#include "meshlayout/layout/devices.h"
#include "meshlayout/models/generation.h"
#include "meshlayout/models/llama.h"
#include "meshlayout/models/llama_test_util.h"
#include "meshlayout/runtime/runtime.h"

namespace meshlayout {
namespace {

TEST(LlamaMpiTest, ShardedAcrossProcessesMatchesTheReference) {
  auto rt = default_runtime();
  const int64_t n = rt->global_device_count();
  ASSERT_EQ(n % 2, 0);
  const DeviceMesh mesh({2, n / 2}, {"batch", "model"});
  const LlamaConfig config{.vocab_size = 40,
                           .hidden_size = 32,
                           .intermediate_size = 24,
                           .num_hidden_layers = 2,
                           .num_attention_heads = 8,
                           .num_key_value_heads = 2,
                           .head_dim = 4,
                           .rms_norm_eps = 1e-6,
                           .rope_theta = 10000.0,
                           .tie_word_embeddings = false,
                           .max_position_embeddings = 32};
  std::vector<int32_t> expected;
  for (const bool keras_hub : {false, true}) {
    LayoutMap rules = keras_hub ? llama_layout_map(mesh, "model", "batch") : LayoutMap(mesh);
    if (!keras_hub) {
      rules["(query|key|value)/kernel"] = TensorLayout({None, "model", None});
      rules["attention_output/kernel"] = TensorLayout({"model", None, None});
      rules["feedforward_(gate|intermediate)_dense/kernel"] = TensorLayout({None, "model"});
      rules["feedforward_output_dense/kernel"] = TensorLayout({"model", None});
    }
    LlamaModel model(config, rules);
    const std::vector<int32_t> tokens = {1, 5, 9, 2, 39, 0, 7, 11};
    HostTensor t(DType::kI32, {2, 4});
    std::copy(tokens.begin(), tokens.end(), t.data_as<int32_t>());
    const HostTensor logits =
        model.logits(distribute_tensor(t, TensorLayout({"batch", None}, mesh))).gather();
    const testing::Vec want = testing::reference_llama_logits(model, tokens, 2, 4);
    double worst = 0, scale = 1;
    for (size_t i = 0; i < want.size(); ++i) {
      worst = std::max(worst, std::abs(logits.data_as<float>()[i] - want[i]));
      scale = std::max(scale, std::abs(want[i]));
    }
    EXPECT_LT(worst / scale, 1e-4) << (keras_hub ? "keras-hub" : "Megatron");
    const GenerateResult r = generate(model, {{4, 8, 15}}, {.max_new_tokens = 4});
    if (expected.empty()) expected = testing::reference_greedy(model, {4, 8, 15}, 4);
    EXPECT_EQ(r.tokens[0], expected);
  }
}

}  // namespace
}  // namespace meshlayout
