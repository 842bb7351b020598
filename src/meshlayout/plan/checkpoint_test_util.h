// checkpoint_test_util.h — a scratch directory for the checkpoint command tests
// (checkpoint_plan_test.cc, inspect_command_test.cc, plan_command_test.cc): small safetensors
// files (make_safetensors_header, data all zeros), index files and rules files.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "meshlayout/io/safetensors_header.h"

namespace meshlayout::testing {

/// A directory unique to the current test and process (ctest runs tests in parallel), removed
/// when the object goes.
class ScratchDir {
 public:
  ScratchDir()
      : dir_(std::filesystem::temp_directory_path() /
             fmt::format("meshlayout_cli_{}_{}_{}", ::getpid(),
                         ::testing::UnitTest::GetInstance()->current_test_suite()->name(),
                         ::testing::UnitTest::GetInstance()->current_test_info()->name())) {
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  ~ScratchDir() { std::filesystem::remove_all(dir_); }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  std::string path(std::string_view name = "") const { return (dir_ / name).string(); }

  /// Writes `text` to file `name`; returns its path.
  std::string write(std::string_view name, std::string_view text) const {
    const std::string p = path(name);
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }

  /// Writes a safetensors file holding `specs` (zeros); returns its path.
  std::string write_safetensors(std::string_view name, const std::vector<TensorSpec>& specs,
                                std::map<std::string, std::string> metadata = {}) const {
    const SafetensorsHeader h = make_safetensors_header(specs, std::move(metadata));
    std::string bytes = safetensors_header_bytes(h);
    bytes.resize(h.file_bytes(), '\0');
    return write(name, bytes);
  }

  /// Writes model.safetensors.index.json mapping every tensor of each file to that file;
  /// returns its path.
  std::string write_index(
      const std::vector<std::pair<std::string, std::vector<TensorSpec>>>& files) const {
    std::string map;
    for (const auto& [file, specs] : files) {
      write_safetensors(file, specs);
      for (const TensorSpec& s : specs) {
        map += fmt::format("{}\"{}\": \"{}\"", map.empty() ? "" : ", ", s.name, file);
      }
    }
    return write("model.safetensors.index.json",
                 fmt::format(R"({{"metadata": {{"total_size": 0}}, "weight_map": {{{}}}}})", map));
  }

 private:
  std::filesystem::path dir_;
};

}  // namespace meshlayout::testing
