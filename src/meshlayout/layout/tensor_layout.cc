#include "meshlayout/layout/tensor_layout.h"

#include <fmt/format.h>

#include <map>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"

namespace meshlayout {

std::string DimSharding::to_string() const {
  if (axes_.empty()) return "None";
  if (axes_.size() == 1) return axes_[0];
  // Appended, not `"(" + join(...)`: g++ 12 at -O3 reports a false -Wrestrict inside
  // std::string's insert-at-front for `const char* + std::string&&` (GCC bug 105329).
  std::string out = "(";
  out += join(axes_, ",");
  out += ')';
  return out;
}

namespace {

std::string axes_text(const std::vector<DimSharding>& axes) {
  std::string out = "layout[";
  for (size_t i = 0; i < axes.size(); ++i) {
    if (i) out += ",";
    out += axes[i].to_string();
  }
  return out + "]";
}

}  // namespace

TensorLayout::TensorLayout(std::vector<DimSharding> axes, std::optional<DeviceMesh> device_mesh)
    : axes_(std::move(axes)) {
  std::map<std::string, size_t> seen;
  for (size_t d = 0; d < axes_.size(); ++d) {
    for (const std::string& axis : axes_[d].axes()) {
      if (!is_identifier(axis) || axis == "None") {
        throw ValueError(fmt::format(
            "TensorLayout dimension {} names axis {}, which is not a valid mesh axis name "
            "(an identifier other than 'None')",
            d, quote(axis)));
      }
      auto [it, inserted] = seen.emplace(axis, d);
      if (!inserted) {
        throw ValueError(fmt::format(
            "TensorLayout {} uses mesh axis {} twice (dimensions {} and {}); a mesh axis may "
            "split at most one dimension, once",
            axes_text(axes_), quote(axis), it->second, d));
      }
    }
  }
  if (device_mesh) set_device_mesh(*device_mesh);
}

TensorLayout TensorLayout::replicated(int rank, std::optional<DeviceMesh> device_mesh) {
  if (rank < 0) throw ValueError(fmt::format("layout rank must be >= 0, got {}", rank));
  return TensorLayout(std::vector<DimSharding>(static_cast<size_t>(rank)), std::move(device_mesh));
}

void TensorLayout::validate_against_mesh(const DeviceMesh& mesh) const {
  std::vector<std::string> bad;
  for (const DimSharding& dim : axes_) {
    for (const std::string& axis : dim.axes()) {
      if (!mesh.axis_index(axis)) bad.push_back(axis);
    }
  }
  if (!bad.empty()) {
    throw ValueError(fmt::format(
        "Invalid axis names for Layout. {} uses {} {}, which {} does not have; valid axis "
        "names: {}",
        axes_text(axes_), bad.size() == 1 ? "axis" : "axes", repr_list(bad), mesh.to_string(),
        repr_list(mesh.axis_names())));
  }
}

void TensorLayout::set_device_mesh(const DeviceMesh& mesh) {
  if (mesh_) {
    throw ValueError(
        fmt::format("Cannot override device mesh value. Existing value is {}", mesh_->to_string()));
  }
  validate_against_mesh(mesh);
  mesh_ = mesh;
}

TensorLayout TensorLayout::with_device_mesh(const DeviceMesh& mesh) const {
  TensorLayout copy = *this;
  copy.set_device_mesh(mesh);
  return copy;
}

std::vector<std::string> TensorLayout::used_axes() const {
  std::vector<std::string> used;
  for (const DimSharding& dim : axes_) {
    used.insert(used.end(), dim.axes().begin(), dim.axes().end());
  }
  return used;
}

void TensorLayout::check_shape(const Shape& shape, const ShapeCheckOptions& options,
                               std::string_view what) const {
  if (static_cast<int>(shape.size()) != rank()) {
    throw ValueError(fmt::format(
        "{} with shape {} does not fit {}: the layout has {} dimension{}, the tensor has {}", what,
        shape_to_string(shape), to_string(), rank(), rank() == 1 ? "" : "s", shape.size()));
  }
  if (!options.strict) return;
  if (!mesh_) {
    throw ValueError(fmt::format("{}: {} has no device mesh, so its split sizes are unknown", what,
                                 to_string()));
  }
  for (size_t d = 0; d < shape.size(); ++d) {
    int64_t parts = 1;
    for (const std::string& axis : axes_[d].axes()) parts *= mesh_->axis_size(axis);
    if (shape[d] % parts != 0) {
      throw ValueError(fmt::format(
          "{} with shape {} does not fit {}: dimension {} (size {}) is split over {} of total "
          "size {}, and {} is not divisible by {} (strict mode rejects uneven shards)",
          what, shape_to_string(shape), to_string(), d, shape[d],
          axes_[d].axes().size() == 1 ? fmt::format("axis {}", quote(axes_[d].axes()[0]))
                                      : fmt::format("axes {}", repr_list(axes_[d].axes())),
          parts, shape[d], parts));
    }
  }
}

std::string TensorLayout::to_string() const {
  std::string out = axes_text(axes_);
  if (mesh_) {
    out += '@';  // appended in two steps: see DimSharding::to_string on -Wrestrict
    out += mesh_->to_string();
  }
  return out;
}

TensorLayout TensorLayout::from_string(std::string_view text) {
  std::string_view t = trim(text);
  std::optional<DeviceMesh> mesh;
  size_t at = t.find('@');
  if (at != std::string_view::npos) {
    mesh = DeviceMesh::from_string(t.substr(at + 1));
    t = trim(t.substr(0, at));
  }
  if (t.substr(0, 7) == "layout[") {
    if (t.back() != ']') {
      throw ValueError(
          fmt::format("layout text {} has no closing ']'; expected the form "
                      "layout[data,None]",
                      quote(text)));
    }
    t = t.substr(7, t.size() - 8);
  }
  std::vector<DimSharding> dims;
  size_t i = 0;
  auto fail = [&](std::string_view why) {
    throw ValueError(fmt::format(
        "layout text {}: {}; expected entries like None, data or (data,model) separated by "
        "commas",
        quote(text), why));
  };
  if (!trim(t).empty()) {
    while (true) {
      while (i < t.size() && (t[i] == ' ' || t[i] == '\t')) ++i;
      if (i < t.size() && t[i] == '(') {
        size_t close = t.find(')', i);
        if (close == std::string_view::npos) fail("a '(' is not closed");
        // As a Python tuple: (data,) is one axis; (), (,) and (data,,model) are refused.
        std::vector<std::string> axes;
        std::vector<std::string> pieces = split(t.substr(i + 1, close - i - 1), ',');
        if (pieces.size() > 1 && trim(pieces.back()).empty()) pieces.pop_back();
        for (size_t k = 0; k < pieces.size(); ++k) {
          if (trim(pieces[k]).empty()) {
            fail(fmt::format(
                "dimension {} ({}) has {}", dims.size(), quote(t.substr(i, close - i + 1)),
                pieces.size() == 1 ? "no axis names in its parentheses"
                                   : fmt::format("an empty axis name at position {}", k)));
          }
          axes.emplace_back(trim(pieces[k]));
        }
        dims.emplace_back(std::move(axes));
        i = close + 1;
      } else {
        size_t end = t.find(',', i);
        if (end == std::string_view::npos) end = t.size();
        std::string_view entry = trim(t.substr(i, end - i));
        if (entry.empty()) fail(fmt::format("dimension {} is empty", dims.size()));
        if (entry.find_first_of("()") != std::string_view::npos) {
          fail(fmt::format("dimension {} ({}) has a misplaced parenthesis", dims.size(),
                           quote(entry)));
        }
        if (entry == "None") {
          dims.emplace_back();
        } else {
          dims.emplace_back(std::string(entry));
        }
        i = end;
      }
      while (i < t.size() && (t[i] == ' ' || t[i] == '\t')) ++i;
      if (i == t.size()) break;
      if (t[i] != ',') fail(fmt::format("unexpected {} at position {}", quote(t.substr(i, 1)), i));
      ++i;
    }
  }
  return TensorLayout(std::move(dims), std::move(mesh));
}

std::ostream& operator<<(std::ostream& os, const TensorLayout& layout) {
  return os << layout.to_string();
}

std::ostream& operator<<(std::ostream& os, const DimSharding& dim) { return os << dim.to_string(); }

}  // namespace meshlayout
