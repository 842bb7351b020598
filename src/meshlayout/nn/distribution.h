// distribution.h — Keras 3's keras.distribution API: DataParallel, ModelParallel, the
// distribution scope and set_distribution().
//
//   DataParallel(mesh)     variables replicated; inputs split on the batch dimension
//   ModelParallel(map)     variable layout: map[variable.path()] (Keras 3 scope paths such as
//                          "sequential/d1/kernel"), else replicated; "<layer path>/output" keys
//                          relayout layer outputs; inputs split on batch_dim_name
// A model records the distribution current when it is constructed (a scope on this thread,
// else the global one from set_distribution()); its variables are then created lazily and
// materialised with these layouts, as under LayoutMap::scope().
//
// Example:
//   LayoutMap layout_map(mesh);
//   layout_map["d1/kernel"] = {None, "model"};
//   auto distribution = std::make_shared<ModelParallel>(layout_map, "data");
//   { DistributionScope scope = distribution->scope(); model = build_model(); }
//   Tensor y = (*model)(distribution->distribute_input(batch));
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "meshlayout/layout_map/layout_map.h"
#include "meshlayout/nn/variable.h"

namespace meshlayout {

class DistributionScope;

class Distribution : public std::enable_shared_from_this<Distribution> {
 public:
  virtual ~Distribution() = default;
  const DeviceMesh& device_mesh() const { return mesh_; }
  const std::string& batch_dim_name() const { return batch_dim_name_; }

  /// The layout of an input batch: dimension 0 split over batch_dim_name, the rest whole.
  TensorLayout get_data_layout(const Shape& data_shape) const;
  /// The layout a variable is materialised with (Keras 3: keyed by variable.path()).
  virtual TensorLayout get_variable_layout(const Variable& variable) const;
  /// The layout of an intermediate tensor such as "d1/output", if the distribution has one.
  virtual std::optional<TensorLayout> get_tensor_layout(std::string_view path) const;
  /// A host batch laid out by get_data_layout().
  Array distribute_input(const HostTensor& batch, std::shared_ptr<Runtime> runtime = nullptr) const;

  /// Makes this distribution current on this thread while the scope lives.
  DistributionScope scope() const;

 protected:
  Distribution(DeviceMesh mesh, std::string batch_dim_name);
  DeviceMesh mesh_;
  std::string batch_dim_name_;
};

/// keras.distribution.DataParallel(device_mesh=None, devices=None).
class DataParallel : public Distribution {
 public:
  /// Without a mesh: a 1-D mesh named "batch" over `devices` (default list_devices()).
  explicit DataParallel(std::optional<DeviceMesh> device_mesh = std::nullopt,
                        std::optional<std::vector<std::string>> devices = std::nullopt);
};

/// keras.distribution.ModelParallel(layout_map=…, batch_dim_name=None).
class ModelParallel : public Distribution {
 public:
  /// The mesh is the map's (ValueError if it has none); batch_dim_name defaults to the mesh's
  /// first axis (ValueError if the mesh has no such axis).
  explicit ModelParallel(LayoutMap layout_map, std::optional<std::string> batch_dim_name = std::nullopt);
  const LayoutMap& layout_map() const { return layout_map_; }
  TensorLayout get_variable_layout(const Variable& variable) const override;
  std::optional<TensorLayout> get_tensor_layout(std::string_view path) const override;

 private:
  LayoutMap layout_map_;
};

/// RAII: the current distribution of this thread while it lives (scopes nest).
class [[nodiscard]] DistributionScope {
 public:
  explicit DistributionScope(std::shared_ptr<const Distribution> distribution);
  DistributionScope(DistributionScope&& other) noexcept;
  DistributionScope(const DistributionScope&) = delete;
  DistributionScope& operator=(const DistributionScope&) = delete;
  DistributionScope& operator=(DistributionScope&&) = delete;
  ~DistributionScope();

 private:
  std::shared_ptr<const Distribution> previous_;
  bool active_ = true;
};

/// keras.distribution.distribution(): the scope's distribution, else the global one, else null.
std::shared_ptr<const Distribution> distribution();
/// keras.distribution.set_distribution(); nullptr clears it.
void set_distribution(std::shared_ptr<const Distribution> distribution);

}  // namespace meshlayout
