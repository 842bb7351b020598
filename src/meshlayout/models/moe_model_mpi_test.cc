// The mixture-of-experts families under mpirun (np 2 and 4): Mixtral, Qwen 3 MoE and Qwen 2 MoE
// (its shared expert width-split over the model axis) written in Hugging Face format (write_hf_moe:
// process 0 writes, every process reads), loaded over every process's devices with the experts
// split over the batch axis (each process holds its own experts and its own tokens: dispatch and
// combine cross processes) and over the model axis; logits within 1e-4 of transformers' equations,
// greedy tokens equal, and the training loss with the load-balancing loss equal to the reference's.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fmt/format.h>

#include <filesystem>

#include "meshlayout/models/generation.h"
#include "meshlayout/models/hf_moe_reference.h"
#include "meshlayout/models/llama.h"
#include "meshlayout/models/llama_families_test_util.h"
#include "meshlayout/models/random_moe_hf.h"
#include "meshlayout/runtime/runtime.h"

namespace meshlayout {
namespace {

TEST(MoeModelMpiTest, ExpertParallelAcrossProcessesMatchesTheHuggingFaceEquations) {
  auto rt = default_runtime();
  const int64_t n = rt->global_device_count();
  ASSERT_EQ(n % 2, 0);
  const DeviceMesh mesh({2, n / 2}, {"batch", "model"});
  // The same directory name on every process (process 0 writes it).
  const std::filesystem::path root = std::filesystem::temp_directory_path() /
                                     fmt::format("meshlayout_moe_mpi_{}", rt->comm().size());
  const std::vector<int32_t> ids = {3, 17, 42, 5, 9, 1, 0, 63, 30, 8, 11, 2, 7, 60};  // (2, 7)
  const std::vector<int32_t> targets = {17, 42, 5, 9, 1, 0, 63, 30, 8, 11, 2, 7, 60, 4};
  const auto on_mesh = [&](const std::vector<int32_t>& v) {
    HostTensor t(DType::kI32, {2, 7});
    std::copy(v.begin(), v.end(), t.data_as<int32_t>());
    return distribute_tensor(t, TensorLayout({"batch", None}, mesh));
  };
  uint64_t seed = 21;
  for (const char* family : {"mixtral", "qwen3_moe", "qwen2_moe"}) {
    SCOPED_TRACE(family);
    HfMoeSpec spec = small_hf_moe_spec(family);
    spec.router_aux_loss_coef = 0.3;
    const auto hf = random_hf_moe_tensors(spec, seed += 100);
    const std::filesystem::path dir = root / family;
    write_hf_moe(dir.string(), spec, hf);
    const HfLlamaCheckpoint checkpoint = HfLlamaCheckpoint::open(dir.string());
    const std::vector<double> want = testing::hf_moe_reference_logits(spec, hf, ids, 2, 7);
    const std::vector<int32_t> greedy = testing::hf_moe_reference_greedy(spec, hf, {3, 17, 42}, 4);
    const testing::HfMoeLoss loss = testing::hf_moe_reference_loss(spec, hf, ids, targets, 2, 7);
    LlamaConfig config = checkpoint.config();
    config.output_router_logits = true;
    for (const char* axis : {"batch", "model"}) {
      SCOPED_TRACE(axis);
      clear_session();
      LayoutMap ep(mesh);
      ep["experts/expert_feedforward_.*"] = TensorLayout({axis, None, None});
      ep["sparse_feedforward_gate_dense/kernel"] = TensorLayout({"batch", None});
      ep["shared_expert_dense/feedforward_(gate|intermediate)_dense/kernel"] =
          TensorLayout({None, "model"});
      ep["shared_expert_dense/feedforward_output_dense/kernel"] = TensorLayout({"model", None});
      LlamaModel model(config, ep);
      (void)load_hf_llama(checkpoint, model.variables_by_path());
      const HostTensor logits = model.logits(on_mesh(ids)).gather();
      EXPECT_LT(testing::max_relative_error(logits, want), 1e-4);
      EXPECT_EQ(generate(model, {{3, 17, 42}}, {.max_new_tokens = 4}).tokens[0], greedy);
      Gradients grads;
      const double got = model.loss_and_gradients(on_mesh(ids), on_mesh(targets), grads);
      EXPECT_NEAR(got, loss.ce + spec.router_aux_loss_coef * loss.aux, 1e-4 * std::abs(got));
    }
  }
  rt->comm().barrier();
  if (rt->comm().rank() == 0) std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace meshlayout
