// `meshlayout generate` on a tiny random Llama written with save_hf_llama (and the toy
// tokenizer): the JSON lines parse and give the tokens (and log-probabilities) of generate() on a
// replicated model, the same tokens under the Megatron and keras-hub rules files and on other
// meshes, the text report, text prompts streamed and batched, sampling with a seed, the EOS of
// generation_config.json, and each refusal. Also the example rules files under examples/rules/.
#include "meshlayout/cli/generate_command.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "meshlayout/cli/generate_test_util.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/layout_map/rules_file.h"
#include "meshlayout/models/generation.h"
#include "meshlayout/models/llama.h"
#include "meshlayout/plan/text_format.h"
#include "meshlayout/testing/test_util.h"
#include "meshlayout/tokenizers/tokenizer.h"
#include "meshlayout/tokenizers/toy_tokenizer.h"

namespace meshlayout::cli {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using testing::ValueErrorMessage;

const std::string kRulesDir = std::string(MESHLAYOUT_SOURCE_DIR) + "/examples/rules/";

struct Step {
  int64_t step;
  int32_t token;
  double logprob;
};

class GenerateCommandTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    set_device_count(4);
    dir_ =
        (std::filesystem::temp_directory_path() / ("generate_test_" + std::to_string(::getpid())))
            .string();
    std::filesystem::create_directories(dir_);
    testing::write_tiny_llama(dir_);
    // What generate() gives on a replicated model loaded from that directory.
    clear_session();
    LlamaModel model(testing::tiny_generate_config(), LayoutMap(default_generate_mesh()));
    load_hf_llama(HfLlamaCheckpoint::open(dir_), model.variables_by_path());
    want_ = new std::vector<Step>;
    generate(model, {kPrompt},
             {.max_new_tokens = kNew, .on_token = [](int64_t step, int64_t, int32_t t, double lp) {
                want_->push_back({step, t, lp});
              }});
    reset_device_count();
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(dir_);
    delete want_;
  }
  void SetUp() override {
    set_device_count(4);
    clear_session();
  }
  void TearDown() override { reset_device_count(); }

  static std::vector<Step> run_json(GenerateCommandOptions o) {
    o.json = true;
    std::ostringstream out;
    clear_session();
    EXPECT_EQ(run_generate(o, out), 0);
    std::vector<Step> steps;
    std::istringstream lines(out.str());
    for (std::string line; std::getline(lines, line);) {
      const nlohmann::json j = nlohmann::json::parse(line);  // throws if not valid JSON
      EXPECT_EQ(j.size(), 3u) << line;
      steps.push_back({j.at("step").get<int64_t>(), j.at("token").get<int32_t>(),
                       j.at("logprob").get<double>()});
    }
    return steps;
  }
  static GenerateCommandOptions options() {
    return {.model_dir = dir_, .prompt_ids = {"5,17,42"}, .max_new_tokens = kNew};
  }

  static inline const std::vector<int32_t> kPrompt = {5, 17, 42};
  static constexpr int64_t kNew = 6;
  static inline std::string dir_;
  static inline std::vector<Step>* want_ = nullptr;
};

TEST_F(GenerateCommandTest, JsonLinesGiveTheTokensOfGenerateOnAReplicatedModel) {
  ASSERT_EQ(want_->size(), static_cast<size_t>(kNew));
  const std::vector<Step> got = run_json(options());
  ASSERT_EQ(got.size(), want_->size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].step, static_cast<int64_t>(i));
    EXPECT_EQ(got[i].token, (*want_)[i].token) << "step " << i;
    // Printed with 17 significant digits: the double read back is the one computed.
    EXPECT_EQ(got[i].logprob, (*want_)[i].logprob) << "step " << i;
    EXPECT_LE(got[i].logprob, 0.0);
  }
}

TEST_F(GenerateCommandTest, SameTokensUnderTheExampleRulesFilesAndOtherMeshes) {
  struct Case {
    std::string rules, mesh;
  };
  const Case cases[] = {{"llama_megatron.json", ""},
                        {"llama_megatron.json", "batch=1,model=2"},
                        {"llama_keras_hub.json", ""},
                        {"llama_keras_hub.json", "batch=2,model=2"},
                        {"", "model=4"}};
  for (const Case& c : cases) {
    GenerateCommandOptions o = options();
    if (!c.rules.empty()) o.rules_path = kRulesDir + c.rules;
    if (!c.mesh.empty()) o.mesh = c.mesh;
    const std::vector<Step> got = run_json(o);
    ASSERT_EQ(got.size(), want_->size()) << c.rules << " " << c.mesh;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].token, (*want_)[i].token) << c.rules << " " << c.mesh << " step " << i;
      EXPECT_NEAR(got[i].logprob, (*want_)[i].logprob, 1e-4)
          << c.rules << " " << c.mesh << " step " << i;
    }
  }
}

