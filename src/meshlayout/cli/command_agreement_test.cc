// command_agreement_test.cc — every parsed option is described without a list of them, and
// processes (here threads of one in-process group) that read different inputs fail together
// naming the first difference. The end-to-end cases under mpirun are in CMakeLists.txt
// (mpi.cli.*disagreeing*).
#include "meshlayout/cli/command_agreement.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "meshlayout/array/array_test_util.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/io/safetensors_file.h"

namespace meshlayout::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

TEST(CommandAgreementTest, DescribesEveryOptionAsParsed) {
  CLI::App app;
  CLI::App* cmd = app.add_subcommand("train");
  std::string model;
  double weight_decay = 0;
  bool zero1 = false;
  std::optional<std::string> save;
  cmd->add_option("--model", model);
  cmd->add_option("--weight-decay", weight_decay);
  cmd->add_flag("--zero1", zero1);
  cmd->add_option("--save", save);
  const char* argv[] = {"meshlayout", "train", "--weight-decay", "0.1", "--model", "m", "--zero1"};
  app.parse(7, argv);
  EXPECT_THAT(describe_parsed_options(*cmd),
              ElementsAre("--model=m", "--weight-decay=0.1", "--zero1=true", "--save=(unset)"));
  record_parsed_options(*cmd);
  EXPECT_EQ(recorded_parsed_options(), describe_parsed_options(*cmd));
  clear_parsed_options();
  EXPECT_TRUE(recorded_parsed_options().empty());
}

TEST(CommandAgreementTest, DigestsNameTheInputAndItsContent) {
  InputDigest d;
  d.add_text("rules file 'r.json'", "{}");
  d.add_absent("tokenizer");
  EXPECT_THAT(d.fields(), ElementsAre("rules file 'r.json'=fnv1a 08f44b07b5901a25, 2 bytes",
                                      "tokenizer=absent"));
}

TEST(CommandAgreementTest, CheckpointDigestFollowsTheHeader) {
  const fs::path dir =
      fs::temp_directory_path() / fmt::format("meshlayout_command_agreement_{}", ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto digest_of = [&](const std::string& name, Shape shape) {
    const std::string path = (dir / name).string();
    std::string header = fmt::format(
        R"({{"w":{{"dtype":"F32","shape":[{},{}],"data_offsets":[0,32]}}}})", shape[0], shape[1]);
    header.resize((header.size() + 7) / 8 * 8, ' ');
    std::string file(8, '\0');
    for (int i = 0; i < 8; ++i)
      file[static_cast<size_t>(i)] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
    file += header + std::string(32, '\0');
    std::ofstream(path, std::ios::binary) << file;
    InputDigest d;
    d.add_checkpoint("weights", Checkpoint::open(path));
    EXPECT_EQ(d.fields().size(), 1u);
    return d.fields().front().substr(d.fields().front().find('='));
  };
  const std::string a = digest_of("a.safetensors", {4, 2}), b = digest_of("b.safetensors", {2, 4});
  EXPECT_THAT(a, HasSubstr(fmt::format("(1 tensors), file {} bytes",
                                       fs::file_size(dir / "a.safetensors"))));
  EXPECT_NE(a, b);  // same size, other shape
  EXPECT_EQ(a, digest_of("c.safetensors", {4, 2}));
  fs::remove_all(dir);
}

// Processes that read different rules (the same path, other bytes) fail together.
TEST(CommandAgreementTest, ProcessesReadingDifferentInputsFailTogether) {
  const std::vector<std::string> failures =
      testing::run_processes(3, 1, 1, [](std::shared_ptr<Runtime> rt) {
        InputDigest inputs;
        inputs.add_text("rules file 'r.json'", rt->process_id() == 2 ? "{\"rules\": []}" : "{}");
        agree_on_command(*rt, "the train command", {"mesh=mesh[batch=3]"}, inputs);
      });
  for (const std::string& f : failures) {
    EXPECT_THAT(
        f, HasSubstr(
               "processes disagree on the train command: process 2 has rules file 'r.json'=fnv1a"));
    EXPECT_THAT(f, HasSubstr(", 13 bytes but process 0 has rules file 'r.json'=fnv1a"));
  }
  // A local failure wins, on every process.
  const std::vector<std::string> failed =
      testing::run_processes(2, 1, 1, [](std::shared_ptr<Runtime> rt) {
        std::exception_ptr error;
        if (rt->process_id() == 1)
          error = std::make_exception_ptr(ValueError("--data 'x': no such file"));
        agree_on_command(*rt, "the train command", {}, InputDigest{}, error);
      });
  for (const std::string& f : failed) EXPECT_THAT(f, HasSubstr("--data 'x': no such file"));
  // Agreeing processes go on.
  testing::run_as_processes(2, 1, [](std::shared_ptr<Runtime> rt) {
    InputDigest inputs;
    inputs.add_text("config.json", "{}");
    agree_on_command(*rt, "the train command", {"mesh=m"}, inputs);
  });
}

}  // namespace
}  // namespace meshlayout::cli
