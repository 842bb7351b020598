// save_directory_test.cc — a multi-file save directory is claimed before the work, locked
// against a second run, and complete or recognisably incomplete after any interruption.
#include "meshlayout/io/save_directory.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>

#include "meshlayout/core/errors.h"

namespace meshlayout {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class SaveDirectoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            fmt::format("meshlayout_save_directory_{}_{}", ::getpid(),
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  template <typename E, typename F>
  static std::string error_of(F&& f) {
    try {
      f();
    } catch (const E& e) {
      return e.what();
    }
    return "<no error of the expected type>";
  }

  fs::path root_;
};

const std::string kOptimizerFile = "optimizer.safetensors";

TEST_F(SaveDirectoryTest, ClaimLockFinish) {
  const std::string dir = (root_ / "out" / "nested").string();
  std::optional<SaveDirectory> save = SaveDirectory::claim(dir, "--save");
  EXPECT_TRUE(fs::is_directory(dir));
  EXPECT_TRUE(fs::exists(fs::path(dir) / kSaveLockFile));
  // A second run saving into the same directory is refused while the first holds it.
  EXPECT_THAT(
      error_of<FailedPreconditionError>([&] { SaveDirectory::claim(dir, "--save"); }),
      HasSubstr(fmt::format("another run is saving into this directory (pid {}", ::getpid())));
  // Until finish(), the directory reads as incomplete.
  std::ofstream(fs::path(dir) / kOptimizerFile) << "x";
  EXPECT_THAT(error_of<FailedPreconditionError>([&] {
                check_save_complete(dir, {&kOptimizerFile, 1});
              }),
              HasSubstr("is an incomplete save: it still holds .meshlayout-save.lock"));
  save->finish({{"iterations", 7}});
  EXPECT_FALSE(fs::exists(fs::path(dir) / kSaveLockFile));
  EXPECT_NO_THROW(check_save_complete(dir, {&kOptimizerFile, 1}));
  EXPECT_EQ(read_save_marker(dir).at("iterations"), 7);
  // Finished: the directory is no longer empty, so nothing claims it again.
  EXPECT_THAT(error_of<ValueError>([&] { SaveDirectory::claim(dir, "--save"); }),
              HasSubstr("the directory is not empty"));
}

TEST_F(SaveDirectoryTest, KilledRunLeavesAnIncompleteDirectoryThatCanBeClaimedAgain) {
  const std::string dir = (root_ / "out").string();
  { SaveDirectory killed = SaveDirectory::claim(dir, "--save"); }  // released, never finished
  EXPECT_THAT(error_of<FailedPreconditionError>([&] { check_save_complete(dir, {}); }),
              HasSubstr("incomplete save"));
  // Only the stale lock is there: a new run may use the directory.
  SaveDirectory again = SaveDirectory::claim(dir, "--save");
  again.finish(nlohmann::json::object());
  EXPECT_NO_THROW(check_save_complete(dir, {}));
}

TEST_F(SaveDirectoryTest, AbandonLeavesNothingBehind) {
  const std::string made = (root_ / "made").string();
  SaveDirectory::claim(made, "--save").abandon();
  EXPECT_FALSE(fs::exists(made));  // created by the claim, empty: removed
  fs::create_directories(root_ / "given");
  SaveDirectory::claim((root_ / "given").string(), "--save").abandon();
  EXPECT_TRUE(fs::is_directory(root_ / "given"));  // the user's: kept, and empty again
  EXPECT_TRUE(fs::is_empty(root_ / "given"));
}

TEST_F(SaveDirectoryTest, FilesWithoutTheMarkerAreIncomplete) {
  const std::string dir = root_.string();
  EXPECT_NO_THROW(
      check_save_complete(dir, {&kOptimizerFile, 1}));  // nothing saved: a plain directory
  std::ofstream(root_ / kOptimizerFile) << "x";
  EXPECT_THAT(error_of<FailedPreconditionError>([&] {
                check_save_complete(dir, {&kOptimizerFile, 1});
              }),
              HasSubstr("holds 'optimizer.safetensors' but no meshlayout_save.json"));
  std::ofstream(root_ / kSaveCompleteFile) << "{not json";
  EXPECT_NO_THROW(check_save_complete(dir, {&kOptimizerFile, 1}));
  EXPECT_THAT(error_of<DataLossError>([&] { read_save_marker(dir); }),
              HasSubstr("is not valid JSON"));
}

TEST_F(SaveDirectoryTest, RefusesWhatIsNotANewOrEmptyDirectory) {
  std::ofstream(root_ / "file") << "x";
  EXPECT_THAT(
      error_of<ValueError>([&] { SaveDirectory::claim((root_ / "file").string(), "--save"); }),
      HasSubstr("it exists and is a regular file"));
  EXPECT_THAT(error_of<ValueError>(
                  [&] { SaveDirectory::claim((root_ / "file" / "sub").string(), "--save"); }),
              HasSubstr("cannot create the directory"));
  fs::create_symlink(root_ / "nowhere", root_ / "dangling");
  EXPECT_THAT(
      error_of<ValueError>([&] { SaveDirectory::claim((root_ / "dangling").string(), "--save"); }),
      HasSubstr("it exists and is a dangling symbolic link"));
  fs::create_directories(root_ / "model");
  EXPECT_THAT(error_of<ValueError>([&] {
                SaveDirectory::claim((root_ / "model").string(), "--save",
                                     (root_ / "model").string());
              }),
              HasSubstr("is the --model directory"));
  EXPECT_THAT(error_of<ValueError>([&] { SaveDirectory::claim(root_.string(), "--save"); }),
              HasSubstr("not empty (it holds"));
  EXPECT_THAT(error_of<ValueError>([&] { SaveDirectory::claim("", "--save"); }),
              HasSubstr("--save is empty"));
  // A symlink to an empty directory is a directory.
  fs::create_directories(root_ / "empty");
  fs::create_directory_symlink(root_ / "empty", root_ / "link");
  SaveDirectory linked = SaveDirectory::claim((root_ / "link").string(), "--save");
  EXPECT_TRUE(fs::exists(root_ / "empty" / kSaveLockFile));
}

TEST_F(SaveDirectoryTest, FallbackDirectoryIsNewAndPrivate) {
  const std::string a = make_fallback_save_dir(), b = make_fallback_save_dir();
  EXPECT_NE(a, b);
  EXPECT_TRUE(fs::is_directory(a));
  EXPECT_TRUE(fs::is_empty(a));
  EXPECT_EQ(fs::status(a).permissions() & fs::perms::others_all, fs::perms::none);
  fs::remove_all(a);
  fs::remove_all(b);
}

}  // namespace
}  // namespace meshlayout
