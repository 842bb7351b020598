// Generation: a left-padded batch of prompts of lengths 3, 7 and 1 gives, row by row, the
// tokens and log-probabilities of each prompt alone (one device, a 2x4 mesh under keras-hub and
// Megatron rules; every family's small model); sampling with a seed gives the same tokens on every
// mesh, other seeds other tokens, top_k = 1 the greedy ones; the sampler's frequencies over 20000
// counter-based draws match its distribution, which follows Hugging Face's warper order (checked by
// hand); EOS stops a row and not the others; eos ids from generation_config.json; bad input
// refused.
#include "meshlayout/models/generation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/models/generation_test_util.h"
#include "meshlayout/models/llama_families_test_util.h"
#include "meshlayout/models/llama_test_util.h"
#include "meshlayout/testing/test_util.h"

namespace meshlayout {
namespace {

namespace fs = std::filesystem;
using testing::HasSubstr;

class GenerationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    set_device_count(8);
    clear_session();
  }
  void TearDown() override { reset_device_count(); }

  // The sharpened test model on `mesh` under `rules_name` ("replicated", "keras-hub",
  // "Megatron"): the same weights on every mesh (counter-based initialisers).
  std::unique_ptr<LlamaModel> model(const DeviceMesh& mesh, const std::string& rules_name) {
    clear_session();
    const LayoutMap rules = rules_name == "Megatron"    ? testing::megatron_rules(mesh)
                            : rules_name == "keras-hub" ? llama_layout_map(mesh, "model", "batch")
                                                        : LayoutMap(mesh);
    auto m = std::make_unique<LlamaModel>(testing::generation_test_config(), rules);
    testing::sharpen_weights(*m);
    return m;
  }

  DeviceMesh one_device_{Shape{1, 1}, {"batch", "model"}, std::vector<std::string>{"cpu:0"}};
  DeviceMesh mesh_{{2, 4}, {"batch", "model"}};
};

TEST_F(GenerationTest, PaddedBatchRowsEqualEachPromptAlone) {
  const std::vector<std::vector<int32_t>> prompts = {{3, 17, 42}, {5, 9, 1, 0, 47, 30, 8}, {21}};
  std::vector<int32_t> first_run;
  for (const auto& [mesh, rules_name] :
       {std::pair{&one_device_, "replicated"}, std::pair{&mesh_, "keras-hub"},
        std::pair{&mesh_, "Megatron"}}) {
    SCOPED_TRACE(rules_name);
    auto m = model(*mesh, rules_name);
    const GenerateResult batch = generate(*m, prompts, {.max_new_tokens = 6});
    ASSERT_EQ(batch.tokens.size(), 3u);
    for (size_t b = 0; b < prompts.size(); ++b) {
      const GenerateResult alone = generate(*m, {prompts[b]}, {.max_new_tokens = 6});
      EXPECT_EQ(batch.tokens[b], alone.tokens[0]) << "prompt " << b;
      ASSERT_EQ(batch.logprobs[b].size(), alone.logprobs[0].size());
      for (size_t s = 0; s < alone.logprobs[0].size(); ++s) {
        EXPECT_NEAR(batch.logprobs[b][s], alone.logprobs[0][s], 1e-5) << "prompt " << b;
      }
      // And alone equals the float64 reference's greedy continuation.
      EXPECT_EQ(alone.tokens[0], testing::reference_greedy(*m, prompts[b], 6)) << "prompt " << b;
    }
    EXPECT_EQ(batch.prefill_tokens, 3 * 7);
    // The greedy tokens differ between rows (the test is not vacuous).
    EXPECT_NE(batch.tokens[0], batch.tokens[1]);
  }
}

