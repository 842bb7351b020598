// gpu_checkpoint_bench.cc — checkpoint loads straight into GPU shards (io/device_staging.h)
// against the raw way of getting the same bytes onto the GPU. Built only with
// -DMESHLAYOUT_CUDA=ON; a plain program.
//
//   build-cuda/bench/gpu_checkpoint_bench [--gib N] [--reps R] [--dir DIR] [--json FILE]
//
// Writes a checkpoint of N GiB (default 2): 4N F32 tensors of 8192 x 8192 (256 MiB each), saved
// from row-sharded GPU arrays (timed: save_gpu_rows8, against raw_save = cudaMemcpy of each
// tensor into page-locked memory + pwrite + fdatasync). Then, warm (the file in the page cache)
// and cold (its pages dropped with posix_fadvise(DONTNEED) before every repetition: run as root
// on the GPU machine), times:
//   raw_serial      for each tensor: pread of its bytes (16 MiB requests, one thread) into one
//                   page-locked 256 MiB buffer, then cudaMemcpy host-to-device
//   raw_parallel    the same with the preads spread over the runtime's threads
//   load_1dev       load_arrays into arrays on gpu:0 alone (a 1-device mesh, replicated)
//   load_rows8      sharded by rows over 8 virtual devices (MESHLAYOUT_GPU_DEVICES=8)
//   load_cols8      sharded by columns over 8 (short runs: a pinned slot per many rows)
//   load_2x4        [data, model] over a 2x4 mesh
//   load_repl8      replicated over 8 (uploaded once, copied on the device to the other 7)
//   load_rows8_preadv  rows with MapMode::kNever (preadv into the slots instead of a mapping)
// printing `name seconds GB/s ratio_vs_baseline` (GB/s of the checkpoint's bytes, 1e9 bytes;
// the baseline is the faster of raw_serial and raw_parallel of the same temperature; median of
// R repetitions). Target: loads >= 0.8. Each load's shards are checked against the data once.
// Without a GPU it prints "skipped: no GPU" and exits 0 (and the JSON says the same).
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "bench_util.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/io/array_io.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/runtime/runtime.h"

using namespace meshlayout;
namespace fs = std::filesystem;

namespace {

using bench::median_seconds;

constexpr int64_t kRows = 8192, kCols = 8192;
constexpr size_t kTensorBytes = size_t{kRows * kCols} * 4;
constexpr size_t kRequest = size_t{16} << 20;

struct Figure {
  std::string name;
  double seconds, gbps, ratio;
};

void check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  std::fprintf(stderr, "gpu_checkpoint_bench: %s: %s\n", what, cudaGetErrorString(status));
  std::exit(1);
}

void drop_from_page_cache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error("cannot open " + path);
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

void pread_all(int fd, std::byte* into, size_t bytes, uint64_t offset) {
  size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::pread(fd, into + done, std::min(kRequest, bytes - done),
                              static_cast<off_t>(offset + done));
    if (n <= 0) throw Error("short read");
    done += static_cast<size_t>(n);
  }
}

// Tensor t's values: a cheap pattern that differs per tensor and element.
HostTensor pattern(int t) {
  HostTensor x(DType::kF32, {kRows, kCols});
  float* v = x.data_as<float>();
  for (int64_t i = 0; i < kRows * kCols; ++i) v[i] = static_cast<float>((i * 7 + t * 131) % 65521);
  return x;
}

void write_json(const std::string& path, const std::vector<Figure>& figures,
                const std::string& device, const std::string& skipped) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::exit(1);
  }
  std::fprintf(f, "{\n  \"device\": \"%s\"", device.c_str());
  if (!skipped.empty()) std::fprintf(f, ",\n  \"skipped\": \"%s\"", skipped.c_str());
  std::fprintf(f, ",\n  \"figures\": [");
  for (size_t i = 0; i < figures.size(); ++i) {
    std::fprintf(f,
                 "%s\n    {\"name\": \"%s\", \"seconds\": %.6f, \"gbps\": %.3f, \"ratio\": %.3f}",
                 i ? "," : "", figures[i].name.c_str(), figures[i].seconds, figures[i].gbps,
                 figures[i].ratio);
  }
  std::fprintf(f, "\n  ]\n}\n");
  std::fclose(f);
}

}  // namespace

