// The Llama as a Model (llama.h): fit on token arrays through the Trainer gives, bit for bit, the
// losses and weights of train_llama on the same rows in a token file (keras-hub rules, Megatron
// rules, data parallel); predict equals logits, evaluate the model's loss; backward from the
// cross-entropy's dlogits gives loss_and_gradients' gradients; summary lists the layers and
// counts every parameter; the variables keep keras-hub's paths.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/models/hf_llama_checkpoint.h"
#include "meshlayout/models/llama.h"
#include "meshlayout/models/llama_test_util.h"
#include "meshlayout/models/llama_train.h"
#include "meshlayout/models/random_llama.h"
#include "meshlayout/nn/model_checkpoint.h"
#include "meshlayout/ops/cross_entropy.h"
#include "meshlayout/train/trainer.h"

namespace meshlayout {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

LlamaConfig tiny() {
  return LlamaConfig{.vocab_size = 48,
                     .hidden_size = 32,
                     .intermediate_size = 24,
                     .num_hidden_layers = 2,
                     .num_attention_heads = 8,
                     .num_key_value_heads = 2,
                     .head_dim = 4,
                     .rms_norm_eps = 1e-5,
                     .rope_theta = 10000.0,
                     .tie_word_embeddings = false,
                     .max_position_embeddings = 64};
}

std::vector<double> doubles(const HostTensor& t) {
  std::vector<double> out(static_cast<size_t>(t.num_elements()));
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = t.dtype() == DType::kF64 ? t.data_as<double>()[i] : t.data_as<float>()[i];
  return out;
}

// Columns [first, first + n) of every row of an I32 (rows, columns) tensor.
HostTensor columns(const HostTensor& rows, int64_t first, int64_t n) {
  const int64_t R = rows.shape()[0], C = rows.shape()[1];
  HostTensor out(DType::kI32, {R, n});
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t c = 0; c < n; ++c)
      out.data_as<int32_t>()[r * n + c] = rows.data_as<int32_t>()[r * C + first + c];
  }
  return out;
}

class LlamaModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    set_device_count(8);
    clear_session();
    dir_ = fs::temp_directory_path() / ("llama_model_test_" + std::to_string(getpid()));
    fs::create_directories(dir_);
    write_random_hf_llama((dir_ / "model").string(), tiny());
  }
  void TearDown() override {
    fs::remove_all(dir_);
    reset_device_count();
  }
  std::shared_ptr<LlamaModel> load(const LayoutMap& rules) {
    auto model = std::make_shared<LlamaModel>(tiny(), rules);
    load_hf_llama(HfLlamaCheckpoint::open((dir_ / "model").string()), model->variables_by_path());
    return model;
  }
  static std::vector<std::vector<double>> weights(const Model& model) {
    std::vector<std::vector<double>> out;
    for (const VariablePtr& v : model.variables()) out.push_back(doubles(v->value().gather()));
    return out;
  }
  fs::path dir_;
};

TEST_F(LlamaModelTest, FitThroughTheTrainerEqualsTrainLlamaBitForBit) {
  const int64_t B = 8, T = 6, steps = 4;
  const HostTensor rows = random_token_rows(B * steps, T + 1, tiny().vocab_size, 3);
  const std::string data_path = (dir_ / "tokens.safetensors").string();
  write_token_file(data_path, rows);
  const TokenDataset data = TokenDataset::open(data_path);
  const HostTensor x = columns(rows, 0, T), y = columns(rows, 1, T);
  const DeviceMesh m24({2, 4}, {"batch", "model"}), m42({4, 2}, {"batch", "model"}),
      dp({8, 1}, {"batch", "model"});
  const std::pair<std::string, LayoutMap> layouts[] = {
      {"keras-hub rules on 2x4", llama_layout_map(m24)},
      {"Megatron rules on 4x2", testing::megatron_rules(m42)},
      {"data parallel on 8", LayoutMap(dp)}};
  for (const auto& [what, rules] : layouts) {
    SCOPED_TRACE(what);
    const std::shared_ptr<LlamaModel> by_command = load(rules);
    auto optimizer = make_optimizer("adamw", {.learning_rate = 1e-2});
    const LlamaTrainResult want =
        train_llama(*by_command, data, *optimizer, {.batch_size = B, .steps = steps});

    const std::shared_ptr<LlamaModel> by_fit = load(rules);
    Trainer trainer = compile(by_fit, {.optimizer = "adamw",
                                       .optimizer_options = {.learning_rate = 1e-2},
                                       .loss = "sparse_categorical_crossentropy",
                                       .loss_options = {.from_logits = true}});
    struct Losses : Callback {
      std::vector<double> values;
      void on_train_batch_end(Trainer&, const BatchLogs& l) override { values.push_back(l.loss); }
    };
    auto losses = std::make_shared<Losses>();
    trainer.fit(x, y, {.batch_size = B, .verbose = 0, .callbacks = {losses}});
    EXPECT_EQ(losses->values, want.losses);
    EXPECT_EQ(weights(*by_fit), weights(*by_command));

    // predict: the logits of every row; evaluate: the mean loss (batch-weighted).
    const HostTensor predicted = trainer.predict(x, {.batch_size = B * steps});
    EXPECT_EQ(predicted.shape(), (Shape{B * steps, T, tiny().vocab_size}));
    const Array xb = by_fit->distribution()->distribute_input(x);
    EXPECT_EQ(doubles(predicted), doubles(by_fit->logits(xb).gather()));
    const double evaluated = trainer.evaluate(x, y, {.batch_size = B * steps});
    const double direct = by_fit->loss(xb, by_fit->distribution()->distribute_input(y));
    EXPECT_NEAR(evaluated, direct, 1e-6 * direct);
  }
}

