// Reshard under MPI against a raw MPI_Alltoallv of the same byte matrix, in the same run.
//
//   mpirun --allow-run-as-root --oversubscribe -np 4 build/bench/mpi_reshard_bench   (or -np 2)
//   ... mpi_reshard_bench rows          only the cases whose name contains "rows"
//   ... mpi_reshard_bench "" 15         best and median of 15 runs instead of 5
//
// Columns (times: best and median of 5 runs (or argv[2]), each run timed from a barrier to a
// barrier, so by its slowest process; process 0 prints):
//   moved_MiB, between_MiB  the plan's bytes moved between devices, and between processes
//   ours_ms, ours_med       distribute_tensor(array, target): plan, allocation, agreement, data
//   raw_ms, raw_med         one MPI_Alltoallv of exactly the byte matrix the reshard sends
//                           between processes (pre-touched contiguous buffers, no packing, no
//                           local copies, no planning)
//   raw_all                 the same Alltoallv with each process's local bytes (pieces the
//                           reshard copies inside the process, kept pieces included) as its
//                           diagonal, which MPI copies with memcpy
//   ratio, r_med            base / ours, best and median (1.0 = as fast as the baseline); base is
//                           raw, except when no byte crosses processes (marked *)
//   ratio_all               raw_all / ours (best)
//   peak_MiB                the largest device peak (source and destination shards live)
// and, under each case, the bytes each process sends, receives and copies locally, and each
// device's peak (MiB, cpu:0 first).
//
// NOTE [Baseline without traffic]: when nothing crosses processes (replicated->sharded: each
// device keeps its slice of the replicated source) the raw matrix is all zeros and raw times an
// empty collective (~0.01 ms), so raw / ours says nothing. For such a case base is raw_all: the
// Alltoallv of the zero matrix plus a memcpy of the bytes the reshard copies locally, i.e. the
// least any implementation must do; its ratio is marked *. ratio_all is shown for every case
// too; the target (ratio >= 0.8 under -np 4) reads the ratio column.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench_util.h"
#include "meshlayout/array/array.h"
#include "meshlayout/runtime/mpi/initialize.h"

using namespace meshlayout;

namespace {

struct Timing {
  double best, median;
};

// Times each of `fns` `reps` times, interleaved (fn0, fn1, ..., fn0, fn1, ...) so that a change
// in the machine's load (other processes on shared cores) hits every contender alike.
std::vector<Timing> time_interleaved(int reps, const std::vector<std::function<void()>>& fns) {
  std::vector<std::vector<double>> times(fns.size());
  for (int r = 0; r < reps; ++r) {
    for (size_t f = 0; f < fns.size(); ++f) {
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      fns[f]();
      MPI_Barrier(MPI_COMM_WORLD);
      times[f].push_back(MPI_Wtime() - t0);
    }
  }
  std::vector<Timing> out;
  for (const std::vector<double>& t : times) out.push_back({bench::best(t), bench::median(t)});
  return out;
}

// One MPI_Alltoallv of a byte matrix (row `send_counts`, column `recv_counts` of this process)
// between pre-touched contiguous buffers.
class RawAlltoallv {
 public:
  RawAlltoallv(std::vector<int> send_counts, std::vector<int> recv_counts)
      : sc_(std::move(send_counts)), rc_(std::move(recv_counts)), sd_(sc_.size(), 0), rd_(sd_) {
    for (size_t k = 1; k < sc_.size(); ++k) {
      sd_[k] = sd_[k - 1] + sc_[k - 1];
      rd_[k] = rd_[k - 1] + rc_[k - 1];
    }
    send_.assign(static_cast<size_t>(sd_.back() + sc_.back()) + 1, 1);
    recv_.assign(static_cast<size_t>(rd_.back() + rc_.back()) + 1, 2);
  }
  void operator()() {
    MPI_Alltoallv(send_.data(), sc_.data(), sd_.data(), MPI_BYTE, recv_.data(), rc_.data(),
                  rd_.data(), MPI_BYTE, MPI_COMM_WORLD);
  }

