// hf_llama_checkpoint_test.cc — the HF ↔ keras-hub Llama mapping: shapes (MHA, GQA, tied),
// the HF element order checked on a hand-written file, round trips through save_hf_llama into
// many layouts (F32 bit for bit, BF16 / F16 as rounded, sharded index checkpoints), bytes read
// against the boxes' bytes, the staging bound, and every refusal.
#include "meshlayout/models/hf_llama_checkpoint.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/models/hf_llama_test_util.h"
#include "meshlayout/testing/test_util.h"

namespace meshlayout {
namespace {

namespace fs = std::filesystem;
using testing::HasSubstr;
using testing::Scheme;
using testing::ValueErrorMessage;

const std::vector<std::string> kEightDevices = {"cpu:0", "cpu:1", "cpu:2", "cpu:3",
                                                "cpu:4", "cpu:5", "cpu:6", "cpu:7"};

class HfLlamaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           fmt::format("meshlayout_hf_{}_{}", ::getpid(),
                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Allocated targets for every variable of `config` under `scheme` on `mesh`.
  std::map<std::string, Array> allocate(const LlamaConfig& config, Scheme scheme,
                                        const DeviceMesh& mesh) {
    std::map<std::string, Array> out;
    for (const HfWeightMapping& m : hf_llama_weight_mappings(config)) {
      out.emplace(m.keras_path, Array::allocate(testing::scheme_layout(scheme, m.keras_path,
                                                                       m.keras_shape.size(), mesh),
                                                m.keras_shape, DType::kF32, rt_));
    }
    return out;
  }
  static std::map<std::string, Array*> pointers(std::map<std::string, Array>& arrays) {
    std::map<std::string, Array*> out;
    for (auto& [path, a] : arrays) out.emplace(path, &a);
    return out;
  }
  // Saves random weights of `config` (distributed under the keras-hub rules) and returns them.
  std::map<std::string, HostTensor> save_random(const LlamaConfig& config, DType file_dtype,
                                                int num_shards, uint64_t seed = 11) {
    std::map<std::string, HostTensor> weights = testing::random_keras_weights(config, seed);
    std::map<std::string, Array> arrays;
    std::map<std::string, const Array*> by_path;
    for (const auto& [path, w] : weights) {
      auto layout = testing::scheme_layout(Scheme::kKerasHub, path, w.shape().size(), mesh_);
      arrays.emplace(path, distribute_tensor(w, layout, {.runtime = rt_}));
      by_path.emplace(path, &arrays.at(path));
    }
    save_hf_llama(dir_.string(), config, by_path, file_dtype, num_shards);
    return weights;
  }

  std::shared_ptr<Runtime> rt_ = Runtime::single_process(8);
  DeviceMesh mesh_{{2, 4}, {"batch", "model"}, kEightDevices};
  fs::path dir_;
};

const HfWeightMapping& mapping(const std::vector<HfWeightMapping>& all, const std::string& keras) {
  for (const HfWeightMapping& m : all) {
    if (m.keras_path == keras) return m;
  }
  throw NotFoundError(keras);
}

TEST(HfLlamaMappingTest, MultiHeadAttentionShapes) {
  const LlamaConfig c = testing::tiny_config(4, 4, /*tied=*/false);  // V 37, d 16, ff 24, hd 4
  const auto all = hf_llama_weight_mappings(c);
  EXPECT_EQ(all.size(), 1 + 9 * 2 + 1 + 1u);
  const auto& q = mapping(all, "transformer_layer_1/self_attention/query/kernel");
  EXPECT_EQ(q.hf_name, "model.layers.1.self_attn.q_proj.weight");
  EXPECT_EQ(q.hf_shape, (Shape{16, 16}));
  EXPECT_EQ(q.view_shape, (Shape{4, 4, 16}));
  EXPECT_EQ(q.perm, (std::vector<int>{2, 0, 1}));
  EXPECT_EQ(q.keras_shape, (Shape{16, 4, 4}));
  const auto& o = mapping(all, "transformer_layer_0/self_attention/attention_output/kernel");
  EXPECT_EQ(o.hf_name, "model.layers.0.self_attn.o_proj.weight");
  EXPECT_EQ(o.view_shape, (Shape{16, 4, 4}));
  EXPECT_EQ(o.keras_shape, (Shape{4, 4, 16}));
  EXPECT_EQ(mapping(all, "transformer_layer_0/feedforward_gate_dense/kernel").hf_name,
            "model.layers.0.mlp.gate_proj.weight");
  EXPECT_EQ(mapping(all, "transformer_layer_0/feedforward_intermediate_dense/kernel").hf_name,
            "model.layers.0.mlp.up_proj.weight");
  const auto& down = mapping(all, "transformer_layer_0/feedforward_output_dense/kernel");
  EXPECT_EQ(down.hf_shape, (Shape{16, 24}));
  EXPECT_EQ(down.keras_shape, (Shape{24, 16}));
  EXPECT_EQ(mapping(all, "transformer_layer_0/feedforward_layernorm/scale").hf_name,
            "model.layers.0.post_attention_layernorm.weight");
  EXPECT_EQ(mapping(all, "transformer_layer_0/self_attention_layernorm/scale").hf_name,
            "model.layers.0.input_layernorm.weight");
  EXPECT_EQ(mapping(all, "sequence_output_layernorm/scale").hf_name, "model.norm.weight");
  const auto& lm = mapping(all, "token_embedding/reverse_embeddings");
  EXPECT_EQ(lm.hf_name, "lm_head.weight");
  EXPECT_EQ(lm.hf_shape, (Shape{37, 16}));
  EXPECT_EQ(lm.keras_shape, (Shape{16, 37}));
  EXPECT_EQ(mapping(all, "token_embedding/embeddings").keras_shape, (Shape{37, 16}));
}

TEST(HfLlamaMappingTest, GroupedQueryAttentionAndTiedShapes) {
  const LlamaConfig c = testing::tiny_config(6, 2, /*tied=*/true);  // d 24
  const auto all = hf_llama_weight_mappings(c);
  EXPECT_EQ(all.size(), 1 + 9 * 2 + 1u);  // no lm_head
  for (const HfWeightMapping& m : all) EXPECT_NE(m.hf_name, "lm_head.weight");
  const auto& k = mapping(all, "transformer_layer_0/self_attention/key/kernel");
  EXPECT_EQ(k.hf_shape, (Shape{8, 24}));
  EXPECT_EQ(k.keras_shape, (Shape{24, 2, 4}));
  EXPECT_EQ(k.hf_shape_fields, "(num_key_value_heads*head_dim, hidden_size) = (2*4, 24)");
  EXPECT_EQ(mapping(all, "transformer_layer_0/self_attention/value/kernel").keras_shape,
            (Shape{24, 2, 4}));
  EXPECT_EQ(mapping(all, "transformer_layer_0/self_attention/query/kernel").keras_shape,
            (Shape{24, 6, 4}));
  EXPECT_EQ(mapping(all, "transformer_layer_0/self_attention/attention_output/kernel").keras_shape,
            (Shape{6, 4, 24}));
}

// The HF element order, on a file written without save_hf_llama: q_proj row h·hd + j, column
// c holds (h·hd + j)·1000 + c, so query/kernel[c, h, j] must hold it too.
TEST_F(HfLlamaTest, HuggingFaceElementOrderOnAHandWrittenFile) {
  const LlamaConfig c = testing::tiny_config(4, 2, /*tied=*/false);
  testing::write_hf_by_hand(dir_, c, testing::formula_tensors(c));
  HfLlamaCheckpoint ckpt = HfLlamaCheckpoint::open(dir_.string());
  auto arrays = allocate(c, Scheme::kKerasHub, mesh_);
  load_hf_llama(ckpt, pointers(arrays));
  const int64_t d = 16, hd = 4;
  auto at = [&](const std::string& path) { return arrays.at(path).gather(); };
  const HostTensor q = at("transformer_layer_1/self_attention/query/kernel");
  const HostTensor k = at("transformer_layer_1/self_attention/key/kernel");
  const HostTensor o = at("transformer_layer_1/self_attention/attention_output/kernel");
  for (int64_t col = 0; col < d; ++col) {
    for (int64_t h = 0; h < 4; ++h) {
      for (int64_t j = 0; j < hd; ++j) {
        const float hf = static_cast<float>((h * hd + j) * 1000 + col);
        ASSERT_EQ(q.data_as<float>()[(col * 4 + h) * hd + j], hf) << col << " " << h << " " << j;
        if (h < 2) {
          ASSERT_EQ(k.data_as<float>()[(col * 2 + h) * hd + j], hf);
        }
        // o_proj (d, Hq·hd): row col, column h·hd + j → attention_output[h, j, col].
        ASSERT_EQ(o.data_as<float>()[(h * hd + j) * d + col],
                  static_cast<float>(col * 1000 + h * hd + j));
      }
    }
  }
  const HostTensor gate = at("transformer_layer_0/feedforward_gate_dense/kernel");    // (d, ff)
  const HostTensor down = at("transformer_layer_0/feedforward_output_dense/kernel");  // (ff, d)
  const HostTensor rev = at("token_embedding/reverse_embeddings");                    // (d, V)
  const HostTensor emb = at("token_embedding/embeddings");                            // (V, d)
  for (int64_t col = 0; col < d; ++col) {
    for (int64_t f = 0; f < 24; ++f) {
      ASSERT_EQ(gate.data_as<float>()[col * 24 + f], static_cast<float>(f * 1000 + col));
      ASSERT_EQ(down.data_as<float>()[f * d + col], static_cast<float>(col * 1000 + f));
    }
    for (int64_t v = 0; v < 37; ++v) {
      ASSERT_EQ(rev.data_as<float>()[col * 37 + v], static_cast<float>(v * 1000 + col));
      ASSERT_EQ(emb.data_as<float>()[v * d + col], static_cast<float>(v * 1000 + col));
    }
    ASSERT_EQ(at("sequence_output_layernorm/scale").data_as<float>()[col], static_cast<float>(col));
  }
}

// Every scheme on two meshes, from F32, BF16 and F16 files, MHA and GQA (3 KV heads on a
// 4-way axis in the swapped scheme), tied and untied: the gathered variables equal the saved
// ones rounded through the file dtype, bit for bit; each distinct box is read exactly once.
TEST_F(HfLlamaTest, RoundTripsIntoEveryLayout) {
  const DeviceMesh flat({8}, {"x"}, kEightDevices);
  struct Model {
    LlamaConfig config;
    DType dtype;
    int shards;
  };
  const Model models[] = {{testing::tiny_config(4, 4, false), DType::kF32, 1},
                          {testing::tiny_config(6, 3, false), DType::kBF16, 3},
                          {testing::tiny_config(4, 2, true), DType::kF16, 1}};
  for (const Model& model : models) {
    const auto weights = save_random(model.config, model.dtype, model.shards);
    HfLlamaCheckpoint ckpt = HfLlamaCheckpoint::open(dir_.string());
    for (Scheme scheme : {Scheme::kKerasHub, Scheme::kReplicated, Scheme::kSwapped,
                          Scheme::kLastDim, Scheme::kFirstDim}) {
      for (const DeviceMesh* mesh : {static_cast<const DeviceMesh*>(&mesh_), &flat}) {
        if (mesh == &flat && (scheme == Scheme::kKerasHub || scheme == Scheme::kSwapped)) continue;
        SCOPED_TRACE(fmt::format("{} heads {} kv {} {} on {}", dtype_name(model.dtype),
                                 model.config.num_attention_heads, model.config.num_key_value_heads,
                                 testing::scheme_name(scheme), mesh->to_string()));
        auto arrays = allocate(model.config, scheme, *mesh);
        const uint64_t before = ckpt.checkpoint().bytes_read();
        HfLoadReport report = load_hf_llama(ckpt, pointers(arrays), {.max_piece_bytes = 512});
        EXPECT_EQ(report.tensors_loaded, static_cast<int64_t>(weights.size()));
        EXPECT_EQ(report.bytes_read, report.box_bytes);
        EXPECT_EQ(ckpt.checkpoint().bytes_read() - before, report.box_bytes);
        EXPECT_LE(report.max_piece_bytes, 512u);
        for (const auto& [path, w] : weights) {
          EXPECT_TRUE(arrays.at(path).gather() == testing::rounded_through(w, model.dtype)) << path;
        }
      }
    }
  }
}

// The bytes of a sharded load, computed independently from the layouts: the distinct boxes
// of each variable (the transposed file region has the same element count), times the file's
// element size. Staging stays within one piece per device.
TEST_F(HfLlamaTest, ReadsExactlyTheBytesOfTheDistinctBoxes) {
  const LlamaConfig c = testing::tiny_config(4, 2, false);
  save_random(c, DType::kBF16, 1);
  HfLlamaCheckpoint ckpt = HfLlamaCheckpoint::open(dir_.string());
  auto arrays = allocate(c, Scheme::kKerasHub, mesh_);
  uint64_t expected = 0;
  for (const auto& [path, a] : arrays) {
    std::set<std::pair<Shape, Shape>> boxes;
    for (int64_t p = 0; p < mesh_.size(); ++p) {
      const Box b = a.geometry().box(p);
      if (!b.empty()) boxes.insert({b.offset, b.shape});
    }
    for (const auto& [offset, shape] : boxes)
      expected += 2 * static_cast<uint64_t>(num_elements(shape));
  }
  const uint64_t before = ckpt.checkpoint().bytes_read();
  for (VirtualDevice* d : rt_->local_devices()) d->memory().reset_peak();
  const uint64_t piece = 96;
  HfLoadReport report = load_hf_llama(ckpt, pointers(arrays), {.max_piece_bytes = piece});
  EXPECT_EQ(report.box_bytes, expected);
  EXPECT_EQ(report.bytes_read, expected);
  const uint64_t read = ckpt.checkpoint().bytes_read() - before;
  EXPECT_LE(static_cast<double>(read), 1.1 * static_cast<double>(expected));
  std::printf("[ bytes    ] read %llu of distinct boxes %llu (ratio %.3f)\n",
              static_cast<unsigned long long>(read), static_cast<unsigned long long>(expected),
              static_cast<double>(read) / static_cast<double>(expected));
  for (VirtualDevice* d : rt_->local_devices()) {
    const MemoryStats s = d->memory().stats();
    EXPECT_LE(s.peak_bytes - s.bytes_live, static_cast<int64_t>(piece)) << d->name();
  }
}

TEST_F(HfLlamaTest, ShardedIndexCheckpoint) {
  const LlamaConfig c = testing::tiny_config(4, 2, false);
  const auto weights = save_random(c, DType::kF32, 4);
  std::ifstream in(dir_ / "model.safetensors.index.json");
  const nlohmann::json index = nlohmann::json::parse(in);
  std::set<std::string> files;
  uint64_t total = 0;
  for (const auto& [name, file] : index["weight_map"].items())
    files.insert(file.get<std::string>());
  EXPECT_EQ(index["weight_map"].size(), weights.size());
  EXPECT_EQ(files.size(), 4u);
  EXPECT_TRUE(files.contains("model-00001-of-00004.safetensors"));
  EXPECT_FALSE(fs::exists(dir_ / "model.safetensors"));
  for (const auto& [path, w] : weights) total += w.num_bytes();
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), total);
  HfLlamaCheckpoint ckpt = HfLlamaCheckpoint::open(dir_.string());
  EXPECT_EQ(ckpt.checkpoint().files().size(), 4u);
  auto arrays = allocate(c, Scheme::kSwapped, mesh_);
  load_hf_llama(ckpt, pointers(arrays));
  for (const auto& [path, w] : weights) EXPECT_TRUE(arrays.at(path).gather() == w) << path;
  // Saving single-file into the same directory removes the index, so the new file is used.
  save_random(c, DType::kF32, 1, /*seed=*/99);
  EXPECT_FALSE(fs::exists(dir_ / "model.safetensors.index.json"));
  EXPECT_EQ(HfLlamaCheckpoint::open(dir_.string()).checkpoint().files().size(), 1u);
}

