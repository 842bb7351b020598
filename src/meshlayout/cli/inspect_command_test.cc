#include "meshlayout/cli/inspect_command.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "meshlayout/core/errors.h"
#include "meshlayout/io/safetensors_file.h"
#include "meshlayout/plan/checkpoint_test_util.h"

namespace meshlayout::cli {
namespace {

using nlohmann::json;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

class InspectCommandTest : public ::testing::Test {
 protected:
  // Output of `inspect` on `path` (text or JSON); the exit code must be 0.
  std::string inspect(const std::string& path, bool as_json = false) {
    std::ostringstream out;
    EXPECT_EQ(run_inspect({.path = path, .json = as_json}, out), 0);
    return out.str();
  }

  // What the throw of `inspect` on `path` says.
  std::string error_of(const std::string& path) {
    std::ostringstream out;
    try {
      run_inspect({.path = path}, out);
    } catch (const Error& e) {
      EXPECT_EQ(out.str(), "");
      return e.what();
    }
    return "<no error>";
  }

  testing::ScratchDir dir_;
  const std::vector<TensorSpec> specs_ = {{"dense/kernel", DType::kF32, {4, 8}},
                                          {"dense/bias", DType::kF32, {8}},
                                          {"emb/embeddings", DType::kBF16, {10, 4}}};
};

// Output hygiene: names with newlines or terminal escapes were printed raw.
TEST_F(InspectCommandTest, TextEscapesControlCharactersInNames) {
  const std::string path = dir_.write_safetensors(
      "m.safetensors",
      {{"evil\nfake line", DType::kF32, {2}}, {"\x1b]0;title\x07x", DType::kF32, {1}}},
      {{"note\r", "\x1b[2Jwiped"}});
  const std::string text = inspect(path);
  EXPECT_EQ(text.find('\x1b'), std::string::npos) << text;
  EXPECT_EQ(text.find('\r'), std::string::npos) << text;
  EXPECT_THAT(text, HasSubstr("\nevil\\nfake line    F32    (2,)"));
  EXPECT_THAT(text, HasSubstr("\n\\x1b]0;title\\x07x  F32    (1,)"));
  EXPECT_THAT(text, HasSubstr("  note\\r: \\x1b[2Jwiped\n"));
}

TEST_F(InspectCommandTest, TextListsTensorsMetadataAndTotals) {
  const std::string path = dir_.write_safetensors("m.safetensors", specs_, {{"format", "pt"}});
  const std::string text = inspect(path);
  // Data order: F32 first (by name within a size), then BF16.
  EXPECT_THAT(text, HasSubstr(fmt::format("checkpoint '{}': 3 tensors in 1 file (", path)));
  EXPECT_THAT(text, HasSubstr("), 240 B (240 bytes) of tensor data\n"));
  EXPECT_THAT(text, HasSubstr("\nmetadata:\n  format: pt\n"));
  EXPECT_THAT(text, HasSubstr("tensor          dtype  shape    bytes  data_offsets\n"
                              "dense/bias      F32    (8,)        32  [0, 32)\n"
                              "dense/kernel    F32    (4, 8)     128  [32, 160)\n"
                              "emb/embeddings  BF16   (10, 4)     80  [160, 240)\n"));
  EXPECT_THAT(text, HasSubstr("  BF16     1 tensor  80 B (80 bytes)\n"
                              "  F32      2 tensors  160 B (160 bytes)\n"));
}

TEST_F(InspectCommandTest, JsonFields) {
  const std::string path = dir_.write_safetensors("m.safetensors", specs_, {{"format", "pt"}});
  const json j = json::parse(inspect(path, true));
  const uint64_t header_bytes = Checkpoint::open(path).files()[0]->header().header_bytes;
  EXPECT_EQ(j["source"], path);
  ASSERT_EQ(j["files"].size(), 1u);
  EXPECT_EQ(j["files"][0]["path"], path);
  EXPECT_EQ(j["files"][0]["header_bytes"], header_bytes);
  EXPECT_EQ(j["files"][0]["data_bytes"], 240);
  EXPECT_EQ(j["files"][0]["file_bytes"], 8 + header_bytes + 240);
  EXPECT_EQ(j["metadata"], json::parse(R"({"format": "pt"})"));
  ASSERT_EQ(j["tensors"].size(), 3u);
  const json& kernel = j["tensors"][1];
  EXPECT_EQ(kernel["name"], "dense/kernel");
  EXPECT_EQ(kernel["file"], path);
  EXPECT_EQ(kernel["dtype"], "F32");
  EXPECT_EQ(kernel["shape"], json::parse("[4, 8]"));
  EXPECT_EQ(kernel["bytes"], 128);
  EXPECT_EQ(kernel["data_offsets"], json::parse("[32, 160]"));
  EXPECT_EQ(kernel["file_offset"], 8 + header_bytes + 32);
  EXPECT_EQ(j["totals"], json::parse(fmt::format(
                             R"({{"tensors": 3, "bytes": 240, "files": 1, "file_bytes": {},
                                 "dtypes": {{"BF16": {{"tensors": 1, "bytes": 80}},
                                            "F32": {{"tensors": 2, "bytes": 160}}}}}})",
                             8 + header_bytes + 240)));
}

