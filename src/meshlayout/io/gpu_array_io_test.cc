// gpu_array_io_test.cc — checkpoints straight into GPU shards (device_staging.h): arrays on a
// 2×4 mesh of virtual GPU devices (MESHLAYOUT_GPU_DEVICES=8 over the physical GPUs) saved under
// several layouts and loaded into others, into CPU arrays, and CPU-saved files into GPU arrays,
// bit-exact for F32/BF16/F64/I32 with odd shapes; the GPU-saved file equals the CPU-saved one
// byte for byte; staging bounded to a few hundred bytes (many slots, pieces of rows) and one
// 256 MiB tensor through the default two 64 MiB slots. Without a GPU those are skipped; the
// staging pipeline itself (packing, pieces, replicas, conversion, the save's writer thread) is
// also run through host memory (DeviceMemory host_memory()), which runs everywhere.
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "meshlayout/array/array_test_util.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/io/array_io.h"
#include "meshlayout/io/device_staging.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/runtime/device_memory.h"
#include "meshlayout/runtime/runtime.h"
#include "meshlayout/testing/test_util.h"

namespace meshlayout {
namespace {

namespace fs = std::filesystem;

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::vector<std::string> devices(int n, DeviceKind kind) {
  std::vector<std::string> names;
  for (int i = 0; i < n; ++i) names.push_back(device_name(i, kind));
  return names;
}

// Bytes of `a` gathered to the host equal `x`'s.
::testing::AssertionResult same_bytes(const Array& a, const HostTensor& x) {
  const HostTensor got = a.gather();
  if (got.num_bytes() != x.num_bytes()) {
    return ::testing::AssertionFailure() << got.num_bytes() << " bytes, expected " << x.num_bytes();
  }
  if (std::memcmp(got.data(), x.data(), x.num_bytes()) != 0) {
    for (size_t i = 0; i < x.num_bytes(); ++i) {
      if (got.data()[i] != x.data()[i]) {
        return ::testing::AssertionFailure()
               << "first differing byte " << i << " of " << x.num_bytes() << " (layout "
               << a.layout().to_string() << ")";
      }
    }
  }
  return ::testing::AssertionSuccess();
}

class GpuArrayIoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv(kGpuDevicesEnvVar, "8", 1);
    dir_ = fs::temp_directory_path() /
           fmt::format("meshlayout_gpu_io_{}_{}", ::getpid(),
                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    fs::remove_all(dir_);
    unsetenv(kGpuDevicesEnvVar);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  std::shared_ptr<Runtime> cpu_ = Runtime::single_process(8);
  const DeviceMesh cpu_mesh_{{2, 4}, {"data", "model"}, devices(8, DeviceKind::kCpu)};
  fs::path dir_;
};

// Layouts of a rank-`rank` tensor over a 2×4 mesh: replicated, each dim over "model", 2-D and
// transposed 2-D, both axes on one dim.
std::vector<std::vector<DimSharding>> layouts_of(size_t rank) {
  std::vector<std::vector<DimSharding>> out;
  out.emplace_back(rank, None);
  for (size_t d = 0; d < rank; ++d) {
    out.emplace_back(rank, None);
    out.back()[d] = "model";
  }
  if (rank >= 2) {
    out.emplace_back(rank, None);
    out.back()[0] = "data";
    out.back()[rank - 1] = "model";
    out.emplace_back(rank, None);
    out.back()[0] = "model";
    out.back()[1] = "data";
  }
  out.emplace_back(rank, None);
  out.back()[0] = DimSharding(std::vector<std::string>{"data", "model"});
  return out;
}

// ---- The staging pipeline through host memory (runs everywhere) ----

// load_to_device with host destinations: every distinct box of an 8-device layout, replicas
// included, with slots of a few hundred bytes (pieces of rows, several pieces a slot), mapped
// and preadv, same dtype and converted: the shards equal load_arrays'.
TEST_F(GpuArrayIoTest, StagedLoadThroughHostMemoryEqualsLoadArrays) {
  const HostTensor x = HostTensor::random(DType::kF32, {37, 53}, 5);
  const TensorLayout replicated({None, None}, cpu_mesh_);
  Array saved = distribute_tensor(x, replicated, {.runtime = cpu_});
  save_arrays(path("x.safetensors"), std::vector<NamedArray>{{"x", &saved}});
  const Checkpoint ckpt = Checkpoint::open(path("x.safetensors"));
  const auto [file, info] = ckpt.find("x");
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF64}) {
    for (const auto& axes : layouts_of(2)) {
      for (uint64_t staging : {uint64_t{500}, uint64_t{4096}, uint64_t{256} << 20}) {
        for (bool mapped : {false, true}) {
          const TensorLayout layout(axes, cpu_mesh_);
          SCOPED_TRACE(fmt::format("{} {} staging {} mapped {}", dtype_name(dtype),
                                   layout.to_string(), staging, mapped));
          Array expected = Array::allocate(layout, x.shape(), dtype, cpu_);
          load_arrays(ckpt, std::vector<LoadTarget>{{"x", &expected}}, {.convert_dtypes = true});
          Array got = Array::allocate(layout, x.shape(), dtype, cpu_);
          std::vector<io_internal::DeviceBox> boxes;
          for (Array::Shard& s : got.local_shards()) {
            if (s.box.empty()) continue;
            auto same = std::find_if(boxes.begin(), boxes.end(),
                                     [&](const auto& b) { return b.box == s.box; });
            if (same != boxes.end()) {
              same->destinations.push_back({&host_memory(), s.buffer.data()});
              continue;
            }
            boxes.push_back(
                {file, info, dtype, s.box, mapped, {{&host_memory(), s.buffer.data()}}});
          }
          std::atomic<uint64_t> landed{0};  // on_bytes is called from the pool's threads
          const io_internal::DeviceLoadReport r = io_internal::load_to_device(
              boxes, cpu_->pool(), cpu_->staging(),
              {.max_staging_bytes = staging, .on_bytes = [&](uint64_t b) { landed += b; }});
          EXPECT_EQ(r.staging_bytes, 2 * std::clamp<uint64_t>(staging / 2, 64, uint64_t{64} << 20));
          EXPECT_EQ(r.bytes_read, landed.load());
          EXPECT_EQ(r.mapped_bytes, mapped ? r.bytes_read : 0);
          EXPECT_EQ(cpu_->staging().stats().bytes_live, 0);
          EXPECT_TRUE(same_bytes(got, expected.gather()));
        }
      }
    }
  }
}