TEST_F(HfLlamaTest, SubsetOfTargetsAndTheirRefusals) {
  const LlamaConfig c = testing::tiny_config(4, 2, false);
  const auto weights = save_random(c, DType::kF32, 1);
  HfLlamaCheckpoint ckpt = HfLlamaCheckpoint::open(dir_.string());
  Array emb = Array::allocate(TensorLayout({"model", None}, mesh_), {37, 16}, DType::kF32, rt_);
  HfLoadReport r = load_hf_llama(ckpt, {{"token_embedding/embeddings", &emb}});
  EXPECT_EQ(r.tensors_loaded, 1);
  EXPECT_EQ(r.max_piece_bytes, 0u);  // F32, not transposed: read straight into the shards
  EXPECT_TRUE(emb.gather() == weights.at("token_embedding/embeddings"));
  std::string m = ValueErrorMessage([&] {
    load_hf_llama(ckpt, {{"transformer_layer_2/x", &emb}});
  });
  EXPECT_TRUE(HasSubstr(m, "'transformer_layer_2/x' is not a variable of this Llama (2 layers"));
  m = ValueErrorMessage([&] {
    load_hf_llama(ckpt, {{"token_embedding/reverse_embeddings", &emb}});
  });
  EXPECT_TRUE(HasSubstr(m, "is F32 (37, 16), expected F32 (16, 37)"));
  Array f64 = Array::allocate(TensorLayout({None, None}, mesh_), {37, 16}, DType::kF64, rt_);
  m = ValueErrorMessage([&] { load_hf_llama(ckpt, {{"token_embedding/embeddings", &f64}}); });
  EXPECT_TRUE(HasSubstr(m, "is F64 (37, 16), expected F32 (37, 16)"));
}

