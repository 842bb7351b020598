#include "meshlayout/nn/distribution.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <mutex>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/kernels/memory.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/runtime/runtime.h"

namespace meshlayout {

int64_t num_data_shards(int64_t num_model_replicas, int64_t num_processes) {
  return std::min(num_model_replicas, num_processes);
}

int64_t data_shard_id(int64_t num_model_replicas, int64_t num_processes, int64_t process_id) {
  if (num_model_replicas >= num_processes) return process_id;
  return process_id / (num_processes / num_model_replicas);
}

std::vector<RowRange> process_rows(int64_t num_rows, int64_t global_batch_size,
                                   int64_t num_model_replicas, int64_t num_processes,
                                   int64_t process_id, bool auto_shard) {
  if (global_batch_size < 1 || num_rows < 0) {
    throw ValueError(
        fmt::format("a dataset needs a global batch size of at least 1 and a "
                    "non-negative row count, got global_batch_size={}, rows={}",
                    global_batch_size, num_rows));
  }
  if (num_model_replicas < 1 || num_processes < 1 || process_id < 0 ||
      process_id >= num_processes) {
    throw ValueError(
        fmt::format("invalid data sharding: num_model_replicas={}, "
                    "num_processes={}, process_id={}",
                    num_model_replicas, num_processes, process_id));
  }
  int64_t shards = 1;
  int64_t id = 0;
  if (auto_shard && num_processes > 1 && num_model_replicas > 1) {
    shards = num_data_shards(num_model_replicas, num_processes);
    id = data_shard_id(num_model_replicas, num_processes, process_id);
    if (global_batch_size % shards != 0) {
      throw ValueError(fmt::format(
          "Global batch size must be divisible by the number of shards. `global_batch_size`={} "
          "and `num_shards`={}",
          global_batch_size, shards));
    }
  }
  const int64_t per_shard = global_batch_size / shards;
  std::vector<RowRange> out;
  for (int64_t start = 0; start < num_rows; start += global_batch_size) {
    const int64_t begin = std::min(start + id * per_shard, num_rows);
    out.push_back(
        {begin, std::min(begin + per_shard, std::min(start + global_batch_size, num_rows))});
    if (out.back().end < out.back().begin) out.back().end = out.back().begin;
  }
  return out;
}

Distribution::Distribution(DeviceMesh mesh, std::string batch_dim_name, bool auto_shard_dataset)
    : mesh_(std::move(mesh)),
      batch_dim_name_(std::move(batch_dim_name)),
      auto_shard_dataset_(auto_shard_dataset) {
  if (!mesh_.axis_index(batch_dim_name_)) {
    throw ValueError(fmt::format("batch_dim_name {} is not an axis of {}; its axes are {}",
                                 quote(batch_dim_name_), mesh_.to_string(),
                                 repr_list(mesh_.axis_names())));
  }
}

TensorLayout Distribution::get_data_layout(const Shape& data_shape) const {
  std::vector<DimSharding> axes(data_shape.size());
  if (!axes.empty()) axes[0] = batch_dim_name_;
  return TensorLayout(std::move(axes), mesh_);
}

int Distribution::process_id() const { return default_runtime()->process_id(); }
int Distribution::num_processes() const { return default_runtime()->num_processes(); }

int64_t Distribution::num_data_shards() const {
  return meshlayout::num_data_shards(num_model_replicas(), num_processes());
}

int64_t Distribution::data_shard_id() const {
  return meshlayout::data_shard_id(num_model_replicas(), num_processes(), process_id());
}

TensorLayout Distribution::get_variable_layout(const Variable& variable) const {
  if (std::optional<TensorLayout> given = variable.explicit_layout()) {
    if (!given->device_mesh()) given->set_device_mesh(mesh_);
    return *given;
  }
  return TensorLayout::replicated(static_cast<int>(variable.shape().size()), mesh_);
}

std::vector<HostTensor> Distribution::distribute_dataset(const HostTensor& data,
                                                         int64_t global_batch_size) const {
  if (data.shape().empty()) {
    throw ValueError("distribute_dataset needs an array with a batch dimension, got a scalar");
  }
  const std::vector<RowRange> rows =
      process_rows(data.shape()[0], global_batch_size, num_model_replicas(), num_processes(),
                   process_id(), auto_shard_dataset_);
  const int64_t row_bytes =
      data.shape()[0] == 0 ? 0 : static_cast<int64_t>(data.num_bytes()) / data.shape()[0];
  std::vector<HostTensor> out;
  out.reserve(rows.size());
  for (const RowRange& r : rows) {
    Shape shape = data.shape();
    shape[0] = r.end - r.begin;
    HostTensor part(data.dtype(), shape);
    if (shape[0] > 0) {
      std::memcpy(part.data(), data.data() + r.begin * row_bytes,
                  static_cast<size_t>(shape[0] * row_bytes));
    }
    out.push_back(std::move(part));
  }
  return out;
}

std::vector<HostTensor> Distribution::distribute_dataset(const Checkpoint& dataset,
                                                         std::string_view name,
                                                         int64_t global_batch_size) const {
  const auto [file, info] = dataset.find(name);
  if (info == nullptr) {
    throw NotFoundError(
        fmt::format("distribute_dataset: {} has no tensor {}", quote(dataset.path()), quote(name)));
  }
  if (info->shape.empty() || !info->dtype) {
    throw ValueError(
        fmt::format("distribute_dataset needs a tensor with a batch dimension of a "
                    "dtype meshlayout holds, got {} {} {}",
                    quote(name), info->dtype_name, shape_to_string(info->shape)));
  }
  const std::vector<RowRange> rows =
      process_rows(info->shape[0], global_batch_size, num_model_replicas(), num_processes(),
                   process_id(), auto_shard_dataset_);
  std::vector<HostTensor> out;
  out.reserve(rows.size());
  for (const RowRange& r : rows) {
    Shape shape = info->shape;
    shape[0] = r.end - r.begin;
    HostTensor part(*info->dtype, shape);
    if (part.num_bytes() > 0) {
      Box box{Shape(shape.size(), 0), shape};
      box.offset[0] = r.begin;
      file->read_box(*info, box, part.data());
    }
    out.push_back(std::move(part));
  }
  return out;
}

RowRange Distribution::process_batch_rows(int64_t global_batch_size) const {
  return process_rows(global_batch_size, global_batch_size, num_model_replicas(), num_processes(),
                      process_id(), auto_shard_dataset_)
      .at(0);
}

Array Distribution::distribute_process_batch(const HostTensor& local, int64_t global_batch_size,
                                             std::shared_ptr<Runtime> runtime) const {
  if (local.shape().empty()) {
    throw ValueError("distribute_process_batch needs rows with a batch dimension, got a scalar");
  }
  if (!runtime) runtime = default_runtime();
  const RowRange rows =
      process_rows(global_batch_size, global_batch_size, num_model_replicas(),
                   runtime->num_processes(), runtime->process_id(), auto_shard_dataset_)
          .at(0);
  if (local.shape()[0] != rows.end - rows.begin) {
    throw ValueError(
        fmt::format("distribute_process_batch: process {} feeds rows [{}, {}) of each global batch "
                    "of {}, so its part must have {} rows, got {}",
                    runtime->process_id(), rows.begin, rows.end, global_batch_size,
                    rows.end - rows.begin, local.shape()[0]));
  }
  Shape shape = local.shape();
  shape[0] = global_batch_size;
  Array out = allocate_agreed(get_data_layout(shape), shape, local.dtype(), runtime);
  const int64_t row_bytes =
      local.shape()[0] == 0 ? 0 : static_cast<int64_t>(local.num_bytes()) / local.shape()[0];
  std::string problem;
  for (const Array::Shard& s : out.local_shards()) {
    const int64_t begin = s.box.offset[0], end = begin + s.box.shape[0];
    if (begin < end && (begin < rows.begin || end > rows.end) && problem.empty()) {
      problem = fmt::format(
          "device {} of process {} holds rows [{}, {}) of the batch, but the process feeds "
          "rows [{}, {}): mesh {} does not split its batch axis {} along the processes "
          "for a global batch of {} (give a batch size that is a multiple of the batch axis's "
          "size, so that each process's devices hold exactly its rows)",
          s.device_id, runtime->process_id(), begin, end, rows.begin, rows.end, mesh_.to_string(),
          quote(batch_dim_name_), global_batch_size);
    }
  }
  agree_on_failure(runtime->comm(), problem.empty() ? std::exception_ptr()
                                                    : std::make_exception_ptr(ValueError(problem)));
  const DeviceKind kind = kind_of(out);
  for (Array::Shard& s : out.local_shards()) {
    if (s.box.shape[0] == 0 || row_bytes == 0) continue;
    copy_from_host(kind, {.dst = &s,
                          .host = local.data() + (s.box.offset[0] - rows.begin) * row_bytes,
                          .bytes = static_cast<size_t>(s.box.shape[0] * row_bytes)});
  }
  return out;
}

std::optional<TensorLayout> Distribution::get_tensor_layout(std::string_view) const {
  return std::nullopt;
}

Array Distribution::distribute_input(const HostTensor& batch,
                                     std::shared_ptr<Runtime> runtime) const {
  return distribute_tensor(batch, get_data_layout(batch.shape()), {.runtime = std::move(runtime)});
}

DistributionScope Distribution::scope() const { return DistributionScope(shared_from_this()); }

namespace {

DeviceMesh data_parallel_mesh(std::optional<DeviceMesh> mesh,
                              std::optional<std::vector<std::string>> devices) {
  if (mesh) return *mesh;
  std::vector<std::string> d = devices ? *devices : list_devices();
  const int64_t n = static_cast<int64_t>(d.size());
  return DeviceMesh({n}, {"batch"}, std::move(d));
}

}  // namespace

DataParallel::DataParallel(std::optional<DeviceMesh> device_mesh,
                           std::optional<std::vector<std::string>> devices, bool auto_shard_dataset)
    : Distribution(data_parallel_mesh(device_mesh, devices),
                   device_mesh ? device_mesh->axis_names()[0] : "batch", auto_shard_dataset) {}

namespace {

DeviceMesh mesh_of(const LayoutMap& map) {
  if (!map.device_mesh()) {
    throw ValueError("ModelParallel needs a LayoutMap with a device mesh: LayoutMap(device_mesh)");
  }
  return *map.device_mesh();
}

}  // namespace

ModelParallel::ModelParallel(LayoutMap layout_map, std::optional<std::string> batch_dim_name,
                             bool auto_shard_dataset)
    : Distribution(mesh_of(layout_map),
                   batch_dim_name.value_or(mesh_of(layout_map).axis_names()[0]),
                   auto_shard_dataset),
      layout_map_(std::move(layout_map)) {
  const int64_t p = num_processes();
  const int64_t r = num_model_replicas();
  if (p > 1 && p > r && p % r != 0) {
    throw ValueError(fmt::format(
        "If `num_processes` is greater than `num_model_replicas`, `num_processes` must be "
        "divisible by `num_model_replicas`. Got num_processes={}, num_model_replicas={}.",
        p, r));
  }
}

int64_t ModelParallel::num_model_replicas() const { return mesh_.axis_size(batch_dim_name_); }

TensorLayout ModelParallel::get_variable_layout(const Variable& variable) const {
  if (variable.explicit_layout()) return Distribution::get_variable_layout(variable);
  std::optional<TensorLayout> layout = layout_map_.get(variable.path());
  if (!layout) return Distribution::get_variable_layout(variable);
  if (!layout->device_mesh()) layout->set_device_mesh(mesh_);
  return *layout;
}

std::optional<TensorLayout> ModelParallel::get_tensor_layout(std::string_view path) const {
  std::optional<TensorLayout> layout = layout_map_.get(path);
  if (layout && !layout->device_mesh()) layout->set_device_mesh(mesh_);
  return layout;
}

namespace {
thread_local std::shared_ptr<const Distribution> t_scoped;
std::mutex g_mu;
std::shared_ptr<const Distribution> g_global;
}  // namespace

DistributionScope::DistributionScope(std::shared_ptr<const Distribution> distribution)
    : previous_(std::move(t_scoped)) {
  t_scoped = std::move(distribution);
}

DistributionScope::DistributionScope(DistributionScope&& other) noexcept
    : previous_(std::move(other.previous_)) {
  other.active_ = false;
}

DistributionScope::~DistributionScope() {
  if (active_) t_scoped = std::move(previous_);
}

std::shared_ptr<const Distribution> distribution() {
  if (t_scoped) return t_scoped;
  std::lock_guard<std::mutex> lock(g_mu);
  return g_global;
}

void set_distribution(std::shared_ptr<const Distribution> d) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_global = std::move(d);
}

}  // namespace meshlayout
