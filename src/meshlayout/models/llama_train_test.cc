// Training a Llama sharded against the float64 reference (llama_train_reference.h): the
// gradient of every weight, and ten optimizer steps' losses, on one device, keras-hub's 2-D
// rules, Megatron's rules and pure data parallelism, MHA and GQA (2 KV heads on a 4-way axis),
// tied and untied; the same in float64 (LlamaOptions::dtype = F64: weights, activations,
// gradients and optimizer slots in double) to 1e-10 for the gradients and 1e-9 for ten steps'
// losses, and the float64 logits and greedy decoding (key/value cache in F64); the training
// data's checks.
#include "meshlayout/models/llama_train.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>

#include "meshlayout/core/errors.h"
#include "meshlayout/io/array_io.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/models/generation.h"
#include "meshlayout/models/llama_test_util.h"
#include "meshlayout/models/llama_train_reference.h"
#include "meshlayout/testing/test_util.h"

namespace meshlayout {
namespace {

using ::testing::HasSubstr;
using testing::Vec;

LlamaConfig tiny(int64_t heads, int64_t kv_heads, bool tied) {
  return LlamaConfig{.vocab_size = 48,
                     .hidden_size = heads * 4,
                     .intermediate_size = 24,
                     .num_hidden_layers = 2,
                     .num_attention_heads = heads,
                     .num_key_value_heads = kv_heads,
                     .head_dim = 4,
                     .rms_norm_eps = 1e-5,
                     .rope_theta = 10000.0,
                     .tie_word_embeddings = tied,
                     .max_position_embeddings = 64};
}

struct Layouts {
  std::string what;
  LayoutMap rules;
};

std::vector<Layouts> every_layout() {
  const DeviceMesh one({1, 1}, {"batch", "model"}, std::vector<std::string>{"cpu:0"});
  const DeviceMesh m24({2, 4}, {"batch", "model"}), m42({4, 2}, {"batch", "model"}),
      dp({8, 1}, {"batch", "model"});
  return {{"one device", LayoutMap(one)},
          {"keras-hub rules on 2x4", llama_layout_map(m24)},
          {"Megatron rules on 4x2", testing::megatron_rules(m42)},
          {"Megatron rules on 2x4", testing::megatron_rules(m24)},
          {"data parallel on 8", LayoutMap(dp)}};
}

// Rows of random token ids (rows, seq + 1), row-major.
std::vector<int32_t> random_rows(int64_t rows, int64_t columns, int64_t vocab, uint64_t seed) {
  testing::Random r(seed);
  std::vector<int32_t> out(static_cast<size_t>(rows * columns));
  for (int32_t& t : out) t = static_cast<int32_t>(r.uniform(vocab));
  return out;
}

// ‖got − want‖ / ‖want‖, got F32 or F64.
double relative_difference(const HostTensor& got, const Vec& want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double g =
        got.dtype() == DType::kF64 ? got.data_as<double>()[i] : got.data_as<float>()[i];
    diff += (g - want[i]) * (g - want[i]);
    norm += want[i] * want[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
}

// Inputs and targets (row-major B × T) of `rows` (B × (T + 1)).
std::pair<std::vector<int32_t>, std::vector<int32_t>> split_rows(const std::vector<int32_t>& rows,
                                                                 int64_t first, int64_t B,
                                                                 int64_t T) {
  std::vector<int32_t> inputs, targets;
  for (int64_t b = first; b < first + B; ++b) {
    inputs.insert(inputs.end(), rows.begin() + b * (T + 1), rows.begin() + b * (T + 1) + T);
    targets.insert(targets.end(), rows.begin() + b * (T + 1) + 1, rows.begin() + (b + 1) * (T + 1));
  }
  return {inputs, targets};
}

// Learnable rows: each an arithmetic sequence (step 5 modulo the vocabulary) from a random start.
std::vector<int32_t> learnable_rows(int64_t rows_count, int64_t T, int32_t vocab, uint64_t seed) {
  std::vector<int32_t> rows = random_rows(rows_count, T + 1, vocab, seed);
  for (int64_t r = 0; r < rows_count; ++r) {
    for (int64_t t = 1; t <= T; ++t)
      rows[r * (T + 1) + t] = (rows[r * (T + 1)] + 5 * static_cast<int32_t>(t)) % vocab;
  }
  return rows;
}

class LlamaTrainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    set_device_count(8);
    clear_session();
  }
  void TearDown() override { reset_device_count(); }

