#include "meshlayout/layout/device_mesh.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <unordered_map>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/layout/devices.h"

namespace meshlayout {
namespace {

std::string received(const std::vector<int64_t>& shape, const std::vector<std::string>& names) {
  return fmt::format("Received: shape={}, axis_names={}", repr_ints(shape), repr_list(names));
}

void validate_axis_names(const std::vector<std::string>& names) {
  std::unordered_map<std::string, size_t> seen;
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string& name = names[i];
    if (!is_identifier(name) || name == "None") {
      throw ValueError(
          fmt::format("DeviceMesh axis name {} is not valid: an axis name is an identifier "
                      "([A-Za-z_][A-Za-z0-9_]*) other than 'None'",
                      quote(name)));
    }
    auto [it, inserted] = seen.emplace(name, i);
    if (!inserted) {
      throw ValueError(
          fmt::format("DeviceMesh axis names must be unique, got {}: {} is at positions {} and {}",
                      repr_list(names), quote(name), it->second, i));
    }
  }
}

}  // namespace

DeviceMesh::DeviceMesh(std::vector<int64_t> shape, std::vector<std::string> axis_names,
                       std::optional<std::vector<std::string>> devices) {
  if (shape.empty() || axis_names.empty()) {
    throw ValueError(
        fmt::format("Shape and axis_names cannot be empty. {}", received(shape, axis_names)));
  }
  if (shape.size() != axis_names.size()) {
    throw ValueError(
        fmt::format("Shape and axis_names should have same size. {}", received(shape, axis_names)));
  }
  validate_axis_names(axis_names);
  int64_t total = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 1) {
      throw ValueError(
          fmt::format("DeviceMesh axis {} has size {}; every axis size must be at least 1. {}",
                      quote(axis_names[i]), shape[i], received(shape, axis_names)));
    }
    if (shape[i] > kMaxMeshDevices || total * shape[i] > kMaxMeshDevices) {
      throw ValueError(fmt::format("DeviceMesh shape {} has more than {} devices", repr_ints(shape),
                                   kMaxMeshDevices));
    }
    total *= shape[i];
  }
  const bool defaulted = !devices.has_value();
  std::vector<std::string> names = defaulted ? list_devices() : std::move(*devices);
  if (static_cast<int64_t>(names.size()) != total) {
    std::string hint = defaulted ? fmt::format(
                                       " (devices defaulted to list_devices(), which has {}; pass "
                                       "devices explicitly or set {} or set_device_count())",
                                       names.size(), kCpuDevicesEnvVar)
                                 : "";
    throw ValueError(
        fmt::format("Shape does not match the number of devices. Received: shape={} ({} devices); "
                    "devices.shape=({},){}",
                    repr_ints(shape), total, names.size(), hint));
  }
  // A mesh holds devices of one kind, that of its first device ("cpu:…" or "gpu:…").
  const bool gpu = !names.empty() && names.front().rfind("gpu:", 0) == 0;
  const DeviceKind kind = gpu ? DeviceKind::kCuda : DeviceKind::kCpu;
  const int64_t known = gpu ? gpu_device_count() : device_count();
  std::unordered_map<int64_t, size_t> seen;
  std::vector<int64_t> ids;
  ids.reserve(names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    std::optional<int64_t> id = parse_device_name(names[i]);
    const bool same_kind = names[i].rfind(device_kind_name(kind), 0) == 0;
    if (id && !same_kind) {
      throw ValueError(fmt::format(
          "DeviceMesh devices must be of one kind: {} (position 0) is a {} device but {} "
          "(position {}) is not",
          quote(names.front()), device_kind_name(kind), quote(names[i]), i));
    }
    if (!id || *id >= known) {
      if (gpu && known == 0) {
        throw ValueError(fmt::format(
            "DeviceMesh device {} (position {}) is not a known device: this process has no GPU "
            "devices (list_devices(\"gpu\") is empty: {}; set {} for virtual ones)",
            quote(names[i]), i,
            physical_gpu_count() == 0 ? "no CUDA GPU, or a build without -DMESHLAYOUT_CUDA=ON"
                                      : "none configured",
            kGpuDevicesEnvVar));
      }
      throw ValueError(
          fmt::format("DeviceMesh device {} (position {}) is not a known device; known devices are "
                      "'{}:0' … '{}:{}' (list_devices({}); set {}{} for more)",
                      quote(names[i]), i, device_kind_name(kind), device_kind_name(kind), known - 1,
                      gpu ? "\"gpu\"" : "", gpu ? kGpuDevicesEnvVar : kCpuDevicesEnvVar,
                      gpu ? "" : " or set_device_count()"));
    }
    auto [it, inserted] = seen.emplace(*id, i);
    if (!inserted) {
      throw ValueError(
          fmt::format("DeviceMesh devices must be distinct: {} is at positions {} and {}",
                      quote(names[i]), it->second, i));
    }
    ids.push_back(*id);
  }
  impl_ = std::make_shared<const Impl>(Impl{std::move(shape), std::move(axis_names),
                                            std::move(names), std::move(ids), std::move(seen)});
}

DeviceMesh DeviceMesh::with_device_kind(DeviceKind kind) const {
  if (kind == device_kind()) return *this;
  std::vector<std::string> names;
  names.reserve(impl_->device_ids.size());
  for (int64_t id : impl_->device_ids) names.push_back(device_name(id, kind));
  return DeviceMesh(impl_->shape, impl_->axis_names, std::move(names));
}

