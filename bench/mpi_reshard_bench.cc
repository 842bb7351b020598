// Reshard under MPI against a raw MPI_Alltoallv of the same byte matrix, in the same run.
//
//   mpirun --allow-run-as-root --oversubscribe -np 4 build/bench/mpi_reshard_bench
//
// For each case the reshard's plan gives the bytes each process sends to each other process;
// the baseline exchanges exactly that matrix with one MPI_Alltoallv between pre-touched
// contiguous buffers (no packing, no local copies). ratio = baseline time / reshard time
// (1.0 = as fast as the raw exchange; the reshard also packs, unpacks and does the copies
// inside each process). Best of 5 runs each. Process 0 prints.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>

#include "meshlayout/array/array.h"
#include "meshlayout/runtime/mpi/initialize.h"

using namespace meshlayout;

namespace {

double time_best(int reps, const std::function<void()>& fn) {
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    fn();
    MPI_Barrier(MPI_COMM_WORLD);
    best = std::min(best, MPI_Wtime() - t0);
  }
  return best;
}

void run_case(const std::shared_ptr<Runtime>& rt, const char* name, Shape shape, const char* mesh_text,
              const char* from, const char* to) {
  const int me = rt->process_id(), procs = rt->num_processes();
  DeviceMesh mesh = DeviceMesh::from_string(mesh_text);
  HostTensor x = HostTensor::random(DType::kF32, shape, 7);
  Array a = distribute_tensor(x, TensorLayout::from_string(from).with_device_mesh(mesh), {.runtime = rt});
  TensorLayout target = TensorLayout::from_string(to).with_device_mesh(mesh);
  ReshardPlan plan = plan_distribute(a, target);
  { Array warm = distribute_tensor(a, target); }
  const double ours = time_best(5, [&] { Array b = distribute_tensor(a, target); });

  std::vector<int> send_counts(static_cast<size_t>(procs), 0), recv_counts(send_counts);
  for (const Transfer& t : plan.transfers) {
    if (t.src_process == t.dst_process) continue;
    if (t.src_process == me) send_counts[static_cast<size_t>(t.dst_process)] += static_cast<int>(t.bytes);
    if (t.dst_process == me) recv_counts[static_cast<size_t>(t.src_process)] += static_cast<int>(t.bytes);
  }
  std::vector<int> sdispl(static_cast<size_t>(procs), 0), rdispl(sdispl);
  for (int k = 1; k < procs; ++k) {
    sdispl[static_cast<size_t>(k)] = sdispl[static_cast<size_t>(k - 1)] + send_counts[static_cast<size_t>(k - 1)];
    rdispl[static_cast<size_t>(k)] = rdispl[static_cast<size_t>(k - 1)] + recv_counts[static_cast<size_t>(k - 1)];
  }
  std::vector<char> sendbuf(static_cast<size_t>(sdispl.back() + send_counts.back()) + 1, 1);
  std::vector<char> recvbuf(static_cast<size_t>(rdispl.back() + recv_counts.back()) + 1, 2);
  const double raw = time_best(5, [&] {
    MPI_Alltoallv(sendbuf.data(), send_counts.data(), sdispl.data(), MPI_BYTE, recvbuf.data(),
                  recv_counts.data(), rdispl.data(), MPI_BYTE, MPI_COMM_WORLD);
  });
  if (me == 0) {
    std::printf("%-26s %9.1f %12.1f %10.2f %10.2f %8.2f\n", name,
                static_cast<double>(plan.bytes_moved) / (1 << 20),
                static_cast<double>(plan.bytes_between_processes) / (1 << 20), ours * 1e3, raw * 1e3,
                ours > 0 ? raw / ours : 0.0);
  }
}

}  // namespace

int main(int argc, char** argv) {
  auto rt = initialize(&argc, &argv);
  if (rt->process_id() == 0) {
    std::printf("%d processes x %lld local devices; f32 tensors\n", rt->num_processes(),
                static_cast<long long>(rt->local_device_count()));
    std::printf("%-26s %9s %12s %10s %10s %8s\n", "case", "moved_MiB", "between_MiB", "ours_ms",
                "raw_ms", "ratio");
  }
  run_case(rt, "replicated->sharded 64M", {4096, 4096}, "mesh[data=2,model=4]", "None,None", "data,model");
  run_case(rt, "sharded->replicated 64M", {4096, 4096}, "mesh[x=8]", "x,None", "None,None");
  run_case(rt, "rows->columns 64M", {4096, 4096}, "mesh[x=8]", "x,None", "None,x");
  run_case(rt, "rows->columns 256M", {8192, 8192}, "mesh[x=8]", "x,None", "None,x");
  run_case(rt, "2-D mesh transpose 64M", {4096, 4096}, "mesh[data=2,model=4]", "data,model", "model,data");
  run_case(rt, "uneven rows->columns 64M", {4099, 4097}, "mesh[x=8]", "x,None", "None,x");
  finalize_mpi();
  return 0;
}
