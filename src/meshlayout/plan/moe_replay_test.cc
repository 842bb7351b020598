// The sparse block's replay on its own (moe_replay.h): which path a rule set takes (experts on
// other axes than the tokens: exact; on the tokens' own axis: the all-to-all dispatch, planned
// for the worst case), the kernels' gradients it records, and what the forward keeps. Its
// bytes against the runtime's accounts: memory_plan_test (Mixtral, replicated and
// expert-parallel experts).
#include "meshlayout/plan/moe_replay.h"

#include <gtest/gtest.h>

#include "meshlayout/layout/devices.h"
#include "meshlayout/models/hf_llama_config.h"

namespace meshlayout {
namespace {

class MoeReplayTest : public ::testing::Test {
 protected:
  void SetUp() override { set_device_count(8); }
  void TearDown() override { reset_device_count(); }

  static DecoderShapes mixtral() {
    LlamaConfig c{.vocab_size = 64,
                  .hidden_size = 32,
                  .intermediate_size = 48,
                  .num_hidden_layers = 2,
                  .num_attention_heads = 4,
                  .num_key_value_heads = 2,
                  .head_dim = 8,
                  .max_position_embeddings = 64};
    c.family = "mixtral";
    c.num_experts = 4;
    c.num_experts_per_tok = 2;
    return decoder_shapes(c);
  }
  // One sparse block's forward and backward on (8, 16, 32) tokens split over batch.
  static StepMemory step(const LayoutMap& map, const DeviceMesh& mesh, bool* dispatched) {
    const DecoderShapes s = mixtral();
    replay::Replay r(mesh, 4);
    const replay::MoeWeights w = replay::moe_weights(s, map, mesh, 1);
    *dispatched = w.dispatched;
    EXPECT_EQ(w.gate_path,
              "transformer_layer_1/mixtral_sparse_moe_block_1/experts/"
              "expert_feedforward_gate_dense");
    const replay::Sym m = r.alloc(TensorLayout({"batch", None, None}, mesh), {8, 16, 32});
    replay::MoeSaved saved;
    {
      const replay::Sym y = replay::moe_forward(r, s, w, m, saved);
      EXPECT_EQ(y.shape, m.shape);
      EXPECT_EQ(y.layout, m.layout);
    }
    EXPECT_EQ(saved.ids->shape, (Shape{8, 16, 2}));
    EXPECT_EQ(saved.probs->shape, (Shape{8, 16, 4}));
    const replay::Sym dy = r.alloc(m.layout, m.shape);
    const replay::Sym dm = replay::moe_backward(r, s, w, m, saved, dy);
    EXPECT_EQ(dm.layout, m.layout);
    return r.result();
  }
};

TEST_F(MoeReplayTest, ExpertsOnAnotherAxisThanTheTokensAreExactAndEveryKernelHasAGradient) {
  const DeviceMesh mesh({2, 4}, {"batch", "model"});
  LayoutMap map(mesh);
  map.set("experts/expert_feedforward_.*", {"model", None, None});
  bool dispatched = true;
  const StepMemory s = step(map, mesh, &dispatched);
  EXPECT_FALSE(dispatched);
  // The four kernels' gradients (router (32, 4) whole; each expert kernel a quarter of
  // 4 x 32 x 48) are live at the end, and counted at the peak when it is there.
  EXPECT_GE(s.peak[0], uint64_t{32 * 4 * 4 + 3 * 32 * 48 * 4});
}

TEST_F(MoeReplayTest, ExpertsOnTheTokensAxisAreDispatchedAndPlannedForTheWorstCase) {
  const DeviceMesh mesh({2, 4}, {"batch", "model"});
  LayoutMap split(mesh), whole(mesh);
  split.set("experts/expert_feedforward_.*", {"batch", None, None});
  bool dispatched = false;
  const StepMemory worst = step(split, mesh, &dispatched);
  EXPECT_TRUE(dispatched);
  // Every token of the group may reach every device: more than the replicated experts' path
  // holds for the same tokens, less kernel.
  const StepMemory replicated = step(whole, mesh, &dispatched);
  EXPECT_FALSE(dispatched);
  EXPECT_GT(worst.peak[0], 0u);
  EXPECT_NE(worst.peak[0], replicated.peak[0]);
}

}  // namespace
}  // namespace meshlayout
