#include "meshlayout/io/safetensors_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "meshlayout/array/host_tensor.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/layout/box_ops.h"
#include "meshlayout/runtime/thread_pool.h"

namespace meshlayout {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// A scratch directory per test, removed afterwards.
class SafetensorsFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           fmt::format("meshlayout_file_test_{}_{}", ::getpid(),
                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes a file holding `tensors` (their bytes laid out as the header says); returns its path.
  std::string write(const std::string& name,
                    const std::vector<std::pair<std::string, HostTensor>>& tensors) {
    std::vector<TensorSpec> specs;
    for (const auto& [n, t] : tensors) specs.push_back({n, t.dtype(), t.shape()});
    SafetensorsHeader h = make_safetensors_header(specs, {{"format", "pt"}});
    std::string bytes = safetensors_header_bytes(h);
    bytes.resize(h.file_bytes());
    for (const auto& [n, t] : tensors) {
      if (t.num_bytes() == 0) continue;  // an empty tensor's data() may be null
      std::memcpy(bytes.data() + h.data_start() + h.find(n)->begin, t.data(), t.num_bytes());
    }
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }

  // The region `box` of `t`, row-major.
  static std::vector<std::byte> region(const HostTensor& t, const Box& box) {
    std::vector<std::byte> out(static_cast<size_t>(box.num_elements()) * dtype_size(t.dtype()));
    copy_box(t.data(), Box{Shape(t.shape().size(), 0), t.shape()}, out.data(), box, box,
             dtype_size(t.dtype()));
    return out;
  }

  fs::path dir_;
};

TEST_F(SafetensorsFileTest, ReadBoxReadsExactlyTheBoxBytes) {
  HostTensor w = HostTensor::random(DType::kF32, {16, 12, 3}, 1);
  HostTensor b = HostTensor::random(DType::kBF16, {7}, 2);
  const std::string path = write("m.safetensors", {{"w", w}, {"b", b}});
  auto file = SafetensorsFile::open(path);
  const uint64_t header = file->bytes_read();
  EXPECT_EQ(header, file->header().data_start());
  const TensorInfo& info = *file->header().find("w");
  for (const Box& box :
       {Box{{0, 0, 0}, {16, 12, 3}}, Box{{4, 0, 0}, {4, 12, 3}}, Box{{0, 3, 0}, {16, 3, 3}},
        Box{{5, 2, 1}, {3, 4, 2}}, Box{{2, 2, 2}, {0, 4, 1}}}) {
    SCOPED_TRACE(box.to_string());
    const uint64_t before = file->bytes_read();
    std::vector<std::byte> got(static_cast<size_t>(box.num_elements()) * 4);
    file->read_box(info, box, got.data());
    EXPECT_EQ(got, region(w, box));
    EXPECT_EQ(file->bytes_read() - before, got.size());  // nothing outside the box is read
  }
  std::vector<std::byte> got(2 * 2);
  file->read_box(*file->header().find("b"), Box{{5}, {2}}, got.data());
  EXPECT_EQ(got, region(b, Box{{5}, {2}}));
}

TEST_F(SafetensorsFileTest, ScalarAndEmptyTensorsRead) {
  HostTensor s = HostTensor::random(DType::kI64, {}, 3);
  HostTensor e(DType::kF32, {0, 5});
  auto file = SafetensorsFile::open(write("s.safetensors", {{"s", s}, {"e", e}}));
  std::vector<std::byte> got(8);
  file->read_box(*file->header().find("s"), Box{{}, {}}, got.data());
  EXPECT_EQ(got, region(s, Box{{}, {}}));
  file->read_box(*file->header().find("e"), Box{{0, 0}, {0, 5}}, nullptr);
}

TEST_F(SafetensorsFileTest, BoxOutsideTheTensorIsAValueError) {
  auto file =
      SafetensorsFile::open(write("m.safetensors", {{"w", HostTensor(DType::kF32, {4, 4})}}));
  std::vector<std::byte> got(64);
  try {
    file->read_box(*file->header().find("w"), Box{{2, 0}, {3, 4}}, got.data());
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("box [2:5, 0:4] is not inside tensor 'w' of shape (4, 4)"));
  }
}

TEST_F(SafetensorsFileTest, FileShrunkAfterOpenIsADataLossErrorNamingTensorAndOffset) {
  const std::string path =
      write("m.safetensors", {{"w", HostTensor::random(DType::kF32, {64, 64}, 4)}});
  auto file = SafetensorsFile::open(path);
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(file->header().data_start() + 1000)), 0);
  std::vector<std::byte> got(64 * 64 * 4);
  try {
    file->read_box(*file->header().find("w"), Box{{0, 0}, {64, 64}}, got.data());
    FAIL() << "no error";
  } catch (const DataLossError& e) {
    EXPECT_THAT(e.what(), HasSubstr(fmt::format("the file ends at byte {}, inside tensor 'w'",
                                                file->header().data_start() + 1000)));
  }
}

