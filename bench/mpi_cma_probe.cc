// Probe (issue 15): would a single-copy two-phase load through Linux cross-memory attach
// (process_vm_writev / process_vm_readv, as Open MPI's vader BTL uses) load column- and
// 2-D-sharded checkpoints faster than copying each process's boxes out of a mapping of the
// file (today's MapMode path, mapped_read.h)? Standalone: plain MPI and system calls, no
// meshlayout code, so that the schemes are compared before any is built into load_arrays.
//
//   mpirun --allow-run-as-root --oversubscribe -np 4 build/bench/mpi_cma_probe [LOCAL_DEVICES]
//   [REPS] (default 2 local devices a process; -np 2 with 4 is the other configuration measured.)
//
// The file: 4 f32 tensors of 8192 x 4096 (512 MiB, no header), written by process 0, warm in
// the page cache. Devices are numbered process-major (process p holds p*L .. p*L+L-1), as the
// runtime does; "columns" splits dim 1 over all of them, "2-D" splits dim 0 in 2 and dim 1 over
// the rest (mpi_checkpoint_bench's [data, model] grid), "replicated" gives every device the
// whole tensor (raw then reads one copy a process; cmaw reads the file once over all processes
// and writes each slab to every device of every process). PROBE_LAYOUT=columns|2-D|replicated
// runs one layout. Destination buffers are 2 MiB aligned
// with MADV_HUGEPAGE, as VirtualDevice allocates shards (runtime/device.cc). Methods, each
// timed as the slowest process (wall) and as the CPU time summed over processes:
//   raw   each process preads a contiguous slice of its shard bytes (16 MiB requests)
//   map   each process copies its devices' runs (one per row) out of a mapping of the file
//   cmaw  each process maps a contiguous slab (1/P of the rows of each tensor) and writes every
//         piece straight into its owner's buffer: process_vm_writev, local iovecs one run per
//         row (<= 1024 a call), one remote iovec (the rows are contiguous in the shard); pieces
//         of its own devices by memcpy; buffer addresses allgathered per load, then a barrier
//   cmar  the same slabs, pulled by the receivers with process_vm_readv (remote iovecs a run)
// Every method's result is compared with map's (a mismatch is printed and fails the run).
// Then the same question for a reshard (reshard_probe, mpi_cma_reshard_probe.cc: rows->columns
// of 64 MiB, CMA writes against MPI datatypes and a raw MPI_Alltoallv).
// It reports first whether CMA is permitted between the ranks and whether all share a host.
#include <fcntl.h>
#include <mpi.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench_util.h"
#include "mpi_cma_probe.h"