int main(int argc, char** argv) {
  int gib = 2, reps = 3;
  fs::path dir = fs::temp_directory_path();
  std::string json;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--gib") {
      gib = std::atoi(argv[i + 1]);
    } else if (flag == "--reps") {
      reps = std::atoi(argv[i + 1]);
    } else if (flag == "--dir") {
      dir = argv[i + 1];
    } else if (flag == "--json") {
      json = argv[i + 1];
    } else {
      std::fprintf(stderr,
                   "usage: gpu_checkpoint_bench [--gib N] [--reps R] [--dir DIR] "
                   "[--json FILE]\n");
      return 2;
    }
  }
  if ((argc - 1) % 2 != 0 || gib < 1 || reps < 1) {
    std::fprintf(stderr,
                 "usage: gpu_checkpoint_bench [--gib N] [--reps R] [--dir DIR] "
                 "[--json FILE]\n");
    return 2;
  }
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus == 0) {
    cudaGetLastError();
    std::printf("skipped: no GPU\n");
    if (!json.empty()) write_json(json, {}, "", "no GPU");
    return 0;
  }
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::fprintf(stderr, "device: %s\n", prop.name);

  setenv(kGpuDevicesEnvVar, "8", 1);
  auto rt = default_runtime(DeviceKind::kCuda);
  std::vector<std::string> names8;
  for (int i = 0; i < 8; ++i) names8.push_back(device_name(i, DeviceKind::kCuda));
  const DeviceMesh one({1}, {"x"}, std::vector<std::string>{device_name(0, DeviceKind::kCuda)});
  const DeviceMesh line({8}, {"x"}, names8);
  const DeviceMesh grid({2, 4}, {"data", "model"}, names8);
  const int tensors = gib * 4;
  const double total_bytes = static_cast<double>(kTensorBytes) * tensors;
  const std::string file =
      (dir / fmt::format("meshlayout_gpu_checkpoint_bench_{}.safetensors", ::getpid())).string();

  std::vector<std::string> names;
  for (int t = 0; t < tensors; ++t) names.push_back(fmt::format("model.layers.{}.w", t));
  std::vector<Figure> figures;
  auto report = [&](const std::string& name, double seconds, double baseline) {
    figures.push_back({name, seconds, total_bytes / seconds / 1e9, baseline / seconds});
    std::printf("%-28s %9.4f %9.2f %7.2f\n", name.c_str(), seconds, total_bytes / seconds / 1e9,
                baseline / seconds);
    std::fflush(stdout);
  };
  std::printf("checkpoint: %d F32 tensors of %lld x %lld, %.2f GiB; median of %d\n", tensors,
              static_cast<long long>(kRows), static_cast<long long>(kCols), total_bytes / (1 << 30),
              reps);
  std::printf("%-28s %9s %9s %7s\n", "name", "seconds", "GB/s", "ratio");

  std::byte* pinned = nullptr;
  check(cudaMallocHost(reinterpret_cast<void**>(&pinned), kTensorBytes), "cudaMallocHost");
  std::vector<void*> raw_device(static_cast<size_t>(tensors));
  for (void*& p : raw_device) check(cudaMalloc(&p, kTensorBytes), "cudaMalloc");
  {
    // The checkpoint, saved from row-sharded GPU arrays; raw_save writes the same bytes.
    std::vector<Array> sources;
    for (int t = 0; t < tensors; ++t) {
      sources.push_back(
          distribute_tensor(pattern(t), TensorLayout({"x", None}, line), {.runtime = rt}));
    }
    std::vector<NamedArray> to_save;
    for (int t = 0; t < tensors; ++t)
      to_save.push_back({names[static_cast<size_t>(t)], &sources[static_cast<size_t>(t)]});
    const std::string plain = file + ".plain";
    const double raw_save = median_seconds(
        reps, [] {},
        [&] {
          const int fd = ::open(plain.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
          for (int t = 0; t < tensors; ++t) {
            check(cudaMemcpy(pinned, raw_device[static_cast<size_t>(t)], kTensorBytes,
                             cudaMemcpyDeviceToHost),
                  "cudaMemcpy D2H");
            for (size_t done = 0; done < kTensorBytes; done += kRequest) {
              if (::pwrite(fd, pinned + done, kRequest,
                           static_cast<off_t>(kTensorBytes * static_cast<size_t>(t) + done)) !=
                  static_cast<ssize_t>(kRequest)) {
                throw Error("short write");
              }
            }
          }
          ::fdatasync(fd);
          ::close(fd);
        });
    fs::remove(plain);
    report("raw_save", raw_save, raw_save);
    report("save_gpu_rows8",
           median_seconds(
               reps, [] {}, [&] { save_arrays(file, to_save); }),
           raw_save);
  }

  const Checkpoint probe = Checkpoint::open(file);
  std::vector<uint64_t> offsets;
  for (const std::string& n : names) {
    const auto [f, info] = probe.find(n);
    offsets.push_back(f->header().data_start() + info->begin);
  }
  bool all_match = true;
  double worst = 1e300;
  for (const bool cold : {false, true}) {
    const char* temp = cold ? "cold" : "warm";
    const auto prepare = [&] {
      if (cold) drop_from_page_cache(file);
    };
    if (!cold) {  // into the page cache
      const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
      for (int t = 0; t < tensors; ++t)
        pread_all(fd, pinned, kTensorBytes, offsets[static_cast<size_t>(t)]);
      ::close(fd);
    }
    auto raw = [&](bool parallel) {
      const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
      for (int t = 0; t < tensors; ++t) {
        const uint64_t offset = offsets[static_cast<size_t>(t)];
        if (parallel) {
          rt->pool().parallel_for(kTensorBytes / kRequest, [&](size_t i) {
            pread_all(fd, pinned + i * kRequest, kRequest, offset + i * kRequest);
          });
        } else {
          pread_all(fd, pinned, kTensorBytes, offset);
        }
        check(cudaMemcpy(raw_device[static_cast<size_t>(t)], pinned, kTensorBytes,
                         cudaMemcpyHostToDevice),
              "cudaMemcpy H2D");
      }
      ::close(fd);
    };
    const double serial = median_seconds(reps, prepare, [&] { raw(false); });
    const double parallel = median_seconds(reps, prepare, [&] { raw(true); });
    const double baseline = std::min(serial, parallel);
    report(fmt::format("raw_serial_{}", temp), serial, baseline);
    report(fmt::format("raw_parallel_{}", temp), parallel, baseline);

    struct Case {
      const char* name;
      TensorLayout layout;
      MapMode map;
    };
    const Case cases[] = {{"load_1dev", TensorLayout({None, None}, one), MapMode::kAuto},
                          {"load_rows8", TensorLayout({"x", None}, line), MapMode::kAuto},
                          {"load_cols8", TensorLayout({None, "x"}, line), MapMode::kAuto},
                          {"load_2x4", TensorLayout({"data", "model"}, grid), MapMode::kAuto},
                          {"load_repl8", TensorLayout({None, None}, line), MapMode::kAuto},
                          {"load_rows8_preadv", TensorLayout({"x", None}, line), MapMode::kNever}};
    for (const Case& c : cases) {
      std::vector<Array> targets;
      std::vector<LoadTarget> to_load;
      for (int t = 0; t < tensors; ++t)
        targets.push_back(Array::allocate(c.layout, {kRows, kCols}, DType::kF32, rt));
      for (int t = 0; t < tensors; ++t)
        to_load.push_back({names[static_cast<size_t>(t)], &targets[static_cast<size_t>(t)]});
      const LoadOptions options{.map = c.map};
      const double seconds = median_seconds(
          reps, prepare, [&] { load_arrays(Checkpoint::open(file), to_load, options); });
      if (!cold) {
        const int t = tensors - 1;
        const HostTensor got = targets[static_cast<size_t>(t)].gather();
        const HostTensor want = pattern(t);
        if (std::memcmp(got.data(), want.data(), want.num_bytes()) != 0) {
          std::fprintf(stderr, "%s: tensor %d differs from the saved data\n", c.name, t);
          all_match = false;
        }
      }
      report(fmt::format("{}_{}", c.name, temp), seconds, baseline);
      worst = std::min(worst, baseline / seconds);
    }
  }
  fs::remove(file);
  for (void* p : raw_device) cudaFree(p);
  cudaFreeHost(pinned);
  std::printf("shards equal the saved data: %s\n", all_match ? "yes" : "NO");
  std::printf("worst load ratio %.2f (target >= 0.80): %s\n", worst,
              worst >= 0.8 ? "met" : "NOT met");
  if (!json.empty()) write_json(json, figures, prop.name, "");
  return all_match ? 0 : 1;
}