TEST_F(InspectCommandTest, NamesNeedingEscapes) {
  const std::string path = dir_.write_safetensors(
      "m.safetensors", {{"a\"b\\c", DType::kF32, {1}}, {"日本/é", DType::kF32, {1}}},
      {{"note", "line\nbreak"}});
  const json j = json::parse(inspect(path, true));
  EXPECT_EQ(j["tensors"][0]["name"], "a\"b\\c");
  EXPECT_EQ(j["tensors"][1]["name"], "日本/é");
  EXPECT_EQ(j["metadata"]["note"], "line\nbreak");
}

TEST_F(InspectCommandTest, MultiFileIndexAndDirectory) {
  const std::string index =
      dir_.write_index({{"model-00001-of-00002.safetensors", {{"a/kernel", DType::kF32, {4, 4}}}},
                        {"model-00002-of-00002.safetensors",
                         {{"b/kernel", DType::kBF16, {2, 4}}, {"b/bias", DType::kF32, {4}}}}});
  const std::string text = inspect(index);
  EXPECT_THAT(text, HasSubstr("3 tensors in 2 files"));
  // With several files, each tensor line names its file.
  EXPECT_THAT(text, HasSubstr("a/kernel  model-00001-of-00002.safetensors  F32    (4, 4)"));
  EXPECT_THAT(text, HasSubstr("b/kernel  model-00002-of-00002.safetensors  BF16   (2, 4)"));

  const json j = json::parse(inspect(dir_.path(), true));  // the directory holding the index
  ASSERT_EQ(j["files"].size(), 2u);
  EXPECT_EQ(j["totals"]["tensors"], 3);
  EXPECT_EQ(j["totals"]["bytes"], 64 + 16 + 16);
  for (const json& t : j["tensors"]) {
    const std::string want = t["name"] == "a/kernel" ? "model-00001-of-00002.safetensors"
                                                     : "model-00002-of-00002.safetensors";
    EXPECT_EQ(t["file"], dir_.path(want)) << t;
  }
}

TEST_F(InspectCommandTest, BadFilesGiveAnErrorNamingThem) {
  const std::string path = dir_.write_safetensors("m.safetensors", specs_);
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const std::string truncated = dir_.write("truncated.safetensors", bytes.substr(0, 100));
  EXPECT_THAT(error_of(truncated), AllOf(HasSubstr(truncated), HasSubstr("truncated")));
  const std::string short_data = dir_.write("short.safetensors", bytes.substr(0, bytes.size() - 1));
  EXPECT_THAT(error_of(short_data), HasSubstr(short_data));
  const std::string text = dir_.write("notes.safetensors", "not a checkpoint at all\n");
  EXPECT_THAT(error_of(text), HasSubstr(text));
  EXPECT_THAT(error_of(dir_.path("missing.safetensors")),
              AllOf(HasSubstr("missing.safetensors"), HasSubstr("does not exist")));
  const std::string index =
      dir_.write("model.safetensors.index.json", R"({"weight_map": {"x": "absent.safetensors"}})");
  EXPECT_THAT(error_of(index), HasSubstr("absent.safetensors"));
}

}  // namespace
}  // namespace meshlayout::cli