  static std::pair<Array, Array> batch(const LlamaModel& model, const std::vector<int32_t>& inputs,
                                       const std::vector<int32_t>& targets, int64_t B, int64_t T) {
    HostTensor x(DType::kI32, {B, T}), y(DType::kI32, {B, T});
    std::copy(inputs.begin(), inputs.end(), x.data_as<int32_t>());
    std::copy(targets.begin(), targets.end(), y.data_as<int32_t>());
    return {model.distribution()->distribute_process_batch(x, B),
            model.distribution()->distribute_process_batch(y, B)};
  }
};

TEST_F(LlamaTrainTest, EveryGradientMatchesTheFloat64ReferenceOnEveryLayout) {
  const int64_t B = 8, T = 5;
  for (const LlamaConfig& config : {tiny(8, 2, true), tiny(4, 4, false)}) {
    const std::vector<int32_t> rows = random_rows(B, T + 1, config.vocab_size, 5);
    std::vector<int32_t> inputs, targets;
    for (int64_t b = 0; b < B; ++b) {
      inputs.insert(inputs.end(), rows.begin() + b * (T + 1), rows.begin() + b * (T + 1) + T);
      targets.insert(targets.end(), rows.begin() + b * (T + 1) + 1,
                     rows.begin() + (b + 1) * (T + 1));
    }
    for (const Layouts& l : every_layout()) {
      SCOPED_TRACE(l.what + (config.tie_word_embeddings ? ", GQA tied" : ", MHA untied"));
      LlamaModel model(config, l.rules);
      const auto [want_loss, want] =
          testing::ReferenceLlama(model).loss_and_gradients(inputs, targets, B, T);
      const auto [x, y] = batch(model, inputs, targets, B, T);
      Gradients grads;
      const double loss = model.loss_and_gradients(x, y, grads);
      EXPECT_NEAR(loss, want_loss, 1e-5 * want_loss);
      EXPECT_NEAR(model.loss(x, y), want_loss, 1e-5 * want_loss);
      ASSERT_EQ(grads.size(), want.size());
      for (const VariablePtr& v : model.variables()) {
        const Array* g = grads.find(*v);
        ASSERT_NE(g, nullptr) << v->path();
        EXPECT_EQ(g->layout(), v->value().layout()) << v->path();
        EXPECT_LT(relative_difference(g->gather(), want.at(v->path())), 1e-4) << v->path();
      }
    }
  }
}

TEST_F(LlamaTrainTest, TenStepsGiveTheFloat64ReferencesLosses) {
  const int64_t B = 8, T = 6, steps = 10;
  const LlamaConfig config = tiny(8, 2, true);
  // Learnable rows: each an arithmetic sequence (step 5 modulo the vocabulary) from a random start.
  std::vector<int32_t> rows = random_rows(B * steps, T + 1, config.vocab_size, 9);
  for (int64_t r = 0; r < B * steps; ++r) {
    for (int64_t t = 1; t <= T; ++t)
      rows[r * (T + 1) + t] = (rows[r * (T + 1)] + 5 * static_cast<int32_t>(t)) % 48;
  }
  struct Run {
    std::string optimizer;
    OptimizerOptions options;
  };
  const Run runs[] = {{"adamw", {.learning_rate = 1e-2}},
                      {"adam", {.learning_rate = 1e-2}},
                      {"sgd", {.learning_rate = 0.5, .momentum = 0.9}}};
  std::vector<Layouts> layouts = every_layout();
  for (size_t r = 0; r < std::size(runs); ++r) {
    for (size_t li = 0; li < layouts.size(); ++li) {
      if (r > 0 && li != 1) continue;  // the other optimizers on one sharded layout
      const Layouts& l = layouts[li];
      SCOPED_TRACE(runs[r].optimizer + " on " + l.what);
      clear_session();
      LlamaModel model(config, l.rules);
      const std::vector<double> want =
          testing::train_losses(testing::ReferenceLlama(model), rows, B * steps, T + 1, B, steps,
                                {.name = runs[r].optimizer, .options = runs[r].options});
      auto optimizer = make_optimizer(runs[r].optimizer, runs[r].options);
      for (int64_t step = 0; step < steps; ++step) {
        std::vector<int32_t> inputs, targets;
        for (int64_t b = step * B; b < (step + 1) * B; ++b) {
          inputs.insert(inputs.end(), rows.begin() + b * (T + 1), rows.begin() + b * (T + 1) + T);
          targets.insert(targets.end(), rows.begin() + b * (T + 1) + 1,
                         rows.begin() + (b + 1) * (T + 1));
        }
        const auto [x, y] = batch(model, inputs, targets, B, T);
        const double loss = llama_train_step(model, *optimizer, x, y);
        EXPECT_NEAR(loss, want[static_cast<size_t>(step)], 1e-3 * want[static_cast<size_t>(step)])
            << "step " << step;
      }
      EXPECT_LT(want.back(), want.front());  // it learns
      // Every slot lives in its variable's layout.
      for (const VariablePtr& v : model.variables()) {
        for (const VariablePtr& slot : optimizer->slots_of(*v)) {
          EXPECT_EQ(slot->value().layout(), v->value().layout()) << slot->path();
        }
      }
    }
  }
}

// Float64 end to end: the same model code in double gives the float64 reference's loss to
// rounding (1e-12) and every gradient to 1e-10 on every layout, MHA and GQA, tied and untied.
TEST_F(LlamaTrainTest, EveryGradientInFloat64MatchesTheReferenceWithin1e10OnEveryLayout) {
  const int64_t B = 8, T = 5;
  double worst = 0;
  for (const LlamaConfig& config : {tiny(8, 2, true), tiny(4, 4, false)}) {
    const auto [inputs, targets] = split_rows(random_rows(B, T + 1, config.vocab_size, 5), 0, B, T);
    for (const Layouts& l : every_layout()) {
      SCOPED_TRACE(l.what + (config.tie_word_embeddings ? ", GQA tied" : ", MHA untied"));
      clear_session();
      LlamaModel model(config, l.rules, {.dtype = DType::kF64});
      EXPECT_EQ(model.dtype(), DType::kF64);
      for (const VariablePtr& v : model.variables())
        ASSERT_EQ(v->dtype(), DType::kF64) << v->path();
      const auto [want_loss, want] =
          testing::ReferenceLlama(model).loss_and_gradients(inputs, targets, B, T);
      const auto [x, y] = batch(model, inputs, targets, B, T);
      Gradients grads;
      const double loss = model.loss_and_gradients(x, y, grads);
      EXPECT_NEAR(loss, want_loss, 1e-12 * want_loss);
      EXPECT_NEAR(model.loss(x, y), want_loss, 1e-12 * want_loss);
      ASSERT_EQ(grads.size(), want.size());
      for (const VariablePtr& v : model.variables()) {
        const Array* g = grads.find(*v);
        ASSERT_NE(g, nullptr) << v->path();
        EXPECT_EQ(g->layout(), v->value().layout()) << v->path();
        EXPECT_EQ(g->dtype(), DType::kF64) << v->path();
        const double d = relative_difference(g->gather(), want.at(v->path()));
        EXPECT_LT(d, 1e-10) << v->path();
        worst = std::max(worst, d);
      }
    }
  }
  std::printf("[ info     ] F64: largest relative gradient difference from the reference: %.3g\n",
              worst);
}

// Ten steps in float64 give the float64 reference's losses within 1e-9 (relative) on every
// layout: AdamW with GQA (tied) and MHA (untied); Adam and SGD with momentum on keras-hub 2x4.
TEST_F(LlamaTrainTest, TenStepsInFloat64GiveTheReferenceLossesWithin1e9) {
  const int64_t B = 8, T = 6, steps = 10;
  struct Run {
    std::string optimizer;
    OptimizerOptions options;
  };
  const Run runs[] = {{"adamw", {.learning_rate = 1e-2}},
                      {"adam", {.learning_rate = 1e-2}},
                      {"sgd", {.learning_rate = 0.5, .momentum = 0.9}}};
  const std::vector<Layouts> layouts = every_layout();
  double worst = 0;
  for (const LlamaConfig& config : {tiny(8, 2, true), tiny(4, 4, false)}) {
    const std::vector<int32_t> rows =
        learnable_rows(B * steps, T, static_cast<int32_t>(config.vocab_size), 9);
    for (size_t r = 0; r < std::size(runs); ++r) {
      for (size_t li = 0; li < layouts.size(); ++li) {
        if (r > 0 && (li != 1 || !config.tie_word_embeddings))
          continue;  // other optimizers: one case
        const Layouts& l = layouts[li];
        SCOPED_TRACE(runs[r].optimizer + " on " + l.what +
                     (config.tie_word_embeddings ? ", GQA tied" : ", MHA untied"));
        clear_session();
        LlamaModel model(config, l.rules, {.dtype = DType::kF64});
        const std::vector<double> want =
            testing::train_losses(testing::ReferenceLlama(model), rows, B * steps, T + 1, B, steps,
                                  {.name = runs[r].optimizer, .options = runs[r].options});
        auto optimizer = make_optimizer(runs[r].optimizer, runs[r].options);
        for (int64_t step = 0; step < steps; ++step) {
          const auto [inputs, targets] = split_rows(rows, step * B, B, T);
          const auto [x, y] = batch(model, inputs, targets, B, T);
          const double loss = llama_train_step(model, *optimizer, x, y);
          const double w = want[static_cast<size_t>(step)];
          EXPECT_NEAR(loss, w, 1e-9 * w) << "step " << step;
          worst = std::max(worst, std::abs(loss - w) / w);
        }
        EXPECT_LT(want.back(), want.front());  // it learns
        for (const VariablePtr& v : model.variables()) {
          for (const VariablePtr& slot : optimizer->slots_of(*v)) {
            EXPECT_EQ(slot->dtype(), DType::kF64) << slot->path();
            EXPECT_EQ(slot->value().layout(), v->value().layout()) << slot->path();
          }
        }
      }
    }
  }
  std::printf("[ info     ] F64: largest relative loss difference over ten steps: %.3g\n", worst);
}

// Inference in float64: the logits equal the float64 formulas to 1e-12, greedy decoding (prefill
// then one token per step, the key/value caches in F64) the reference's tokens.
TEST_F(LlamaTrainTest, Float64LogitsAndGreedyDecodingMatchTheReference) {
  const std::vector<Layouts> layouts = every_layout();
  for (const size_t li : {size_t{0}, size_t{2}}) {
    SCOPED_TRACE(layouts[li].what);
    clear_session();
    LlamaModel model(tiny(8, 2, true), layouts[li].rules, {.dtype = DType::kF64});
    const std::vector<int32_t> tokens = random_rows(2, 5, 48, 3);
    HostTensor t(DType::kI32, {2, 5});
    std::copy(tokens.begin(), tokens.end(), t.data_as<int32_t>());
    const HostTensor logits =
        model.logits(distribute_tensor(t, TensorLayout::replicated(2, model.mesh()))).gather();
    ASSERT_EQ(logits.dtype(), DType::kF64);
    EXPECT_LT(relative_difference(logits, testing::reference_llama_logits(model, tokens, 2, 5)),
              1e-12);
    const GenerateResult r = generate(model, {{3, 17, 42}}, {.max_new_tokens = 5});
    EXPECT_EQ(r.tokens[0], testing::reference_greedy(model, {3, 17, 42}, 5));
  }
  EXPECT_TRUE(testing::HasSubstr(testing::ValueErrorMessage([&] {
                                   LlamaModel(tiny(4, 4, false), layouts[0].rules,
                                              {.dtype = DType::kBF16});
                                 }),
                                 "LlamaModel runs in F32 or F64, got dtype BF16"));
}

// A step holds each device's shards of the weights, gradients and slots plus activations:
// nothing whole. Megatron rules on 1x8 with weights far larger than the activations.
TEST_F(LlamaTrainTest, AStepHoldsShardsAndActivationsOnlyOnEveryDevice) {
  const LlamaConfig config{.vocab_size = 1024,
                           .hidden_size = 64,
                           .intermediate_size = 256,
                           .num_hidden_layers = 2,
                           .num_attention_heads = 8,
                           .num_key_value_heads = 8,
                           .head_dim = 8,
                           .tie_word_embeddings = false,
                           .max_position_embeddings = 16};
  const DeviceMesh mesh({1, 8}, {"batch", "model"});
  LlamaModel model(config, testing::megatron_rules(mesh));
  auto optimizer = make_optimizer("adam");
  const int64_t B = 2, T = 4;
  std::vector<int32_t> inputs(B * T, 3), targets(B * T, 5);
  const auto [x, y] = batch(model, inputs, targets, B, T);
  llama_train_step(model, *optimizer, x, y);  // builds the slots
  std::map<int64_t, int64_t> weights;
  int64_t whole = 0;
  for (const VariablePtr& v : model.variables()) {
    whole += num_elements(v->shape()) * 4;
    for (const Array::Shard& s : v->value().local_shards())
      weights[s.device_id] += static_cast<int64_t>(s.buffer.size());
  }
  std::vector<VirtualDevice*> devices = default_runtime()->local_devices();
  for (VirtualDevice* d : devices) d->memory().reset_peak();
  llama_train_step(model, *optimizer, x, y);
  // Activations: per layer a few (B, T, d) and (B, T, ff) arrays, and the logits, each at most
  // whole on a device, 4 bytes: a generous bound far below the weights.
  const int64_t activations =
      4 * (config.num_hidden_layers * 16 * B * T * (64 + 256) + 4 * B * T * 1024);
  for (int64_t p = 0; p < mesh.size(); ++p) {
    const int64_t id = mesh.device_ids()[static_cast<size_t>(p)];
    const int64_t peak = devices[static_cast<size_t>(id)]->memory().stats().peak_bytes;
    // weights + gradients + Adam's two slots = 4 x the weight shards.
    EXPECT_LE(peak, 4 * weights[id] + activations) << "device " << id;
    EXPECT_LT(peak, whole) << "device " << id << " held as much as the whole model";
  }
}

class TokenFileTest : public LlamaTrainTest {
 protected:
  void TearDown() override {
    std::filesystem::remove_all(dir_);
    LlamaTrainTest::TearDown();
  }
  std::string write(const HostTensor& tokens, const std::string& name = "tokens") {
    std::filesystem::create_directories(dir_);
    const DeviceMesh one({1}, {"x"}, std::vector<std::string>{"cpu:0"});
    const Array a = distribute_tensor(
        tokens, TensorLayout::replicated(static_cast<int>(tokens.shape().size()), one));
    const std::string path = dir_ + "/" + name + ".safetensors";
    const NamedArray named[] = {{name, &a}};
    save_arrays(path, named);
    return path;
  }
  std::string dir_ =
      (std::filesystem::temp_directory_path() / ("llama_train_test_" + std::to_string(::getpid())))
          .string();
};

TEST_F(TokenFileTest, RefusesDataOfTheWrongNameDtypeRankOrLength) {
  try {
    TokenDataset::open(write(HostTensor(DType::kF32, {4, 6})));
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_THAT(
        e.what(),
        HasSubstr("tokens must be I32 of shape (rows, seq + 1) with seq >= 1, got F32 (4, 6)"));
  }
  EXPECT_THROW(TokenDataset::open(write(HostTensor(DType::kI32, {24}))), ValueError);
  EXPECT_THROW(TokenDataset::open(write(HostTensor(DType::kI32, {4, 1}))), ValueError);
  EXPECT_THROW(TokenDataset::open(write(HostTensor(DType::kI32, {4, 6}), "ids")), NotFoundError);
  // A directory was refused as a checkpoint directory, without naming the training data.
  const std::string dir = ::testing::TempDir() + "token_file_test_dir";
  std::filesystem::create_directories(dir);
  try {
    TokenDataset::open(dir);
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("training data '" + dir +
                                    "' is a directory; expected a safetensors file"));
  }
  std::filesystem::remove_all(dir);

