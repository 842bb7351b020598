// mapped_read_test.cc — loads that copy boxes from a mapping of the file (mapped_read.h): the
// same arrays, bit for bit, as preadv and two-phase loads on random layouts; what the auto
// choice maps; each process reads exactly its shard bytes with no staging; the preadv
// fallback when mapping fails; a file shrunk after open gives the same DataLossError; the run
// count (merged_runs) the auto choice is made on.
#include "meshlayout/io/mapped_read.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <random>

#include "meshlayout/array/array_test_util.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/io/array_io.h"
#include "meshlayout/layout/box_ops.h"

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
    io_internal::stream_width_for_testing(0);
    fs::remove_all(dir_);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  std::shared_ptr<Runtime> rt_ = Runtime::single_process(8);
  fs::path dir_;
};

// Every way of loading gives the same arrays: mapped, mapped with every mapping failing (the
// preadv fallback), preadv, the default choice, and mapped with streaming stores for every run
// (as large loads use them), of each width the CPU has.
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
    for (int variant = 0; variant < 7; ++variant) {
      io_internal::fail_mappings_for_testing(variant == 1);
      io_internal::stream_all_for_testing(variant >= 4);
      // Variants 4-6: streaming stores of 16, 32 and 64 bytes (those the CPU has).
      if (variant >= 4 && !io_internal::stream_width_for_testing(16 << (variant - 4))) continue;
      const MapMode map = variant == 2   ? MapMode::kNever
                          : variant == 3 ? MapMode::kAuto
                                         : MapMode::kAlways;
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
      const uint64_t mapped = (variant == 0 || variant >= 4) && any ? report.shard_bytes : 0;
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
      const std::string where =
          fmt::format("process {} layout {}", rt->comm().rank(), l.layout.to_string());
      Array b = Array::allocate(l.layout, x.shape(), DType::kF32, rt);
      LoadTarget targets[] = {{"x", &b}};
      rt->staging().reset_peak();
      LoadReport report = load_arrays(Checkpoint::open(file), targets);
      if (!(b.gather() == x)) throw InternalError("arrays differ; " + where);
      if (report.shard_bytes != l.shard_bytes || report.bytes_read != l.shard_bytes ||
          report.mapped_bytes != (l.mapped ? l.shard_bytes : 0) || report.two_phase_bytes != 0 ||
          rt->staging().stats().peak_bytes != 0) {
        throw InternalError(fmt::format("shard {} read {} mapped {} two-phase {} staged {}; {}",
                                        report.shard_bytes, report.bytes_read, report.mapped_bytes,
                                        report.two_phase_bytes, rt->staging().stats().peak_bytes,
                                        where));
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
      EXPECT_THAT(e.what(),
                  HasSubstr(fmt::format("the file ends at byte {}, inside tensor 'w'", end)));
    }
  }
}

// The boxes of a grid cutting `shape` into `parts[d]` blocks along each dimension, row-major.
std::vector<Box> grid_boxes(const Shape& shape, const std::vector<int64_t>& parts) {
  std::vector<Box> boxes(1, Box{{}, {}});
  for (size_t d = 0; d < shape.size(); ++d) {
    std::vector<Box> next;
    for (const Box& b : boxes) {
      for (int64_t i = 0; i < parts[d]; ++i) {
        const auto [begin, end] = block_range(shape[d], parts[d], i);
        Box c = b;
        c.offset.push_back(begin);
        c.shape.push_back(end - begin);
        next.push_back(c);
      }
    }
    boxes = next;
  }
  return boxes;
}

// The runs of `boxes` in the file with every file-adjacent pair joined (sorting each run).
uint64_t joined_runs(const std::vector<Box>& boxes, const Box& whole) {
  std::vector<std::pair<size_t, size_t>> spans;
  for (const Box& box : boxes) {
    for_each_contiguous_run(box, whole, box, 1,
                            [&](size_t, size_t at, size_t n) { spans.emplace_back(at, n); });
  }
  std::sort(spans.begin(), spans.end());
  uint64_t runs = 0;
  size_t end = 0;
  for (const auto& [at, n] : spans) {
    if (runs == 0 || at != end) ++runs;
    end = at + n;
  }
  return runs;
}

std::vector<Box> pick(const std::vector<Box>& boxes, std::initializer_list<size_t> which) {
  std::vector<Box> picked;
  for (size_t i : which) picked.push_back(boxes[i]);
  return picked;
}

// merged_runs (what auto's preadv-or-map choice counts): neighbouring boxes merge, along each
// dimension and repeatedly (a 2 x 4 grid's first row is one run of the file); boxes that only
// meet across a row end (the last column block and the first) are counted apart, an
// overestimate; on random grids and subsets it never counts fewer runs than joining every
// file-adjacent pair, and equals it for every grid's full set (one run).
TEST(MergedRunsTest, MergesNeighboursAndNeverUndercounts) {
  const Box whole{{0, 0}, {64, 4096}};
  const std::vector<Box> columns = grid_boxes(whole.shape, {1, 8});
  const std::vector<Box> grid = grid_boxes(whole.shape, {2, 4});
  EXPECT_EQ(io_internal::merged_runs(columns, whole), 1u);
  EXPECT_EQ(io_internal::merged_runs(pick(columns, {1, 0}), whole), 64u);
  EXPECT_EQ(io_internal::merged_runs(pick(columns, {0, 2}), whole), 128u);
  EXPECT_EQ(io_internal::merged_runs(pick(grid, {0, 1}), whole), 32u);
  EXPECT_EQ(io_internal::merged_runs(pick(grid, {2, 0, 3, 1}), whole), 1u);
  EXPECT_EQ(io_internal::merged_runs(pick(grid, {0, 4}), whole), 64u);
  EXPECT_EQ(io_internal::merged_runs(pick(grid, {0, 5}), whole), 64u);
  EXPECT_EQ(io_internal::merged_runs(pick(columns, {7, 0}), whole), 128u);
  EXPECT_EQ(joined_runs(pick(columns, {7, 0}), whole), 65u);
  EXPECT_EQ(io_internal::merged_runs({}, whole), 0u);

  std::mt19937_64 rng(testing::test_seed(51));
  for (int trial = 0; trial < 300; ++trial) {
    const size_t rank = 1 + rng() % 3;
    Shape shape;
    std::vector<int64_t> parts;
    for (size_t d = 0; d < rank; ++d) {
      shape.push_back(1 + static_cast<int64_t>(rng() % 9));
      const auto most = static_cast<uint64_t>(std::min<int64_t>(shape.back(), 4));
      parts.push_back(1 + static_cast<int64_t>(rng() % most));
    }
    const Box all{Shape(rank, 0), shape};
    const std::vector<Box> boxes = grid_boxes(shape, parts);
    std::vector<Box> subset;
    for (const Box& b : boxes) {
      if (rng() % 2 == 0) subset.push_back(b);
    }
    std::shuffle(subset.begin(), subset.end(), rng);
    const std::string where = fmt::format("trial {}: shape {} parts {}", trial,
                                          shape_to_string(shape), fmt::join(parts, "x"));
    EXPECT_GE(io_internal::merged_runs(subset, all), joined_runs(subset, all)) << where;
    EXPECT_EQ(io_internal::merged_runs(boxes, all), 1u) << where;
  }
}

}  // namespace
}  // namespace meshlayout
