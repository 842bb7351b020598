#include "meshlayout/models/random_moe_hf.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "meshlayout/core/errors.h"
#include "meshlayout/io/safetensors_file.h"

namespace meshlayout {
namespace {

namespace fs = std::filesystem;

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const ValueError& e) {
    return e.what();
  }
  return "(no ValueError)";
}

TEST(RandomMoeHf, TensorNamesAndShapesFollowEachFamily) {
  const auto names = [](const HfMoeSpec& s) {
    std::map<std::string, Shape> out;
    for (auto& [n, shape] : hf_moe_tensor_shapes(s)) out.emplace(n, shape);
    return out;
  };
  const auto mixtral = names(small_hf_moe_spec("mixtral"));  // 2 layers, 4 experts, ff 24
  EXPECT_EQ(mixtral.size(), 1u + 2 * (2 + 4 + 1 + 4 * 3) + 1 + 1);
  EXPECT_EQ(mixtral.at("model.layers.1.block_sparse_moe.gate.weight"), (Shape{4, 32}));
  EXPECT_EQ(mixtral.at("model.layers.0.block_sparse_moe.experts.3.w1.weight"), (Shape{24, 32}));
  EXPECT_EQ(mixtral.at("model.layers.0.block_sparse_moe.experts.3.w3.weight"), (Shape{24, 32}));
  EXPECT_EQ(mixtral.at("model.layers.0.block_sparse_moe.experts.3.w2.weight"), (Shape{32, 24}));
  EXPECT_TRUE(mixtral.contains("lm_head.weight"));
  EXPECT_FALSE(mixtral.contains("model.layers.0.self_attn.q_proj.bias"));

  const auto qwen2 = names(small_hf_moe_spec("qwen2_moe"));  // layer 1 dense, tied
  EXPECT_EQ(qwen2.at("model.layers.0.mlp.experts.2.gate_proj.weight"), (Shape{16, 32}));
  EXPECT_EQ(qwen2.at("model.layers.2.mlp.shared_expert.down_proj.weight"), (Shape{32, 24}));
  EXPECT_EQ(qwen2.at("model.layers.2.mlp.shared_expert_gate.weight"), (Shape{1, 32}));
  EXPECT_EQ(qwen2.at("model.layers.1.mlp.gate_proj.weight"), (Shape{48, 32}));
  EXPECT_FALSE(qwen2.contains("model.layers.1.mlp.gate.weight"));
  EXPECT_EQ(qwen2.at("model.layers.0.self_attn.k_proj.bias"), (Shape{16}));
  EXPECT_FALSE(qwen2.contains("model.layers.0.self_attn.o_proj.bias"));
  EXPECT_FALSE(qwen2.contains("lm_head.weight"));

  const auto qwen3 = names(small_hf_moe_spec("qwen3_moe"));
  EXPECT_EQ(qwen3.at("model.layers.1.self_attn.q_norm.weight"), (Shape{12}));
  EXPECT_EQ(qwen3.at("model.layers.1.self_attn.q_proj.weight"), (Shape{48, 32}));
  EXPECT_EQ(qwen3.at("model.layers.1.mlp.experts.7.down_proj.weight"), (Shape{32, 16}));
  EXPECT_FALSE(qwen3.contains("model.layers.1.mlp.shared_expert_gate.weight"));
}

TEST(RandomMoeHf, MoeLayersFollowTransformersRule) {
  HfMoeSpec s = small_hf_moe_spec("qwen3_moe");
  s.base.num_hidden_layers = 6;
  s.decoder_sparse_step = 2;  // (i + 1) % 2 == 0: layers 1, 3, 5 …
  s.mlp_only_layers = {3};    // … but not 3
  std::vector<bool> moe;
  for (int64_t i = 0; i < 6; ++i) moe.push_back(s.is_moe_layer(i));
  EXPECT_EQ(moe, (std::vector<bool>{false, true, false, false, false, true}));
  EXPECT_FALSE(small_hf_moe_spec("qwen2_moe").is_moe_layer(1));
  EXPECT_TRUE(small_hf_moe_spec("qwen2_moe").is_moe_layer(2));
  EXPECT_TRUE(small_hf_moe_spec("mixtral").renormalizes());
  EXPECT_FALSE(small_hf_moe_spec("qwen2_moe").renormalizes());
  EXPECT_TRUE(small_hf_moe_spec("qwen3_moe").renormalizes());
}

TEST(RandomMoeHf, ConfigJsonHasEachFamilysFields) {
  const auto mixtral = nlohmann::json::parse(small_hf_moe_spec("mixtral").to_json());
  EXPECT_EQ(mixtral["architectures"][0], "MixtralForCausalLM");
  EXPECT_EQ(mixtral["model_type"], "mixtral");
  EXPECT_EQ(mixtral["num_local_experts"], 4);
  EXPECT_EQ(mixtral["num_experts_per_tok"], 2);
  EXPECT_EQ(mixtral["intermediate_size"], 24);
  EXPECT_EQ(mixtral["sliding_window"], 3);
  EXPECT_FALSE(mixtral.contains("num_experts"));
  const auto qwen2 = nlohmann::json::parse(small_hf_moe_spec("qwen2_moe").to_json());
  EXPECT_EQ(qwen2["architectures"][0], "Qwen2MoeForCausalLM");
  EXPECT_EQ(qwen2["num_experts"], 4);
  EXPECT_EQ(qwen2["moe_intermediate_size"], 16);
  EXPECT_EQ(qwen2["shared_expert_intermediate_size"], 24);
  EXPECT_EQ(qwen2["mlp_only_layers"], nlohmann::json::array({1}));
  EXPECT_EQ(qwen2["norm_topk_prob"], false);
  EXPECT_EQ(qwen2["use_sliding_window"], false);
  EXPECT_EQ(qwen2["tie_word_embeddings"], true);
  EXPECT_FALSE(qwen2.contains("head_dim"));
  const auto qwen3 = nlohmann::json::parse(small_hf_moe_spec("qwen3_moe").to_json());
  EXPECT_EQ(qwen3["model_type"], "qwen3_moe");
  EXPECT_EQ(qwen3["head_dim"], 12);
  EXPECT_EQ(qwen3["norm_topk_prob"], true);
  EXPECT_EQ(qwen3["router_aux_loss_coef"], 0.001);
  EXPECT_FALSE(qwen3.contains("shared_expert_intermediate_size"));
}

