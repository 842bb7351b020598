// tensor_layout.h — TensorLayout: how each dimension of a tensor is split over the axes of a
// DeviceMesh, as keras.distribution.TensorLayout(axes, device_mesh) and JAX PartitionSpec.
//
// One DimSharding per tensor dimension: None (not split), one mesh axis, or an ordered list
// of axes (major first, as JAX P(('data', 'model'))). Mesh axes the layout does not use hold
// replicas. The mesh may be attached later (Keras 3); attaching validates the axis names.
//
// Example:
//   TensorLayout col({None, "model"});                     // no mesh yet
//   TensorLayout row({"data", None}, mesh);                // validated against mesh
//   TensorLayout both({{"data", "model"}, None});          // dim 0 split 8 ways
//   col.to_string();                                       // "layout[None,model]"
//   TensorLayout::from_string("layout[None,model]") == col;
#pragma once

#include <initializer_list>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "meshlayout/core/shape.h"
#include "meshlayout/layout/device_mesh.h"

namespace meshlayout {

/// Python's None, for writing layouts as Keras does: `TensorLayout({None, "model"})`.
inline constexpr std::nullopt_t None = std::nullopt;

/// How one tensor dimension is split: over no mesh axis, one axis, or several (major first).
class DimSharding {
 public:
  DimSharding() = default;
  DimSharding(std::nullopt_t) {}                             // NOLINT: implicit, as Python None
  DimSharding(const char* axis) : axes_{axis} {}             // NOLINT: implicit, as a Python str
  DimSharding(std::string axis) : axes_{std::move(axis)} {}  // NOLINT
  DimSharding(std::initializer_list<std::string> axes) : axes_(axes) {}
  explicit DimSharding(std::vector<std::string> axes) : axes_(std::move(axes)) {}

  bool is_sharded() const { return !axes_.empty(); }
  /// The mesh axes, major first; empty for None.
  const std::vector<std::string>& axes() const { return axes_; }
  /// `None`, `model` or `(data,model)`.
  std::string to_string() const;

  friend bool operator==(const DimSharding&, const DimSharding&) = default;

 private:
  std::vector<std::string> axes_;
};

/// Options for checking a layout against a concrete tensor shape.
struct ShapeCheckOptions {
  /// Reject dimensions whose size is not a multiple of the number of shards.
  bool strict = false;
};

class TensorLayout {
 public:
  /// Throws ValueError for an axis name that is not an identifier, an axis used twice, or
  /// (with a mesh) an axis the mesh does not have.
  TensorLayout(std::vector<DimSharding> axes, std::optional<DeviceMesh> device_mesh = {});
  /// The brace form `TensorLayout({None, "model"})`; also keeps `TensorLayout({{"data",
  /// "model"}, None})` a one-dimension-list rather than (axes, mesh).
  TensorLayout(std::initializer_list<DimSharding> axes, std::optional<DeviceMesh> device_mesh = {})
      : TensorLayout(std::vector<DimSharding>(axes), std::move(device_mesh)) {}

  /// A layout of `rank` dimensions that splits nothing.
  static TensorLayout replicated(int rank, std::optional<DeviceMesh> device_mesh = {});

  const std::vector<DimSharding>& axes() const { return axes_; }
  int rank() const { return static_cast<int>(axes_.size()); }
  const std::optional<DeviceMesh>& device_mesh() const { return mesh_; }

  /// Attaches a mesh, as Keras' `layout.device_mesh = mesh`: ValueError if one is already
  /// set (Keras: "Cannot override device mesh value") or an axis is not in the mesh.
  void set_device_mesh(const DeviceMesh& mesh);
  /// A copy with `mesh` attached (same checks as set_device_mesh).
  TensorLayout with_device_mesh(const DeviceMesh& mesh) const;

  /// Mesh axes the layout splits over, in dimension order.
  std::vector<std::string> used_axes() const;

  /// Checks this layout against a tensor of `shape` (rank; divisibility if strict).
  /// `what` names the tensor in the message, for example "variable 'd1.kernel'".
  /// Throws ValueError naming the tensor, its shape and the layout.
  void check_shape(const Shape& shape, const ShapeCheckOptions& options = {},
                   std::string_view what = "tensor") const;

  /// `layout[data,None]`, with `@mesh[…]` appended when a mesh is attached.
  std::string to_string() const;
  /// Parses to_string()'s form; also `data,None` and `(data,model),None` without brackets.
  static TensorLayout from_string(std::string_view text);

  friend bool operator==(const TensorLayout&, const TensorLayout&) = default;

 private:
  void validate_against_mesh(const DeviceMesh& mesh) const;

  std::vector<DimSharding> axes_;
  std::optional<DeviceMesh> mesh_;
};

std::ostream& operator<<(std::ostream& os, const TensorLayout& layout);
std::ostream& operator<<(std::ostream& os, const DimSharding& dim);

}  // namespace meshlayout