std::optional<int> DeviceMesh::axis_index(std::string_view name) const {
  for (size_t i = 0; i < impl_->axis_names.size(); ++i) {
    if (impl_->axis_names[i] == name) return static_cast<int>(i);
  }
  return std::nullopt;
}

int64_t DeviceMesh::axis_size(std::string_view name) const {
  std::optional<int> i = axis_index(name);
  if (!i) {
    throw ValueError(fmt::format("{} has no axis {}; its axes are {}", to_string(), quote(name),
                                 repr_list(impl_->axis_names)));
  }
  return impl_->shape[static_cast<size_t>(*i)];
}

const std::string& DeviceMesh::device_at(std::span<const int64_t> coords) const {
  const std::vector<int64_t>& shape = impl_->shape;
  bool ok = coords.size() == shape.size();
  int64_t position = 0;
  for (size_t i = 0; ok && i < shape.size(); ++i) {
    ok = coords[i] >= 0 && coords[i] < shape[i];
    position = position * shape[i] + coords[i];
  }
  if (!ok) {
    throw ValueError(
        fmt::format("device coordinates ({}) do not index {}: expected {} coordinates "
                    "within the shape ({})",
                    fmt::join(coords, ", "), to_string(), shape.size(), fmt::join(shape, ", ")));
  }
  return impl_->devices[static_cast<size_t>(position)];
}

std::vector<int64_t> DeviceMesh::coords(int64_t position) const {
  std::vector<int64_t> c(impl_->shape.size());
  for (size_t i = impl_->shape.size(); i-- > 0;) {
    c[i] = position % impl_->shape[i];
    position /= impl_->shape[i];
  }
  return c;
}

std::optional<int64_t> DeviceMesh::position_of_device(int64_t id) const {
  // A scan per call made a reshard on a 1024 x 1024 mesh quadratic (minutes).
  const auto it = impl_->position_by_id.find(id);
  if (it == impl_->position_by_id.end()) return std::nullopt;
  return static_cast<int64_t>(it->second);
}

std::string DeviceMesh::to_string() const {
  std::string out = "mesh[";
  for (size_t i = 0; i < impl_->shape.size(); ++i) {
    if (i) out += ",";
    out += fmt::format("{}={}", impl_->axis_names[i], impl_->shape[i]);
  }
  out += "]";
  bool iota = true;
  for (size_t i = 0; i < impl_->device_ids.size(); ++i) {
    iota = iota && impl_->device_ids[i] == static_cast<int64_t>(i);
  }
  if (!iota)
    out += fmt::format("({})", join(impl_->devices, ","));  // no -Wrestrict (tensor_layout.cc)
  return out;
}

DeviceMesh DeviceMesh::from_string(std::string_view text) {
  std::string_view t = trim(text);
  std::optional<std::vector<std::string>> devices;
  std::string_view axes = t;
  if (t.substr(0, 5) == "mesh[") {
    size_t close = t.find(']');
    if (close == std::string_view::npos) {
      throw ValueError(
          fmt::format("mesh text {} has no closing ']'; expected the form "
                      "mesh[data=2,model=4]",
                      quote(text)));
    }
    axes = t.substr(5, close - 5);
    std::string_view rest = trim(t.substr(close + 1));
    if (!rest.empty()) {
      if (rest.front() != '(' || rest.back() != ')') {
        throw ValueError(
            fmt::format("mesh text {} has {} after ']'; expected nothing or a device list like "
                        "(cpu:1,cpu:0)",
                        quote(text), quote(rest)));
      }
      devices.emplace();
      for (const std::string& d : split(rest.substr(1, rest.size() - 2), ',')) {
        devices->emplace_back(trim(d));
      }
    }
  }
  std::vector<int64_t> shape;
  std::vector<std::string> names;
  if (!trim(axes).empty()) {
    for (const std::string& part : split(axes, ',')) {
      size_t eq = part.find('=');
      if (eq == std::string::npos) {
        throw ValueError(
            fmt::format("mesh text {}: axis {} must be written name=size, as in "
                        "data=2",
                        quote(text), quote(trim(part))));
      }
      names.emplace_back(trim(std::string_view(part).substr(0, eq)));
      shape.push_back(parse_int64(
          std::string_view(part).substr(eq + 1),
          fmt::format("mesh text {}: the size of axis {}", quote(text), quote(names.back()))));
    }
  }
  if (!devices && !shape.empty()) {
    int64_t total = 1;
    for (int64_t s : shape) {
      if (s < 1 || s > kMaxMeshDevices || total * s > kMaxMeshDevices) {
        total = -1;
        break;
      }
      total *= s;
    }
    if (total > device_count()) {
      throw ValueError(fmt::format(
          "mesh text {} describes {} devices (cpu:0 … cpu:{}), but list_devices() has {}; set "
          "{} or set_device_count(), or list the devices, as in mesh[data=2](cpu:0,cpu:1)",
          quote(text), total, total - 1, device_count(), kCpuDevicesEnvVar));
    }
    if (total > 0) {  // invalid sizes are reported by the constructor
      devices.emplace();
      for (int64_t i = 0; i < total; ++i) devices->push_back(device_name(i));
    }
  }
  return DeviceMesh(std::move(shape), std::move(names), std::move(devices));
}

bool operator==(const DeviceMesh& a, const DeviceMesh& b) {
  if (a.impl_ == b.impl_) return true;
  return a.impl_->shape == b.impl_->shape && a.impl_->axis_names == b.impl_->axis_names &&
         a.impl_->device_ids == b.impl_->device_ids;
}

std::ostream& operator<<(std::ostream& os, const DeviceMesh& mesh) {
  return os << mesh.to_string();
}

}  // namespace meshlayout