// A file checked against its config before any data is read.
TEST_F(HfLlamaTest, OpenRefusesCheckpointsThatDoNotMatchTheConfig) {
  const LlamaConfig c = testing::tiny_config(4, 2, false);
  auto tensors = testing::formula_tensors(c);
  auto open_error = [&](const std::map<std::string, HostTensor>& t, const std::string& json = "") {
    fs::remove_all(dir_);
    testing::write_hf_by_hand(dir_, c, t, json);
    try {
      HfLlamaCheckpoint::open(dir_.string());
    } catch (const Error& e) {
      return std::string(typeid(e).name()) + ": " + e.what();
    }
    return std::string("<nothing thrown>");
  };
  {
    auto t = tensors;
    t.erase("model.layers.1.self_attn.k_proj.weight");
    t.erase("lm_head.weight");
    const std::string m = open_error(t);
    EXPECT_TRUE(HasSubstr(m, "NotFoundError"));
    EXPECT_TRUE(HasSubstr(m, "lacks 2 of the 21 tensors"));
    EXPECT_TRUE(HasSubstr(m, "'model.layers.1.self_attn.k_proj.weight', 'lm_head.weight'"));
  }
  {
    auto t = tensors;
    t.emplace("model.layers.0.self_attn.q_proj.bias", HostTensor(DType::kF32, {16}));
    t.emplace("model.layers.0.self_attn.rotary_emb.inv_freq", HostTensor(DType::kF32, {2}));
    const std::string m = open_error(t);
    EXPECT_TRUE(HasSubstr(m, "ValueError"));
    EXPECT_TRUE(HasSubstr(m,
                          "holds 1 tensor(s) a LlamaForCausalLM of its config.json does not "
                          "have: 'model.layers.0.self_attn.q_proj.bias'"));
  }
  {
    auto t = tensors;
    t.at("model.layers.0.mlp.up_proj.weight") = HostTensor(DType::kF32, {20, 16});
    const std::string m = open_error(t);
    EXPECT_TRUE(HasSubstr(m, "tensor 'model.layers.0.mlp.up_proj.weight'"));
    EXPECT_TRUE(HasSubstr(m,
                          "has shape (20, 16), but config.json implies (24, 16): "
                          "(intermediate_size, hidden_size) = (24, 16)"));
  }
  {
    auto t = tensors;
    t.at("model.norm.weight") = HostTensor(DType::kI64, {16});
    const std::string m = open_error(t);
    EXPECT_TRUE(HasSubstr(m, "tensor 'model.norm.weight'"));
    EXPECT_TRUE(HasSubstr(m, "has dtype I64, expected F32, BF16 or F16"));
  }
  {
    std::string json = c.to_json();
    json.replace(json.find("LlamaForCausalLM"), 16, "GPT2LMHeadModel");
    const std::string m = open_error(tensors, json);
    EXPECT_TRUE(HasSubstr(m, "unsupported architecture [\"GPT2LMHeadModel\"]"));
    EXPECT_TRUE(HasSubstr(m, "expected LlamaForCausalLM"));
  }
  for (const int64_t layers : {int64_t{3}, int64_t{1000000000}}) {
    // A config value that sizes what is built is checked against the weights first: a billion
    // layers used to build 9 records a layer and grow to all memory before this comparison.
    std::string json = c.to_json();
    const std::string field = "\"num_hidden_layers\": 2";
    ASSERT_NE(json.find(field), std::string::npos);
    json.replace(json.find(field), field.size(), fmt::format("\"num_hidden_layers\": {}", layers));
    const std::string m = open_error(tensors, json);
    EXPECT_TRUE(HasSubstr(m, "ValueError")) << m;
    EXPECT_TRUE(HasSubstr(
        m, fmt::format("says num_hidden_layers = {}, but the checkpoint holds the tensors of 2 "
                       "layer(s) (model.layers.0 to model.layers.1)",
                       layers)))
        << m;
  }
  fs::remove(dir_ / "config.json");
  try {
    HfLlamaCheckpoint::open(dir_.string());
    ADD_FAILURE() << "no error";
  } catch (const NotFoundError& e) {
    EXPECT_TRUE(HasSubstr(e.what(), (dir_ / "config.json").string()));
  }
}