 private:
  std::vector<int> sc_, rc_, sd_, rd_;
  std::vector<char> send_, recv_;
};

void run_case(const std::shared_ptr<Runtime>& rt, int reps, const char* name, Shape shape,
              const std::string& mesh_text, const char* from, const char* to) {
  const int me = rt->process_id(), procs = rt->num_processes();
  DeviceMesh mesh = DeviceMesh::from_string(mesh_text);
  HostTensor x = HostTensor::random(DType::kF32, shape, 7);
  Array a =
      distribute_tensor(x, TensorLayout::from_string(from).with_device_mesh(mesh), {.runtime = rt});
  TensorLayout target = TensorLayout::from_string(to).with_device_mesh(mesh);
  ReshardPlan plan = plan_distribute(a, target);
  { Array warm = distribute_tensor(a, target); }
  for (VirtualDevice* d : rt->local_devices()) d->memory().reset_peak();
  std::vector<int> send_counts(static_cast<size_t>(procs), 0), recv_counts(send_counts);
  int local = 0;
  for (const Transfer& t : plan.transfers) {
    if (t.src_process == t.dst_process) {
      if (t.src_process == me) local += static_cast<int>(t.bytes);
      continue;
    }
    if (t.src_process == me)
      send_counts[static_cast<size_t>(t.dst_process)] += static_cast<int>(t.bytes);
    if (t.dst_process == me)
      recv_counts[static_cast<size_t>(t.src_process)] += static_cast<int>(t.bytes);
  }
  // Bytes this process sends, receives and copies locally, gathered on process 0.
  double mine[3] = {0, 0, static_cast<double>(local)};
  for (int k = 0; k < procs; ++k) {
    mine[0] += send_counts[static_cast<size_t>(k)];
    mine[1] += recv_counts[static_cast<size_t>(k)];
  }
  std::vector<double> moved(3 * static_cast<size_t>(procs));
  MPI_Gather(mine, 3, MPI_DOUBLE, moved.data(), 3, MPI_DOUBLE, 0, MPI_COMM_WORLD);

  RawAlltoallv raw_fn(send_counts, recv_counts);
  send_counts[static_cast<size_t>(me)] = recv_counts[static_cast<size_t>(me)] = local;
  RawAlltoallv raw_all_fn(send_counts, recv_counts);
  raw_fn();  // warm up MPI's paths for these sizes, as the reshard was
  raw_all_fn();
  const std::vector<Timing> t = time_interleaved(
      reps,
      {[&] { Array b = distribute_tensor(a, target); }, [&] { raw_fn(); }, [&] { raw_all_fn(); }});
  const Timing ours = t[0], raw = t[1], raw_all = t[2];
  // Each device's peak, gathered on process 0 in global device order.
  std::vector<double> my_peaks;
  for (VirtualDevice* d : rt->local_devices())
    my_peaks.push_back(static_cast<double>(d->memory().stats().peak_bytes));
  std::vector<double> peaks(my_peaks.size() * static_cast<size_t>(procs));
  MPI_Gather(my_peaks.data(), static_cast<int>(my_peaks.size()), MPI_DOUBLE, peaks.data(),
             static_cast<int>(my_peaks.size()), MPI_DOUBLE, 0, MPI_COMM_WORLD);
  const double peak = *std::max_element(my_peaks.begin(), my_peaks.end());
  double max_peak = peak;
  MPI_Allreduce(MPI_IN_PLACE, &max_peak, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);

  if (me == 0) {
    const bool no_traffic = plan.bytes_between_processes == 0;  // NOTE [Baseline without traffic]
    const Timing base = no_traffic ? raw_all : raw;
    std::printf("%-26s %9.1f %12.1f %8.2f %8.2f %8.2f %8.2f %8.2f %6.2f%s %5.2f %9.2f %8.1f\n",
                name, static_cast<double>(plan.bytes_moved) / (1 << 20),
                static_cast<double>(plan.bytes_between_processes) / (1 << 20), ours.best * 1e3,
                ours.median * 1e3, raw.best * 1e3, raw.median * 1e3, raw_all.best * 1e3,
                base.best / ours.best, no_traffic ? "*" : " ", base.median / ours.median,
                raw_all.best / ours.best, max_peak / (1 << 20));
    std::string per_process = "    MiB sent/received/copied locally per process:";
    for (int p = 0; p < procs; ++p) {
      const double* m = &moved[3 * static_cast<size_t>(p)];
      char text[64];
      std::snprintf(text, sizeof text, " p%d %.1f/%.1f/%.1f", p, m[0] / (1 << 20), m[1] / (1 << 20),
                    m[2] / (1 << 20));
      per_process += text;
    }
    std::string per_device = "    peak MiB per device:";
    for (double b : peaks) {
      char text[32];
      std::snprintf(text, sizeof text, " %.1f", b / (1 << 20));
      per_device += text;
    }
    std::printf("%s\n%s\n", per_process.c_str(), per_device.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  auto rt = initialize(&argc, &argv);
  const char* filter = argc > 1 ? argv[1] : "";
  const int reps = argc > 2 ? std::max(1, std::atoi(argv[2])) : 5;
  if (rt->process_id() == 0) {
    std::printf("%d processes x %lld local devices; f32 tensors\n", rt->num_processes(),
                static_cast<long long>(rt->local_device_count()));
    std::printf("%-26s %9s %12s %8s %8s %8s %8s %8s %7s %5s %9s %8s\n", "case", "moved_MiB",
                "between_MiB", "ours_ms", "ours_med", "raw_ms", "raw_med", "raw_all", "ratio",
                "r_med", "ratio_all", "peak_MiB");
  }
  // Every global device (np 2 or 4 processes x MESHLAYOUT_LOCAL_DEVICES).
  const int64_t n = rt->global_device_count();
  const std::string line = "mesh[x=" + std::to_string(n) + "]";
  const std::string grid = "mesh[data=2,model=" + std::to_string(n / 2) + "]";
  auto run = [&](const char* name, Shape shape, const std::string& mesh, const char* from,
                 const char* to) {
    if (std::strstr(name, filter) != nullptr)
      run_case(rt, reps, name, std::move(shape), mesh, from, to);
  };
  run("replicated->sharded 64M", {4096, 4096}, grid, "None,None", "data,model");
  run("sharded->replicated 64M", {4096, 4096}, line, "x,None", "None,None");
  run("rows->columns 64M", {4096, 4096}, line, "x,None", "None,x");
  run("rows->columns 256M", {8192, 8192}, line, "x,None", "None,x");
  run("2-D mesh transpose 64M", {4096, 4096}, grid, "data,model", "model,data");
  run("uneven rows->columns 64M", {4099, 4097}, line, "x,None", "None,x");
  finalize_mpi();
  return 0;
}
