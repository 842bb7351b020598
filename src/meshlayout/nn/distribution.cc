#include "meshlayout/nn/distribution.h"

#include <fmt/format.h>

#include <mutex>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/layout/devices.h"

namespace meshlayout {

Distribution::Distribution(DeviceMesh mesh, std::string batch_dim_name)
    : mesh_(std::move(mesh)), batch_dim_name_(std::move(batch_dim_name)) {
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

TensorLayout Distribution::get_variable_layout(const Variable& variable) const {
  return TensorLayout::replicated(static_cast<int>(variable.shape().size()), mesh_);
}

std::optional<TensorLayout> Distribution::get_tensor_layout(std::string_view) const {
  return std::nullopt;
}

Array Distribution::distribute_input(const HostTensor& batch, std::shared_ptr<Runtime> runtime) const {
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
                           std::optional<std::vector<std::string>> devices)
    : Distribution(data_parallel_mesh(device_mesh, devices),
                   device_mesh ? device_mesh->axis_names()[0] : "batch") {}

namespace {

DeviceMesh mesh_of(const LayoutMap& map) {
  if (!map.device_mesh()) {
    throw ValueError("ModelParallel needs a LayoutMap with a device mesh: LayoutMap(device_mesh)");
  }
  return *map.device_mesh();
}

}  // namespace

ModelParallel::ModelParallel(LayoutMap layout_map, std::optional<std::string> batch_dim_name)
    : Distribution(mesh_of(layout_map),
                   batch_dim_name.value_or(mesh_of(layout_map).axis_names()[0])),
      layout_map_(std::move(layout_map)) {}

TensorLayout ModelParallel::get_variable_layout(const Variable& variable) const {
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