// Every family's attention variant (Mistral's window shorter than the prompts, Qwen's biases
// and head norms, Llama 3's rope scaling, Gemma's) keeps a padded row equal to its prompt alone,
// under keras-hub's rules for the family on 2x4.
TEST_F(GenerationTest, PaddedBatchRowsEqualEachPromptAloneInEveryFamily) {
  const std::vector<std::vector<int32_t>> prompts = {{3, 17, 42}, {5, 9, 1, 0, 47, 30, 8}, {21}};
  for (const testing::Family& f : testing::families()) {
    SCOPED_TRACE(f.what);
    clear_session();
    LlamaModel m(f.config, family_layout_map(f.config, mesh_, "model", "batch"));
    const GenerateResult batch = generate(m, prompts, {.max_new_tokens = 5});
    for (size_t b = 0; b < prompts.size(); ++b) {
      const GenerateResult alone = generate(m, {prompts[b]}, {.max_new_tokens = 5});
      EXPECT_EQ(batch.tokens[b], alone.tokens[0]) << "prompt " << b;
      for (size_t s = 0; s < alone.logprobs[0].size() && s < batch.logprobs[b].size(); ++s) {
        EXPECT_NEAR(batch.logprobs[b][s], alone.logprobs[0][s], 1e-5) << "prompt " << b;
      }
    }
  }
}

TEST_F(GenerationTest, SamplingWithASeedIsTheSameOnEveryMesh) {
  std::vector<std::vector<int32_t>> first;
  for (const auto& [mesh, rules_name] :
       {std::pair{&one_device_, "replicated"}, std::pair{&mesh_, "replicated"},
        std::pair{&mesh_, "keras-hub"}, std::pair{&mesh_, "Megatron"}}) {
    SCOPED_TRACE(rules_name);
    auto m = model(*mesh, rules_name);
    const GenerateResult r = generate(*m, testing::kSampledPrompts, testing::sampled_options());
    if (first.empty()) first = r.tokens;
    EXPECT_EQ(r.tokens, first);
    EXPECT_EQ(r.tokens, testing::kSampledTokens);
    // Other seeds give other tokens; the same seed again the same.
    EXPECT_EQ(generate(*m, testing::kSampledPrompts, testing::sampled_options()).tokens, r.tokens);
    EXPECT_NE(generate(*m, testing::kSampledPrompts, testing::sampled_options(8)).tokens, r.tokens);
    EXPECT_NE(generate(*m, testing::kSampledPrompts, testing::sampled_options(1234567)).tokens,
              r.tokens);
    // Sampling is not greedy here, and top_k = 1 is.
    const GenerateResult greedy = generate(*m, testing::kSampledPrompts, {.max_new_tokens = 8});
    EXPECT_NE(r.tokens, greedy.tokens);
    GenerateOptions top1 = testing::sampled_options();
    top1.top_k = 1;
    EXPECT_EQ(generate(*m, testing::kSampledPrompts, top1).tokens, greedy.tokens);
  }
}

// Hugging Face's order, by hand: logits {2, 1, 0.5, 0, -1, 3} at temperature 0.5 are
// {4, 2, 1, 0, -2, 6}; top_k 4 keeps ids 5, 0, 1, 2; their softmax is {0.862, 0.117, 0.016,
// 0.006}; top_p 0.9 keeps 5 (0.862 < 0.9) and 0 (0.978 >= 0.9): e^6 / (e^6 + e^4) and the rest.
TEST(SamplerTest, FiltersInHuggingFaceOrder) {
  const std::vector<double> logits{2, 1, 0.5, 0, -1, 3};
  const GenerateOptions o{.do_sample = true, .temperature = 0.5, .top_k = 4, .top_p = 0.9};
  const std::vector<double> p = sampling_probabilities(logits, o);
  const double p5 = 1 / (1 + std::exp(-2.0));
  const std::vector<double> want{1 - p5, 0, 0, 0, 0, p5};
  for (size_t v = 0; v < want.size(); ++v) EXPECT_NEAR(p[v], want[v], 1e-15) << v;
  // top_k alone keeps the ties with the k-th score; top_p = 1 and top_k = 0 keep everything.
  const std::vector<double> tied{1, 3, 3, 0};
  const std::vector<double> q =
      sampling_probabilities(tied, {.do_sample = true, .temperature = 1, .top_k = 1});
  EXPECT_NEAR(q[1], 0.5, 1e-15);
  EXPECT_NEAR(q[2], 0.5, 1e-15);
  const std::vector<double> all = sampling_probabilities(logits, {.do_sample = true});
  double sum = 0;
  for (size_t v = 0; v < logits.size(); ++v) {
    EXPECT_GT(all[v], 0);
    sum += std::exp(logits[v]);
  }
  EXPECT_NEAR(all[5], std::exp(3.0) / sum, 1e-15);
  // top_p smaller than the top token's probability keeps that token alone.
  EXPECT_EQ(sampling_probabilities(logits, {.do_sample = true, .top_p = 1e-9})[5], 1.0);
}

