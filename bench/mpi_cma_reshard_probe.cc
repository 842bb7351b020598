// mpi_cma_reshard_probe.cc — the reshard half of the cross-memory-attach probe (issue 15): see
// mpi_cma_probe.h and mpi_cma_probe.cc.
#include <mpi.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "bench_util.h"
#include "mpi_cma_probe.h"

namespace cma_probe {

using bench::best;
using bench::median;

// Reshard rows -> columns of a 4096 x 4096 f32 array (64 MiB; mpi_reshard_bench's
// "rows->columns 64M"): device d holds rows block d before and column block d after. Methods:
//   raw    one MPI_Alltoallv of the bytes that cross processes, packed contiguous beforehand
//          (mpi_reshard_bench's baseline)
//   dtype  MPI_Isend/Irecv of each (source, target) device pair's piece described by an MPI
//          subarray datatype, local pairs by memcpy (what exchange_boxes does today)
//   cmaw   each sender process_vm_writev's each piece (one run per row, strided in its row
//          block) into the target's column block (contiguous rows there); addresses
//          allgathered per reshard, then a barrier
// Returns the mismatches (a method's target shards differing from dtype's).
int reshard_probe(int me, int procs, int64_t local, int reps, const std::vector<pid_t>& pids) {
  constexpr int64_t kN = 4096, kRowB = kN * 4;
  const int64_t devices = local * procs, rows = kN / devices, col_bytes = kRowB / devices;
  const int64_t block = rows * kRowB;  // bytes of one device's shard, before and after
  auto shard = [&] {
    auto* p =
        static_cast<std::byte*>(std::aligned_alloc(size_t{2} << 20, static_cast<size_t>(block)));
    ::madvise(p, static_cast<size_t>(block), MADV_HUGEPAGE);
    return p;
  };
  std::vector<std::byte*> source, target;
  for (int64_t l = 0; l < local; ++l) {
    source.push_back(shard());
    target.push_back(shard());
    auto* words = reinterpret_cast<uint32_t*>(source.back());
    for (int64_t i = 0; i < block / 4; ++i) {
      words[i] = static_cast<uint32_t>((me * local + l) * 1000003 + i * 7919);
    }
    std::memset(target.back(), 0, static_cast<size_t>(block));
  }
  // raw: what crosses processes, contiguous.
  const int64_t pair_bytes = rows * col_bytes;  // one (source device, target device) piece
  const int64_t per_peer = pair_bytes * local * local;
  std::vector<std::byte> send(static_cast<size_t>(per_peer * procs), std::byte{1});
  std::vector<std::byte> recv(send.size(), std::byte{1});
  std::vector<int> counts(static_cast<size_t>(procs), static_cast<int>(per_peer));
  std::vector<int> displs(static_cast<size_t>(procs));
  for (int q = 0; q < procs; ++q) displs[static_cast<size_t>(q)] = static_cast<int>(per_peer * q);
  counts[static_cast<size_t>(me)] = 0;
  auto raw = [&] {
    MPI_Alltoallv(send.data(), counts.data(), displs.data(), MPI_BYTE, recv.data(), counts.data(),
                  displs.data(), MPI_BYTE, MPI_COMM_WORLD);
  };
  auto local_copies = [&] {
    for (int64_t s = 0; s < local; ++s) {
      for (int64_t t = 0; t < local; ++t) {
        const int64_t sd = me * local + s, td = me * local + t;
        for (int64_t r = 0; r < rows; ++r) {
          std::memcpy(target[t] + (sd * rows + r) * col_bytes,
                      source[s] + r * kRowB + td * col_bytes, static_cast<size_t>(col_bytes));
        }
      }
    }
  };
  auto dtype = [&] {
    std::vector<MPI_Request> requests;
    std::vector<MPI_Datatype> types;
    MPI_Datatype strided;  // a piece in a row block: rows runs of col_bytes, kRowB apart
    MPI_Type_vector(static_cast<int>(rows), static_cast<int>(col_bytes), static_cast<int>(kRowB),
                    MPI_BYTE, &strided);
    MPI_Type_commit(&strided);
    for (int k = 1; k < procs; ++k) {
      const int from = (me - k + procs) % procs;
      for (int64_t s = 0; s < local; ++s) {
        for (int64_t t = 0; t < local; ++t) {
          const int64_t sd = from * local + s;
          requests.emplace_back();
          MPI_Irecv(target[t] + sd * rows * col_bytes, static_cast<int>(pair_bytes), MPI_BYTE, from,
                    static_cast<int>(s * local + t), MPI_COMM_WORLD, &requests.back());
        }
      }
    }
    for (int k = 1; k < procs; ++k) {
      const int to = (me + k) % procs;
      for (int64_t s = 0; s < local; ++s) {
        for (int64_t t = 0; t < local; ++t) {
          const int64_t td = to * local + t;
          requests.emplace_back();
          MPI_Isend(source[s] + td * col_bytes, 1, strided, to, static_cast<int>(s * local + t),
                    MPI_COMM_WORLD, &requests.back());
        }
      }
    }
    local_copies();
    MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE);
    MPI_Type_free(&strided);
  };
  std::vector<uint64_t> addresses(static_cast<size_t>(devices));
  auto cmaw = [&] {
    std::vector<uint64_t> own;
    for (std::byte* p : target) own.push_back(reinterpret_cast<uint64_t>(p));
    MPI_Allgather(own.data(), static_cast<int>(local * 8), MPI_BYTE, addresses.data(),
                  static_cast<int>(local * 8), MPI_BYTE, MPI_COMM_WORLD);
    std::vector<iovec> runs(static_cast<size_t>(std::min<int64_t>(rows, 1024)));
    for (int k = 1; k < procs; ++k) {
      const int to = (me + k) % procs;
      for (int64_t s = 0; s < local; ++s) {
        for (int64_t t = 0; t < local; ++t) {
          const int64_t sd = me * local + s, td = to * local + t;
          for (int64_t r0 = 0; r0 < rows; r0 += 1024) {
            const int64_t n = std::min<int64_t>(1024, rows - r0);
            for (int64_t i = 0; i < n; ++i) {
              runs[static_cast<size_t>(i)] = {source[s] + (r0 + i) * kRowB + td * col_bytes,
                                              static_cast<size_t>(col_bytes)};
            }
            iovec into{reinterpret_cast<void*>(addresses[static_cast<size_t>(td)] +
                                               static_cast<uint64_t>((sd * rows + r0) * col_bytes)),
                       static_cast<size_t>(n * col_bytes)};
            if (process_vm_writev(pids[static_cast<size_t>(to)], runs.data(),
                                  static_cast<unsigned long>(n), &into, 1, 0) != n * col_bytes) {
              std::abort();
            }
          }
        }
      }
    }
    local_copies();
    MPI_Barrier(MPI_COMM_WORLD);
  };
  dtype();
  std::vector<std::vector<std::byte>> expected;
  for (std::byte* p : target) expected.emplace_back(p, p + block);
  int mismatches = 0;
  for (std::byte* p : target) std::memset(p, 0, static_cast<size_t>(block));
  cmaw();
  for (int64_t t = 0; t < local; ++t) {
    if (std::memcmp(target[t], expected[t].data(), static_cast<size_t>(block)) != 0) {
      std::printf("process %d: reshard cmaw differs from dtype\n", me);
      ++mismatches;
    }
  }
  std::vector<double> raw_wall, dtype_wall, cmaw_wall, raw_cpu, dtype_cpu, cmaw_cpu;
  for (int r = 0; r < reps; ++r) {
    Sample x = time_once(raw);
    raw_wall.push_back(x.wall);
    raw_cpu.push_back(x.cpu);
    x = time_once(dtype);
    dtype_wall.push_back(x.wall);
    dtype_cpu.push_back(x.cpu);
    x = time_once(cmaw);
    cmaw_wall.push_back(x.wall);
    cmaw_cpu.push_back(x.cpu);
  }
  if (me == 0) {
    std::printf(
        "reshard rows->columns 64M: %lld MiB sent a process; raw Alltoallv best %.2f ms, "
        "median %.2f ms, CPU median %.1f ms\n",
        static_cast<long long>((per_peer * (procs - 1)) >> 20), best(raw_wall) * 1e3,
        median(raw_wall) * 1e3, median(raw_cpu) * 1e3);
    const std::pair<const char*, std::pair<std::vector<double>*, std::vector<double>*>> rows_out[] =
        {{"dtype", {&dtype_wall, &dtype_cpu}}, {"cmaw", {&cmaw_wall, &cmaw_cpu}}};
    for (const auto& [name, v] : rows_out) {
      std::printf(
          "  %-5s best %6.2f ms median %6.2f ms  ratio best %.2f median %.2f  CPU median "
          "%6.1f ms (%.2fx raw)\n",
          name, best(*v.first) * 1e3, median(*v.first) * 1e3, best(raw_wall) / best(*v.first),
          median(raw_wall) / median(*v.first), median(*v.second) * 1e3,
          median(*v.second) / median(raw_cpu));
    }
  }
  for (std::byte* p : source) std::free(p);
  for (std::byte* p : target) std::free(p);
  return mismatches;
}

}  // namespace cma_probe