TEST(RandomMoeHf, BadSpecsNameTheField) {
  EXPECT_NE(error_of([] { small_hf_moe_spec("llama"); }).find("'llama'"), std::string::npos);
  HfMoeSpec s = small_hf_moe_spec("mixtral");
  s.num_experts_per_tok = 5;
  EXPECT_NE(error_of([&] { s.validate(); }).find("num_experts_per_tok is 5, expected 1 to 4"),
            std::string::npos);
  s = small_hf_moe_spec("qwen2_moe");
  s.mlp_only_layers = {3};
  EXPECT_NE(error_of([&] { s.validate(); }).find("mlp_only_layers has 3, expected layers 0 to 2"),
            std::string::npos);
  s = small_hf_moe_spec("qwen2_moe");
  s.shared_expert_intermediate_size = 0;
  EXPECT_NE(error_of([&] { s.validate(); }).find("shared_expert_intermediate_size is 0"),
            std::string::npos);
  s = small_hf_moe_spec("qwen3_moe");
  s.decoder_sparse_step = 0;
  EXPECT_NE(error_of([&] { hf_moe_tensor_shapes(s); }).find("decoder_sparse_step is 0"),
            std::string::npos);
  s = small_hf_moe_spec("mixtral");
  s.mlp_only_layers = {0};
  EXPECT_NE(error_of([&] { s.to_json(); }).find("mixtral has no dense layers"), std::string::npos);
}

TEST(RandomMoeHf, WritesADirectoryThatReadsBack) {
  const fs::path dir = fs::temp_directory_path() / ("random_moe_hf_" + std::to_string(getpid()));
  const HfMoeSpec spec = small_hf_moe_spec("qwen2_moe");
  const auto tensors = random_hf_moe_tensors(spec, 11, 0.5f);
  const float* norm = tensors.at("model.layers.0.input_layernorm.weight").data_as<float>();
  const float* gate = tensors.at("model.layers.0.mlp.gate.weight").data_as<float>();
  for (int i = 0; i < 32; ++i) {
    EXPECT_GE(norm[i], 0.5f);
    EXPECT_LT(norm[i], 1.5f);
    EXPECT_LE(std::abs(gate[i]), 0.5f);
  }
  write_hf_moe(dir.string(), spec, tensors);
  std::ifstream config(dir / "config.json");
  std::stringstream text;
  text << config.rdbuf();
  EXPECT_EQ(text.str(), spec.to_json());
  const Checkpoint ckpt = Checkpoint::open(dir.string());
  EXPECT_EQ(ckpt.tensors().size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    const auto [file, info] = ckpt.find(name);
    ASSERT_NE(info, nullptr) << name;
    ASSERT_EQ(info->shape, t.shape()) << name;
    std::vector<float> back(static_cast<size_t>(t.num_elements()));
    file->read_box(*info, Box{Shape(t.shape().size(), 0), t.shape()},
                   reinterpret_cast<std::byte*>(back.data()));
    EXPECT_EQ(std::memcmp(back.data(), t.data(), t.num_bytes()), 0) << name;
  }
  fs::remove_all(dir);
}

TEST(RandomMoeHf, WriteRefusesTensorsThatDoNotFit) {
  const HfMoeSpec spec = small_hf_moe_spec("mixtral");
  auto tensors = random_hf_moe_tensors(spec, 1);
  const std::string dir = (fs::temp_directory_path() / "random_moe_hf_unwritten").string();
  auto missing = tensors;
  missing.erase("model.layers.1.block_sparse_moe.experts.2.w2.weight");
  EXPECT_NE(error_of([&] {
              write_hf_moe(dir, spec, missing);
            }).find("'model.layers.1.block_sparse_moe.experts.2.w2.weight' is missing"),
            std::string::npos);
  auto extra = tensors;
  extra.emplace("model.layers.0.mlp.gate.weight", HostTensor(DType::kF32, {4, 32}));
  EXPECT_NE(error_of([&] { write_hf_moe(dir, spec, extra); }).find("is not one of this mixtral"),
            std::string::npos);
  tensors.at("model.layers.0.block_sparse_moe.gate.weight") = HostTensor(DType::kF32, {5, 32});
  EXPECT_NE(error_of([&] {
              write_hf_moe(dir, spec, tensors);
            }).find("is F32 (5, 32), expected F32 (4, 32)"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(dir));
  const fs::path blocker =
      fs::temp_directory_path() / ("random_moe_hf_file_" + std::to_string(getpid()));
  std::ofstream(blocker) << "x";
  try {
    write_hf_moe((blocker / "model").string(), spec, random_hf_moe_tensors(spec, 1));
    ADD_FAILURE() << "no error for a directory under a file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("write_hf_moe: creating '" + (blocker / "model").string() +
                                         "' failed"),
              std::string::npos)
        << e.what();
  }
  fs::remove(blocker);
}

}  // namespace
}  // namespace meshlayout
