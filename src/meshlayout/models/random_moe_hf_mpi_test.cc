// write_hf_moe under mpirun (np 2 and 4): collective; process 0 writes, every process reads the
// same files back; a directory that cannot be made fails on every process alike.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "meshlayout/core/errors.h"
#include "meshlayout/io/safetensors_file.h"
#include "meshlayout/models/random_moe_hf.h"
#include "meshlayout/runtime/runtime.h"

namespace meshlayout {
namespace {

namespace fs = std::filesystem;

TEST(RandomMoeHfMpiTest, EveryProcessReadsWhatProcessZeroWrote) {
  auto rt = default_runtime();
  ASSERT_GT(rt->comm().size(), 1);
  // One name for all processes: process 0's pid, broadcast.
  std::vector<int64_t> pid = {rt->comm().rank() == 0 ? static_cast<int64_t>(::getpid()) : 0};
  rt->comm().broadcast(pid.data(), sizeof(int64_t), 0);
  const fs::path dir = fs::temp_directory_path() / ("random_moe_hf_mpi_" + std::to_string(pid[0]));
  const HfMoeSpec spec = small_hf_moe_spec("mixtral");
  const auto tensors = random_hf_moe_tensors(spec, 3);
  write_hf_moe(dir.string(), spec, tensors);
  std::ifstream config(dir / "config.json");
  const std::string text((std::istreambuf_iterator<char>(config)),
                         std::istreambuf_iterator<char>());
  EXPECT_EQ(text, spec.to_json());
  const Checkpoint ckpt = Checkpoint::open(dir.string());
  for (const auto& [name, t] : tensors) {
    const auto [file, info] = ckpt.find(name);
    ASSERT_NE(info, nullptr) << name;
    std::vector<float> back(static_cast<size_t>(t.num_elements()));
    file->read_box(*info, Box{Shape(t.shape().size(), 0), t.shape()},
                   reinterpret_cast<std::byte*>(back.data()));
    EXPECT_EQ(std::memcmp(back.data(), t.data(), t.num_bytes()), 0) << name;
  }
  rt->comm().barrier();
  if (rt->comm().rank() == 0) fs::remove_all(dir);

  // A regular file where the directory should be: every process throws.
  const fs::path blocker = dir.string() + "_file";
  if (rt->comm().rank() == 0) std::ofstream(blocker) << "x";
  rt->comm().barrier();
  EXPECT_THROW(write_hf_moe((blocker / "model").string(), spec, tensors), Error);
  rt->comm().barrier();
  if (rt->comm().rank() == 0) fs::remove(blocker);
}

}  // namespace
}  // namespace meshlayout
