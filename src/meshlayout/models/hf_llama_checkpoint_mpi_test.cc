// hf_llama_checkpoint_mpi_test.cc — HF Llama checkpoints under mpirun (np 2 and 4): process 0
// writes a random model with save_hf_llama, then every process loads it under sharded
// layouts, holds exactly the expected values in its own shards, and read at most 1.1x the
// bytes of its devices' distinct boxes.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <set>

#include "meshlayout/models/hf_llama_checkpoint.h"
#include "meshlayout/models/hf_llama_test_util.h"
#include "meshlayout/testing/test_util.h"

namespace meshlayout {
namespace {

namespace fs = std::filesystem;
using testing::Scheme;

class HfLlamaMpiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char name[128] = {};
    if (rt_->comm().rank() == 0) {
      std::string tmpl = (fs::temp_directory_path() / "meshlayout_hf_mpi_XXXXXX").string();
      if (::mkdtemp(tmpl.data()) != nullptr) std::snprintf(name, sizeof name, "%s", tmpl.c_str());
    }
    rt_->comm().broadcast(name, sizeof name, 0);
    ASSERT_STRNE(name, "") << "mkdtemp failed in process 0";
    dir_ = name;
  }
  void TearDown() override {
    rt_->comm().barrier();
    if (rt_->comm().rank() == 0) fs::remove_all(dir_);
  }

  std::shared_ptr<Runtime> rt_ = default_runtime();
  fs::path dir_;
};

TEST_F(HfLlamaMpiTest, EachProcessLoadsAndReadsOnlyItsShards) {
  const int64_t devices = rt_->global_device_count();
  ASSERT_EQ(devices % 2, 0);
  const DeviceMesh mesh({2, devices / 2}, {"batch", "model"});
  for (const auto& [config, dtype, shards] :
       {std::tuple{testing::tiny_config(6, 3, false), DType::kBF16, 2},
        std::tuple{testing::tiny_config(4, 4, true), DType::kF32, 1}}) {
    const auto weights = testing::random_keras_weights(config, 5);
    {
      std::map<std::string, Array> saved;
      std::map<std::string, const Array*> by_path;
      for (const auto& [path, w] : weights) {
        saved.emplace(
            path, distribute_tensor(
                      w, testing::scheme_layout(Scheme::kFirstDim, path, w.shape().size(), mesh),
                      {.runtime = rt_}));
        by_path.emplace(path, &saved.at(path));
      }
      save_hf_llama(dir_.string(), config, by_path, dtype, shards);
    }
    HfLlamaCheckpoint ckpt = HfLlamaCheckpoint::open(dir_.string());
    for (Scheme scheme : {Scheme::kKerasHub, Scheme::kSwapped, Scheme::kLastDim}) {
      SCOPED_TRACE(fmt::format("{} kv {} {}", dtype_name(dtype), config.num_key_value_heads,
                               testing::scheme_name(scheme)));
      std::map<std::string, Array> arrays;
      std::map<std::string, Array*> targets;
      for (const HfWeightMapping& m : hf_llama_weight_mappings(config)) {
        arrays.emplace(m.keras_path,
                       Array::allocate(
                           testing::scheme_layout(scheme, m.keras_path, m.keras_shape.size(), mesh),
                           m.keras_shape, DType::kF32, rt_));
        targets.emplace(m.keras_path, &arrays.at(m.keras_path));
      }
      const uint64_t before = ckpt.checkpoint().bytes_read();
      HfLoadReport report = load_hf_llama(ckpt, targets, {.max_piece_bytes = 256});
      const uint64_t read = ckpt.checkpoint().bytes_read() - before;
      // This process's distinct boxes, from the layouts alone.
      uint64_t own = 0;
      const size_t element = dtype_size(dtype);
      for (const auto& [path, a] : arrays) {
        std::set<std::pair<Shape, Shape>> boxes;
        for (const Array::Shard& s : a.local_shards()) {
          if (!s.box.empty()) boxes.insert({s.box.offset, s.box.shape});
        }
        for (const auto& [offset, shape] : boxes)
          own += element * static_cast<uint64_t>(num_elements(shape));
      }
      EXPECT_EQ(report.box_bytes, own);
      EXPECT_LE(static_cast<double>(read), 1.1 * static_cast<double>(own));
      if (rt_->comm().rank() == 0) {
        std::printf("[ bytes    ] %s: process 0 read %llu of its boxes' %llu (ratio %.3f)\n",
                    testing::scheme_name(scheme), static_cast<unsigned long long>(read),
                    static_cast<unsigned long long>(own),
                    static_cast<double>(read) / static_cast<double>(own));
      }
      // Local shards only: no gather.
      for (const auto& [path, a] : arrays) {
        const HostTensor expected = testing::rounded_through(weights.at(path), dtype);
        for (const Array::Shard& s : a.local_shards()) {
          const std::vector<std::byte> want = testing::slice(expected, s.box);
          ASSERT_EQ(s.buffer.size(), want.size()) << path;
          if (want.empty()) continue;  // an empty block has no buffer to compare
          EXPECT_EQ(std::memcmp(s.buffer.data(), want.data(), want.size()), 0)
              << path << " box " << s.box.to_string();
        }
      }
    }
    rt_->comm().barrier();  // nobody rewrites the directory while another process reads it
  }
}

