// Checkpoints under mpirun (np 2 and 4): every process writes only the blocks given to it and
// reads only its devices' boxes, yet the file is one standard safetensors file and every
// layout loads back exactly, read with preadv, from a mapping or two-phase. Row-sharded tensors
// cost a process at most 1.1x its shard bytes; a two-phase load reads each byte once over all
// processes.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>

#include "meshlayout/array/array_test_util.h"
#include "meshlayout/io/array_io.h"

namespace meshlayout {
namespace {

namespace fs = std::filesystem;

// A scratch directory, the same in every process (rank 0 makes it and broadcasts its name).
class IoMpiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char name[128] = {};
    if (rt_->comm().rank() == 0) {
      std::string tmpl = (fs::temp_directory_path() / "meshlayout_io_mpi_XXXXXX").string();
      if (::mkdtemp(tmpl.data()) != nullptr) std::snprintf(name, sizeof name, "%s", tmpl.c_str());
    }
    rt_->comm().broadcast(name, sizeof name, 0);  // empty if rank 0 could not make it
    ASSERT_STRNE(name, "") << "mkdtemp failed in process 0";
    dir_ = name;
  }
  void TearDown() override {
    rt_->comm().barrier();
    if (rt_->comm().rank() == 0) fs::remove_all(dir_);
  }
  uint64_t sum_over_processes(uint64_t value) {
    int64_t v = static_cast<int64_t>(value);
    rt_->comm().all_reduce_sum(&v, 1, DType::kI64);
    return static_cast<uint64_t>(v);
  }

  std::shared_ptr<Runtime> rt_ = default_runtime();
  fs::path dir_;
};

TEST_F(IoMpiTest, RandomLayoutsRoundTripThroughOneFile) {
  const uint64_t seed = testing::test_seed(404);
  testing::Random r(seed);  // the same cases in every process
  const std::string file = (dir_ / "random.safetensors").string();
  for (int round = 0; round < 10; ++round) {
    testing::Case c = testing::random_case(r, rt_->global_device_count());
    SCOPED_TRACE(fmt::format("seed {} round {}: {}", seed, round, c.describe()));
    HostTensor x = HostTensor::random(c.dtype, c.shape, seed + static_cast<uint64_t>(round));
    Array a = distribute_tensor(x, c.a, {.runtime = rt_});
    NamedArray arrays[] = {{"x", &a}};
    SaveReport s = save_arrays(file, arrays);
    EXPECT_EQ(sum_over_processes(s.bytes_written), x.num_bytes());  // one writer per block
    // Direct (preadv or mapped): each process reads its boxes. Two-phase (tiny staging: many
    // rounds): over all processes the tensor is read once.
    const std::pair<TwoPhaseMode, MapMode> modes[] = {{TwoPhaseMode::kNever, MapMode::kNever},
                                                      {TwoPhaseMode::kNever, MapMode::kAlways},
                                                      {TwoPhaseMode::kAlways, MapMode::kNever}};
    for (const auto& [mode, map] : modes) {
      Array b = Array::allocate(c.b, c.shape, c.dtype, rt_);
      LoadTarget targets[] = {{"x", &b}};
      LoadReport l = load_arrays(Checkpoint::open(file), targets,
                                 {.max_staging_bytes = 256, .two_phase = mode, .map = map});
      if (mode == TwoPhaseMode::kNever) {
        EXPECT_EQ(l.bytes_read, l.shard_bytes);
      } else if (!c.shape.empty()) {
        EXPECT_EQ(l.two_phase_bytes, l.shard_bytes);
        EXPECT_EQ(sum_over_processes(l.bytes_read), x.num_bytes());
      }
      EXPECT_TRUE(b.gather() == x)
          << "mode " << static_cast<int>(mode) << " map " << static_cast<int>(map);
    }
    rt_->comm().barrier();  // nobody replaces the file while another process still reads it
  }
}

