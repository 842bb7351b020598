#include "meshlayout/array/array.h"

#include <fmt/format.h>

#include <cstring>
#include <new>
#include <optional>
#include <span>
#include <vector>

#include "meshlayout/array/transfer_executor.h"
#include "meshlayout/core/byte_size.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/core/memory_budget.h"
#include "meshlayout/layout/box_ops.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/runtime/device_memory.h"
#include "meshlayout/runtime/operation_agreement.h"

namespace meshlayout {
namespace {

// The given runtime, else the default one of the layout's devices' kind (GPU devices have their
// own runtime: default_runtime(DeviceKind::kCuda)).
std::shared_ptr<Runtime> runtime_or_default(std::shared_ptr<Runtime> rt,
                                            const TensorLayout* layout = nullptr) {
  if (rt) return rt;
  if (layout != nullptr && layout->device_mesh()) {
    return default_runtime(layout->device_mesh()->device_kind());
  }
  return default_runtime();
}

void check_mesh_in_runtime(const DeviceMesh& mesh, const Runtime& rt) {
  if (mesh.device_kind() != rt.device_kind()) {
    throw ValueError(fmt::format(
        "{} is made of {} devices, but the runtime's devices are {} devices: use the runtime of "
        "the mesh's devices (default_runtime(DeviceKind::k{}), or none to pick it)",
        mesh.to_string(), device_kind_name(mesh.device_kind()), device_kind_name(rt.device_kind()),
        mesh.device_kind() == DeviceKind::kCuda ? "Cuda" : "Cpu"));
  }
  for (int64_t id : mesh.device_ids()) {
    if (id >= rt.global_device_count()) {
      throw ValueError(fmt::format(
          "{} uses {}, but the runtime has {} devices ({}:0 … {}:{}); build the mesh from "
          "list_devices()",
          mesh.to_string(), device_name(id, rt.device_kind()), rt.global_device_count(),
          device_kind_name(rt.device_kind()), device_kind_name(rt.device_kind()),
          rt.global_device_count() - 1));
    }
  }
}

Box whole(const Shape& shape) { return Box{Shape(shape.size(), 0), shape}; }

// A layout with its mesh and the mesh's devices, for agree_on_operation.
std::string describe_layout(const TensorLayout& layout) {
  if (!layout.device_mesh()) return layout.to_string();
  const DeviceMesh& mesh = *layout.device_mesh();
  return fmt::format("{} on {} devices [{}]", layout.to_string(), mesh.to_string(),
                     fmt::join(mesh.device_ids(), ","));
}

}  // namespace

Array Array::allocate(const TensorLayout& layout, Shape shape, DType dtype,
                      std::shared_ptr<Runtime> runtime, const GeometryOptions& options) {
  runtime = runtime_or_default(std::move(runtime), &layout);
  if (layout.device_mesh()) check_mesh_in_runtime(*layout.device_mesh(), *runtime);
  Array a(ShardGeometry(layout, std::move(shape), options), dtype, runtime);
  const DeviceMesh& mesh = a.mesh();
  // Check what every local device will hold against the budgets first: nothing is allocated
  // when the array cannot fit.
  struct Planned {
    int64_t position, id;
    Box box;
    int64_t bytes;
  };
  std::vector<Planned> planned;
  int64_t process_bytes = 0;
  for (int64_t p = 0; p < mesh.size(); ++p) {
    const int64_t id = mesh.device_ids()[static_cast<size_t>(p)];
    if (!runtime->is_local(id)) continue;
    Box box = a.geometry_.box(p);
    const int64_t bytes = num_bytes(box.shape, dtype);
    process_bytes += bytes;  // <= the whole array's bytes times the local device count
    planned.push_back({p, id, std::move(box), bytes});
  }
  const auto what = [&] {
    return fmt::format("array {} {} as {}", shape_to_string(a.shape()), dtype_name(dtype),
                       a.layout().to_string());
  };
  if (process_bytes >= kHostCheckMinBytes && runtime->device_kind() == DeviceKind::kCpu) {
    check_host_allocation(fmt::format("{} ({} local device{})", what(), planned.size(),
                                      planned.size() == 1 ? "" : "s"),
                          process_bytes);
  }
  if (device_memory_budget()) {
    for (const Planned& p : planned) {
      MemoryAccount& memory = runtime->device(p.id).memory();
      check_device_allocation(memory.name(), memory.stats().bytes_live, p.bytes, what());
    }
  }
  a.shard_index_.assign(static_cast<size_t>(mesh.size()), -1);
  try {
    for (Planned& p : planned) {
      a.shard_index_[static_cast<size_t>(p.position)] = static_cast<int64_t>(a.shards_.size());
      a.shards_.push_back(
          Shard{p.position, p.id, std::move(p.box),
                DeviceBuffer(runtime->device(p.id).memory(), static_cast<size_t>(p.bytes))});
    }
  } catch (const std::bad_alloc&) {
    throw ResourceExhaustedError(
        fmt::format("{}: the system refused {} for {} local device{} (out of memory)", what(),
                    format_bytes(static_cast<uint64_t>(process_bytes)), planned.size(),
                    planned.size() == 1 ? "" : "s"));
  }
  return a;
}

Array Array::from_shards(ShardGeometry geometry, DType dtype, std::shared_ptr<Runtime> runtime,
                         std::vector<Shard> shards) {
  Array a(std::move(geometry), dtype, runtime_or_default(std::move(runtime)));
  a.shard_index_.assign(static_cast<size_t>(a.mesh().size()), -1);
  for (Shard& s : shards) {
    if (s.position < 0 || s.position >= a.mesh().size() ||
        !(a.geometry_.box(s.position) == s.box) ||
        s.buffer.size() != static_cast<size_t>(num_bytes(s.box.shape, dtype))) {
      throw ValueError(fmt::format(
          "Array::from_shards: the shard at mesh position {} holds {}, "
          "but {} of {} gives it {}",
          s.position, s.box.to_string(), a.layout().to_string(), shape_to_string(a.shape()),
          s.position >= 0 && s.position < a.mesh().size()
              ? a.geometry_.box(s.position).to_string()
              : std::string("no box (not a mesh position)")));
    }
    a.shard_index_[static_cast<size_t>(s.position)] = static_cast<int64_t>(a.shards_.size());
    a.shards_.push_back(std::move(s));
  }
  return a;
}

const Array::Shard* Array::shard_at(int64_t position) const {
  int64_t i = shard_index_[static_cast<size_t>(position)];
  return i < 0 ? nullptr : &shards_[static_cast<size_t>(i)];
}

Array::Shard* Array::shard_at(int64_t position) {
  int64_t i = shard_index_[static_cast<size_t>(position)];
  return i < 0 ? nullptr : &shards_[static_cast<size_t>(i)];
}

int64_t Array::local_bytes() const {
  int64_t total = 0;
  for (const Shard& s : shards_) total += static_cast<int64_t>(s.buffer.size());
  return total;
}

HostTensor Array::gather() const {
  Runtime& rt = *runtime_;
  std::vector<Destination> dsts;
  for (int r = 0; r < rt.num_processes(); ++r) dsts.push_back({r, -1, r, whole(shape())});
  ReshardPlan plan =
      plan_to_destinations(geometry_, dsts, dtype_size(dtype_), rt.local_device_count());
  HostTensor out(dtype_, shape());
  const Box box = whole(shape());
  internal_array::execute_plan(
      plan, *this, [&](int64_t) { return std::make_pair(out.data(), box); }, nullptr,
      /*dst_on_host=*/true);
  return out;
}

Array distribute_tensor(const HostTensor& tensor, const TensorLayout& layout,
                        const DistributeOptions& options) {
  std::shared_ptr<Runtime> runtime = runtime_or_default(options.runtime, &layout);
  if (runtime->num_processes() > 1) {
    agree_on_operation(runtime->comm(), "distribute_tensor",
                       describe_fields({fmt::format("shape={}", shape_to_string(tensor.shape())),
                                        fmt::format("dtype={}", dtype_name(tensor.dtype())),
                                        "layout=" + describe_layout(layout)}));
  }
  const GeometryOptions geometry_options{.strict = options.strict};
  Array a =
      runtime->num_processes() > 1
          ? allocate_agreed(layout, tensor.shape(), tensor.dtype(), runtime, geometry_options)
          : Array::allocate(layout, tensor.shape(), tensor.dtype(), runtime, geometry_options);
  const Box box = whole(tensor.shape());
  const size_t elem = dtype_size(tensor.dtype());
  if (runtime->device_kind() != DeviceKind::kCpu) {
    for (Array::Shard& s : a.local_shards()) {  // one strided host-to-device copy per shard
      copy_box_through(runtime->device(s.device_id).memory().device_memory(),
                       CopyDirection::kHostToDevice, s.buffer.data(), s.box, tensor.data(), box,
                       s.box, elem);
    }
    return a;
  }
  a.runtime().pool().parallel_for(a.local_shards().size(), [&](size_t i) {
    Array::Shard& s = a.local_shards()[i];
    copy_box(tensor.data(), box, s.buffer.data(), s.box, s.box, elem);
  });
  return a;
}

ReshardPlan plan_distribute(const Array& array, const TensorLayout& layout, bool strict) {
  TensorLayout target = layout;
  if (!target.device_mesh()) target.set_device_mesh(array.mesh());
  ShardGeometry dst(target, array.shape(), GeometryOptions{.strict = strict});
  return plan_reshard(array.geometry(), dst, dtype_size(array.dtype()),
                      array.runtime().local_device_count());
}

namespace {
void run_reshard(ReshardPlan plan, const Array& src, const TensorLayout& to, Array* dst,
                 bool fresh_dst, const ReshardOptions& options, std::exception_ptr failure);
}  // namespace

void reshard_into(const Array& src, Array& dst, const ReshardOptions& options) {
  if (src.dtype() != dst.dtype()) {
    throw ValueError(fmt::format(
        "cannot reshard a {} tensor of shape {} into a {} array: the dtypes differ (convert "
        "explicitly first)",
        dtype_name(src.dtype()), shape_to_string(src.shape()), dtype_name(dst.dtype())));
  }
  if (src.shape() != dst.shape()) {
    throw ValueError(fmt::format("cannot reshard a tensor of shape {} into an array of shape {}",
                                 shape_to_string(src.shape()), shape_to_string(dst.shape())));
  }
  if (&src.runtime() != &dst.runtime()) {
    throw ValueError("cannot reshard between arrays of different runtimes");
  }
  run_reshard(plan_reshard(src.geometry(), dst.geometry(), dtype_size(src.dtype()),
                           src.runtime().local_device_count()),
              src, dst.layout(), &dst, /*fresh_dst=*/false, options, nullptr);
}

namespace {

// Moves the data of a checked plan from `src` into `dst`; every process calls it. `failure`
// is this process's error so far (allocating `dst`, which is then null), agreed on here.
// `fresh_dst`: `dst` was allocated for this reshard and is dropped if it fails.
//
// NOTE [One agreement per reshard]: the allocation's failure, the injected failure and the
// operation check (a rank given another target would post other sends and receives and wait
// forever) are agreed on at once (agree_on_operation with an error), not in three collectives.
// Into a fresh destination under several processes the agreement even travels with the data:
// every process sends its OperationRecord to every other (exchange_boxes_if_agreed) and a
// pair's pieces move as soon as both records are in and equal, while the copies inside each
// process run; then every process settles the same decision from the same records. Pieces
// never move between processes that disagree or failed, and on failure the destination is
// dropped, so the outcome is as if they agreed first. Measured under `mpirun -np 4` on 2
// shared cores: each collective waited 1-2 ms for the last process (processes leave a barrier
// that far apart), 20-30% of a 64 MiB reshard. reshard_into agrees first, so a failed
// reshard leaves the caller's array untouched.
void run_reshard(ReshardPlan plan, const Array& src, const TensorLayout& to, Array* dst,
                 bool fresh_dst, const ReshardOptions& options, std::exception_ptr failure) {
  Runtime& rt = src.runtime();
  if (!failure && options.inject_failure_on_process &&
      *options.inject_failure_on_process == rt.process_id()) {
    failure = std::make_exception_ptr(DataLossError(
        fmt::format("injected failure on process {} before the reshard moved any data (testing)",
                    rt.process_id())));
  }
  auto resolver = [&](int64_t q) {
    Array::Shard* s = dst->shard_at(q);
    return std::make_pair(s->buffer.data(), s->box);
  };
  if (rt.num_processes() == 1) {
    agree_on_failure(rt.comm(), failure);
    internal_array::execute_plan(plan, src, resolver);
  } else {
    const std::string description =
        describe_fields({fmt::format("shape={}", shape_to_string(src.shape())),
                         fmt::format("dtype={}", dtype_name(src.dtype())),
                         "from=" + describe_layout(src.layout()), "to=" + describe_layout(to)});
    if (!fresh_dst) {
      agree_on_operation(rt.comm(), "reshard", description, failure);
      internal_array::execute_plan(plan, src, resolver);
    } else {
      const OperationRecord mine = operation_record(description, failure != nullptr);
      internal_array::ExchangeAgreement agreement{std::as_bytes(std::span(&mine, 1)), {}};
      if (dst != nullptr && !failure) {
        internal_array::execute_plan(plan, src, resolver, &agreement);
      } else {  // this process failed: it only tells the others
        agreement.all = rt.comm().exchange_boxes_if_agreed(agreement.header, {}, {}, 1, nullptr);
      }
      std::vector<OperationRecord> all(static_cast<size_t>(rt.num_processes()));
      std::memcpy(all.data(), agreement.all.data(), all.size() * sizeof(OperationRecord));
      settle_operation_agreement(rt.comm(), "reshard", description, failure, all);
    }
  }
  if (options.plan_out) *options.plan_out = std::move(plan);
}

}  // namespace

Array distribute_tensor(const Array& array, const TensorLayout& layout,
                        const ReshardOptions& options) {
  TensorLayout target = layout;
  if (!target.device_mesh()) target.set_device_mesh(array.mesh());
  // Check everything that replicated metadata decides before any memory is allocated.
  ShardGeometry check(target, array.shape(), GeometryOptions{.strict = options.strict});
  ReshardPlan plan = plan_reshard(array.geometry(), check, dtype_size(array.dtype()),
                                  array.runtime().local_device_count());
  // Allocated without its own agreement: run_reshard agrees on a failure here along with
  // the rest (NOTE [One agreement per reshard]).
  std::optional<Array> dst;
  std::exception_ptr failure;
  try {
    dst.emplace(Array::allocate(target, array.shape(), array.dtype(), array.runtime_ptr(),
                                GeometryOptions{.strict = options.strict}));
  } catch (...) {
    failure = std::current_exception();  // e.g. out of memory on this process only
  }
  run_reshard(std::move(plan), array, target, dst ? &*dst : nullptr, /*fresh_dst=*/true, options,
              failure);
  return std::move(*dst);  // dst's geometry is `check`'s
}

Array allocate_agreed(const TensorLayout& layout, const Shape& shape, DType dtype,
                      const std::shared_ptr<Runtime>& runtime, const GeometryOptions& options) {
  std::exception_ptr failure;
  std::optional<Array> a;
  try {
    a.emplace(Array::allocate(layout, shape, dtype, runtime, options));
  } catch (...) {
    failure = std::current_exception();  // e.g. out of memory on this process only
  }
  agree_on_failure(runtime->comm(), failure);
  return std::move(*a);
}

}  // namespace meshlayout
