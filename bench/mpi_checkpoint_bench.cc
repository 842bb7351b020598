// Checkpoint loads under MPI: each load against a raw pread of the same number of bytes in the
// same run, the bytes each process read, and each device's peak memory.
//
//   mpirun --allow-run-as-root --oversubscribe -np 4 build/bench/mpi_checkpoint_bench [MIB] [MODE]
//   [REPS] [CASE] (also -np 2; CASE: run only the cases whose name starts with it, e.g. columns.)
//   MODE: auto (LoadOptions defaults), map (every box copied from a mapping), pread (every box read
//   with preadv), 2ph (two-phase wherever it can), never / always (only LoadOptions::two_phase), or
//   compare (pread, map, 2ph and auto, interleaved in one run).
//
// Process 0 saves a checkpoint of MIB MiB (default 512; f32 tensors of 8192 x 4096) from
// row-sharded arrays; then for each layout every process loads it into its devices' shards.
// The raw baseline: each process preads a contiguous slice of the file of its shard bytes,
// 16 MiB at a time, into a pre-touched buffer. The file is warm in the page cache (the
// processes share it). Loads and the baseline are timed alternately (raw, then each method, 5
// times over, or REPS), so a noisy machine slows both alike; each time is the slowest process's.
// Columns: how the bytes were read (pread, map, 2ph or a mix); shard_MiB and read_MiB of the
// process reading most; read/shard (largest over the processes; the target is <= 1.1 for
// direct and mapped reads) and read/file (all processes' reads over the file's tensor bytes;
// the target for two-phase loads is <= 1.1); load and raw times, best and median of the runs; ratio
// = raw / load (of the bests, and of the medians; the target is >= 0.8); peak_MiB = the largest
// device peak during a load (shards included) and stage_MiB the staging account's peak. Below
// the table: the bytes each process read and each device's peak, per case; and where a
// process's devices hold its boxes several times (replicated), the ratio to a second raw
// baseline that fills them all: the pread, then a memcpy to each other copy.
#include <fcntl.h>
#include <fmt/format.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <vector>

#include "bench_util.h"
#include "meshlayout/io/array_io.h"
#include "meshlayout/runtime/mpi/initialize.h"

using namespace meshlayout;
namespace fs = std::filesystem;

namespace {

struct Timing {
  double best, median;
};

Timing summarize(const std::vector<double>& times) {
  return {bench::best(times), bench::median(times)};
}

// One run's time: the slowest process's.
double time_once(const std::function<void()>& fn) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  fn();
  double t = MPI_Wtime() - t0;
  MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return t;
}