namespace {

using bench::best;
using bench::median;
using cma_probe::reshard_probe;
using cma_probe::Sample;
using cma_probe::time_once;

constexpr int64_t kTensors = 4, kRows = 8192, kCols = 4096, kRowBytes = kCols * 4;
constexpr int64_t kTensorBytes = kRows * kRowBytes;

// Where device d's box lies: rows [row0, row0 + rows), bytes [col0, col0 + col_bytes) of a row.
struct Box {
  int64_t row0, rows, col0, col_bytes;
};

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int me = 0, procs = 0, host_procs = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &procs);
  MPI_Comm host;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &host);
  MPI_Comm_size(host, &host_procs);
  const int64_t local = argc > 1 ? std::max(1, std::atoi(argv[1])) : 2;
  const int reps = argc > 2 ? std::max(1, std::atoi(argv[2])) : 7;
  const int64_t devices = local * procs;
  const std::string path = "/tmp/meshlayout_cma_probe_" + std::to_string(procs) + ".bin";
  if (me == 0) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    std::vector<uint32_t> chunk(size_t{1} << 22);
    for (int64_t i = 0; i < kTensors * kTensorBytes / static_cast<int64_t>(chunk.size() * 4); ++i) {
      for (size_t j = 0; j < chunk.size(); ++j)
        chunk[j] = static_cast<uint32_t>(i * 2654435761u + j * 40503u);
      if (::write(fd, chunk.data(), chunk.size() * 4) != static_cast<ssize_t>(chunk.size() * 4))
        std::abort();
    }
    ::close(fd);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  std::vector<pid_t> pids(static_cast<size_t>(procs));
  const pid_t pid = ::getpid();
  MPI_Allgather(&pid, sizeof pid, MPI_BYTE, pids.data(), sizeof pid, MPI_BYTE, MPI_COMM_WORLD);

  // (a) Is CMA permitted here, and do all ranks share this host?
  {
    uint64_t probe = 0x1234, got = 0;
    const uint64_t addr = reinterpret_cast<uint64_t>(&probe);
    std::vector<uint64_t> addrs(static_cast<size_t>(procs));
    MPI_Allgather(&addr, 8, MPI_BYTE, addrs.data(), 8, MPI_BYTE, MPI_COMM_WORLD);
    const int peer = (me + 1) % procs;
    iovec lo{&got, 8}, re{reinterpret_cast<void*>(addrs[static_cast<size_t>(peer)]), 8};
    const ssize_t n = process_vm_readv(pids[static_cast<size_t>(peer)], &lo, 1, &re, 1, 0);
    int ok = n == 8 && got == 0x1234;
    const int err = n < 0 ? errno : 0;
    MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    if (me == 0) {
      std::printf(
          "%d processes x %lld devices; all on one host: %s; process_vm_readv between ranks: "
          "%s%s\n",
          procs, static_cast<long long>(local), host_procs == procs ? "yes" : "no",
          ok ? "works" : "FAILS ", ok ? "" : std::strerror(err));
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (!ok || host_procs != procs) {
      MPI_Finalize();
      return 1;
    }
  }

  int mismatches = 0;
  const char* only = std::getenv("PROBE_LAYOUT");
  for (const char* layout : {"columns", "2-D", "replicated"}) {
    if (only != nullptr && std::string(only) != layout) continue;
    const bool grid = std::string(layout) == "2-D";
    const bool replicated = std::string(layout) == "replicated";
    const int64_t row_parts = grid ? 2 : 1, col_parts = replicated ? 1 : devices / row_parts;
    auto box_of = [&](int64_t d) {
      if (replicated) return Box{0, kRows, 0, kRowBytes};
      const int64_t rows = kRows / row_parts, cb = kRowBytes / col_parts;
      return Box{(d / col_parts) * rows, rows, (d % col_parts) * cb, cb};
    };
    // buffers[l][t]: local device l's shard of tensor t (rows x col_bytes, row-major).
    const Box mine0 = box_of(me * local);
    const int64_t shard_bytes = mine0.rows * mine0.col_bytes;
    std::vector<std::vector<std::byte*>> buffers(static_cast<size_t>(local));
    for (auto& per_tensor : buffers) {
      for (int64_t t = 0; t < kTensors; ++t) {
        auto* p = static_cast<std::byte*>(
            std::aligned_alloc(size_t{2} << 20, static_cast<size_t>(shard_bytes)));
        ::madvise(p, static_cast<size_t>(shard_bytes), MADV_HUGEPAGE);
        std::memset(p, 1, static_cast<size_t>(shard_bytes));
        per_tensor.push_back(p);
      }
    }
    const int64_t process_bytes = shard_bytes * kTensors * (replicated ? 1 : local);
    std::vector<std::byte> raw_buffer(static_cast<size_t>(process_bytes), std::byte{1});
    const int64_t slab_rows = kRows / procs;

    auto raw = [&] {
      const int64_t offset = (process_bytes * me) % (kTensors * kTensorBytes);
      for (int64_t done = 0; done < process_bytes;) {
        const ssize_t n = ::pread(
            fd, raw_buffer.data() + done,
            static_cast<size_t>(std::min<int64_t>(16 << 20, process_bytes - done)), offset + done);
        if (n <= 0) std::abort();
        done += n;
      }
    };
    auto map = [&] {
      const size_t length = static_cast<size_t>(kTensors * kTensorBytes);
      auto* file =
          static_cast<const std::byte*>(::mmap(nullptr, length, PROT_READ, MAP_SHARED, fd, 0));
      for (int64_t t = 0; t < kTensors; ++t) {
        for (int64_t l = 0; l < local; ++l) {
          const Box b = box_of(me * local + l);
          for (int64_t r = 0; r < b.rows; ++r) {
            std::memcpy(buffers[l][t] + r * b.col_bytes,
                        file + t * kTensorBytes + (b.row0 + r) * kRowBytes + b.col0, b.col_bytes);
          }
        }
      }
      ::munmap(const_cast<std::byte*>(file), length);
    };
    // Every process's buffer addresses, [process][local device][tensor], gathered per load.
    std::vector<uint64_t> remote(static_cast<size_t>(procs * local * kTensors));
    auto gather_addresses = [&] {
      std::vector<uint64_t> own;
      for (auto& per_tensor : buffers)
        for (std::byte* p : per_tensor) own.push_back(reinterpret_cast<uint64_t>(p));
      MPI_Allgather(own.data(), static_cast<int>(own.size() * 8), MPI_BYTE, remote.data(),
                    static_cast<int>(own.size() * 8), MPI_BYTE, MPI_COMM_WORLD);
    };
    auto cma_write = [&] {
      gather_addresses();
      std::vector<iovec> runs(1024);
      for (int64_t t = 0; t < kTensors; ++t) {
        const int64_t slab0 = me * slab_rows;
        const size_t length = static_cast<size_t>(slab_rows * kRowBytes);
        auto* slab = static_cast<std::byte*>(::mmap(nullptr, length, PROT_READ, MAP_SHARED, fd,
                                                    t * kTensorBytes + slab0 * kRowBytes));
        for (int64_t k = 0; k < devices; ++k) {
          const int64_t d = (me * local + k) % devices, owner = d / local, l = d % local;
          const Box b = box_of(d);
          const int64_t r_begin = std::max(slab0, b.row0),
                        r_end = std::min(slab0 + slab_rows, b.row0 + b.rows);
          for (int64_t r0 = r_begin; r0 < r_end; r0 += 1024) {
            const int64_t n = std::min<int64_t>(1024, r_end - r0);
            if (owner == me) {
              for (int64_t i = 0; i < n; ++i) {
                std::memcpy(buffers[l][t] + (r0 + i - b.row0) * b.col_bytes,
                            slab + (r0 + i - slab0) * kRowBytes + b.col0, b.col_bytes);
              }
              continue;
            }
            for (int64_t i = 0; i < n; ++i)
              runs[i] = {slab + (r0 + i - slab0) * kRowBytes + b.col0,
                         static_cast<size_t>(b.col_bytes)};
            const uint64_t base = remote[static_cast<size_t>((owner * local + l) * kTensors + t)];
            iovec dst{reinterpret_cast<void*>(base + (r0 - b.row0) * b.col_bytes),
                      static_cast<size_t>(n * b.col_bytes)};
            if (process_vm_writev(pids[owner], runs.data(), n, &dst, 1, 0) != n * b.col_bytes)
              std::abort();
          }
        }
        ::munmap(slab, length);
      }
      MPI_Barrier(MPI_COMM_WORLD);
    };
    auto cma_read = [&] {
      std::vector<std::byte*> slabs;
      std::vector<uint64_t> own, all(static_cast<size_t>(procs * kTensors));
      const size_t length = static_cast<size_t>(slab_rows * kRowBytes);
      for (int64_t t = 0; t < kTensors; ++t) {
        slabs.push_back(
            static_cast<std::byte*>(::mmap(nullptr, length, PROT_READ, MAP_SHARED, fd,
                                           t * kTensorBytes + me * slab_rows * kRowBytes)));
        own.push_back(reinterpret_cast<uint64_t>(slabs.back()));
      }
      MPI_Allgather(own.data(), static_cast<int>(kTensors * 8), MPI_BYTE, all.data(),
                    static_cast<int>(kTensors * 8), MPI_BYTE, MPI_COMM_WORLD);
      std::vector<iovec> runs(1024);
      for (int64_t t = 0; t < kTensors; ++t) {
        for (int64_t k = 0; k < procs; ++k) {
          const int64_t source = (me + k) % procs, slab0 = source * slab_rows;
          for (int64_t l = 0; l < local; ++l) {
            const Box b = box_of(me * local + l);
            const int64_t r_begin = std::max(slab0, b.row0),
                          r_end = std::min(slab0 + slab_rows, b.row0 + b.rows);
            for (int64_t r0 = r_begin; r0 < r_end; r0 += 1024) {
              const int64_t n = std::min<int64_t>(1024, r_end - r0);
              std::byte* dst = buffers[l][t] + (r0 - b.row0) * b.col_bytes;
              const uint64_t base = all[static_cast<size_t>(source * kTensors + t)];
              for (int64_t i = 0; i < n; ++i) {
                runs[i] = {reinterpret_cast<void*>(base + (r0 + i - slab0) * kRowBytes + b.col0),
                           static_cast<size_t>(b.col_bytes)};
              }
              iovec into{dst, static_cast<size_t>(n * b.col_bytes)};
              if (source == me) {
                for (int64_t i = 0; i < n; ++i)
                  std::memcpy(dst + i * b.col_bytes, runs[i].iov_base, b.col_bytes);
              } else if (process_vm_readv(pids[source], &into, 1, runs.data(), n, 0) !=
                         n * b.col_bytes) {
                std::abort();
              }
            }
          }
        }
      }
      MPI_Barrier(MPI_COMM_WORLD);
      for (std::byte* s : slabs) ::munmap(s, length);
    };

    struct Method {
      const char* name;
      std::function<void()> load;
      std::vector<double> wall, cpu;
    };
    std::vector<Method> methods = {
        {"map", map, {}, {}}, {"cmaw", cma_write, {}, {}}, {"cmar", cma_read, {}, {}}};
    map();
    std::vector<std::vector<std::byte>> expected;
    for (auto& per_tensor : buffers)
      for (std::byte* p : per_tensor) expected.emplace_back(p, p + shard_bytes);
    for (Method& m : methods) {
      for (auto& per_tensor : buffers)
        for (std::byte* p : per_tensor) std::memset(p, 0, static_cast<size_t>(shard_bytes));
      m.load();
      size_t i = 0;
      for (auto& per_tensor : buffers) {
        for (std::byte* p : per_tensor) {
          if (std::memcmp(p, expected[i++].data(), static_cast<size_t>(shard_bytes)) != 0) {
            std::printf("process %d: %s %s differs from map\n", me, layout, m.name);
            ++mismatches;
          }
        }
      }
    }
    std::vector<double> raw_wall, raw_cpu;
    for (int r = 0; r < reps; ++r) {
      const Sample s = time_once(raw);
      raw_wall.push_back(s.wall);
      raw_cpu.push_back(s.cpu);
      for (Method& m : methods) {
        const Sample ms = time_once(m.load);
        m.wall.push_back(ms.wall);
        m.cpu.push_back(ms.cpu);
      }
    }
    if (me == 0) {
      std::printf("%s: %lld MiB a process; raw best %.1f ms, median %.1f ms, CPU median %.1f ms\n",
                  layout, static_cast<long long>(process_bytes >> 20), best(raw_wall) * 1e3,
                  median(raw_wall) * 1e3, median(raw_cpu) * 1e3);
      for (const Method& m : methods) {
        std::printf(
            "  %-5s best %6.1f ms median %6.1f ms  ratio best %.2f median %.2f  CPU median %6.1f "
            "ms (%.2fx raw)\n",
            m.name, best(m.wall) * 1e3, median(m.wall) * 1e3, best(raw_wall) / best(m.wall),
            median(raw_wall) / median(m.wall), median(m.cpu) * 1e3,
            median(m.cpu) / median(raw_cpu));
      }
    }
    for (auto& per_tensor : buffers)
      for (std::byte* p : per_tensor) std::free(p);
  }
  ::close(fd);
  mismatches += reshard_probe(me, procs, local, reps, pids);
  MPI_Allreduce(MPI_IN_PLACE, &mismatches, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (me == 0) ::unlink(path.c_str());
  MPI_Finalize();
  return mismatches == 0 ? 0 : 1;
}
