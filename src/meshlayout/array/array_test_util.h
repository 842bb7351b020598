// array_test_util.h — random meshes, shapes, layouts and dtypes for the array property tests,
// and run_as_processes (threads as the processes of one group). Test-only. The seed comes from
// MESHLAYOUT_TEST_SEED when set, and is printed.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <thread>

#include "meshlayout/array/array.h"
#include "meshlayout/core/dtype.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/layout/box_ops.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/layout/tensor_layout.h"
#include "meshlayout/runtime/device_memory.h"
#include "meshlayout/testing/test_util.h"

namespace meshlayout::testing {

/// A mesh of exactly `devices` devices (cpu:0 …, or gpu:0 … for kCuda, in a random order when
/// `permute`).
inline DeviceMesh random_mesh(Random& r, int64_t devices, bool permute,
                              DeviceKind kind = DeviceKind::kCpu) {
  std::vector<int64_t> shape;
  int64_t left = devices;
  const int max_rank = 1 + static_cast<int>(r.uniform(3));
  for (int a = 0; a < max_rank - 1 && left > 1; ++a) {
    std::vector<int64_t> divisors;
    for (int64_t d = 1; d <= left; ++d) {
      if (left % d == 0) divisors.push_back(d);
    }
    int64_t s = r.pick(divisors);
    shape.push_back(s);
    left /= s;
  }
  shape.push_back(left);
  std::vector<std::string> names;
  for (size_t a = 0; a < shape.size(); ++a)
    names.push_back(std::string(1, static_cast<char>('a' + a)));
  std::vector<std::string> ids;
  for (int64_t i = 0; i < devices; ++i) ids.push_back(device_name(i, kind));
  if (permute) {
    for (size_t i = ids.size(); i > 1; --i)
      std::swap(ids[i - 1], ids[static_cast<size_t>(r.uniform(static_cast<int64_t>(i)))]);
  }
  return DeviceMesh(shape, names, ids);
}

inline Shape random_shape(Random& r) {
  static const std::vector<int64_t> extents{0, 1, 2, 3, 5, 7, 8, 13};
  Shape s;
  const int rank = static_cast<int>(r.uniform(4));
  for (int d = 0; d < rank; ++d) s.push_back(r.uniform(10) == 0 ? 0 : r.pick(extents));
  return s;
}

/// Each mesh axis goes to a random dimension or stays unused; order within a dim is random.
inline TensorLayout random_layout(Random& r, const DeviceMesh& mesh, size_t rank) {
  std::vector<std::vector<std::string>> dims(rank);
  std::vector<std::string> axes = mesh.axis_names();
  for (size_t i = axes.size(); i > 1; --i)
    std::swap(axes[i - 1], axes[static_cast<size_t>(r.uniform(static_cast<int64_t>(i)))]);
  for (const std::string& a : axes) {
    int64_t choice = r.uniform(static_cast<int64_t>(rank) + 1);
    if (choice < static_cast<int64_t>(rank)) dims[static_cast<size_t>(choice)].push_back(a);
  }
  std::vector<DimSharding> ds;
  for (auto& d : dims) ds.emplace_back(std::move(d));
  return TensorLayout(std::move(ds), mesh);
}

inline DType random_dtype(Random& r) {
  static const std::vector<DType> all{DType::kF32, DType::kF64, DType::kBF16, DType::kF16,
                                      DType::kI8,  DType::kI16, DType::kI32,  DType::kI64,
                                      DType::kU8,  DType::kBool};
  return r.pick(all);
}

// Every local shard holds exactly its box of `x` (read through its device's memory, so GPU
// shards are compared too).
inline void expect_shards_match(const Array& a, const HostTensor& x) {
  const Box whole{Shape(x.shape().size(), 0), x.shape()};
  for (const Array::Shard& s : a.local_shards()) {
    std::vector<std::byte> want(s.buffer.size());
    copy_box(x.data(), whole, want.data(), s.box, s.box, dtype_size(x.dtype()));
    std::vector<std::byte> have(s.buffer.size());
    a.runtime()
        .device(s.device_id)
        .memory()
        .device_memory()
        .copy_to_host(have.data(), s.buffer.data(), have.size());
    if (want != have) {
      throw InternalError(fmt::format("shard at position {} (box {}) differs from the tensor",
                                      s.position, s.box.to_string()));
    }
  }
}

struct Case {
  DeviceMesh mesh;
  DeviceMesh other_mesh;  // same devices, another shape and order
  Shape shape;
  DType dtype;
  TensorLayout a, b;
  std::string describe() const {
    return fmt::format("shape {} dtype {} A {} B {}", shape_to_string(shape), dtype_name(dtype),
                       a.to_string(), b.to_string());
  }
};

inline Case random_case(Random& r, int64_t devices, DeviceKind kind = DeviceKind::kCpu) {
  DeviceMesh mesh = testing::random_mesh(r, devices, r.uniform(2) == 0, kind);
  DeviceMesh other = testing::random_mesh(r, devices, true, kind);
  Shape shape = testing::random_shape(r);
  DType dtype = testing::random_dtype(r);
  TensorLayout a = testing::random_layout(r, mesh, shape.size());
  TensorLayout b = testing::random_layout(r, r.uniform(3) == 0 ? other : mesh, shape.size());
  return Case{mesh, other, shape, dtype, a, b};
}

/// The property suite shared by the in-process, thread-rank and mpirun tests: random cases
/// (the same in every process for the same seed) checked for gather∘distribute = id,
/// A→B→A = id, bytes moved = minimum, and nothing staged (NOTE [Reshard memory]). Throws
/// InternalError describing the first failing case.
inline void check_random_reshards(const std::shared_ptr<Runtime>& rt, uint64_t seed, int cases) {
  Random r(seed);
  for (int i = 0; i < cases; ++i) {
    Case c = random_case(r, rt->global_device_count(), rt->device_kind());
    const std::string where = fmt::format("seed {} case {}: {}", seed, i, c.describe());
    HostTensor x = HostTensor::random(c.dtype, c.shape, seed + static_cast<uint64_t>(i));
    Array a = distribute_tensor(x, c.a, {.runtime = rt});
    expect_shards_match(a, x);
    if (!(a.gather() == x)) throw InternalError("gather(distribute(x)) != x; " + where);
    ReshardPlan plan;
    rt->staging().reset_peak();
    std::vector<int64_t> live_before;
    for (VirtualDevice* d : rt->local_devices()) {
      live_before.push_back(d->memory().stats().bytes_live);
      d->memory().reset_peak();
    }
    Array b = distribute_tensor(a, c.b, {.plan_out = &plan});
    // NOTE [Reshard memory]: a device holds its source shard and target shard, nothing else.
    for (size_t i = 0; i < live_before.size(); ++i) {
      VirtualDevice* d = rt->local_devices()[i];
      int64_t target = 0;
      for (const Array::Shard& s : b.local_shards()) {
        if (s.device_id == d->id()) target += static_cast<int64_t>(s.buffer.size());
      }
      if (d->memory().stats().peak_bytes > live_before[i] + target) {
        throw InternalError(fmt::format("{} peaked at {} bytes, above source + target {}; {}",
                                        d->name(), d->memory().stats().peak_bytes,
                                        live_before[i] + target, where));
      }
    }
    if (plan.bytes_moved != plan.minimum_bytes) throw InternalError("moved != minimum; " + where);
    if (rt->staging().stats().peak_bytes != 0) throw InternalError("bytes were staged; " + where);
    expect_shards_match(b, x);
    Array back = distribute_tensor(b, c.a);
    if (!(back.gather() == x)) throw InternalError("A->B->A is not the identity; " + where);
  }
}
// Runs `body(rank runtime)` on `procs` threads, each a process of one in-process group with
// `local_devices` devices and a pool of `pool_threads` threads; returns each process's failure
// message ("" for none).
inline std::vector<std::string> run_processes(
    int procs, int64_t local_devices, size_t pool_threads,
    const std::function<void(std::shared_ptr<Runtime>)>& body) {
  std::vector<std::unique_ptr<Communicator>> comms = make_in_process_group(procs);
  std::vector<std::thread> threads;
  std::vector<std::string> failures(static_cast<size_t>(procs));
  for (int p = 0; p < procs; ++p) {
    auto rt = std::make_shared<Runtime>(
        std::shared_ptr<Communicator>(std::move(comms[static_cast<size_t>(p)])), local_devices,
        std::make_shared<ThreadPool>(pool_threads));
    threads.emplace_back([rt, &body, &failures, p] {
      try {
        body(rt);
      } catch (const std::exception& e) {
        failures[static_cast<size_t>(p)] = e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return failures;
}

// The same, expecting every process to succeed (pool of `pool_threads`, default 1).
inline void run_as_processes(int procs, int64_t local_devices,
                             const std::function<void(std::shared_ptr<Runtime>)>& body,
                             size_t pool_threads = 1) {
  const std::vector<std::string> failures = run_processes(procs, local_devices, pool_threads, body);
  for (int p = 0; p < procs; ++p) {
    EXPECT_EQ(failures[static_cast<size_t>(p)], "") << "process " << p;
  }
}

}  // namespace meshlayout::testing