TEST(SamplerTest, FrequenciesFollowTheDistribution) {
  const std::vector<double> logits{0.3, -1.2, 2.0, 1.1, 0.0, -0.4, 1.7, -2.5};
  const GenerateOptions o{.do_sample = true, .temperature = 1.5, .top_k = 6, .top_p = 0.93};
  const std::vector<double> p = sampling_probabilities(logits, o);
  constexpr int kDraws = 20000;
  std::vector<int> counts(logits.size(), 0);
  for (int i = 0; i < kDraws; ++i) {
    const double u = sampling_uniform(/*seed=*/42, /*sequence=*/i % 3, /*step=*/i);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    ++counts[static_cast<size_t>(choose_token(logits, o, u))];
  }
  int filtered = 0;
  for (size_t v = 0; v < logits.size(); ++v) {
    if (p[v] == 0) {
      ++filtered;
      EXPECT_EQ(counts[v], 0) << "token " << v << " was filtered out";
      continue;
    }
    const double mean = kDraws * p[v], sd = std::sqrt(kDraws * p[v] * (1 - p[v]));
    EXPECT_LT(std::abs(counts[v] - mean), 5 * sd)
        << "token " << v << ": " << counts[v] << " draws, expected " << mean;
  }
  EXPECT_GE(filtered, 2);  // top_k removed two, top_p maybe more: the filters took part
  // The draws are a pure function of (seed, sequence, step).
  EXPECT_EQ(sampling_uniform(1, 2, 3), sampling_uniform(1, 2, 3));
  EXPECT_NE(sampling_uniform(1, 2, 3), sampling_uniform(2, 2, 3));
  EXPECT_NE(sampling_uniform(1, 2, 3), sampling_uniform(1, 3, 3));
  EXPECT_NE(sampling_uniform(1, 2, 3), sampling_uniform(1, 2, 4));
  // Greedy ignores u and takes the first of equal maxima.
  EXPECT_EQ(choose_token(std::vector<double>{1, 4, 4, 2}, {}, 0.99), 1);
}

TEST_F(GenerationTest, EosStopsItsSequenceAndNotTheOthers) {
  auto m = model(mesh_, "Megatron");
  const std::vector<std::vector<int32_t>> prompts = {{3, 17, 42}, {5, 9}, {21, 4, 4, 7}};
  const GenerateResult free_run = generate(*m, prompts, {.max_new_tokens = 8});
  const int32_t eos = free_run.tokens[0][2];  // row 0's third token
  const GenerateResult r = generate(*m, prompts, {.max_new_tokens = 8, .eos_token_ids = {eos}});
  bool one_ran_on = false;
  for (size_t b = 0; b < prompts.size(); ++b) {
    const std::vector<int32_t>& all = free_run.tokens[b];
    const auto stop = std::find(all.begin(), all.end(), eos);
    const std::vector<int32_t> want(all.begin(), stop == all.end() ? all.end() : stop + 1);
    EXPECT_EQ(r.tokens[b], want) << "row " << b;
    EXPECT_EQ(r.stopped_on_eos[b], stop != all.end()) << "row " << b;
    one_ran_on = one_ran_on || (stop == all.end() && want.size() == 8);
  }
  EXPECT_EQ(r.tokens[0].size(), 3u);
  EXPECT_TRUE(one_ran_on) << "no row ran past row 0's EOS";
  // Every row stopping ends the loop early: fewer decode steps.
  const GenerateResult all_stop =
      generate(*m, {prompts[0]}, {.max_new_tokens = 8, .eos_token_ids = {eos, 999}});
  EXPECT_EQ(all_stop.tokens[0].size(), 3u);
  EXPECT_EQ(all_stop.decode_tokens, 2);
}