void read_slice(const std::string& path, uint64_t offset, std::vector<std::byte>& into) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  size_t done = 0;
  while (done < into.size()) {
    const ssize_t n =
        ::pread(fd, into.data() + done, std::min<size_t>(16 << 20, into.size() - done),
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
// Every process's `values` (the same count each), on process 0.
std::vector<double> gather(const std::vector<double>& values, int procs) {
  std::vector<double> all(values.size() * static_cast<size_t>(procs));
  MPI_Gather(values.data(), static_cast<int>(values.size()), MPI_DOUBLE, all.data(),
             static_cast<int>(values.size()), MPI_DOUBLE, 0, MPI_COMM_WORLD);
  return all;
}

struct Method {
  const char* name;
  LoadOptions options;
};

std::vector<Method> parse_mode(const std::string& m) {
  const Method pread{"pread", {.two_phase = TwoPhaseMode::kNever, .map = MapMode::kNever}};
  const Method map{"map", {.two_phase = TwoPhaseMode::kNever, .map = MapMode::kAlways}};
  const Method two_phase{"2ph", {.two_phase = TwoPhaseMode::kAlways}};
  const Method automatic{"auto", {}};
  if (m == "compare") return {pread, map, two_phase, automatic};
  if (m == "pread") return {pread};
  if (m == "map") return {map};
  if (m == "2ph" || m == "always") return {two_phase};
  if (m == "never") return {{"never", {.two_phase = TwoPhaseMode::kNever}}};
  if (m != "auto")
    std::fprintf(stderr,
                 "unknown mode '%s' (auto, map, pread, 2ph, never, always, compare); using auto\n",
                 m.c_str());
  return {automatic};
}

}  // namespace

int main(int argc, char** argv) {
  auto rt = initialize(&argc, &argv);
  const int me = rt->process_id(), procs = rt->num_processes();
  const int64_t devices = rt->global_device_count();
  const int64_t mib = argc > 1 ? std::atoll(argv[1]) : 512;
  const std::vector<Method> methods = parse_mode(argc > 2 ? argv[2] : "auto");
  const int64_t rows_per_tensor = 8192, cols = 4096;  // 128 MiB per f32 tensor
  const int64_t tensors = std::max<int64_t>(1, mib / 128);
  const int reps = argc > 3 ? std::max(1, std::atoi(argv[3])) : 5;
  const std::string only = argc > 4 ? argv[4] : "";

  char path[256] = {};
  if (me == 0) {
    std::snprintf(path, sizeof path, "%s",
                  (fs::temp_directory_path() /
                   fmt::format("meshlayout_mpi_ckpt_bench_{}.safetensors", ::getpid()))
                      .c_str());
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
      sources.push_back(distribute_tensor(
          HostTensor::random(DType::kF32, {rows_per_tensor, cols}, static_cast<uint64_t>(t)),
          TensorLayout({"x", None}, line), {.runtime = rt}));
    }
    for (int64_t t = 0; t < tensors; ++t)
      to_save.push_back({names[static_cast<size_t>(t)], &sources[static_cast<size_t>(t)]});
    save_arrays(path, to_save);
  }
  if (me == 0) {
    std::printf(
        "%d processes x %lld local devices; checkpoint %lld MiB (%lld f32 tensors of %lld x "
        "%lld)\n",
        procs, static_cast<long long>(rt->local_device_count()),
        static_cast<long long>(tensors * 128), static_cast<long long>(tensors),
        static_cast<long long>(rows_per_tensor), static_cast<long long>(cols));
    std::printf("%-24s %-5s %9s %8s %10s %9s %8s %8s %7s %7s %6s %6s %8s %9s\n", "case", "how",
                "shard_MiB", "read_MiB", "read/shard", "read/file", "load_ms", "load_med", "raw_ms",
                "raw_med", "ratio", "r_med", "peak_MiB", "stage_MiB");
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
  std::vector<std::string> details;
  for (const Case& c : cases) {
    if (!std::string(c.name).starts_with(only)) continue;
    std::vector<Array> targets;
    std::vector<LoadTarget> to_load;
    for (int64_t t = 0; t < tensors; ++t)
      targets.push_back(Array::allocate(c.layout, {rows_per_tensor, cols}, DType::kF32, rt));
    for (int64_t t = 0; t < tensors; ++t)
      to_load.push_back({names[static_cast<size_t>(t)], &targets[static_cast<size_t>(t)]});
    // Per method: times, the last report and bytes read, each device's and staging's peak.
    struct Result {
      std::vector<double> times;
      LoadReport report;
      uint64_t read_bytes = 0;
      std::vector<double> device_peak;
      double staging_peak = 0;
    };
    std::vector<Result> results(methods.size());
    const uint64_t shard_bytes = load_arrays(Checkpoint::open(path), to_load, methods[0].options)
                                     .shard_bytes;  // touches the shards
    std::vector<std::byte> buffer(shard_bytes, std::byte{1});
    const uint64_t slice =
        (shard_bytes * static_cast<uint64_t>(me)) % (static_cast<uint64_t>(tensors) << 27);
    std::vector<double> raw_times;
    // Local replicas: a process whose devices hold its boxes `copies` times also gets the
    // cheapest raw way to fill them (the pread, then memcpy to the other copies) as a second
    // baseline, timed in the same runs.
    uint64_t held_bytes = 0;
    for (const Array& a : targets) {
      for (const Array::Shard& shard : a.local_shards()) held_bytes += shard.buffer.size();
    }
    const uint64_t copies = shard_bytes == 0 ? 1 : held_bytes / shard_bytes;
    std::vector<std::byte> replica_buffer(copies > 1 ? shard_bytes * (copies - 1) : 0,
                                          std::byte{1});
    std::vector<double> raw_copies_times;
    for (int r = 0; r < reps; ++r) {
      raw_times.push_back(time_once([&] { read_slice(path, slice, buffer); }));
      if (copies > 1) {
        raw_copies_times.push_back(time_once([&] {
          read_slice(path, slice, buffer);
          for (uint64_t c = 0; c + 1 < copies; ++c) {
            std::memcpy(replica_buffer.data() + c * shard_bytes, buffer.data(), shard_bytes);
          }
        }));
      }
      for (size_t m = 0; m < methods.size(); ++m) {
        Result& res = results[m];
        for (VirtualDevice* d : rt->local_devices()) d->memory().reset_peak();
        rt->staging().reset_peak();
        res.times.push_back(time_once([&] {
          Checkpoint ckpt = Checkpoint::open(path);
          const uint64_t header = ckpt.bytes_read();
          res.report = load_arrays(ckpt, to_load, methods[m].options);
          res.read_bytes = ckpt.bytes_read() - header;
        }));
        res.device_peak.resize(rt->local_devices().size());
        for (size_t d = 0; d < res.device_peak.size(); ++d) {
          res.device_peak[d] =
              std::max(res.device_peak[d],
                       static_cast<double>(rt->local_devices()[d]->memory().stats().peak_bytes));
        }
        res.staging_peak =
            std::max(res.staging_peak, static_cast<double>(rt->staging().stats().peak_bytes));
      }
    }
    const Timing raw = summarize(raw_times);
    for (size_t m = 0; m < methods.size(); ++m) {
      const Result& res = results[m];
      const Timing load = summarize(res.times);
      const double shard = static_cast<double>(res.report.shard_bytes),
                   read = static_cast<double>(res.read_bytes);
      const double max_read_ratio = max_over_processes(read / shard);
      const double read_file_ratio = sum_over_processes(read) / file_tensor_bytes;
      const double max_read = max_over_processes(read), max_shard = max_over_processes(shard);
      const double peak =
          max_over_processes(*std::max_element(res.device_peak.begin(), res.device_peak.end()));
      const double staging = max_over_processes(res.staging_peak);
      const double two_phase = sum_over_processes(static_cast<double>(res.report.two_phase_bytes));
      const double mapped = sum_over_processes(static_cast<double>(res.report.mapped_bytes));
      const double direct = sum_over_processes(shard) - two_phase - mapped;
      const int kinds = (two_phase > 0) + (mapped > 0) + (direct > 0);
      const char* how = kinds > 1 ? "mix" : two_phase > 0 ? "2ph" : mapped > 0 ? "map" : "pread";
      const std::vector<double> reads = gather({read / (1 << 20)}, procs);
      std::vector<double> peaks = res.device_peak;
      for (double& p : peaks) p /= 1 << 20;
      const std::vector<double> all_peaks = gather(peaks, procs);
      if (std::string(c.name).starts_with("rows") && max_read_ratio > 1.1) row_target_met = false;
      if (me == 0) {
        const std::string name =
            methods.size() > 1 ? fmt::format("{} {}", c.name, methods[m].name) : c.name;
        std::printf(
            "%-24s %-5s %9.1f %8.1f %10.3f %9.3f %8.1f %8.1f %7.1f %7.1f %6.2f %6.2f %8.1f %9.1f\n",
            name.c_str(), how, max_shard / (1 << 20), max_read / (1 << 20), max_read_ratio,
            read_file_ratio, load.best * 1e3, load.median * 1e3, raw.best * 1e3, raw.median * 1e3,
            raw.best / load.best, raw.median / load.median, peak / (1 << 20), staging / (1 << 20));
        details.push_back(
            fmt::format("{}: read MiB by process [{:.1f}]; peak MiB by device [{:.1f}]; "
                        "ratio >= 0.8: best {}, median {}",
                        name, fmt::join(reads, ", "), fmt::join(all_peaks, ", "),
                        raw.best / load.best >= 0.8 ? "met" : "NOT met",
                        raw.median / load.median >= 0.8 ? "met" : "NOT met"));
        if (copies > 1) {
          const Timing rc = summarize(raw_copies_times);
          details.push_back(fmt::format(
              "{}: each process holds its boxes {} times; against raw pread + {} memcpy of them "
              "({:.1f} ms best, {:.1f} median): ratio {:.2f} best, {:.2f} median",
              name, copies, copies - 1, rc.best * 1e3, rc.median * 1e3, rc.best / load.best,
              rc.median / load.median));
        }
      }
    }
  }
  rt->comm().barrier();
  if (me == 0) {
    fs::remove(path);
    std::printf("\n");
    for (const std::string& line : details) std::printf("%s\n", line.c_str());
    std::printf(
        "\n(how: pread = each process preadv'd its boxes, map = copied them from a mapping of the "
        "file,\n"
        " 2ph = two-phase; times: the slowest process; ratio target >= 0.8)\n");
    std::printf("row-sharded: every process read <= 1.1x its shard bytes: %s\n",
                row_target_met ? "met" : "NOT met");
  }
  finalize_mpi();
  return row_target_met ? 0 : 1;
}