TEST_F(SafetensorsFileTest, OpenRefusesMissingAndTruncatedFiles) {
  EXPECT_THROW(SafetensorsFile::open((dir_ / "nope.safetensors").string()), NotFoundError);
  const std::string path =
      write("m.safetensors", {{"w", HostTensor::random(DType::kF32, {8, 8}, 5)}});
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(fs::file_size(path) - 4)), 0);
  try {
    SafetensorsFile::open(path);
    FAIL() << "no error";
  } catch (const DataLossError& e) {
    EXPECT_THAT(e.what(), HasSubstr(path));
  }
}

// Column blocks of every device cover whole rows: the batch reads them with one request.
TEST_F(SafetensorsFileTest, BatchMergesFileAdjacentPiecesOfSeveralBoxes) {
  HostTensor w = HostTensor::random(DType::kF32, {64, 32}, 6);
  auto file = SafetensorsFile::open(write("m.safetensors", {{"w", w}}));
  const TensorInfo& info = *file->header().find("w");
  std::vector<std::vector<std::byte>> shards(8, std::vector<std::byte>(64 * 4 * 4));
  ReadBatch batch;
  for (int64_t d = 0; d < 8; ++d) {
    batch.add(*file, info, Box{{0, 4 * d}, {64, 4}}, shards[static_cast<size_t>(d)].data());
  }
  EXPECT_EQ(batch.bytes(), 64u * 32 * 4);
  std::atomic<int> requests = 0;  // on_bytes runs on the workers
  std::atomic<uint64_t> seen = 0;
  ThreadPool pool(2);
  batch.run({.pool = &pool, .on_bytes = [&](uint64_t n) {
               ++requests;
               seen += n;
             }});
  EXPECT_EQ(requests, 1);  // 512 pieces, one contiguous range of the file
  EXPECT_EQ(seen, 64u * 32 * 4);
  for (int64_t d = 0; d < 8; ++d) {
    EXPECT_EQ(shards[static_cast<size_t>(d)], region(w, Box{{0, 4 * d}, {64, 4}}));
  }
  EXPECT_TRUE(batch.empty());
}

TEST_F(SafetensorsFileTest, LargePiecesAreCutIntoParallelRequests) {
  HostTensor w = HostTensor::random(DType::kU8, {1000, 100}, 7);
  auto file = SafetensorsFile::open(write("m.safetensors", {{"w", w}}));
  std::vector<std::byte> got(100000);
  ReadBatch batch;
  batch.add(*file, *file->header().find("w"), Box{{0, 0}, {1000, 100}}, got.data());
  std::atomic<int> requests = 0;  // on_bytes runs on the workers, concurrently
  ThreadPool pool(2);
  batch.run({.pool = &pool, .max_request_bytes = 30000, .on_bytes = [&](uint64_t) { ++requests; }});
  EXPECT_EQ(requests, 4);  // 30000 + 30000 + 30000 + 10000
  EXPECT_EQ(got, region(w, Box{{0, 0}, {1000, 100}}));
}

TEST_F(SafetensorsFileTest, CheckpointOpensAnIndexOfSeveralFiles) {
  HostTensor a = HostTensor::random(DType::kF32, {4, 4}, 8);
  HostTensor b = HostTensor::random(DType::kF16, {3}, 9);
  write("model-00001-of-00002.safetensors", {{"a", a}});
  write("model-00002-of-00002.safetensors", {{"b", b}});
  std::ofstream(dir_ / "model.safetensors.index.json")
      << R"({"metadata": {"total_size": 70}, "weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}})";
  for (const std::string& p : {dir_.string(), (dir_ / "model.safetensors.index.json").string()}) {
    Checkpoint ckpt = Checkpoint::open(p);
    EXPECT_EQ(ckpt.files().size(), 2u);
    EXPECT_EQ(ckpt.tensors().size(), 2u);
    auto [file, info] = ckpt.find("b");
    ASSERT_NE(info, nullptr);
    EXPECT_THAT(file->path(), HasSubstr("model-00002-of-00002"));
    std::vector<std::byte> got(6);
    file->read_box(*info, Box{{0}, {3}}, got.data());
    EXPECT_EQ(got, region(b, Box{{0}, {3}}));
    EXPECT_EQ(ckpt.find("c").second, nullptr);
    EXPECT_EQ(ckpt.file_bytes(), fs::file_size(dir_ / "model-00001-of-00002.safetensors") +
                                     fs::file_size(dir_ / "model-00002-of-00002.safetensors"));
  }
}

