// Llama training under mpirun (np 2 and 4): ten AdamW steps give the float64 reference's
// losses under Megatron rules, keras-hub 2-D rules and pure data parallelism, each process
// feeding only its rows — within 1e-3 in float32, within 1e-9 with the model in float64; a batch
// the data shards do not divide is refused by every process.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/models/llama_train.h"
#include "meshlayout/models/llama_train_reference.h"
#include "meshlayout/runtime/runtime.h"

namespace meshlayout {
namespace {

const LlamaConfig kConfig{.vocab_size = 40,
                          .hidden_size = 32,
                          .intermediate_size = 24,
                          .num_hidden_layers = 2,
                          .num_attention_heads = 8,
                          .num_key_value_heads = 2,
                          .head_dim = 4,
                          .rms_norm_eps = 1e-6,
                          .rope_theta = 10000.0,
                          .tie_word_embeddings = true,
                          .max_position_embeddings = 32};

// Ten AdamW steps of a model in `dtype` on every layout; each loss within `tolerance` (relative)
// of the float64 reference's. Returns the largest relative difference.
double ten_steps_on_every_layout(DType dtype, double tolerance) {
  auto rt = default_runtime();
  double worst = 0;
  const int64_t n = rt->global_device_count(), B = 8, T = 6, steps = 10;
  std::vector<int32_t> rows(static_cast<size_t>(B * steps * (T + 1)));
  for (size_t r = 0; r < rows.size() / (T + 1); ++r) {
    for (int64_t t = 0; t <= T; ++t)
      rows[r * (T + 1) + t] = static_cast<int32_t>((r * 7 + 5 * t) % 40);
  }
  const DeviceMesh grid({2, n / 2}, {"batch", "model"}), dp({n, 1}, {"batch", "model"});
  LayoutMap megatron(grid);
  megatron["(query|key|value)/kernel"] = TensorLayout({None, "model", None});
  megatron["attention_output/kernel"] = TensorLayout({"model", None, None});
  megatron["feedforward_(gate|intermediate)_dense/kernel"] = TensorLayout({None, "model"});
  megatron["feedforward_output_dense/kernel"] = TensorLayout({"model", None});
  megatron["token_embedding/embeddings"] = TensorLayout({"model", None});
  const std::pair<const char*, LayoutMap> layouts[] = {{"Megatron", megatron},
                                                       {"keras-hub", llama_layout_map(grid)},
                                                       {"data parallel", LayoutMap(dp)}};
  for (const auto& [what, rules] : layouts) {
    SCOPED_TRACE(what);
    clear_session();
    LlamaModel model(kConfig, rules, {.dtype = dtype});
    const OptimizerOptions options{.learning_rate = 1e-2};
    const std::vector<double> want =
        testing::train_losses(testing::ReferenceLlama(model), rows, B * steps, T + 1, B,
                              static_cast<int>(steps), {.name = "adamw", .options = options});
    auto optimizer = make_optimizer("adamw", options);
    for (int64_t step = 0; step < steps; ++step) {
      const RowRange mine = model.distribution()->process_batch_rows(B);
      HostTensor x(DType::kI32, {mine.end - mine.begin, T}),
          y(DType::kI32, {mine.end - mine.begin, T});
      for (int64_t r = mine.begin; r < mine.end; ++r) {
        for (int64_t t = 0; t < T; ++t) {
          x.data_as<int32_t>()[(r - mine.begin) * T + t] =
              rows[static_cast<size_t>((step * B + r) * (T + 1) + t)];
          y.data_as<int32_t>()[(r - mine.begin) * T + t] =
              rows[static_cast<size_t>((step * B + r) * (T + 1) + t + 1)];
        }
      }
      const double loss =
          llama_train_step(model, *optimizer, model.distribution()->distribute_process_batch(x, B),
                           model.distribution()->distribute_process_batch(y, B));
      const double w = want[static_cast<size_t>(step)];
      EXPECT_NEAR(loss, w, tolerance * w) << "step " << step;
      worst = std::max(worst, std::abs(loss - w) / w);
    }
  }
  return worst;
}

TEST(LlamaTrainMpiTest, TenStepsMatchTheFloat64ReferenceOnEveryLayout) {
  (void)ten_steps_on_every_layout(DType::kF32, 1e-3);
}

TEST(LlamaTrainMpiTest, TenStepsInFloat64MatchTheReferenceWithin1e9OnEveryLayout) {
  const double worst = ten_steps_on_every_layout(DType::kF64, 1e-9);
  if (default_runtime()->process_id() == 0) {
    std::printf("[ info     ] F64: largest relative loss difference over ten steps: %.3g\n", worst);
  }
}

TEST(LlamaTrainMpiTest, ABatchTheDataShardsDoNotDivideIsRefusedEverywhere) {
  auto rt = default_runtime();
  const int64_t n = rt->global_device_count();
  LlamaModel model(kConfig, LayoutMap(DeviceMesh({n, 1}, {"batch", "model"})));
  const int64_t B = rt->num_processes() + 1;  // one row more than the data shards
  try {
    model.distribution()->process_batch_rows(B);
    FAIL() << "accepted a batch of " << B;
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr(std::to_string(B)));
  }
}

}  // namespace
}  // namespace meshlayout
