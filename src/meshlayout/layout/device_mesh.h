// device_mesh.h — DeviceMesh: an n-dimensional grid of named axes over global devices,
// as keras.distribution.DeviceMesh(shape, axis_names, devices).
//
// Devices are laid out row-major over the shape: with shape (2, 4) and axes
// ("data", "model"), device position p sits at coordinates (p / 4, p % 4).
// A DeviceMesh is an immutable value: cheap to copy, compared by content.
//
// Example:
//   DeviceMesh mesh({2, 4}, {"data", "model"});       // devices = list_devices()
//   mesh.axis_size("model");                          // 4
//   mesh.to_string();                                 // "mesh[data=2,model=4]"
//   DeviceMesh::from_string("mesh[data=2,model=4]") == mesh;
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "meshlayout/layout/devices.h"

namespace meshlayout {

/// Most devices one mesh may hold (guards against overflow and absurd allocations): the
/// same cap as the device count (kMaxDeviceCount, 2^20), since a mesh names its devices.
inline constexpr int64_t kMaxMeshDevices = kMaxDeviceCount;

class DeviceMesh {
 public:
  /// Validates Keras' rules (non-empty, equal lengths, device count = product of shape)
  /// and what Keras misses (sizes >= 1, unique identifier axis names, distinct known
  /// devices). `devices` defaults to list_devices(). Throws ValueError.
  DeviceMesh(std::vector<int64_t> shape, std::vector<std::string> axis_names,
             std::optional<std::vector<std::string>> devices = std::nullopt);

  const std::vector<int64_t>& shape() const { return impl_->shape; }
  const std::vector<std::string>& axis_names() const { return impl_->axis_names; }
  /// Device names, row-major over shape().
  const std::vector<std::string>& devices() const { return impl_->devices; }
  /// Keras' `mesh.devices` (an ndarray of the mesh's shape): the device at `coords`, one
  /// coordinate per mesh axis. ValueError naming the coordinates and the shape if they are
  /// out of range or of the wrong count.
  const std::string& device_at(std::span<const int64_t> coords) const;
  const std::string& device_at(std::initializer_list<int64_t> coords) const {
    return device_at(std::span<const int64_t>(coords.begin(), coords.size()));
  }
  /// Global device indices (K of `cpu:K`), row-major over shape().
  const std::vector<int64_t>& device_ids() const { return impl_->device_ids; }
  /// The kind of the mesh's devices (a mesh holds one kind): kCuda for gpu:K devices.
  DeviceKind device_kind() const {
    return !impl_->devices.empty() && impl_->devices.front().rfind("gpu:", 0) == 0
               ? DeviceKind::kCuda
               : DeviceKind::kCpu;
  }

  int rank() const { return static_cast<int>(impl_->shape.size()); }
  /// Number of devices.
  int64_t size() const { return static_cast<int64_t>(impl_->devices.size()); }

  /// Position of an axis by name, or std::nullopt.
  std::optional<int> axis_index(std::string_view name) const;
  /// Size of a named axis; ValueError listing the axes if there is no such axis.
  int64_t axis_size(std::string_view name) const;

  /// Coordinates of the device at row-major `position` (0 <= position < size()).
  std::vector<int64_t> coords(int64_t position) const;
  /// Row-major position of global device id `id` in this mesh, or std::nullopt.
  std::optional<int64_t> position_of_device(int64_t id) const;

  /// Canonical text: `mesh[data=2,model=4]` when the devices are cpu:0 … cpu:N-1 in order,
  /// else `mesh[data=2,model=4](cpu:7,cpu:6,…)`. from_string(to_string()) == *this.
  std::string to_string() const;
  /// Parses the canonical text, or the short form `data=2,model=4`. The short and
  /// bracketed forms without a device list mean cpu:0 … cpu:N-1. Throws ValueError.
  static DeviceMesh from_string(std::string_view text);

  /// The same shape, axes and device numbers on devices of `kind` (cpu:K → gpu:K), e.g. a rules
  /// file's mesh run on GPUs. ValueError as the constructor's when those devices do not exist.
  DeviceMesh with_device_kind(DeviceKind kind) const;

  friend bool operator==(const DeviceMesh& a, const DeviceMesh& b);

 private:
  struct Impl {
    std::vector<int64_t> shape;
    std::vector<std::string> axis_names;
    std::vector<std::string> devices;
    std::vector<int64_t> device_ids;
    std::unordered_map<int64_t, size_t> position_by_id;  // position_of_device in O(1)
  };
  std::shared_ptr<const Impl> impl_;
};

std::ostream& operator<<(std::ostream& os, const DeviceMesh& mesh);

}  // namespace meshlayout
