// Checkpoint loads under MPI: bytes each process reads against its shard bytes, and its load
// time against a raw pread of the same number of bytes, in the same run.
//
//   mpirun --allow-run-as-root --oversubscribe -np 4 build/bench/mpi_checkpoint_bench [MIB]
//
// Process 0 saves a checkpoint of MIB MiB (default 512; f32 tensors of 4096 columns) from
// row-sharded arrays; then for each rule set every process loads it into its devices' shards.
// Per process: read_MiB (everything it read from the file, header included, as counted by
// Checkpoint) over shard_MiB (its distinct boxes): the target is <= 1.1 for row-sharded
// tensors. The baseline: each process preads a contiguous slice of the file of its shard
// bytes, 16 MiB at a time, into a pre-touched buffer; ratio = baseline time / load time. The
// file is warm in the page cache (the processes share it). Best of 5. Process 0 prints the
// largest read ratio and the smallest time ratio over the processes.
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

double time_best(int reps, const std::function<void()>& fn) {
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    fn();
    best = std::min(best, MPI_Wtime() - t0);
  }
  return best;
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

}  // namespace

int main(int argc, char** argv) {
  auto rt = initialize(&argc, &argv);
  const int me = rt->process_id(), procs = rt->num_processes();
  const int64_t devices = rt->global_device_count();
  const int64_t mib = argc > 1 ? std::atoll(argv[1]) : 512;
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
    std::printf("%-24s %10s %10s %15s %9s %9s %12s\n", "case", "shard_MiB", "read_MiB",
                "max read/shard", "load_ms", "raw_ms", "min ratio");
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
  for (const Case& c : cases) {
    std::vector<Array> targets;
    std::vector<LoadTarget> to_load;
    for (int64_t t = 0; t < tensors; ++t) targets.push_back(Array::allocate(c.layout, {rows_per_tensor, cols}, DType::kF32, rt));
    for (int64_t t = 0; t < tensors; ++t) to_load.push_back({names[static_cast<size_t>(t)], &targets[static_cast<size_t>(t)]});
    load_arrays(Checkpoint::open(path), to_load);  // touches the shards
    LoadReport report;
    uint64_t read_bytes = 0;
    const double load_s = time_best(5, [&] {
      Checkpoint ckpt = Checkpoint::open(path);
      report = load_arrays(ckpt, to_load);
      read_bytes = ckpt.bytes_read();
    });
    std::vector<std::byte> buffer(report.shard_bytes, std::byte{1});
    const uint64_t slice = (report.shard_bytes * static_cast<uint64_t>(me)) % (static_cast<uint64_t>(tensors) << 27);
    const double raw_s = time_best(5, [&] { read_slice(path, slice, buffer); });

    double mine[4] = {static_cast<double>(report.shard_bytes), static_cast<double>(read_bytes),
                      static_cast<double>(read_bytes) / static_cast<double>(report.shard_bytes), raw_s / load_s};
    std::vector<double> all(4 * static_cast<size_t>(procs));
    rt->comm().all_gather(mine, sizeof mine, all.data());
    double max_read_ratio = 0, min_time_ratio = 1e300, max_load = load_s, max_raw = raw_s;
    MPI_Allreduce(MPI_IN_PLACE, &max_load, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &max_raw, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    for (int p = 0; p < procs; ++p) {
      max_read_ratio = std::max(max_read_ratio, all[static_cast<size_t>(4 * p + 2)]);
      min_time_ratio = std::min(min_time_ratio, all[static_cast<size_t>(4 * p + 3)]);
    }
    if (std::string(c.name).starts_with("rows") && max_read_ratio > 1.1) row_target_met = false;
    if (me == 0) {
      std::printf("%-24s %10.1f %10.1f %15.4f %9.1f %9.1f %12.2f\n", c.name, mine[0] / (1 << 20),
                  mine[1] / (1 << 20), max_read_ratio, max_load * 1e3, max_raw * 1e3, min_time_ratio);
    }
  }
  rt->comm().barrier();
  if (me == 0) {
    fs::remove(path);
    std::printf("\n(process 0's MiB shown; read/shard is the largest over processes)\n");
    std::printf("row-sharded: every process read <= 1.1x its shard bytes: %s\n", row_target_met ? "met" : "NOT met");
  }
  finalize_mpi();
  return row_target_met ? 0 : 1;
}