// Issue 24: NaN/Inf weights made generate print token 0 forever with exit 0. They are refused
// at load, naming the tensor, the value and the element in the Keras variable's coordinates.
TEST_F(HfLlamaTest, NonFiniteWeightsAreRefusedAtLoad) {
  const LlamaConfig c = testing::tiny_config(4, 2, false);
  for (const float bad :
       {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
    auto tensors = testing::formula_tensors(c);
    HostTensor& down = tensors.at("model.layers.1.mlp.down_proj.weight");  // (d, ff)
    const int64_t ff = down.shape()[1];
    down.data_as<float>()[3 * ff + 5] = bad;  // HF (3, 5) is Keras (5, 3): the kernel is transposed
    fs::remove_all(dir_);
    testing::write_hf_by_hand(dir_, c, tensors);
    const HfLlamaCheckpoint ckpt = HfLlamaCheckpoint::open(dir_.string());
    for (Scheme scheme : {Scheme::kKerasHub, Scheme::kReplicated}) {
      auto arrays = allocate(c, scheme, mesh_);
      const std::string m = ValueErrorMessage([&] { load_hf_llama(ckpt, pointers(arrays)); });
      EXPECT_TRUE(HasSubstr(
          m, fmt::format("tensor 'model.layers.1.mlp.down_proj.weight' in Llama checkpoint {} "
                         "holds a non-finite value ({} at index [5, 3] of "
                         "'transformer_layer_1/feedforward_output_dense/kernel')",
                         quote(dir_.string()), bad)))
          << m;
      // Opting out loads it as it is.
      EXPECT_NO_THROW(load_hf_llama(ckpt, pointers(arrays), {.refuse_non_finite = false}));
    }
  }
}

// A tied model's lm_head.weight and RoPE inv_freq buffers are ignored, and said so.
TEST_F(HfLlamaTest, TiedLmHeadAndRopeBuffersAreIgnored) {
  const LlamaConfig tied = testing::tiny_config(4, 2, true);
  auto tensors = testing::formula_tensors(testing::tiny_config(4, 2, false));  // with lm_head
  tensors.emplace("model.layers.0.self_attn.rotary_emb.inv_freq", HostTensor(DType::kF32, {2}));
  testing::write_hf_by_hand(dir_, tied, tensors);
  HfLlamaCheckpoint ckpt = HfLlamaCheckpoint::open(dir_.string());
  EXPECT_EQ(ckpt.find("token_embedding/reverse_embeddings"), nullptr);
  auto arrays = allocate(tied, Scheme::kReplicated, mesh_);
  HfLoadReport r = load_hf_llama(ckpt, pointers(arrays));
  ASSERT_EQ(r.ignored_tensors.size(), 2u);
  EXPECT_TRUE(HasSubstr(r.ignored_tensors[0] + r.ignored_tensors[1], "lm_head.weight (tie_word"));
  EXPECT_TRUE(
      HasSubstr(r.ignored_tensors[0] + r.ignored_tensors[1], "rotary_emb.inv_freq (a RoPE"));
}

TEST_F(HfLlamaTest, SaveRefusesIncompleteOrMisshapenVariables) {
  const LlamaConfig c = testing::tiny_config(4, 2, false);
  Array emb = Array::allocate(TensorLayout({None, None}, mesh_), {37, 16}, DType::kF32, rt_);
  std::string m = ValueErrorMessage([&] {
    save_hf_llama(dir_.string(), c, {{"token_embedding/embeddings", &emb}});
  });
  EXPECT_TRUE(HasSubstr(m,
                        "needs every variable of the model; missing "
                        "'transformer_layer_0/self_attention_layernorm/scale'"));
  m = ValueErrorMessage([&] { save_hf_llama(dir_.string(), c, {{"dense/kernel", &emb}}); });
  EXPECT_TRUE(HasSubstr(m, "'dense/kernel' is not a variable of this Llama"));
  m = ValueErrorMessage([&] { save_hf_llama(dir_.string(), c, {}, DType::kI32); });
  EXPECT_TRUE(HasSubstr(m, "writes F32, BF16 or F16, not I32"));
}

}  // namespace
}  // namespace meshlayout
