#include "meshlayout/array/array.h"

#include <fmt/format.h>

#include "meshlayout/layout/box_ops.h"
#include "meshlayout/array/transfer_executor.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"

namespace meshlayout {
namespace {

std::shared_ptr<Runtime> runtime_or_default(std::shared_ptr<Runtime> rt) {
  return rt ? std::move(rt) : default_runtime();
}

void check_mesh_in_runtime(const DeviceMesh& mesh, const Runtime& rt) {
  for (int64_t id : mesh.device_ids()) {
    if (id >= rt.global_device_count()) {
      throw ValueError(fmt::format(
          "{} uses {}, but the runtime has {} devices (cpu:0 … cpu:{}); build the mesh from "
          "list_devices()",
          mesh.to_string(), device_name(id), rt.global_device_count(),
          rt.global_device_count() - 1));
    }
  }
}

Box whole(const Shape& shape) { return Box{Shape(shape.size(), 0), shape}; }

}  // namespace

Array Array::allocate(const TensorLayout& layout, Shape shape, DType dtype,
                      std::shared_ptr<Runtime> runtime, const GeometryOptions& options) {
  runtime = runtime_or_default(std::move(runtime));
  if (layout.device_mesh()) check_mesh_in_runtime(*layout.device_mesh(), *runtime);
  Array a(ShardGeometry(layout, std::move(shape), options), dtype, runtime);
  const DeviceMesh& mesh = a.mesh();
  a.shard_index_.assign(static_cast<size_t>(mesh.size()), -1);
  for (int64_t p = 0; p < mesh.size(); ++p) {
    const int64_t id = mesh.device_ids()[static_cast<size_t>(p)];
    if (!runtime->is_local(id)) continue;
    Box box = a.geometry_.box(p);
    size_t bytes = static_cast<size_t>(box.num_elements()) * dtype_size(dtype);
    a.shard_index_[static_cast<size_t>(p)] = static_cast<int64_t>(a.shards_.size());
    a.shards_.push_back(Shard{p, id, std::move(box), DeviceBuffer(runtime->device(id).memory(), bytes)});
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
  ReshardPlan plan = plan_to_destinations(geometry_, dsts, dtype_size(dtype_), rt.local_device_count());
  HostTensor out(dtype_, shape());
  const Box box = whole(shape());
  internal_array::execute_plan(plan, *this,
                               [&](int64_t) { return std::make_pair(out.data(), box); });
  return out;
}

Array distribute_tensor(const HostTensor& tensor, const TensorLayout& layout,
                        const DistributeOptions& options) {
  Array a = Array::allocate(layout, tensor.shape(), tensor.dtype(), options.runtime,
                            GeometryOptions{.strict = options.strict});
  const Box box = whole(tensor.shape());
  const size_t elem = dtype_size(tensor.dtype());
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
void run_reshard(ReshardPlan plan, const Array& src, Array& dst, const ReshardOptions& options);
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
              src, dst, options);
}

namespace {

// Moves the data of a checked plan from `src` into `dst`; every process calls it.
void run_reshard(ReshardPlan plan, const Array& src, Array& dst, const ReshardOptions& options) {
  Runtime& rt = src.runtime();
  std::exception_ptr failure;
  if (options.inject_failure_on_process && *options.inject_failure_on_process == rt.process_id()) {
    failure = std::make_exception_ptr(DataLossError(fmt::format(
        "injected failure on process {} before the reshard moved any data (testing)",
        rt.process_id())));
  }
  agree_on_failure(rt.comm(), failure);
  internal_array::execute_plan(
      plan, src,
      [&](int64_t q) {
        Array::Shard* s = dst.shard_at(q);
        return std::make_pair(s->buffer.data(), s->box);
      });
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
  Array dst = allocate_agreed(target, array.shape(), array.dtype(), array.runtime_ptr(),
                             GeometryOptions{.strict = options.strict});
  run_reshard(std::move(plan), array, dst, options);  // dst's geometry is `check`'s
  return dst;
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