// save_from_device with host shards writes every box's bytes where the file holds them (the
// writer thread overlapping the next slot's copies), for slots smaller than a row.
TEST_F(GpuArrayIoTest, StagedSaveThroughHostMemoryWritesEveryBox) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF64, DType::kI32}) {
    const HostTensor x = HostTensor::random(dtype, {5, 7, 11}, 9);
    for (const auto& axes : layouts_of(3)) {
      for (uint64_t staging : {uint64_t{100}, uint64_t{1000}, uint64_t{256} << 20}) {
        const TensorLayout layout(axes, cpu_mesh_);
        SCOPED_TRACE(
            fmt::format("{} {} staging {}", dtype_name(dtype), layout.to_string(), staging));
        Array a = distribute_tensor(x, layout, {.runtime = cpu_});
        TensorInfo info{.name = "x",
                        .dtype_name = std::string(dtype_name(dtype)),
                        .dtype = dtype,
                        .element_size = dtype_size(dtype),
                        .shape = x.shape()};
        std::vector<io_internal::DeviceWrite> writes;
        for (const Array::Shard& s : a.local_shards()) {
          if (s.box.empty()) continue;
          if (std::any_of(writes.begin(), writes.end(),
                          [&](const auto& w) { return w.box == s.box; })) {
            continue;
          }
          writes.push_back({&info, 16, s.box, &host_memory(), s.buffer.data()});
        }
        const std::string file = path("raw");
        const int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        ASSERT_GE(fd, 0);
        ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(16 + x.num_bytes())), 0);
        const uint64_t written = io_internal::save_from_device(
            fd, file, writes, cpu_->pool(), cpu_->staging(), {.max_staging_bytes = staging});
        ::close(fd);
        EXPECT_EQ(written, x.num_bytes());
        EXPECT_EQ(cpu_->staging().stats().bytes_live, 0);
        const std::string bytes = read_all(file);
        ASSERT_EQ(bytes.size(), 16 + x.num_bytes());
        EXPECT_EQ(std::memcmp(bytes.data() + 16, x.data(), x.num_bytes()), 0);
      }
    }
  }
}

// ---- On GPU devices ----