  const LlamaConfig config = tiny(4, 4, false);
  LlamaModel model(config, llama_layout_map(DeviceMesh({2, 4}, {"batch", "model"})));
  HostTensor rows(DType::kI32, {6, 5});
  for (int64_t i = 0; i < rows.num_elements(); ++i)
    rows.data_as<int32_t>()[i] = static_cast<int32_t>(i % 40);
  const TokenDataset data = TokenDataset::open(write(rows));
  EXPECT_EQ(data.rows(), 6);
  EXPECT_EQ(data.sequence_length(), 4);
  auto optimizer = make_optimizer("adamw");
  try {
    train_llama(model, data, *optimizer, {.batch_size = 4, .steps = 2});
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("has 6 rows, but steps 0 to 1 of batch 4 need 8"));
  }
  EXPECT_THROW(train_llama(model, data, *optimizer, {.batch_size = 0, .steps = 1}), ValueError);
  EXPECT_EQ(optimizer->iterations(), 0);  // nothing ran

  const LlamaTrainResult r = train_llama(model, data, *optimizer, {.batch_size = 2, .steps = 3});
  EXPECT_EQ(r.losses.size(), 3u);
  EXPECT_EQ(r.tokens, 3 * 2 * 4);
  EXPECT_EQ(optimizer->iterations(), 3);
}

TEST_F(TokenFileTest, ATokenOutsideTheVocabularyIsNamed) {
  const LlamaConfig config = tiny(4, 4, false);
  LlamaModel model(config, LayoutMap(DeviceMesh({2, 4}, {"batch", "model"})));
  HostTensor rows(DType::kI32, {2, 5});
  for (int64_t i = 0; i < rows.num_elements(); ++i) rows.data_as<int32_t>()[i] = 1;
  rows.data_as<int32_t>()[7] = 48;  // row 1, column 2: an input
  const TokenDataset data = TokenDataset::open(write(rows));
  auto optimizer = make_optimizer("sgd");
  try {
    train_llama(model, data, *optimizer, {.batch_size = 2, .steps = 1});
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("48"));
  }
  rows.data_as<int32_t>()[7] = 1;
  rows.data_as<int32_t>()[9] = 60;  // row 1, last column: only a target
  const TokenDataset targets_only = TokenDataset::open(write(rows, "tokens"));
  try {
    train_llama(model, targets_only, *optimizer, {.batch_size = 2, .steps = 1});
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("60"));
  }
  EXPECT_EQ(optimizer->iterations(), 0);
}

}  // namespace
}  // namespace meshlayout
