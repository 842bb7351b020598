// Checkpoint loads under MPI: each load against a raw pread of the same number of bytes in the
// same run, the bytes each process read, and each device's peak memory.
//
//   mpirun --allow-run-as-root --oversubscribe -np 4 build/bench/mpi_checkpoint_bench [MIB] [MODE]
//   (also -np 2; MODE = auto (default), never or always: LoadOptions::two_phase)
//
// Process 0 saves a checkpoint of MIB MiB (default 512; f32 tensors of 8192 x 4096) from
// row-sharded arrays; then for each layout every process loads it into its devices' shards.
// Columns: shard_MiB and read_MiB of the process reading most; read/shard (largest over the
// processes; the target is <= 1.1 for direct reads) and read/file (all processes' reads over
// the file's tensor bytes; the target for two-phase loads is <= 1.1); load and raw times, best
// and median of 5 (the slowest process of each run); ratio = raw / load (best of 5, and of the
// medians); peak_MiB = the largest device peak during a load (shards included) and stage_MiB
// the two-phase staging slab. The baseline: each process preads a contiguous slice of the file
// of its shard bytes, 16 MiB at a time, into a pre-touched buffer. The file is warm in the page
// cache (the processes share it).
#include <fcntl.h>
#include <fmt/format.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <vector>

#include "meshlayout/io/array_io.h"
#include "meshlayout/runtime/mpi/initialize.h"

using namespace meshlayout;
namespace fs = std::filesystem;

namespace {

struct Timing {
  double best, median;
};

// Best and median of `reps` runs; each run's time is the slowest process's.
Timing time_runs(int reps, const std::function<void()>& fn) {
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    fn();
    double t = MPI_Wtime() - t0;
    MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    times.push_back(t);
  }
  std::sort(times.begin(), times.end());
  return {times.front(), times[times.size() / 2]};
}

void read_slice(const std::string& path, uint64_t offset, std::vector<std::byte>& into) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  size_t done = 0;
  while (done < into.size()) {
    const ssize_t n = ::pread(fd, into.data() + done, std::min<size_t>(16 << 20, into.size() - done),
                              static_cast<off_t>(offset + done));
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  ::close(fd);
}

double max_over_processes(double v) {
  MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return v;
}
double sum_over_processes(double v) {
  MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return v;
}

TwoPhaseMode parse_mode(const char* text) {
  const std::string m = text;
  if (m == "never") return TwoPhaseMode::kNever;
  if (m == "always") return TwoPhaseMode::kAlways;
  if (m != "auto") std::fprintf(stderr, "unknown mode '%s' (auto, never, always); using auto\n", text);
  return TwoPhaseMode::kAuto;
}

}  // namespace