// The four layouts of the benchmark, each loaded every way (preadv, mapped, mapped with the
// mapping failing, two-phase, the defaults): the same arrays bit for bit. Mapped and preadv
// loads read exactly each process's distinct boxes (a replicated tensor once per process).
TEST_F(IoMpiTest, EveryLayoutLoadsAlikeEveryWay) {
  const int64_t devices = rt_->global_device_count();
  const DeviceMesh line({devices}, {"x"});
  const DeviceMesh grid({2, devices / 2}, {"data", "model"});
  const HostTensor x = HostTensor::random(DType::kF32, {96, 1000}, testing::test_seed(15));
  const std::string file = (dir_ / "layouts.safetensors").string();
  {
    Array a = distribute_tensor(x, TensorLayout({"x", None}, line), {.runtime = rt_});
    NamedArray arrays[] = {{"x", &a}};
    save_arrays(file, arrays);
  }
  const TensorLayout layouts[] = {TensorLayout({"x", None}, line), TensorLayout({None, "x"}, line),
                                  TensorLayout({"data", "model"}, grid),
                                  TensorLayout({None, None}, line)};
  for (const TensorLayout& layout : layouts) {
    for (int way = 0; way < 5; ++way) {
      SCOPED_TRACE(fmt::format("layout {} way {}", layout.to_string(), way));
      io_internal::fail_mappings_for_testing(way == 2);
      LoadOptions options;
      if (way == 0) options = {.two_phase = TwoPhaseMode::kNever, .map = MapMode::kNever};
      if (way == 1 || way == 2)
        options = {.two_phase = TwoPhaseMode::kNever, .map = MapMode::kAlways};
      if (way == 3) options = {.max_staging_bytes = 4096, .two_phase = TwoPhaseMode::kAlways};
      Array b = Array::allocate(layout, x.shape(), DType::kF32, rt_);
      LoadTarget targets[] = {{"x", &b}};
      LoadReport l = load_arrays(Checkpoint::open(file), targets, options);
      io_internal::fail_mappings_for_testing(false);
      EXPECT_TRUE(b.gather() == x);
      EXPECT_NO_THROW(testing::expect_shards_match(b, x));
      if (way == 3) {
        EXPECT_EQ(sum_over_processes(l.bytes_read), x.num_bytes());
      } else {
        EXPECT_EQ(l.bytes_read, l.shard_bytes);
        EXPECT_EQ(l.mapped_bytes, way == 1               ? l.shard_bytes
                                  : way == 2 || way == 0 ? 0
                                                         : l.mapped_bytes);
      }
      rt_->comm().barrier();
    }
  }
}

TEST_F(IoMpiTest, RowShardedLoadsReadAtMostTheirShardBytes) {
  const int64_t devices = rt_->global_device_count();
  DeviceMesh mesh({devices}, {"rows"});
  HostTensor w = HostTensor::random(DType::kF32, {devices * 64, 256}, 7);
  HostTensor bias = HostTensor::random(DType::kF32, {devices * 64}, 8);
  const std::string file = (dir_ / "rows.safetensors").string();
  {
    Array wa = distribute_tensor(w, TensorLayout({None, "rows"}, mesh), {.runtime = rt_});
    Array ba = distribute_tensor(bias, TensorLayout({None}, mesh), {.runtime = rt_});
    NamedArray arrays[] = {{"w", &wa}, {"b", &ba}};
    save_arrays(file, arrays);
  }
  Array wa = Array::allocate(TensorLayout({"rows", None}, mesh), w.shape(), DType::kF32, rt_);
  Array ba = Array::allocate(TensorLayout({"rows"}, mesh), bias.shape(), DType::kF32, rt_);
  Checkpoint ckpt = Checkpoint::open(file);
  const uint64_t header_bytes = ckpt.bytes_read();
  LoadTarget targets[] = {{"w", &wa}, {"b", &ba}};
  LoadReport report = load_arrays(ckpt, targets);
  const uint64_t own = static_cast<uint64_t>(wa.local_bytes() + ba.local_bytes());
  EXPECT_EQ(report.shard_bytes, own);
  EXPECT_EQ(report.bytes_read, own);
  // Everything this process took from the file, header included.
  EXPECT_LE(static_cast<double>(ckpt.bytes_read()), 1.1 * static_cast<double>(own))
      << "header " << header_bytes << " bytes";
  EXPECT_TRUE(wa.gather() == w);
  EXPECT_TRUE(ba.gather() == bias);
}

}  // namespace
}  // namespace meshlayout
