// Reshard under MPI against a raw MPI_Alltoallv of the same byte matrix, in the same run.
//
//   mpirun --allow-run-as-root --oversubscribe -np 4 build/bench/mpi_reshard_bench   (or -np 2)
//
// For each case the reshard's plan gives the bytes each process sends to each other process;
// the baseline exchanges exactly that matrix with one MPI_Alltoallv between pre-touched
// contiguous buffers (no packing, no local copies): ratio = baseline / reshard (1.0 = as fast
// as the raw exchange). A second baseline adds the bytes the reshard copies inside each
// process (kept pieces included) as the Alltoallv's diagonal (a memcpy): ratio_all. Best of 5
// and median of 5 (each run timed by its slowest process). peak_MiB: the largest device peak
// during the reshards (source and destination shards). Process 0 prints.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "meshlayout/array/array.h"
#include "meshlayout/runtime/mpi/initialize.h"

using namespace meshlayout;

namespace {

struct Timing {
  double best, median;
};

Timing time_runs(int reps, const std::function<void()>& fn) {
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    fn();
    MPI_Barrier(MPI_COMM_WORLD);
    times.push_back(MPI_Wtime() - t0);
  }
  std::sort(times.begin(), times.end());
  return {times.front(), times[times.size() / 2]};
}

// One MPI_Alltoallv of the byte matrix row `send_counts` / column `recv_counts` of this process.
Timing raw_alltoallv(const std::vector<int>& send_counts, const std::vector<int>& recv_counts) {
  const size_t procs = send_counts.size();
  std::vector<int> sdispl(procs, 0), rdispl(procs, 0);
  for (size_t k = 1; k < procs; ++k) {
    sdispl[k] = sdispl[k - 1] + send_counts[k - 1];
    rdispl[k] = rdispl[k - 1] + recv_counts[k - 1];
  }
  std::vector<char> sendbuf(static_cast<size_t>(sdispl.back() + send_counts.back()) + 1, 1);
  std::vector<char> recvbuf(static_cast<size_t>(rdispl.back() + recv_counts.back()) + 1, 2);
  return time_runs(5, [&] {
    MPI_Alltoallv(sendbuf.data(), send_counts.data(), sdispl.data(), MPI_BYTE, recvbuf.data(),
                  recv_counts.data(), rdispl.data(), MPI_BYTE, MPI_COMM_WORLD);
  });
}

void run_case(const std::shared_ptr<Runtime>& rt, const char* name, Shape shape, const std::string& mesh_text,
              const char* from, const char* to) {
  const int me = rt->process_id(), procs = rt->num_processes();
  DeviceMesh mesh = DeviceMesh::from_string(mesh_text);
  HostTensor x = HostTensor::random(DType::kF32, shape, 7);
  Array a = distribute_tensor(x, TensorLayout::from_string(from).with_device_mesh(mesh), {.runtime = rt});
  TensorLayout target = TensorLayout::from_string(to).with_device_mesh(mesh);
  ReshardPlan plan = plan_distribute(a, target);
  { Array warm = distribute_tensor(a, target); }
  for (VirtualDevice* d : rt->local_devices()) d->memory().reset_peak();
  const Timing ours = time_runs(5, [&] { Array b = distribute_tensor(a, target); });
  double peak = 0;
  for (VirtualDevice* d : rt->local_devices()) peak = std::max(peak, static_cast<double>(d->memory().stats().peak_bytes));
  MPI_Allreduce(MPI_IN_PLACE, &peak, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);

  std::vector<int> send_counts(static_cast<size_t>(procs), 0), recv_counts(send_counts);
  int local = 0;
  for (const Transfer& t : plan.transfers) {
    if (t.src_process == t.dst_process) {
      if (t.src_process == me) local += static_cast<int>(t.bytes);
      continue;
    }
    if (t.src_process == me) send_counts[static_cast<size_t>(t.dst_process)] += static_cast<int>(t.bytes);
    if (t.dst_process == me) recv_counts[static_cast<size_t>(t.src_process)] += static_cast<int>(t.bytes);
  }
  const Timing raw = raw_alltoallv(send_counts, recv_counts);
  send_counts[static_cast<size_t>(me)] = recv_counts[static_cast<size_t>(me)] = local;
  const Timing raw_all = raw_alltoallv(send_counts, recv_counts);
  if (me == 0) {
    std::printf("%-26s %9.1f %12.1f %8.2f %8.2f %8.2f %8.2f %8.2f %6.2f %6.2f %9.2f %8.1f\n", name,
                static_cast<double>(plan.bytes_moved) / (1 << 20),
                static_cast<double>(plan.bytes_between_processes) / (1 << 20), ours.best * 1e3,
                ours.median * 1e3, raw.best * 1e3, raw.median * 1e3, raw_all.best * 1e3,
                raw.best / ours.best, raw.median / ours.median, raw_all.best / ours.best,
                peak / (1 << 20));
  }
}

}  // namespace

int main(int argc, char** argv) {
  auto rt = initialize(&argc, &argv);
  if (rt->process_id() == 0) {
    std::printf("%d processes x %lld local devices; f32 tensors\n", rt->num_processes(),
                static_cast<long long>(rt->local_device_count()));
    std::printf("%-26s %9s %12s %8s %8s %8s %8s %8s %6s %6s %9s %8s\n", "case", "moved_MiB",
                "between_MiB", "ours_ms", "ours_med", "raw_ms", "raw_med", "raw_all", "ratio",
                "r_med", "ratio_all", "peak_MiB");
  }
  // Every global device (np 2 or 4 processes x MESHLAYOUT_LOCAL_DEVICES).
  const int64_t n = rt->global_device_count();
  const std::string line = "mesh[x=" + std::to_string(n) + "]";
  const std::string grid = "mesh[data=2,model=" + std::to_string(n / 2) + "]";
  run_case(rt, "replicated->sharded 64M", {4096, 4096}, grid, "None,None", "data,model");
  run_case(rt, "sharded->replicated 64M", {4096, 4096}, line, "x,None", "None,None");
  run_case(rt, "rows->columns 64M", {4096, 4096}, line, "x,None", "None,x");
  run_case(rt, "rows->columns 256M", {8192, 8192}, line, "x,None", "None,x");
  run_case(rt, "2-D mesh transpose 64M", {4096, 4096}, grid, "data,model", "model,data");
  run_case(rt, "uneven rows->columns 64M", {4099, 4097}, line, "x,None", "None,x");
  finalize_mpi();
  return 0;
}