TEST_F(LlamaModelTest, BackwardFromTheLossGradientGivesTheFusedGradients) {
  const int64_t B = 4, T = 5;
  const HostTensor rows = random_token_rows(B, T + 1, tiny().vocab_size, 7);
  const std::shared_ptr<LlamaModel> model =
      load(llama_layout_map(DeviceMesh({2, 4}, {"batch", "model"})));
  const Array x = model->distribution()->distribute_process_batch(columns(rows, 0, T), B);
  const Array y = model->distribution()->distribute_process_batch(columns(rows, 1, T), B);
  Gradients fused;
  const double loss = model->loss_and_gradients(x, y, fused);
  const CrossEntropyResult ce = sparse_categorical_crossentropy_with_grad(model->logits(x), y);
  EXPECT_NEAR(ce.loss, loss, 1e-6 * loss);
  Gradients generic;
  (void)model->backward(x, ce.dlogits, generic);
  ASSERT_EQ(generic.size(), fused.size());
  for (const VariablePtr& v : model->variables()) {
    SCOPED_TRACE(v->path());
    const std::vector<double> g = doubles(generic.find(*v)->gather()),
                              f = doubles(fused.find(*v)->gather());
    double diff = 0, norm = 0;
    for (size_t i = 0; i < f.size(); ++i) {
      diff += (g[i] - f[i]) * (g[i] - f[i]);
      norm += f[i] * f[i];
    }
    EXPECT_LE(std::sqrt(diff), 1e-5 * std::sqrt(norm) + 1e-12);
  }
  // fused_loss_and_gradients takes exactly the loss it computes.
  Gradients none;
  EXPECT_EQ(model->fused_loss_and_gradients(x, y, {.name = "mean_squared_error"}, none),
            std::nullopt);
  EXPECT_EQ(
      model->fused_loss_and_gradients(x, y, {.name = "sparse_categorical_crossentropy"}, none),
      std::nullopt);  // probabilities, not logits
  EXPECT_EQ(none.size(), 0u);
}

TEST_F(LlamaModelTest, IsAModelWithKerasHubPathsAndASummary) {
  clear_session();  // SetUp's random model took the first name
  const std::shared_ptr<LlamaModel> model =
      load(llama_layout_map(DeviceMesh({2, 4}, {"batch", "model"})));
  const Model& as_model = *model;
  EXPECT_TRUE(as_model.built());
  EXPECT_EQ(as_model.name(), "llama_causal_lm");
  std::vector<std::string> paths;
  for (const VariablePtr& v : as_model.variables()) paths.push_back(v->path());
  EXPECT_EQ(paths.front(), "token_embedding/embeddings");
  EXPECT_EQ(paths[1], "token_embedding/reverse_embeddings");
  EXPECT_EQ(paths.back(), "sequence_output_layernorm/scale");
  EXPECT_THAT(paths, ::testing::Contains("transformer_layer_1/self_attention/query/kernel"));
  EXPECT_EQ(as_model.compute_output_shape({3, 7}), (Shape{3, 7, 48}));
  EXPECT_THROW((void)as_model.compute_output_shape({3}), ValueError);
  const std::string summary = as_model.summary();
  EXPECT_THAT(summary, HasSubstr("token_embedding"));
  EXPECT_THAT(summary, HasSubstr("transformer_layer_1"));
  EXPECT_THAT(summary, HasSubstr("sequence_output_layernorm"));
  int64_t parameters = 0;
  for (const VariablePtr& v : as_model.variables()) parameters += num_elements(v->value().shape());
  const std::string digits = std::to_string(parameters);
  std::string commas;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) commas += ',';
    commas += digits[i];
  }
  EXPECT_THAT(summary, HasSubstr("Total params: " + commas + " ("));
}

TEST_F(LlamaModelTest, TheModelCheckpointCodeSavesAndLoadsItAcrossLayouts) {
  // save_model / load_model (nn/model_checkpoint.h), by keras-hub's Keras 3 paths, from
  // keras-hub rules on 2x4 into Megatron rules on 4x2: the same logits (the same weights; the
  // sums run in another order across layouts, hence 1e-5).
  const std::shared_ptr<LlamaModel> saved =
      load(llama_layout_map(DeviceMesh({2, 4}, {"batch", "model"})));
  const std::string path = (dir_ / "llama.safetensors").string();
  save_model(*saved, path, {.path_style = VariablePathStyle::kScope});
  const Checkpoint checkpoint = Checkpoint::open(path);
  EXPECT_EQ(checkpoint.tensors().size(), saved->variables().size());
  clear_session();
  auto loaded = std::make_shared<LlamaModel>(
      tiny(), testing::megatron_rules(DeviceMesh({4, 2}, {"batch", "model"})));
  const ModelLoadReport report =
      load_model(*loaded, checkpoint, {.path_style = VariablePathStyle::kScope});
  EXPECT_EQ(report.loaded, saved->variables().size());
  const HostTensor tokens = random_token_rows(4, 6, tiny().vocab_size, 11);
  const std::vector<double> want =
      doubles(saved->logits(saved->distribution()->distribute_input(tokens)).gather());
  const std::vector<double> got =
      doubles(loaded->logits(loaded->distribution()->distribute_input(tokens)).gather());
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << i;
}

}  // namespace
}  // namespace meshlayout
