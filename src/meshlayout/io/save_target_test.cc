// save_target_test.cc — saves never replace what is not a regular file, keep symlinks, and
// clear the temporary files of saves whose process died.
#include "meshlayout/io/save_target.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <set>

#include "meshlayout/array/array.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/io/array_io.h"
#include "meshlayout/layout/devices.h"

namespace meshlayout {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class SaveTargetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    set_device_count(8);
    dir_ = fs::temp_directory_path() /
           fmt::format("meshlayout_save_target_{}_{}", ::getpid(),
                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    reset_device_count();
    fs::remove_all(dir_);
  }

  // Saves a small array to `path`; returns the error text, or "" on success.
  std::string save(const std::string& path) {
    DeviceMesh mesh({8}, {"x"});
    Array a = distribute_tensor(HostTensor::random(DType::kF32, {16}, 1), TensorLayout({"x"}, mesh),
                                {.runtime = rt_});
    NamedArray arrays[] = {{"a", &a}};
    try {
      save_arrays(path, arrays);
      return "";
    } catch (const Error& e) {
      return e.what();
    }
  }
  std::set<std::string> listing() const {
    std::set<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.insert(e.path().filename().string());
    return names;
  }

  std::shared_ptr<Runtime> rt_ = Runtime::single_process(8);
  fs::path dir_;
};

TEST_F(SaveTargetTest, RefusesADeviceNodeAndLeavesIt) {
  EXPECT_THAT(save("/dev/null"),
              HasSubstr("cannot save to '/dev/null': it exists and is a character device"));
  struct stat st {};
  ASSERT_EQ(::stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
}

TEST_F(SaveTargetTest, RefusesAFifoAndADirectory) {
  const fs::path fifo = dir_ / "pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_THAT(save(fifo.string()), HasSubstr("is a FIFO (named pipe)"));
  fs::create_directory(dir_ / "sub");
  EXPECT_THAT(save((dir_ / "sub").string()), HasSubstr("is a directory"));
  EXPECT_TRUE(fs::is_fifo(fifo));
  EXPECT_EQ(listing(), (std::set<std::string>{"pipe", "sub"}));  // no temporary left
  EXPECT_THAT(save(""), HasSubstr("names no file"));
}

TEST_F(SaveTargetTest, ASymlinkKeepsPointingAtTheNewFile) {
  const fs::path real = dir_ / "real.safetensors", link = dir_ / "link.safetensors";
  std::ofstream(real) << "old";
  fs::create_symlink(real, link);
  EXPECT_EQ(save(link.string()), "");
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_GT(fs::file_size(real), 3u);
  EXPECT_EQ(listing(), (std::set<std::string>{"link.safetensors", "real.safetensors"}));
}

TEST_F(SaveTargetTest, RemovesOnlyTemporariesOfDeadProcessesOfThisHost) {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);                 // `child` is now a pid no process has
  const std::string token = make_save_token();  // "<host>-<pid>-<hex>"
  const std::string host = token.substr(0, token.find('-'));
  const fs::path target = dir_ / "m.safetensors";
  const std::string dead = fmt::format(".m.safetensors.tmp-{}-{}-0000abcd", host, child);
  const std::string dead_old_form = fmt::format(".m.safetensors.tmp-{}-0000abcd", child);
  const std::string alive = fmt::format(".m.safetensors.tmp-{}-{}-0000abcd", host, ::getpid());
  const std::string other_host = fmt::format(".m.safetensors.tmp-elsewhere-{}-0000abcd", child);
  const std::string other_file = fmt::format(".n.safetensors.tmp-{}-{}-0000abcd", host, child);
  for (const std::string& name : {dead, dead_old_form, alive, other_host, other_file}) {
    std::ofstream(dir_ / name) << "partial";
  }
  EXPECT_EQ(save(target.string()), "");
  EXPECT_EQ(listing(), (std::set<std::string>{"m.safetensors", alive, other_host, other_file}));
  EXPECT_EQ(temporary_save_name(target, "t"), (dir_ / ".m.safetensors.tmp-t").string());
}

}  // namespace
}  // namespace meshlayout