TEST_F(GenerateCommandTest, ShardedCheckpointDirectoryGivesTheSameTokens) {
  const std::string sharded = dir_ + "_sharded";
  std::filesystem::create_directories(sharded);
  testing::write_tiny_llama(sharded, /*num_shards=*/3);
  GenerateCommandOptions o = options();
  o.model_dir = sharded;
  o.rules_path = kRulesDir + "llama_megatron.json";
  const std::vector<Step> got = run_json(o);
  std::filesystem::remove_all(sharded);
  ASSERT_EQ(got.size(), want_->size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i].token, (*want_)[i].token);
}

TEST_F(GenerateCommandTest, TextReportShowsPromptTokensRatesAndMemory) {
  GenerateCommandOptions o = options();
  o.rules_path = kRulesDir + "llama_megatron.json";
  std::ostringstream out;
  EXPECT_EQ(run_generate(o, out), 0);
  const std::string text = out.str();
  std::string ids;
  for (const Step& s : *want_) ids += (ids.empty() ? "" : ",") + std::to_string(s.token);
  EXPECT_THAT(text, HasSubstr("vocab 64, hidden 16, 2 layers, 4 heads / 2 key-value heads, ff 32"));
  EXPECT_THAT(text, HasSubstr("mesh: mesh[batch=1,model=4] (1 process x 4 local devices)"));
  EXPECT_THAT(text, ContainsRegex("rules: '.*llama_megatron.json' \\(6 rules, search mode\\)"));
  EXPECT_THAT(text, HasSubstr("prompt (3 tokens): 5,17,42\n"));
  EXPECT_THAT(text, HasSubstr("generated (6 tokens): " + ids + "\n"));
  EXPECT_THAT(text, ContainsRegex("prefill: 3 tokens in [0-9.]+ s = [0-9.]+ tokens/s"));
  EXPECT_THAT(text, ContainsRegex("decode: +[0-9]+ tokens in [0-9.]+ s = [0-9.]+ tokens/s"));
  EXPECT_THAT(text, ContainsRegex("cpu:3 +live +[0-9.]+ [KMG]?i?B +peak"));
}

TEST_F(GenerateCommandTest, WithoutRulesEveryVariableIsReplicated) {
  std::ostringstream out;
  EXPECT_EQ(run_generate(options(), out), 0);
  EXPECT_THAT(out.str(), HasSubstr("rules: none: every variable replicated"));
}

