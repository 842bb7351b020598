#include "meshlayout/core/input_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "meshlayout/core/errors.h"

namespace meshlayout {
namespace {

namespace fs = std::filesystem;

class InputFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("meshlayout_input_file_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(path(name), std::ios::binary) << text;
  }
  fs::path dir_;
};

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST_F(InputFileTest, ReadsARegularFile) {
  write("a.json", "{\"rules\": []}");
  EXPECT_EQ(read_regular_file(path("a.json"), 100, "rules file"), "{\"rules\": []}");
  write("empty", "");
  EXPECT_EQ(read_regular_file(path("empty"), 100, "rules file"), "");
}

TEST_F(InputFileTest, RefusesAFileOverTheLimitNamingLimitAndSize) {
  write("big", std::string(101, 'x'));
  EXPECT_EQ(message_of([&] { read_regular_file(path("big"), 100, "rules file"); }),
            "rules file '" + path("big") +
                "' is 101 bytes, over the limit of 100 bytes for a rules file");
  write("exact", std::string(100, 'x'));
  EXPECT_EQ(read_regular_file(path("exact"), 100, "rules file").size(), 100u);
}

// Fault 5: /dev/zero (a character device, endless) used to be read until bad_alloc.
TEST_F(InputFileTest, RefusesDevicesAndSymlinksToThem) {
  EXPECT_EQ(message_of([&] { read_regular_file("/dev/zero", kMaxJsonFileBytes, "rules file"); }),
            "rules file '/dev/zero' is a character device, not a regular file");
  fs::create_symlink("/dev/zero", path("model.safetensors.index.json"));
  EXPECT_EQ(message_of([&] {
              read_regular_file(path("model.safetensors.index.json"), kMaxJsonFileBytes, "index");
            }),
            "index '" + path("model.safetensors.index.json") +
                "' is a character device, not a regular file");
}

// Fault 8: opening a FIFO with no writer used to block forever in open().
TEST_F(InputFileTest, RefusesAFifoWithoutBlocking) {
  ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0600), 0);
  EXPECT_EQ(message_of([&] { open_regular_file(path("fifo"), "checkpoint file"); }),
            "checkpoint file '" + path("fifo") + "' is a FIFO (named pipe), not a regular file");
}

TEST_F(InputFileTest, SaysWhyAPathCannotBeOpened) {
  EXPECT_EQ(message_of([&] { read_regular_file(dir_.string(), 100, "rules file"); }),
            "rules file '" + dir_.string() + "' is a directory, not a regular file");
  EXPECT_THROW(read_regular_file(path("missing"), 100, "rules file"), NotFoundError);
  EXPECT_EQ(message_of([&] { read_regular_file(path("missing"), 100, "rules file"); }),
            "rules file '" + path("missing") + "' does not exist");
  fs::create_symlink(path("loop_b"), path("loop_a"));
  fs::create_symlink(path("loop_a"), path("loop_b"));
  const std::string loop =
      message_of([&] { read_regular_file(path("loop_a"), 100, "rules file"); });
  EXPECT_NE(loop.find("(ELOOP); a symlink loop?"), std::string::npos) << loop;
  const std::string long_name = path(std::string(300, 'n'));
  const std::string too_long = message_of([&] { read_regular_file(long_name, 100, "rules file"); });
  EXPECT_NE(too_long.find("(ENAMETOOLONG)"), std::string::npos) << too_long;
  EXPECT_LT(too_long.size(), 400u) << "the path is quoted short";
  if (::geteuid() != 0) {  // root reads anything
    write("secret", "{}");
    fs::permissions(path("secret"), fs::perms::none);
    const std::string denied =
        message_of([&] { read_regular_file(path("secret"), 100, "rules file"); });
    EXPECT_NE(denied.find("permission denied (EACCES)"), std::string::npos) << denied;
  }
  EXPECT_EQ(describe_open_error("rules file", "r.json", EACCES),
            "cannot open rules file 'r.json': permission denied (EACCES)");
}

TEST_F(InputFileTest, ReadsProcFilesWhoseSizeIsZero) {
  const std::string text = read_regular_file("/proc/self/status", 1 << 20, "file");
  EXPECT_NE(text.find("Name:"), std::string::npos);
  EXPECT_THROW(read_regular_file("/proc/self/status", 10, "file"), ValueError);
}

}  // namespace
}  // namespace meshlayout