int main(int argc, char** argv) {
  auto rt = initialize(&argc, &argv);
  const int me = rt->process_id(), procs = rt->num_processes();
  const int64_t devices = rt->global_device_count();
  const int64_t mib = argc > 1 ? std::atoll(argv[1]) : 512;
  const TwoPhaseMode mode = parse_mode(argc > 2 ? argv[2] : "auto");
  const int64_t rows_per_tensor = 8192, cols = 4096;  // 128 MiB per f32 tensor
  const int64_t tensors = std::max<int64_t>(1, mib / 128);

  char path[256] = {};
  if (me == 0) {
    std::snprintf(path, sizeof path, "%s", (fs::temp_directory_path() /
                                            fmt::format("meshlayout_mpi_ckpt_bench_{}.safetensors", ::getpid())).c_str());
  }
  rt->comm().broadcast(path, sizeof path, 0);

  const DeviceMesh line({devices}, {"x"});
  const DeviceMesh grid({2, devices / 2}, {"data", "model"});
  std::vector<std::string> names;
  {
    std::vector<Array> sources;
    std::vector<NamedArray> to_save;
    for (int64_t t = 0; t < tensors; ++t) {
      names.push_back(fmt::format("layers.{}.w", t));
      sources.push_back(distribute_tensor(HostTensor::random(DType::kF32, {rows_per_tensor, cols}, static_cast<uint64_t>(t)),
                                          TensorLayout({"x", None}, line), {.runtime = rt}));
    }
    for (int64_t t = 0; t < tensors; ++t) to_save.push_back({names[static_cast<size_t>(t)], &sources[static_cast<size_t>(t)]});
    save_arrays(path, to_save);
  }
  if (me == 0) {
    std::printf("%d processes x %lld local devices; checkpoint %lld MiB (%lld f32 tensors of %lld x %lld)\n",
                procs, static_cast<long long>(rt->local_device_count()),
                static_cast<long long>(tensors * 128), static_cast<long long>(tensors),
                static_cast<long long>(rows_per_tensor), static_cast<long long>(cols));
    std::printf("%-24s %3s %9s %8s %10s %9s %8s %8s %7s %7s %6s %6s %8s %9s\n", "case", "how",
                "shard_MiB", "read_MiB", "read/shard", "read/file", "load_ms", "load_med",
                "raw_ms", "raw_med", "ratio", "r_med", "peak_MiB", "stage_MiB");
  }
  struct Case {
    const char* name;
    TensorLayout layout;
  };
  const Case cases[] = {{"rows [x, None]", TensorLayout({"x", None}, line)},
                        {"columns [None, x]", TensorLayout({None, "x"}, line)},
                        {"2-D [data, model]", TensorLayout({"data", "model"}, grid)},
                        {"replicated [None, None]", TensorLayout({None, None}, line)}};
  bool row_target_met = true;
  const double file_tensor_bytes = static_cast<double>(tensors) * rows_per_tensor * cols * 4;
  for (const Case& c : cases) {
    std::vector<Array> targets;
    std::vector<LoadTarget> to_load;
    for (int64_t t = 0; t < tensors; ++t) targets.push_back(Array::allocate(c.layout, {rows_per_tensor, cols}, DType::kF32, rt));
    for (int64_t t = 0; t < tensors; ++t) to_load.push_back({names[static_cast<size_t>(t)], &targets[static_cast<size_t>(t)]});
    const LoadOptions options{.two_phase = mode};
    load_arrays(Checkpoint::open(path), to_load, options);  // touches the shards
    for (VirtualDevice* d : rt->local_devices()) d->memory().reset_peak();
    LoadReport report;
    uint64_t read_bytes = 0;
    const Timing load = time_runs(5, [&] {
      Checkpoint ckpt = Checkpoint::open(path);
      const uint64_t header = ckpt.bytes_read();
      report = load_arrays(ckpt, to_load, options);
      read_bytes = ckpt.bytes_read() - header;
    });
    double peak = 0;
    for (VirtualDevice* d : rt->local_devices()) peak = std::max(peak, static_cast<double>(d->memory().stats().peak_bytes));
    std::vector<std::byte> buffer(report.shard_bytes, std::byte{1});
    const uint64_t slice = (report.shard_bytes * static_cast<uint64_t>(me)) % (static_cast<uint64_t>(tensors) << 27);
    const Timing raw = time_runs(5, [&] { read_slice(path, slice, buffer); });

    const double shard = static_cast<double>(report.shard_bytes), read = static_cast<double>(read_bytes);
    const double max_read_ratio = max_over_processes(read / shard);
    const double read_file_ratio = sum_over_processes(read) / file_tensor_bytes;
    const double max_read = max_over_processes(read), max_shard = max_over_processes(shard);
    peak = max_over_processes(peak);
    const double staging = max_over_processes(static_cast<double>(report.staging_bytes));
    const bool two_phase = max_over_processes(static_cast<double>(report.two_phase_bytes)) > 0;
    if (std::string(c.name).starts_with("rows") && max_read_ratio > 1.1) row_target_met = false;
    if (me == 0) {
      std::printf("%-24s %3s %9.1f %8.1f %10.3f %9.3f %8.1f %8.1f %7.1f %7.1f %6.2f %6.2f %8.1f %9.1f\n",
                  c.name, two_phase ? "2ph" : "dir", max_shard / (1 << 20), max_read / (1 << 20),
                  max_read_ratio, read_file_ratio, load.best * 1e3, load.median * 1e3,
                  raw.best * 1e3, raw.median * 1e3, raw.best / load.best, raw.median / load.median,
                  peak / (1 << 20), staging / (1 << 20));
    }
  }
  rt->comm().barrier();
  if (me == 0) {
    fs::remove(path);
    std::printf("\n(how: dir = each process read its boxes, 2ph = two-phase; times: the slowest process)\n");
    std::printf("row-sharded: every process read <= 1.1x its shard bytes: %s\n", row_target_met ? "met" : "NOT met");
  }
  finalize_mpi();
  return row_target_met ? 0 : 1;
}
