// mapped_read_test.cc — loads that copy boxes from a mapping of the file (mapped_read.h): the
// same arrays, bit for bit, as preadv and two-phase loads on random layouts; what the auto
// choice maps; each process reads exactly its shard bytes with no staging; the preadv
// fallback when mapping fails; a file shrunk after open gives the same DataLossError.
#include "meshlayout/io/mapped_read.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "meshlayout/array/array_test_util.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/io/array_io.h"

namespace meshlayout {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class MappedReadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           fmt::format("meshlayout_mapped_read_{}_{}", ::getpid(),
                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    io_internal::fail_mappings_for_testing(false);
    io_internal::stream_all_for_testing(false);
    fs::remove_all(dir_);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  std::shared_ptr<Runtime> rt_ = Runtime::single_process(8);
  fs::path dir_;
};

// Every way of loading gives the same arrays: mapped, mapped with every mapping failing (the
// preadv fallback), preadv, the default choice, and mapped with streaming stores for every run
// (as large loads use them).
TEST_F(MappedReadTest, MappedPreadAndFallbackLoadsAreBitIdentical) {
  const uint64_t seed = testing::test_seed(1515);
  testing::Random r(seed);
  const std::string file = path("m.safetensors");
  for (int round = 0; round < 16; ++round) {
    testing::Case c = testing::random_case(r, 8);
    SCOPED_TRACE(fmt::format("seed {} round {}: {}", seed, round, c.describe()));
    HostTensor x = HostTensor::random(c.dtype, c.shape, seed + static_cast<uint64_t>(round));
    Array a = distribute_tensor(x, c.a, {.runtime = rt_});
    NamedArray arrays[] = {{"x", &a}};
    save_arrays(file, arrays);
    for (int variant = 0; variant < 5; ++variant) {
      io_internal::fail_mappings_for_testing(variant == 1);
      io_internal::stream_all_for_testing(variant == 4);
      const MapMode map = variant == 2 ? MapMode::kNever
                          : variant == 3 ? MapMode::kAuto : MapMode::kAlways;
      Array b = Array::allocate(c.b, c.shape, c.dtype, rt_);
      LoadTarget targets[] = {{"x", &b}};
      Checkpoint ckpt = Checkpoint::open(file);
      const uint64_t header = ckpt.bytes_read();
      LoadReport report = load_arrays(ckpt, targets, {.map = map});
      EXPECT_TRUE(b.gather() == x) << "variant " << variant;
      EXPECT_NO_THROW(testing::expect_shards_match(b, x)) << "variant " << variant;
      EXPECT_EQ(report.bytes_read, report.shard_bytes) << "variant " << variant;
      EXPECT_EQ(ckpt.bytes_read() - header, report.shard_bytes) << "variant " << variant;
      const bool any = num_elements(c.shape) > 0;
      const uint64_t mapped = (variant == 0 || variant == 4) && any ? report.shard_bytes : 0;
      if (variant != 3) {
        EXPECT_EQ(report.mapped_bytes, mapped) << "variant " << variant;
      }
      EXPECT_EQ(rt_->staging().stats().bytes_live, 0);
    }
  }
}

// Under 4 processes of 2 devices every layout of the benchmark is mapped by default; every
// process reads exactly its distinct boxes' bytes (a replicated tensor once per process, not
// per device) and stages nothing.
TEST_F(MappedReadTest, AutoMapsEveryLayoutReadingOnlyTheShards) {
  const std::string file = path("auto.safetensors");
  // 4 MiB: each process's row block (1 MiB) is one long run.
  const HostTensor x = HostTensor::random(DType::kF32, {256, 4096}, testing::test_seed(16));
  testing::run_as_processes(4, 2, [&](std::shared_ptr<Runtime> rt) {
    const DeviceMesh line({8}, {"x"});
    const DeviceMesh grid({2, 4}, {"data", "model"});
    Array a = distribute_tensor(x, TensorLayout({"x", None}, line), {.runtime = rt});
    NamedArray arrays[] = {{"x", &a}};
    save_arrays(file, arrays);
    struct Layout {
      TensorLayout layout;
      bool mapped;
      uint64_t shard_bytes;
    };
    const uint64_t all = x.num_bytes();
    const Layout layouts[] = {{TensorLayout({"x", None}, line), true, all / 4},
                              {TensorLayout({None, "x"}, line), true, all / 4},
                              {TensorLayout({"data", "model"}, grid), true, all / 4},
                              {TensorLayout({None, None}, line), true, all}};
    for (const Layout& l : layouts) {
      const std::string where = fmt::format("process {} layout {}", rt->comm().rank(),
                                            l.layout.to_string());
      Array b = Array::allocate(l.layout, x.shape(), DType::kF32, rt);
      LoadTarget targets[] = {{"x", &b}};
      rt->staging().reset_peak();
      LoadReport report = load_arrays(Checkpoint::open(file), targets);
      if (!(b.gather() == x)) throw InternalError("arrays differ; " + where);
      if (report.shard_bytes != l.shard_bytes || report.bytes_read != l.shard_bytes ||
          report.mapped_bytes != (l.mapped ? l.shard_bytes : 0) || report.two_phase_bytes != 0 ||
          rt->staging().stats().peak_bytes != 0) {
        throw InternalError(fmt::format("shard {} read {} mapped {} two-phase {} staged {}; {}",
                                        report.shard_bytes, report.bytes_read,
                                        report.mapped_bytes, report.two_phase_bytes,
                                        rt->staging().stats().peak_bytes, where));
      }
    }
    rt->comm().barrier();
  });
}

// In one process the 8 devices' column boxes are adjacent in the file: their short runs merge
// into one long run per tensor, read with preadv. A replicated tensor (8 local copies) is
// mapped and read once.
TEST_F(MappedReadTest, OneProcessMergesNeighbouringColumnsAndMapsReplicas) {
  const DeviceMesh line({8}, {"x"});
  HostTensor x = HostTensor::random(DType::kF32, {64, 4096}, 3);
  Array a = distribute_tensor(x, TensorLayout({"x", None}, line), {.runtime = rt_});
  NamedArray arrays[] = {{"x", &a}};
  save_arrays(path("one.safetensors"), arrays);
  Array cols = Array::allocate(TensorLayout({None, "x"}, line), x.shape(), DType::kF32, rt_);
  LoadTarget t1[] = {{"x", &cols}};
  EXPECT_EQ(load_arrays(Checkpoint::open(path("one.safetensors")), t1).mapped_bytes, 0u);
  EXPECT_TRUE(cols.gather() == x);
  Array rep = Array::allocate(TensorLayout({None, None}, line), x.shape(), DType::kF32, rt_);
  LoadTarget t2[] = {{"x", &rep}};
  LoadReport report = load_arrays(Checkpoint::open(path("one.safetensors")), t2);
  EXPECT_EQ(report.mapped_bytes, x.num_bytes());
  EXPECT_EQ(report.bytes_read, x.num_bytes());
  EXPECT_NO_THROW(testing::expect_shards_match(rep, x));
}

// A file shrunk after open is not mapped past its end (that would raise SIGBUS): the load
// falls back to preadv and fails with the same message as a preadv load.
TEST_F(MappedReadTest, FileShrunkAfterOpenIsTheSameDataLossError) {
  const DeviceMesh line({8}, {"x"});
  HostTensor x = HostTensor::random(DType::kF32, {64, 64}, 4);
  Array a = distribute_tensor(x, TensorLayout({"x", None}, line), {.runtime = rt_});
  NamedArray arrays[] = {{"w", &a}};
  const std::string file = path("shrunk.safetensors");
  save_arrays(file, arrays);
  Checkpoint ckpt = Checkpoint::open(file);
  const uint64_t end = ckpt.files().front()->header().data_start() + 1000;
  ASSERT_EQ(::truncate(file.c_str(), static_cast<off_t>(end)), 0);
  for (MapMode map : {MapMode::kAlways, MapMode::kNever}) {
    Array b = Array::allocate(TensorLayout({None, "x"}, line), x.shape(), DType::kF32, rt_);
    LoadTarget targets[] = {{"w", &b}};
    try {
      load_arrays(ckpt, targets, {.map = map});
      ADD_FAILURE() << "no error, map " << static_cast<int>(map);
    } catch (const DataLossError& e) {
      EXPECT_THAT(e.what(), HasSubstr(fmt::format("the file ends at byte {}, inside tensor 'w'",
                                                  end)));
    }
  }
}

}  // namespace
}  // namespace meshlayout
