// plan --batch/--seq/--cache-length/--device-memory (memory_plan.h) on a Hugging Face Llama
// directory: the per-device table and its JSON, exit code 3 when a peak does not fit, and bad
// sizes or options refused by name before anything is read.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "meshlayout/cli/generate_test_util.h"
#include "meshlayout/cli/plan_command.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/plan/checkpoint_test_util.h"
#include "meshlayout/testing/test_util.h"

namespace meshlayout::cli {
namespace {

using meshlayout::testing::ValueErrorMessage;
using nlohmann::json;
using ::testing::HasSubstr;

class MemoryPlanCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    set_device_count(kMaxMeshDevices);  // as the command does
    llama_ = dir_.path("llama");
    meshlayout::testing::write_tiny_llama(llama_);
  }
  void TearDown() override { reset_device_count(); }

  PlanCommandOptions options() const {
    return {
        .path = llama_,
        .rules_path = std::string(MESHLAYOUT_SOURCE_DIR) + "/examples/rules/llama_megatron.json",
        .mesh = "batch=2,model=4",
        .optimizer = "adam",
        .batch = 4,
        .seq = 8,
        .cache_length = 16};
  }
  int run(const PlanCommandOptions& o) {
    std::ostringstream out;
    const int code = run_plan(o, out);
    out_ = out.str();
    return code;
  }

  testing::ScratchDir dir_;
  std::string llama_, out_;
};

TEST_F(MemoryPlanCommandTest, TheTablePerDeviceAndItsJson) {
  PlanCommandOptions o = options();
  o.device_memory = "80GiB";
  EXPECT_EQ(run(o), 0);
  EXPECT_THAT(out_, HasSubstr("memory per device (training step of batch 4 x seq 8, recompute "
                              "attention; key/value cache of 4 x 16 positions; device memory "
                              "80.0 GiB):\n"));
  EXPECT_THAT(out_, HasSubstr("weights       grads       slots  activations       cache  "
                              "reshard temp        peak  fits?"));
  EXPECT_THAT(out_, ::testing::ContainsRegex("cpu:7 +[0-9.]+ KiB .* yes\n"));
  EXPECT_THAT(out_, HasSubstr("fits: every device's peak is within 80.0 GiB"));
  EXPECT_THAT(out_, HasSubstr("the reshard temp is a part of the activations"));
  o.json = true;
  EXPECT_EQ(run(o), 0);
  const json j = json::parse(out_).at("memory");
  EXPECT_EQ(j.at("batch"), 4);
  EXPECT_EQ(j.at("cache_length"), 16);
  EXPECT_EQ(j.at("devices").size(), 8u);
  const json& d = j.at("devices")[7];
  EXPECT_EQ(d.at("device"), "cpu:7");
  EXPECT_GT(d.at("activations").get<uint64_t>(), 0u);
  EXPECT_GT(d.at("cache").get<uint64_t>(), 0u);
  // Adam: two slots per weight, each the weight's size.
  EXPECT_EQ(d.at("slots").get<uint64_t>(), 2 * d.at("weights").get<uint64_t>());
  EXPECT_TRUE(j.at("all_fit").get<bool>());
  // Keeping every block's norms, projections and attention output keeps more.
  o.recompute = "none";
  EXPECT_EQ(run(o), 0);
  EXPECT_GT(json::parse(out_).at("memory").at("devices")[7].at("activations").get<uint64_t>(),
            d.at("activations").get<uint64_t>());
}

TEST_F(MemoryPlanCommandTest, APeakAboveTheDeviceMemoryExits3) {
  PlanCommandOptions o = options();
  o.device_memory = "16KiB";
  EXPECT_EQ(run(o), kPlanDoesNotFitExitCode);
  EXPECT_THAT(out_, ::testing::ContainsRegex("cpu:0 .* NO\n"));
  EXPECT_THAT(out_, HasSubstr("does NOT fit: 8 of 8 devices exceed 16.0 KiB"));
}

TEST_F(MemoryPlanCommandTest, BadSizesAndOptionsAreRefusedByName) {
  PlanCommandOptions o = options();
  o.device_memory = "80 gigs";
  EXPECT_THAT(ValueErrorMessage([&] { run(o); }), HasSubstr("--device-memory"));
  EXPECT_THAT(ValueErrorMessage([&] { run(o); }), HasSubstr("80 gigs"));
  EXPECT_EQ(out_, "");
  o = options();
  o.recompute = "everything";
  EXPECT_THAT(ValueErrorMessage([&] { run(o); }), HasSubstr("--recompute 'everything'"));
  o = options();
  o.optimizer.reset();
  EXPECT_THAT(ValueErrorMessage([&] { run(o); }), HasSubstr("need --optimizer"));
  o = options();
  o.seq = 0;
  o.cache_length = 0;
  EXPECT_THAT(ValueErrorMessage([&] { run(o); }), HasSubstr("need both --batch and --seq"));
}

}  // namespace
}  // namespace meshlayout::cli