// The file loses its last bytes after every process opened it: only the process holding the
// last block of the last tensor (model.norm.weight, row-split) fails to read, and every
// process throws its error.
TEST_F(HfLlamaMpiTest, AReadFailureInOneProcessIsThrownByAll) {
  const LlamaConfig c = testing::tiny_config(4, 2, false);
  const DeviceMesh mesh({rt_->global_device_count()}, {"x"});
  const auto weights = testing::random_keras_weights(c, 3);
  std::map<std::string, Array> arrays;
  std::map<std::string, Array*> targets;
  std::map<std::string, const Array*> by_path;
  for (const auto& [path, w] : weights) {
    arrays.emplace(path,
                   distribute_tensor(
                       w, testing::scheme_layout(Scheme::kFirstDim, path, w.shape().size(), mesh),
                       {.runtime = rt_}));
    targets.emplace(path, &arrays.at(path));
    by_path.emplace(path, &arrays.at(path));
  }
  save_hf_llama(dir_.string(), c, by_path);
  HfLlamaCheckpoint ckpt = HfLlamaCheckpoint::open(dir_.string());
  rt_->comm().barrier();
  if (rt_->comm().rank() == 0) {
    const fs::path file = dir_ / "model.safetensors";
    fs::resize_file(file, fs::file_size(file) - 4);
  }
  rt_->comm().barrier();
  try {
    load_hf_llama(ckpt, targets);
    ADD_FAILURE() << "no error";
  } catch (const DataLossError& e) {
    EXPECT_TRUE(testing::HasSubstr(e.what(), fmt::format("rank {}", rt_->comm().size() - 1)));
    EXPECT_TRUE(testing::HasSubstr(e.what(), "model.norm.weight"));
  }
}

// A checkpoint that does not match its config: every process refuses it the same way.
TEST_F(HfLlamaMpiTest, EveryProcessRefusesAMismatchedCheckpoint) {
  const LlamaConfig c = testing::tiny_config(4, 2, false);
  if (rt_->comm().rank() == 0) {
    auto tensors = testing::formula_tensors(c);
    tensors.erase("model.layers.0.mlp.down_proj.weight");
    testing::write_hf_by_hand(dir_, c, tensors);
  }
  rt_->comm().barrier();
  try {
    HfLlamaCheckpoint::open(dir_.string());
    ADD_FAILURE() << "no error";
  } catch (const NotFoundError& e) {
    EXPECT_TRUE(testing::HasSubstr(e.what(), "'model.layers.0.mlp.down_proj.weight'"));
  }
}

}  // namespace
}  // namespace meshlayout