// Every dtype and several odd shapes: saved from GPU shards under each layout (the file equals
// the CPU-saved one to the byte), loaded into GPU arrays of every layout, into CPU arrays, and
// the CPU-saved file into GPU arrays, with default staging and with slots of a few hundred bytes
// (preadv and mapped).
TEST_F(GpuArrayIoTest, SavesAndLoadsBitExactAcrossLayoutsOfA2x4GpuMesh) {
  MESHLAYOUT_REQUIRE_GPU();
  auto gpu = default_runtime(DeviceKind::kCuda);
  ASSERT_EQ(gpu->global_device_count(), 8);
  const DeviceMesh mesh({2, 4}, {"data", "model"}, devices(8, DeviceKind::kCuda));
  const std::vector<Shape> shapes{{37, 53}, {5, 7, 11}, {13}, {1030, 515}};
  uint64_t seed = 100;
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF64, DType::kI32}) {
    for (const Shape& shape : shapes) {
      const HostTensor x = HostTensor::random(dtype, shape, ++seed);
      // Slots of a few hundred bytes for the small shapes, about a seventh of the tensor for
      // the 2 MiB one (each slot fill costs a synchronization and a mapping).
      const uint64_t small = std::max<uint64_t>(700, x.num_bytes() / 7);
      const std::vector<LoadOptions> load_options{
          {},
          {.max_staging_bytes = small, .map = MapMode::kNever},
          {.max_staging_bytes = small, .map = MapMode::kAlways}};
      Array on_cpu = distribute_tensor(x, TensorLayout(layouts_of(shape.size())[0], cpu_mesh_),
                                       {.runtime = cpu_});
      save_arrays(path("cpu.safetensors"), std::vector<NamedArray>{{"w", &on_cpu}});
      const std::string cpu_file = read_all(path("cpu.safetensors"));
      const Checkpoint from_cpu = Checkpoint::open(path("cpu.safetensors"));
      for (const auto& save_axes : layouts_of(shape.size())) {
        const TensorLayout save_layout(save_axes, mesh);
        SCOPED_TRACE(fmt::format("{} {} saved as {}", dtype_name(dtype), shape_to_string(shape),
                                 save_layout.to_string()));
        Array a = distribute_tensor(x, save_layout, {.runtime = gpu});
        ASSERT_TRUE(same_bytes(a, x));
        const uint64_t save_staging = seed % 2 ? small / 2 : uint64_t{256} << 20;
        const SaveReport saved =
            save_arrays(path("gpu.safetensors"), std::vector<NamedArray>{{"w", &a}},
                        {.max_staging_bytes = save_staging});
        EXPECT_EQ(saved.bytes_written, x.num_bytes());
        ASSERT_EQ(read_all(path("gpu.safetensors")), cpu_file) << "staging " << save_staging;
        const Checkpoint from_gpu = Checkpoint::open(path("gpu.safetensors"));
        for (const auto& load_axes : layouts_of(shape.size())) {
          for (const LoadOptions& options : load_options) {
            SCOPED_TRACE(fmt::format("loaded as {} staging {}", TensorLayout(load_axes).to_string(),
                                     options.max_staging_bytes));
            Array g = Array::allocate(TensorLayout(load_axes, mesh), shape, dtype, gpu);
            const LoadReport r = load_arrays(from_gpu, std::vector<LoadTarget>{{"w", &g}}, options);
            EXPECT_TRUE(same_bytes(g, x));
            EXPECT_EQ(r.bytes_read, r.shard_bytes);  // each distinct box read once
            EXPECT_LE(r.staging_bytes, std::max<uint64_t>(options.max_staging_bytes, 128));
            Array g2 = Array::allocate(TensorLayout(load_axes, mesh), shape, dtype, gpu);
            load_arrays(from_cpu, std::vector<LoadTarget>{{"w", &g2}}, options);
            EXPECT_TRUE(same_bytes(g2, x));
          }
          Array c = Array::allocate(TensorLayout(load_axes, cpu_mesh_), shape, dtype, cpu_);
          load_arrays(from_gpu, std::vector<LoadTarget>{{"w", &c}});
          EXPECT_TRUE(same_bytes(c, x));
        }
      }
    }
  }
  EXPECT_EQ(gpu->staging().stats().bytes_live, 0);
}

