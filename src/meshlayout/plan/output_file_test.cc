#include "meshlayout/plan/output_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "meshlayout/core/errors.h"
#include "meshlayout/plan/checkpoint_test_util.h"

namespace meshlayout {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string error_of(const std::string& path) {
  try {
    write_output_file(path, "<html></html>", "--html");
  } catch (const ValueError& e) {
    return e.what();
  }
  return "no error";
}

size_t files_in(const std::string& dir) {
  return static_cast<size_t>(std::distance(fs::directory_iterator(dir), fs::directory_iterator()));
}

TEST(OutputFile, WritesAndReplacesWholeFiles) {
  testing::ScratchDir dir;
  const std::string path = dir.path("page.html");
  write_output_file(path, "first", "--html");
  EXPECT_EQ(read(path), "first");
  write_output_file(path, "second, longer", "--html");
  EXPECT_EQ(read(path), "second, longer");
  EXPECT_EQ(files_in(dir.path()), 1u);  // no temporary left behind
}

TEST(OutputFile, BadPathsAreNamedAndNothingIsWritten) {
  testing::ScratchDir dir;
  EXPECT_THAT(error_of(dir.path("missing/page.html")),
              AllOf(HasSubstr("cannot write --html '" + dir.path("missing/page.html") + "'"),
                    HasSubstr("directory '" + dir.path("missing") + "' does not exist")));
  EXPECT_THAT(error_of(dir.path()), HasSubstr("names no file"));  // ends in '/'
  fs::create_directory(dir.path("sub"));
  EXPECT_THAT(error_of(dir.path("sub")), HasSubstr("it exists and is a directory"));
  const std::string file = dir.write("plain", "x");
  EXPECT_THAT(error_of(file + "/page.html"), HasSubstr("is a regular file, not a directory"));
  EXPECT_THAT(error_of(""), HasSubstr("names no file"));
  // A directory no one can create files in (root included).
  EXPECT_THAT(error_of("/proc/meshlayout-page.html"),
              HasSubstr("cannot write --html '/proc/meshlayout-page.html': cannot create a file "
                        "in '/proc'"));
  EXPECT_EQ(files_in(dir.path()), 2u);  // sub and plain: nothing else
  EXPECT_EQ(read(file), "x");
}

}  // namespace
}  // namespace meshlayout