TEST_F(GenerationTest, RefusesBadInput) {
  auto m = model(mesh_, "Megatron");
  const auto error = [&](const std::vector<std::vector<int32_t>>& prompts,
                         const GenerateOptions& o) {
    return testing::ValueErrorMessage([&] { (void)generate(*m, prompts, o); });
  };
  EXPECT_TRUE(HasSubstr(error({{1, 48}}, {}), "token 48 at position 1 of prompt 0 is outside"));
  EXPECT_TRUE(HasSubstr(error({}, {}), "at least one prompt"));
  EXPECT_TRUE(HasSubstr(error({{1}, {}}, {}), "prompt 1 is empty"));
  EXPECT_TRUE(HasSubstr(error({std::vector<int32_t>(65, 1)}, {}),
                        "prompt 0 has 65 tokens, more than the context window "
                        "(max_position_embeddings 64)"));
  EXPECT_TRUE(HasSubstr(error({{1, 2}, {1, 2, 3}}, {.max_new_tokens = 62}),
                        "the prompt (3 tokens) plus max_new_tokens (62) at most the context "
                        "window (max_position_embeddings 64)"));
  EXPECT_TRUE(HasSubstr(error({{1}}, {.max_new_tokens = 0}), "max_new_tokens must be >= 1"));
  EXPECT_TRUE(HasSubstr(error({{1}}, {.do_sample = true, .temperature = 0}),
                        "temperature must be a number > 0 when sampling, got 0"));
  EXPECT_TRUE(HasSubstr(error({{1}}, {.do_sample = true, .temperature = -1}), "got -1"));
  EXPECT_TRUE(HasSubstr(error({{1}}, {.do_sample = true, .temperature = NAN}), "got nan"));
  EXPECT_TRUE(HasSubstr(error({{1}}, {.top_k = -1}), "top_k must be >= 0"));
  EXPECT_TRUE(HasSubstr(error({{1}}, {.top_p = 0}), "top_p must be in (0, 1]"));
  EXPECT_TRUE(HasSubstr(error({{1}}, {.top_p = 1.5}), "got 1.5"));
  EXPECT_TRUE(HasSubstr(error({{1}}, {.top_p = NAN}), "got nan"));
  // Greedy ignores the temperature.
  EXPECT_EQ(generate(*m, {{1}}, {.max_new_tokens = 1, .temperature = 0}).tokens[0].size(), 1u);
}

// Issue 24: finite weights whose activations overflow (a norm scale of 3e38) gave NaN logits,
// whose argmax is token 0; generate printed it with exit 0. Non-finite logits are refused.
TEST_F(GenerationTest, RefusesLogitsThatOverflow) {
  auto m = model(mesh_, "Megatron");
  Array* scale = m->variables_by_path().at("sequence_output_layernorm/scale");
  for (Array::Shard& shard : scale->local_shards()) {
    float* x = reinterpret_cast<float*>(shard.buffer.data());
    for (int64_t i = 0; i < shard.box.num_elements(); ++i) x[i] = 3e38f;
  }
  const std::string e = testing::ValueErrorMessage([&] { (void)generate(*m, {{1, 2, 3}}); });
  EXPECT_TRUE(HasSubstr(e, "for prompt 0 at step 0 is"));
  EXPECT_TRUE(HasSubstr(e, "the model's activations overflow"));
}

TEST(ReadEosTokenIdsTest, GenerationConfigThenConfig) {
  const fs::path dir =
      fs::temp_directory_path() /
      ("meshlayout_eos_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  EXPECT_TRUE(read_eos_token_ids(dir.string()).empty());
  std::ofstream(dir / "config.json") << R"({"eos_token_id": 2})";
  EXPECT_EQ(read_eos_token_ids(dir.string()), std::vector<int64_t>{2});
  std::ofstream(dir / "generation_config.json") << R"({"do_sample": true})";
  EXPECT_EQ(read_eos_token_ids(dir.string()), std::vector<int64_t>{2});
  std::ofstream(dir / "generation_config.json") << R"({"eos_token_id": [128001, 128009]})";
  EXPECT_EQ(read_eos_token_ids(dir.string()), (std::vector<int64_t>{128001, 128009}));
  std::ofstream(dir / "generation_config.json") << R"({"eos_token_id": [1, "x"]})";
  const std::string e = testing::ValueErrorMessage([&] { (void)read_eos_token_ids(dir.string()); });
  EXPECT_TRUE(HasSubstr(e, "generation_config.json"));
  EXPECT_TRUE(HasSubstr(e, R"(eos_token_id [1,"x"] is not a token id)"));
  std::ofstream(dir / "generation_config.json") << "{";
  EXPECT_TRUE(HasSubstr(testing::ValueErrorMessage([&] { (void)read_eos_token_ids(dir.string()); }),
                        "generation_config.json"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace meshlayout