TEST_F(SafetensorsFileTest, CheckpointRefusesBadIndexes) {
  write("one.safetensors", {{"a", HostTensor(DType::kF32, {2})}});
  write("two.safetensors",
        {{"a", HostTensor(DType::kF32, {2})}, {"b", HostTensor(DType::kF32, {2})}});
  auto open_index = [&](const std::string& json) -> std::string {
    std::ofstream(dir_ / "x.safetensors.index.json", std::ios::trunc) << json;
    try {
      Checkpoint::open((dir_ / "x.safetensors.index.json").string());
    } catch (const Error& e) {
      return e.what();
    }
    return "<nothing thrown>";
  };
  EXPECT_THAT(open_index(R"({"weight_map": {"b": "one.safetensors"}})"),
              HasSubstr("maps tensor 'b' to 'one.safetensors', which does not hold it"));
  EXPECT_THAT(open_index(R"({"weight_map": {"a": "../one.safetensors"}})"),
              HasSubstr("expected a file name in the index's directory"));
  EXPECT_THAT(open_index(R"({"weight_map": {"a": "one.safetensors", "b": "two.safetensors"}})"),
              HasSubstr("tensor 'a' is in both"));
  EXPECT_THAT(open_index(R"({"weight_map": {"a": 3}})"), HasSubstr("expected a file name"));
  EXPECT_THAT(open_index(R"({"weights": {}})"), HasSubstr("\"weight_map\""));
  EXPECT_THAT(open_index(R"({"weight_map": )"), HasSubstr("not valid JSON"));
  EXPECT_THAT(open_index(R"({"weight_map": {"a": "missing.safetensors"}})"),
              HasSubstr("missing.safetensors"));
  fs::create_directories(dir_ / "empty");
  EXPECT_THROW(Checkpoint::open((dir_ / "empty").string()), NotFoundError);
  EXPECT_THROW(Checkpoint::open((dir_ / "absent").string()), NotFoundError);
}

// What Checkpoint::open(path) throws.
std::string open_error(const fs::path& path) {
  try {
    Checkpoint::open(path.string());
  } catch (const Error& e) {
    return e.what();
  }
  return "<nothing thrown>";
}

// Faults 5 and 8, and the silently accepted NUL: an index that is a symlink to /dev/zero was
// read forever, a FIFO named in an index hung open(), "a\u0000b" was opened as "a".
TEST_F(SafetensorsFileTest, CheckpointRefusesSpecialFilesWithoutBlocking) {
  fs::create_symlink("/dev/zero", dir_ / "z.safetensors.index.json");
  EXPECT_EQ(open_error(dir_ / "z.safetensors.index.json"),
            "checkpoint index '" + (dir_ / "z.safetensors.index.json").string() +
                "' is a character device, not a regular file");
  ASSERT_EQ(::mkfifo((dir_ / "fifo.safetensors").c_str(), 0600), 0);
  std::ofstream(dir_ / "f.safetensors.index.json")
      << R"({"weight_map": {"a": "fifo.safetensors"}})";
  EXPECT_EQ(open_error(dir_ / "f.safetensors.index.json"),
            "checkpoint file '" + (dir_ / "fifo.safetensors").string() +
                "' is a FIFO (named pipe), not a regular file");
  EXPECT_EQ(open_error(dir_ / "fifo.safetensors"),
            "checkpoint file '" + (dir_ / "fifo.safetensors").string() +
                "' is a FIFO (named pipe), not a regular file");
  std::ofstream(dir_ / "n.safetensors.index.json")
      << R"({"weight_map": {"a": "a\u0000.safetensors"}})";
  EXPECT_THAT(open_error(dir_ / "n.safetensors.index.json"),
              HasSubstr("weight_map['a'] is 'a\\x00.safetensors'; expected a file name in the "
                        "index's directory (no '/', no NUL byte)"));
  std::ofstream(dir_ / "d.safetensors.index.json") << R"({"weight_map": {"a": "x", "a": "a"}})";
  EXPECT_THAT(open_error(dir_ / "d.safetensors.index.json"),
              HasSubstr("the key 'a' appears twice in the object \"weight_map\""));
  std::ofstream(dir_ / "deep.safetensors.index.json") << std::string(100000, '[');
  EXPECT_THAT(open_error(dir_ / "deep.safetensors.index.json"),
              HasSubstr("nested deeper than the limit of 64 levels"));
}

// Wrong reasons: a symlink loop or an over-long name was reported as "does not exist".
TEST_F(SafetensorsFileTest, CheckpointSaysWhyAPathCannotBeUsed) {
  fs::create_symlink(dir_ / "loop2", dir_ / "loop1");
  fs::create_symlink(dir_ / "loop1", dir_ / "loop2");
  EXPECT_THAT(open_error(dir_ / "loop1"), HasSubstr("(ELOOP); a symlink loop?"));
  EXPECT_THAT(open_error(dir_ / std::string(300, 'x')), HasSubstr("(ENAMETOOLONG)"));
  EXPECT_THAT(open_error(dir_ / "absent"), HasSubstr("does not exist"));
  // A directory whose model.safetensors is a symlink loop: the loop is named, not "neither".
  fs::create_directories(dir_ / "d");
  fs::create_symlink(dir_ / "d" / "model.safetensors", dir_ / "d" / "model.safetensors");
  EXPECT_THAT(open_error(dir_ / "d"), HasSubstr("(ELOOP)"));
}

}  // namespace
}  // namespace meshlayout