TEST_F(GenerateCommandTest, RefusesBadInputNamingTheValue) {
  const auto message = [](GenerateCommandOptions o) {
    std::ostringstream out;
    try {
      clear_session();
      run_generate(o, out);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return "<nothing thrown> " + out.str();
  };
  GenerateCommandOptions o = options();
  o.prompt_ids = {"5,x,42"};
  EXPECT_THAT(message(o),
              HasSubstr("--prompt-ids '5,x,42' is not a comma-separated list of token ids"));
  EXPECT_THAT(message(o), HasSubstr("item 1 'x' is not a whole number"));
  o.prompt_ids = {"5,,42"};
  EXPECT_THAT(message(o), HasSubstr("item 1 is empty"));
  o.prompt_ids = {""};
  EXPECT_THAT(message(o), HasSubstr("it is empty"));
  o.prompt_ids = {"-1"};
  EXPECT_THAT(message(o), HasSubstr("item 0 '-1' is not a whole number"));
  o.prompt_ids = {"99999999999"};
  EXPECT_THAT(message(o), HasSubstr("item 0 '99999999999' is too large"));
  o.prompt_ids = {"5,64"};  // vocab is 64: generate's own ValueError reaches the user
  EXPECT_THAT(message(o), HasSubstr("token 64 at position 1 of prompt 0 is outside"));
  o = options();
  o.max_new_tokens = 0;
  EXPECT_THAT(message(o), HasSubstr("--max-new-tokens must be at least 1, got 0"));
  o = options();
  o.model_dir = "";
  EXPECT_THAT(message(o), HasSubstr("--model is required"));
  o.model_dir = dir_ + "/no-such-dir";
  EXPECT_THAT(message(o), HasSubstr("--model '" + dir_ + "/no-such-dir': no such directory"));
  o.model_dir = dir_ + "/config.json";
  EXPECT_THAT(message(o), HasSubstr("config.json' is not a directory"));
  o = options();
  o.mesh = "data=4";  // the keras-hub rules name "model" and "batch"
  o.rules_path = kRulesDir + "llama_keras_hub.json";
  EXPECT_THAT(message(o), ContainsRegex("model|batch"));
  o = options();
  o.rules_path = dir_ + "/missing.json";
  EXPECT_THAT(message(o), HasSubstr("missing.json"));
  // Issue 27: prompts, sampling values and the context window.
  o = options();
  o.prompts = {"the cat"};
  EXPECT_THAT(message(o), HasSubstr("--prompt (text) or as --prompt-ids (token ids), not both"));
  o.prompt_ids.clear();
  o.prompts.clear();
  EXPECT_THAT(message(o), HasSubstr("a prompt is required"));
  o = options();
  o.top_p = 1.5;
  EXPECT_THAT(message(o), HasSubstr("--top-p must be in (0, 1] (1: no top-p filter), got 1.5"));
  o.top_p = 0.0;
  EXPECT_THAT(message(o), HasSubstr("--top-p must be in (0, 1]"));
  o = options();
  o.temperature = 0.0;
  EXPECT_THAT(message(o), HasSubstr("--temperature must be a number > 0 when sampling, got 0"));
  o = options();
  o.top_k = -2;
  EXPECT_THAT(message(o), HasSubstr("--top-k must be >= 0 (0: no top-k filter), got -2"));
  o = options();
  std::string long_prompt = "1";
  for (int i = 0; i < 64; ++i) long_prompt += ",1";
  o.prompt_ids = {long_prompt};
  EXPECT_THAT(message(o), HasSubstr("prompt 0 has 65 tokens, more than the context window "
                                    "(max_position_embeddings 64)"));
  o.prompt_ids = {"1,2,3"};
  o.max_new_tokens = 62;
  EXPECT_THAT(message(o), HasSubstr("the prompt (3 tokens) plus max_new_tokens (62) at most the "
                                    "context window (max_position_embeddings 64)"));
  // Text needs a tokenizer in the model directory.
  const std::string bare = dir_ + "_no_tokenizer";
  std::filesystem::create_directories(bare);
  for (const char* f : {"config.json", "model.safetensors"}) {
    std::filesystem::copy_file(dir_ + "/" + f, bare + "/" + f,
                               std::filesystem::copy_options::overwrite_existing);
  }
  o = options();
  o.model_dir = bare;
  o.prompt_ids.clear();
  o.prompts = {"the cat"};
  EXPECT_THAT(message(o), HasSubstr("tokenizer.json"));
  std::filesystem::remove_all(bare);
}

// The tokens generate() gives for `prompts` with `o` on a replicated model of the tiny Llama.
std::vector<std::vector<int32_t>> library_tokens(const std::string& dir,
                                                 const std::vector<std::vector<int32_t>>& prompts,
                                                 GenerateOptions o) {
  clear_session();
  LlamaModel model(testing::tiny_generate_config(), LayoutMap(default_generate_mesh()));
  load_hf_llama(HfLlamaCheckpoint::open(dir), model.variables_by_path());
  return generate(model, prompts, o).tokens;
}

std::vector<int32_t> encoded(const tokenizers::Tokenizer& tok, const std::string& text) {
  std::vector<int32_t> ids;
  for (const int64_t id : tok.encode(text, true)) ids.push_back(static_cast<int32_t>(id));
  return ids;
}

// What generate and chat share: the device checked, the directory opened on its mesh.
TEST_F(GenerateCommandTest, GenerationSetupChecksTheDeviceAndPicksTheMesh) {
  EXPECT_EQ(ValueErrorMessage([] { open_generation_setup(dir_, "", std::nullopt, "tpu"); }),
            "--device 'tpu': expected cpu or gpu");
  const GenerationSetup s = open_generation_setup(dir_, "", std::nullopt, "cpu");
  EXPECT_EQ(s.llama.mesh->to_string(), "mesh[batch=1,model=4]");
  EXPECT_EQ(s.llama.rules_text, "none: every variable replicated");
  EXPECT_EQ(s.llama.checkpoint->config().vocab_size, testing::tiny_generate_config().vocab_size);
  EXPECT_EQ(s.device_runtime, default_runtime());
  EXPECT_EQ(
      open_generation_setup(dir_, "", std::string("batch=2,model=2"), "cpu").llama.mesh->shape(),
      (std::vector<int64_t>{2, 2}));
}

TEST_F(GenerateCommandTest, TextPromptStreamsItsContinuation) {
  const std::unique_ptr<tokenizers::Tokenizer> tok = tokenizers::load_tokenizer(dir_);
  const std::vector<int32_t> prompt = encoded(*tok, "the cat");
  EXPECT_EQ(prompt[0], 1);  // <s>, added by the tokenizer's post-processor
  const std::vector<int32_t> want = library_tokens(dir_, {prompt}, {.max_new_tokens = kNew})[0];
  const std::vector<int64_t> want64(want.begin(), want.end());
  GenerateCommandOptions o{.model_dir = dir_, .prompts = {"the cat"}, .max_new_tokens = kNew};
  o.rules_path = kRulesDir + "llama_megatron.json";
  std::ostringstream out;
  clear_session();
  EXPECT_EQ(run_generate(o, out), 0);
  const std::string text = out.str();
  EXPECT_THAT(text, HasSubstr("tokenizer: byte-level BPE from tokenizer.json (64 tokens"));
  EXPECT_THAT(text, HasSubstr("decoding: greedy; stop on 6 new tokens\n"));
  EXPECT_THAT(text, HasSubstr("prompt (" + std::to_string(prompt.size()) +
                              " tokens): " + join_ids(prompt) + "\n"));
  EXPECT_THAT(text, HasSubstr("\nthe cat" + tok->decode(want64, true) +
                              "\n\ngenerated (6 tokens): " + join_ids(want) + "\n"));
  // --json: per-token lines whose "text" pieces make up the decoded continuation.
  o.json = true;
  std::ostringstream json_out;
  clear_session();
  EXPECT_EQ(run_generate(o, json_out), 0);
  std::istringstream lines(json_out.str());
  std::string pieces;
  std::vector<int32_t> got;
  for (std::string line; std::getline(lines, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    got.push_back(j.at("token").get<int32_t>());
    pieces += j.at("text").get<std::string>();
  }
  EXPECT_EQ(got, want);
  EXPECT_EQ(pieces, tok->decode(want64, true));
}

TEST_F(GenerateCommandTest, BatchedTextPromptsEachGiveTheirOwnTokens) {
  const std::unique_ptr<tokenizers::Tokenizer> tok = tokenizers::load_tokenizer(dir_);
  const std::vector<std::string> texts = {"the cat sat on the mat", "a", "is it"};
  GenerateCommandOptions o{.model_dir = dir_, .prompts = texts, .max_new_tokens = 5};
  o.rules_path = kRulesDir + "llama_keras_hub.json";
  o.mesh = "batch=2,model=2";
  o.json = true;
  std::ostringstream out;
  clear_session();
  EXPECT_EQ(run_generate(o, out), 0);
  std::vector<std::vector<int32_t>> got(texts.size());
  std::istringstream lines(out.str());
  for (std::string line; std::getline(lines, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    got.at(j.at("sequence").get<size_t>()).push_back(j.at("token").get<int32_t>());
  }
  for (size_t b = 0; b < texts.size(); ++b) {
    EXPECT_EQ(got[b], library_tokens(dir_, {encoded(*tok, texts[b])}, {.max_new_tokens = 5})[0])
        << texts[b];
  }
  // Without --json: each prompt's text and its ids at the end.
  o.json = false;
  std::ostringstream report;
  clear_session();
  EXPECT_EQ(run_generate(o, report), 0);
  EXPECT_THAT(report.str(), HasSubstr("--- text 1\na"));
  EXPECT_THAT(report.str(), HasSubstr("generated 2 (5 tokens): " + join_ids(got[2]) + "\n"));
}

TEST_F(GenerateCommandTest, SamplingWithASeedIsTheLibrarysOnEveryMesh) {
  const GenerateOptions sampling{
      .max_new_tokens = kNew, .do_sample = true, .temperature = 1.5, .top_k = 20, .seed = 11};
  const std::vector<int32_t> want = library_tokens(dir_, {kPrompt}, sampling)[0];
  EXPECT_NE(want, library_tokens(dir_, {kPrompt}, {.max_new_tokens = kNew})[0]);  // not greedy
  for (const std::string rules : {"", "llama_megatron.json", "llama_keras_hub.json"}) {
    GenerateCommandOptions o = options();
    o.temperature = 1.5;
    o.top_k = 20;
    o.seed = 11;
    if (!rules.empty()) o.rules_path = kRulesDir + rules;
    std::vector<int32_t> got;
    for (const Step& s : run_json(o)) got.push_back(s.token);
    EXPECT_EQ(got, want) << rules;
  }
}

TEST_F(GenerateCommandTest, StopsOnTheEosOfGenerationConfig) {
  const std::string eos_dir = dir_ + "_eos";
  std::filesystem::create_directories(eos_dir);
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json"}) {
    std::filesystem::copy_file(dir_ + "/" + f, eos_dir + "/" + f,
                               std::filesystem::copy_options::overwrite_existing);
  }
  const int32_t eos = (*want_)[2].token;  // the third greedy token
  std::ofstream(eos_dir + "/generation_config.json") << "{\"eos_token_id\": [" << eos << ", 63]}";
  GenerateCommandOptions o = options();
  o.model_dir = eos_dir;
  std::ostringstream out;
  clear_session();
  EXPECT_EQ(run_generate(o, out), 0);
  int64_t first_eos = 0;  // the first of the two ids in the greedy tokens (at most step 2)
  while ((*want_)[static_cast<size_t>(first_eos)].token != eos &&
         (*want_)[static_cast<size_t>(first_eos)].token != 63) {
    ++first_eos;
  }
  std::string ids;
  for (int64_t i = 0; i <= first_eos; ++i) {
    ids += (ids.empty() ? "" : ",") + std::to_string((*want_)[static_cast<size_t>(i)].token);
  }
  EXPECT_THAT(out.str(),
              HasSubstr("stop on EOS id " + std::to_string(eos) + ", 63 or 6 new tokens"));
  EXPECT_THAT(out.str(), HasSubstr("generated (" + std::to_string(first_eos + 1) +
                                   " tokens, stopped on EOS): " + ids + "\n"));
  std::filesystem::remove_all(eos_dir);
}

// A character split over byte-level tokens is printed once whole.
TEST(TokenTextStreamTest, HoldsBackSplitCharacters) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("meshlayout_stream_" + std::to_string(::getpid()));
  tokenizers::write_toy_tokenizer(dir.string(), 512);
  const std::unique_ptr<tokenizers::Tokenizer> tok = tokenizers::load_tokenizer(dir.string());
  const std::vector<int64_t> ids = tok->encode("é東 x", false);  // one token per byte here
  TokenTextStream stream(*tok);
  std::vector<std::string> pieces;
  for (const int64_t id : ids) pieces.push_back(stream.push(id));
  EXPECT_EQ(pieces.front(), "");  // the first byte of é
  std::string all;
  for (const std::string& p : pieces) {
    EXPECT_TRUE(p.empty() || p == "é" || p == "東" || p == " " || p == "x" || p == " x") << p;
    all += p;
  }
  all += stream.finish();
  EXPECT_EQ(all, "é東 x");
  EXPECT_EQ(stream.push(2), "");  // </s> is special: no text
  std::filesystem::remove_all(dir);
}

TEST(GenerateCommandParseTest, PromptAcceptsSpacesAroundItems) {
  EXPECT_EQ(parse_prompt("5, 17 ,42"), (std::vector<int32_t>{5, 17, 42}));
  EXPECT_EQ(parse_prompt("2147483647"), (std::vector<int32_t>{2147483647}));
  EXPECT_THAT(ValueErrorMessage([] { parse_prompt("2147483648"); }), HasSubstr("is too large"));
  EXPECT_THAT(ValueErrorMessage([] { parse_prompt("1.5"); }),
              HasSubstr("'1.5' is not a whole number"));
}

// The layout `map` gives `path` without its mesh ("layout[model,None]"), or "none".
std::string rule_layout_text(const LayoutMap& map, const std::string& path) {
  const std::optional<TensorLayout> l = map.get(path);
  if (!l) return "none";
  const std::string text = l->to_string();  // layout[…]@mesh[…]
  return text.substr(0, text.find('@'));
}

// The example rules files: each loads, and keras-hub paths get the documented layouts.
TEST(LlamaRulesFilesTest, KerasHubRulesGiveKerasHubLayouts) {
  set_device_count(8);
  const DeviceMesh mesh({2, 4}, {"batch", "model"});
  RulesFile file = load_rules_file(kRulesDir + "llama_keras_hub.json");
  EXPECT_FALSE(file.mesh.has_value());  // portable: the mesh comes from --mesh or the default
  file.mesh = mesh;
  const LayoutMap map = file.to_layout_map();
  const auto layout = [&](const std::string& path) { return rule_layout_text(map, path); };
  EXPECT_EQ(layout("token_embedding/embeddings"), "layout[model,batch]");
  EXPECT_EQ(layout("transformer_layer_0/self_attention/query/kernel"), "layout[model,batch,None]");
  EXPECT_EQ(layout("transformer_layer_1/self_attention/value/kernel"), "layout[model,batch,None]");
  EXPECT_EQ(layout("transformer_layer_0/self_attention/attention_output/kernel"),
            "layout[model,None,batch]");
  EXPECT_EQ(layout("transformer_layer_3/feedforward_gate_dense/kernel"), "layout[batch,model]");
  EXPECT_EQ(layout("transformer_layer_3/feedforward_intermediate_dense/kernel"),
            "layout[batch,model]");
  EXPECT_EQ(layout("transformer_layer_3/feedforward_output_dense/kernel"), "layout[model,batch]");
  EXPECT_EQ(layout("transformer_layer_0/self_attention_layernorm/scale"), "none");
  EXPECT_EQ(layout("token_embedding/reverse_embeddings"), "none");
  EXPECT_EQ(layout("sequence_output_layernorm/scale"), "none");
  // The same as llama_layout_map (keras-hub's get_layout_map) on every variable of a model.
  const LayoutMap builtin = llama_layout_map(mesh, "model", "batch");
  for (const HfWeightMapping& m : hf_llama_weight_mappings(testing::tiny_generate_config())) {
    const std::optional<TensorLayout> a = map.get(m.keras_path), b = builtin.get(m.keras_path);
    EXPECT_EQ(a.has_value(), b.has_value()) << m.keras_path;
    if (a && b) {
      EXPECT_EQ(a->to_string(), b->to_string()) << m.keras_path;
    }
  }
  reset_device_count();
}

TEST(LlamaRulesFilesTest, MegatronRulesSplitHeadsAndFeedforward) {
  set_device_count(8);
  RulesFile file = load_rules_file(kRulesDir + "llama_megatron.json");
  EXPECT_FALSE(file.mesh.has_value());
  file.mesh = DeviceMesh({1, 8}, {"batch", "model"});
  const LayoutMap map = file.to_layout_map();
  const auto layout = [&](const std::string& path) { return rule_layout_text(map, path); };
  EXPECT_EQ(layout("token_embedding/embeddings"), "layout[model,None]");
  EXPECT_EQ(layout("token_embedding/reverse_embeddings"), "layout[None,model]");
  EXPECT_EQ(layout("transformer_layer_0/self_attention/query/kernel"), "layout[None,model,None]");
  EXPECT_EQ(layout("transformer_layer_0/self_attention/key/kernel"), "layout[None,model,None]");
  EXPECT_EQ(layout("transformer_layer_0/self_attention/attention_output/kernel"),
            "layout[model,None,None]");
  EXPECT_EQ(layout("transformer_layer_7/feedforward_gate_dense/kernel"), "layout[None,model]");
  EXPECT_EQ(layout("transformer_layer_7/feedforward_intermediate_dense/kernel"),
            "layout[None,model]");
  EXPECT_EQ(layout("transformer_layer_7/feedforward_output_dense/kernel"), "layout[model,None]");
  EXPECT_EQ(layout("transformer_layer_7/feedforward_layernorm/scale"), "none");
  // Every rule is used by some variable of a Llama, and no path matches two rules.
  for (const HfWeightMapping& m : hf_llama_weight_mappings(testing::tiny_generate_config())) {
    EXPECT_NO_THROW(map.get(m.keras_path)) << m.keras_path;
  }
  reset_device_count();
}

}  // namespace
}  // namespace meshlayout::cli