// Several tensors in one call, and dtype conversion on load (F32 and F64 files into BF16 and F32
// GPU arrays): the same values as a CPU load with conversion.
TEST_F(GpuArrayIoTest, SeveralTensorsAndConversionsMatchTheCpuLoad) {
  MESHLAYOUT_REQUIRE_GPU();
  auto gpu = default_runtime(DeviceKind::kCuda);
  const DeviceMesh mesh({2, 4}, {"data", "model"}, devices(8, DeviceKind::kCuda));
  const HostTensor a = HostTensor::random(DType::kF32, {61, 29}, 1);
  const HostTensor b = HostTensor::random(DType::kF64, {17, 3}, 2);
  const HostTensor c = HostTensor::random(DType::kI32, {9}, 3);
  Array ga = distribute_tensor(a, TensorLayout({"data", "model"}, mesh), {.runtime = gpu});
  Array gb = distribute_tensor(b, TensorLayout({None, "model"}, mesh), {.runtime = gpu});
  Array gc = distribute_tensor(c, TensorLayout({None}, mesh), {.runtime = gpu});
  save_arrays(path("m.safetensors"), std::vector<NamedArray>{{"a", &ga}, {"b", &gb}, {"c", &gc}});
  const Checkpoint ckpt = Checkpoint::open(path("m.safetensors"));
  for (uint64_t staging : {uint64_t{600}, uint64_t{256} << 20}) {
    SCOPED_TRACE(fmt::format("staging {}", staging));
    Array la = Array::allocate(TensorLayout({"model", None}, mesh), a.shape(), DType::kBF16, gpu);
    Array lb = Array::allocate(TensorLayout({None, None}, mesh), b.shape(), DType::kF32, gpu);
    Array lc = Array::allocate(TensorLayout({"model"}, mesh), c.shape(), DType::kI32, gpu);
    load_arrays(ckpt, std::vector<LoadTarget>{{"a", &la}, {"b", &lb}, {"c", &lc}},
                {.convert_dtypes = true, .max_staging_bytes = staging});
    Array ca =
        Array::allocate(TensorLayout({"model", None}, cpu_mesh_), a.shape(), DType::kBF16, cpu_);
    Array cb = Array::allocate(TensorLayout({None, None}, cpu_mesh_), b.shape(), DType::kF32, cpu_);
    load_arrays(ckpt, std::vector<LoadTarget>{{"a", &ca}, {"b", &cb}}, {.convert_dtypes = true});
    EXPECT_TRUE(same_bytes(la, ca.gather()));
    EXPECT_TRUE(same_bytes(lb, cb.gather()));
    EXPECT_TRUE(same_bytes(lc, c));
  }
}

// 256 MiB of F32: saved from row-sharded GPU shards through the default staging (two 64 MiB
// slots: several slot fills each way), loaded replicated (read once, copied on the device to the
// other 7) and 2-D sharded, and into CPU arrays.
TEST_F(GpuArrayIoTest, A256MiBTensorGoesThroughSeveralStagingSlots) {
  MESHLAYOUT_REQUIRE_GPU();
  auto gpu = default_runtime(DeviceKind::kCuda);
  const DeviceMesh mesh({2, 4}, {"data", "model"}, devices(8, DeviceKind::kCuda));
  const Shape shape{8192, 8192};
  const HostTensor x = HostTensor::random(DType::kF32, shape, 77);
  const uint64_t bytes = x.num_bytes();
  {
    Array a = distribute_tensor(x, TensorLayout({"model", None}, mesh), {.runtime = gpu});
    EXPECT_EQ(
        save_arrays(path("big.safetensors"), std::vector<NamedArray>{{"w", &a}}).bytes_written,
        bytes);
  }
  const Checkpoint ckpt = Checkpoint::open(path("big.safetensors"));
  for (const std::vector<DimSharding>& axes :
       {std::vector<DimSharding>{None, None}, std::vector<DimSharding>{"data", "model"}}) {
    for (MapMode map : {MapMode::kAuto, MapMode::kNever}) {
      Array g = Array::allocate(TensorLayout(axes, mesh), shape, DType::kF32, gpu);
      SCOPED_TRACE(g.layout().to_string());
      const LoadReport r = load_arrays(ckpt, std::vector<LoadTarget>{{"w", &g}}, {.map = map});
      EXPECT_EQ(r.bytes_read, bytes);
      EXPECT_EQ(r.staging_bytes, uint64_t{128} << 20);  // less than the tensor: several fills
      EXPECT_TRUE(same_bytes(g, x));
    }
  }
  Array c = Array::allocate(TensorLayout({None, "model"}, cpu_mesh_), shape, DType::kF32, cpu_);
  load_arrays(ckpt, std::vector<LoadTarget>{{"w", &c}});
  EXPECT_TRUE(same_bytes(c, x));
  EXPECT_EQ(gpu->staging().stats().bytes_live, 0);
}

}  // namespace
}  // namespace meshlayout
