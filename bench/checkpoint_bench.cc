// Checkpoint load and save on 8 virtual devices, against plain sequential file I/O of the same
// file in the same run.
//
//   build/bench/checkpoint_bench [--gib N] [--reps R] [--dir DIR] [--only rows|columns|2x4]
//                                [--map auto|always|never]   (LoadOptions::map)
//
// Writes a checkpoint of N GiB (default 1): N x 8 f32 tensors of 4096 x 8192 (128 MiB each),
// then for each rule set (rows, columns, a 2x4 mesh) loads it into already allocated Arrays
// with Checkpoint::open + load_arrays, and compares with the baseline: pread of the whole file,
// 16 MiB at a time, into one pre-touched buffer of the file's size. Both are measured warm
// (the file in the page cache) and cold (its pages dropped with posix_fadvise(DONTNEED) before
// every repetition, so the bytes come from the disk; run first). ratio = baseline time / load time
// (1.0: as fast as reading the file; the target is >= 0.8). The save is compared with pwrite of the
// same bytes + fdatasync. Each loaded shard is checked against the data. Median of R runs.
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "bench_util.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/io/array_io.h"
#include "meshlayout/layout/box_ops.h"

using namespace meshlayout;
namespace fs = std::filesystem;

namespace {

using bench::median_seconds;

constexpr int64_t kRows = 4096, kCols = 8192;
constexpr size_t kChunk = size_t{16} << 20;

void drop_from_page_cache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error("cannot open " + path);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

void sequential_read(const std::string& path, std::vector<std::byte>& into) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  size_t done = 0;
  while (done < into.size()) {
    const ssize_t n = ::pread(fd, into.data() + done, std::min(kChunk, into.size() - done),
                              static_cast<off_t>(done));
    if (n <= 0) throw Error("short read of " + path);
    done += static_cast<size_t>(n);
  }
  ::close(fd);
}

void sequential_write(const std::string& path, const std::vector<std::byte>& from) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  size_t done = 0;
  while (done < from.size()) {
    const ssize_t n = ::pwrite(fd, from.data() + done, std::min(kChunk, from.size() - done),
                               static_cast<off_t>(done));
    if (n <= 0) throw Error("short write of " + path);
    done += static_cast<size_t>(n);
  }
  ::fdatasync(fd);
  ::close(fd);
}

