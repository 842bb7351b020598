#include "meshlayout/cli/demo_command.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "meshlayout/core/errors.h"
#include "meshlayout/io/safetensors_file.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/models/hf_llama_checkpoint.h"
#include "meshlayout/tokenizers/tokenizer.h"

namespace meshlayout::cli {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(DemoCommandTest, RunsTheLlamaShardedAndPassesEveryCheck) {
  set_device_count(8);
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("demo_test_" + std::to_string(::getpid()));
  std::ostringstream out;
  EXPECT_EQ(run_demo(out, {.keep_dir = dir.string()}), 0) << out.str();
  const std::string text = out.str();
  EXPECT_THAT(text, HasSubstr("1. A 2x4 mesh of virtual devices: mesh[batch=2,model=4]"));
  EXPECT_THAT(text, ContainsRegex("transformer_layer_1/self_attention/query/kernel"));
  EXPECT_THAT(text, HasSubstr("check: every variable has the layout the plan gave it: ok"));
  EXPECT_THAT(text, HasSubstr("check: each device holds exactly the bytes the plan predicted: ok"));
  EXPECT_THAT(text, ContainsRegex("check: each device's peak while loading was its shards plus at "
                                  "most one piece in flight .*: ok"));
  EXPECT_THAT(
      text, HasSubstr("check: the process read at most 1.1x the bytes of its devices' boxes: ok"));
  EXPECT_THAT(text, ContainsRegex("check: 8-device logits equal the 1-device logits .*: ok"));
  EXPECT_THAT(text, HasSubstr("check: the greedy tokens are the same on 8 devices and on 1: ok"));
  EXPECT_THAT(text, HasSubstr("plan model_split: the 2 key/value heads do not split like the 8 "
                              "query heads over 'model' (4)"));
  EXPECT_THAT(text, ContainsRegex("check: its logits equal the 1-device logits .*: ok"));
  EXPECT_THAT(text, HasSubstr("check: so do its greedy tokens: ok"));
  // Megatron's rules split 2 key/value heads over 4 devices: the plan says so.
  EXPECT_THAT(text, ContainsRegex("plan uneven: .*self_attention/key/kernel"));
  EXPECT_THAT(text, HasSubstr("keras-hub: every rule matches a variable"));
  EXPECT_THAT(text,
              HasSubstr("Megatron: rule 1 'token_embedding/reverse_embeddings' matches nothing"));
  EXPECT_THAT(text, HasSubstr("all checks passed"));
  EXPECT_THAT(text, Not(HasSubstr("FAILED")));
  // What it kept: a Hugging Face directory and a checkpoint of every variable by Keras path.
  const HfLlamaCheckpoint hf = HfLlamaCheckpoint::open((dir / "llama").string());
  EXPECT_EQ(hf.checkpoint().files().size(), 2u);
  EXPECT_TRUE(hf.config().tie_word_embeddings);
  // And a tokenizer of its vocabulary, for generate --prompt "text".
  EXPECT_EQ(tokenizers::load_tokenizer((dir / "llama").string())->vocab_size(),
            hf.config().vocab_size);
  Checkpoint keras = Checkpoint::open((dir / "llama.safetensors").string());
  EXPECT_EQ(keras.tensors().size(), hf.mappings().size());
  ASSERT_NE(keras.find("transformer_layer_0/self_attention/key/kernel").second, nullptr);
  EXPECT_EQ(keras.find("transformer_layer_0/self_attention/key/kernel").second->shape,
            (Shape{128, 2, 16}));
  std::filesystem::remove_all(dir);
  reset_device_count();
}

// --keep never replaces what the user had: a non-empty directory or a file is refused before
// anything is written.
// demo --family: each family's story end to end, every check passing, with the family's
// Hugging Face class and keras-hub rules named, and the model written under its family's name.
TEST(DemoCommandTest, EveryFamilyPassesEveryCheck) {
  set_device_count(8);
  const std::pair<std::string, std::string> families[] = {
      {"mistral", "Mistral (MistralForCausalLM), sliding window of 4 keys"},
      {"qwen2", "Qwen 2 (Qwen2ForCausalLM), q/k/v biases"},
      {"qwen3", "Qwen 3 (Qwen3ForCausalLM), q/k head norms, head_dim 24 != 128 / 8"},
      {"gemma", "Gemma (GemmaForCausalLM), keras-hub's Gemma block"},
      {"gemma2", "Gemma 2 (Gemma2ForCausalLM), post norms, soft caps 50 and 30"},
      {"gemma3_text", "Gemma 3 (Gemma3ForCausalLM), q/k norms"},
      {"mixtral", "Mixtral (MixtralForCausalLM), 4 experts per layer, top-2"},
      {"qwen3_moe", "Qwen 3 MoE (Qwen3MoeForCausalLM), 8 experts of 64 on layer 1, top-2"},
      {"qwen2_moe",
       "Qwen 2 MoE (Qwen2MoeForCausalLM), 8 experts of 64 and a gated shared "
       "expert of 128 on layer 1, top-2"}};
  std::string llama_tokens;
  {
    std::ostringstream out;
    ASSERT_EQ(run_demo(out, {}), 0) << out.str();
    llama_tokens = out.str().substr(out.str().find("   prompt "), 120);
  }
  for (const auto& [family, story] : families) {
    SCOPED_TRACE(family);
    const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                      ("demo_family_" + family + std::to_string(::getpid()));
    std::ostringstream out;
    EXPECT_EQ(run_demo(out, {.keep_dir = dir.string(), .family = family}), 0) << out.str();
    const std::string text = out.str();
    EXPECT_THAT(text, HasSubstr(story));
    EXPECT_THAT(text, HasSubstr("all checks passed"));
    EXPECT_THAT(text, Not(HasSubstr("FAILED")));
    EXPECT_THAT(text, HasSubstr(family == "mistral"           ? "MistralBackbone.get_layout_map"
                                : family.starts_with("gemma") ? "GemmaBackbone.get_layout_map"
                                : family == "mixtral"         ? "MixtralBackbone.get_layout_map"
                                : family == "qwen3_moe"       ? "Qwen3MoeBackbone.get_layout_map"
                                : family == "qwen2_moe"       ? "QwenMoeBackbone.get_layout_map"
                                                              : "QwenBackbone.get_layout_map"));
    EXPECT_TRUE(std::filesystem::exists(dir / family / "config.json"));
    // What distinguishes the family changes the tokens (the window, the biases, the norms).
    EXPECT_NE(text.substr(text.find("   prompt "), 120), llama_tokens);
    std::filesystem::remove_all(dir);
  }
}

TEST(DemoCommandTest, RefusesAKeepPathThatIsNotANewOrEmptyDirectory) {
  set_device_count(8);
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("demo_keep_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  { std::ofstream(dir / "notes.txt") << "mine"; }
  std::ostringstream out;
  try {
    run_demo(out, {.keep_dir = dir.string()});
    FAIL() << "a non-empty --keep directory was accepted";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("the directory is not empty")) << e.what();
  }
  try {
    run_demo(out, {.keep_dir = (dir / "notes.txt").string()});
    FAIL() << "a file as --keep was accepted";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("it exists and is a regular file, not a directory"))
        << e.what();
  }
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir),
                          std::filesystem::directory_iterator()),
            1);
  std::filesystem::remove_all(dir);
  reset_device_count();
}

TEST(DemoCommandTest, RefusesWithTooFewDevices) {
  set_device_count(4);
  std::ostringstream out;
  EXPECT_EQ(run_demo(out), 1);
  EXPECT_THAT(out.str(), HasSubstr("the demo needs 8 devices"));
  reset_device_count();
}

}  // namespace
}  // namespace meshlayout::cli
