// Generation under mpirun (np 2 and 4): a seed's sampled tokens of a left-padded batch are
// those of one device in process (generation_test_util.h's kSampledTokens), on a mesh over
// every process's devices under replicated, keras-hub and Megatron rules; greedy rows of a
// padded batch equal each prompt alone.
#include <gtest/gtest.h>

#include "meshlayout/layout/devices.h"
#include "meshlayout/models/generation.h"
#include "meshlayout/models/generation_test_util.h"
#include "meshlayout/models/llama.h"
#include "meshlayout/models/llama_test_util.h"
#include "meshlayout/runtime/runtime.h"

namespace meshlayout {
namespace {

TEST(GenerationMpiTest, SampledTokensAreTheOneDeviceTokens) {
  auto rt = default_runtime();
  const int64_t n = rt->global_device_count();
  ASSERT_EQ(n % 2, 0);
  const DeviceMesh mesh({2, n / 2}, {"batch", "model"});
  for (const std::string rules_name : {"replicated", "keras-hub", "Megatron"}) {
    SCOPED_TRACE(rules_name);
    clear_session();
    const LayoutMap rules = rules_name == "Megatron"    ? testing::megatron_rules(mesh)
                            : rules_name == "keras-hub" ? llama_layout_map(mesh, "model", "batch")
                                                        : LayoutMap(mesh);
    LlamaModel model(testing::generation_test_config(), rules);
    testing::sharpen_weights(model);
    const GenerateResult r = generate(model, testing::kSampledPrompts, testing::sampled_options());
    EXPECT_EQ(r.tokens, testing::kSampledTokens);
    const GenerateResult batch = generate(model, {{3, 17, 42}, {21}}, {.max_new_tokens = 4});
    EXPECT_EQ(batch.tokens[0], generate(model, {{3, 17, 42}}, {.max_new_tokens = 4}).tokens[0]);
    EXPECT_EQ(batch.tokens[1], generate(model, {{21}}, {.max_new_tokens = 4}).tokens[0]);
  }
}

}  // namespace
}  // namespace meshlayout