// Every local shard of `a` holds its box of `x`.
bool shards_match(const Array& a, const HostTensor& x) {
  const Box whole{Shape(x.shape().size(), 0), x.shape()};
  std::vector<std::byte> want;
  for (const Array::Shard& s : a.local_shards()) {
    want.resize(s.buffer.size());
    copy_box(x.data(), whole, want.data(), s.box, s.box, dtype_size(x.dtype()));
    if (std::memcmp(want.data(), s.buffer.data(), want.size()) != 0) return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  int gib = 1, reps = 5;
  fs::path dir = fs::temp_directory_path();
  std::string only;  // run the load cases whose name contains this
  LoadOptions options;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--gib")
      gib = std::atoi(argv[i + 1]);
    else if (flag == "--reps")
      reps = std::atoi(argv[i + 1]);
    else if (flag == "--dir")
      dir = argv[i + 1];
    else if (flag == "--only")
      only = argv[i + 1];
    else if (flag == "--map" && std::string(argv[i + 1]) == "always")
      options.map = MapMode::kAlways;
    else if (flag == "--map" && std::string(argv[i + 1]) == "never")
      options.map = MapMode::kNever;
    else if (flag == "--map" && std::string(argv[i + 1]) == "auto")
      options.map = MapMode::kAuto;
    else {
      std::fprintf(stderr,
                   "usage: checkpoint_bench [--gib N] [--reps R] [--dir DIR] [--only "
                   "rows|columns|2x4] [--map auto|always|never]\n");
      return 2;
    }
  }
  auto rt = Runtime::single_process(8);
  const DeviceMesh line({8}, {"x"});
  const DeviceMesh grid({2, 4}, {"data", "model"});
  const int tensors = gib * 8;
  const std::string file =
      (dir / fmt::format("meshlayout_checkpoint_bench_{}.safetensors", ::getpid())).string();
  const std::string plain = file + ".plain";

  // The checkpoint, saved from row-sharded arrays.
  std::vector<std::string> names;
  std::vector<Array> sources;
  for (int t = 0; t < tensors; ++t) {
    names.push_back(fmt::format("model.layers.{}.mlp.up_proj.weight", t));
    sources.push_back(
        distribute_tensor(HostTensor::random(DType::kF32, {kRows, kCols}, static_cast<uint64_t>(t)),
                          TensorLayout({"x", None}, line), {.runtime = rt}));
  }
  std::vector<NamedArray> to_save;
  for (int t = 0; t < tensors; ++t)
    to_save.push_back({names[static_cast<size_t>(t)], &sources[static_cast<size_t>(t)]});
  const auto nothing = [] {};
  uint64_t file_bytes = 0;
  const double save_s =
      median_seconds(reps, nothing, [&] { file_bytes = save_arrays(file, to_save).file_bytes; });
  std::vector<std::byte> buffer(file_bytes, std::byte{1});  // pre-touched
  const double write_s = median_seconds(reps, nothing, [&] { sequential_write(plain, buffer); });
  fs::remove(plain);
  const double gibs = static_cast<double>(file_bytes) / (1 << 30);
  std::printf(
      "checkpoint: %d tensors of %lld x %lld f32, %.2f GiB, 8 virtual devices, median of %d\n\n",
      tensors, static_cast<long long>(kRows), static_cast<long long>(kCols), gibs, reps);
  std::printf("%-34s %9s %9s %12s %7s\n", "case", "time_s", "GiB/s", "baseline_s", "ratio");
  std::printf("%-34s %9.3f %9.2f %12.3f %7.2f\n", "save (rows) vs pwrite+fdatasync", save_s,
              gibs / save_s, write_s, write_s / save_s);

  struct Rules {
    const char* name;
    TensorLayout layout;
  };
  const Rules cases[] = {{"rows    [x, None]", TensorLayout({"x", None}, line)},
                         {"columns [None, x]", TensorLayout({None, "x"}, line)},
                         {"2x4     [data, model]", TensorLayout({"data", "model"}, grid)}};
  bool all_match = true;
  double worst_ratio = 1e300;
  for (const bool cold : {true, false}) {
    const auto prepare = [&] {
      if (cold) drop_from_page_cache(file);
    };
    const double read_s = median_seconds(reps, prepare, [&] { sequential_read(file, buffer); });
    for (const Rules& c : cases) {
      if (std::string(c.name).find(only) == std::string::npos) continue;
      std::vector<Array> targets;
      std::vector<LoadTarget> to_load;
      for (int t = 0; t < tensors; ++t)
        targets.push_back(Array::allocate(c.layout, {kRows, kCols}, DType::kF32, rt));
      for (int t = 0; t < tensors; ++t)
        to_load.push_back({names[static_cast<size_t>(t)], &targets[static_cast<size_t>(t)]});
      load_arrays(Checkpoint::open(file), to_load, options);  // touches the shards once
      LoadReport report;
      const double load_s = median_seconds(
          reps, prepare, [&] { report = load_arrays(Checkpoint::open(file), to_load, options); });
      for (int t = 0; t < tensors; ++t) {
        all_match = all_match && shards_match(targets[static_cast<size_t>(t)],
                                              HostTensor::random(DType::kF32, {kRows, kCols},
                                                                 static_cast<uint64_t>(t)));
      }
      const double ratio = read_s / load_s;
      worst_ratio = std::min(worst_ratio, ratio);
      std::printf("%-34s %9.3f %9.2f %12.3f %7.2f   (read %.2f GiB)\n",
                  fmt::format("load {} {}", cold ? "cold" : "warm", c.name).c_str(), load_s,
                  gibs / load_s, read_s, ratio, static_cast<double>(report.bytes_read) / (1 << 30));
    }
  }
  fs::remove(file);
  std::printf("\nshards equal the saved data: %s\n", all_match ? "yes" : "NO");
  std::printf("worst load ratio %.2f (target >= 0.80): %s\n", worst_ratio,
              worst_ratio >= 0.8 ? "met" : "NOT met");
  return all_match ? 0 : 1;
}
