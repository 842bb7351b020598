#include "meshlayout/array/array_view.h"

#include <fmt/format.h>

#include "meshlayout/core/errors.h"

namespace meshlayout {
namespace {

// A run of old dimensions [old_begin, old_end) whose product equals that of the new
// dimensions [new_begin, new_end): the smallest such runs, left to right.
struct DimGroup {
  int old_begin, old_end, new_begin, new_end;
};

std::optional<std::vector<DimGroup>> reshape_groups(const Shape& from, const Shape& to) {
  const int n = static_cast<int>(from.size()), m = static_cast<int>(to.size());
  if (num_elements(from) != num_elements(to) || num_elements(from) == 0) return std::nullopt;
  std::vector<DimGroup> groups;
  int i = 0, j = 0;
  while (i < n || j < m) {
    DimGroup g{i, i, j, j};
    int64_t pa = 1, pb = 1;
    if (i < n) pa *= from[static_cast<size_t>(i++)];
    if (j < m) pb *= to[static_cast<size_t>(j++)];
    while (pa != pb) {
      if (pa < pb && i < n) {
        pa *= from[static_cast<size_t>(i++)];
      } else if (pb < pa && j < m) {
        pb *= to[static_cast<size_t>(j++)];
      } else {
        return std::nullopt;
      }
    }
    g.old_end = i;
    g.new_end = j;
    groups.push_back(g);
  }
  return groups;
}

// The first dimension of [begin, end) larger than 1 (begin if none; end if empty).
int first_non_unit(const Shape& shape, int begin, int end) {
  for (int d = begin; d < end; ++d) {
    if (shape[static_cast<size_t>(d)] > 1) return d;
  }
  return begin;
}

// [start, end) of a group's flattened index range that `box` covers, given that only the
// group's first non-unit dimension can be partial. Empty ranges compare as {0, 0}.
std::pair<int64_t, int64_t> group_range(const Shape& shape, const Box& box, int begin, int end) {
  if (begin == end) return {0, 1};
  const int f = first_non_unit(shape, begin, end);
  int64_t inner = 1;
  for (int d = f + 1; d < end; ++d) inner *= shape[static_cast<size_t>(d)];
  const int64_t extent = box.shape[static_cast<size_t>(f)] * inner;
  if (extent == 0) return {0, 0};
  const int64_t start = box.offset[static_cast<size_t>(f)] * inner;
  return {start, start + extent};
}

// Whether every device of the mesh holds the same elements, in the same order, under both.
bool boxes_coincide(const ShardGeometry& from, const ShardGeometry& to,
                    const std::vector<DimGroup>& groups) {
  for (int64_t p = 0; p < from.mesh().size(); ++p) {
    const Box a = from.box(p), b = to.box(p);
    if (a.empty() || b.empty()) {
      if (a.empty() != b.empty()) return false;
      continue;
    }
    for (const DimGroup& g : groups) {
      if (group_range(from.shape(), a, g.old_begin, g.old_end) !=
          group_range(to.shape(), b, g.new_begin, g.new_end)) {
        return false;
      }
    }
  }
  return true;
}

// The candidate layout: each group's first non-unit old dimension gives its axes to the first
// non-unit new dimension; std::nullopt if another old dimension of a group is split.
std::optional<TensorLayout> candidate_layout(const TensorLayout& layout, const Shape& shape,
                                             const Shape& new_shape,
                                             const std::vector<DimGroup>& groups) {
  std::vector<DimSharding> axes(new_shape.size());
  for (const DimGroup& g : groups) {
    const int f = first_non_unit(shape, g.old_begin, g.old_end);
    for (int d = g.old_begin; d < g.old_end; ++d) {
      if (d != f && layout.axes()[static_cast<size_t>(d)].is_sharded()) return std::nullopt;
    }
    if (g.old_begin == g.old_end || !layout.axes()[static_cast<size_t>(f)].is_sharded()) continue;
    if (g.new_begin == g.new_end) return std::nullopt;
    axes[static_cast<size_t>(first_non_unit(new_shape, g.new_begin, g.new_end))] =
        layout.axes()[static_cast<size_t>(f)];
  }
  return TensorLayout(std::move(axes), layout.device_mesh());
}

void check_view(const ShardGeometry& from, const Shape& new_shape, const TensorLayout& layout,
                const char* what) {
  const auto groups = reshape_groups(from.shape(), new_shape);
  bool ok = groups.has_value() && layout.rank() == static_cast<int>(new_shape.size()) &&
            layout.device_mesh() && *layout.device_mesh() == from.mesh();
  if (ok) ok = boxes_coincide(from, ShardGeometry(layout, new_shape), *groups);
  if (!ok) {
    throw ValueError(
        fmt::format("{}: {} laid out as {} cannot be seen as {} laid out as {} without "
                    "moving data (each device must keep exactly its elements in "
                    "row-major order)",
                    what, shape_to_string(from.shape()), from.layout().to_string(),
                    shape_to_string(new_shape), layout.to_string()));
  }
}

}  // namespace

std::optional<TensorLayout> local_reshape_layout(const TensorLayout& layout, const Shape& shape,
                                                 const Shape& new_shape) {
  if (shape == new_shape) return layout;
  const auto groups = reshape_groups(shape, new_shape);
  if (!groups || !layout.device_mesh() || layout.rank() != static_cast<int>(shape.size())) {
    return std::nullopt;
  }
  std::optional<TensorLayout> candidate = candidate_layout(layout, shape, new_shape, *groups);
  if (!candidate) return std::nullopt;
  if (!boxes_coincide(ShardGeometry(layout, shape), ShardGeometry(*candidate, new_shape),
                      *groups)) {
    return std::nullopt;
  }
  return candidate;
}

TensorLayout viewable_layout(const TensorLayout& layout, const Shape& shape,
                             const Shape& new_shape) {
  if (local_reshape_layout(layout, shape, new_shape)) return layout;
  const auto groups = reshape_groups(shape, new_shape);
  std::vector<DimSharding> axes = layout.axes();
  if (!groups) return TensorLayout(std::vector<DimSharding>(axes.size()), layout.device_mesh());
  // Keep only each group's first non-unit dimension split, then drop that too where needed.
  for (const DimGroup& g : *groups) {
    const int f = first_non_unit(shape, g.old_begin, g.old_end);
    for (int d = g.old_begin; d < g.old_end; ++d) {
      if (d != f || g.new_begin == g.new_end) axes[static_cast<size_t>(d)] = DimSharding();
    }
  }
  TensorLayout kept(axes, layout.device_mesh());
  if (local_reshape_layout(kept, shape, new_shape)) return kept;
  // Each group's split is checked alone; one whose blocks do not coincide is made whole.
  std::vector<DimSharding> result = axes;
  for (const DimGroup& g : *groups) {
    const int f = first_non_unit(shape, g.old_begin, g.old_end);
    if (f >= g.old_end || !axes[static_cast<size_t>(f)].is_sharded()) continue;
    std::vector<DimSharding> single(axes.size());
    single[static_cast<size_t>(f)] = axes[static_cast<size_t>(f)];
    if (!local_reshape_layout(TensorLayout(single, layout.device_mesh()), shape, new_shape)) {
      result[static_cast<size_t>(f)] = DimSharding();
    }
  }
  axes = std::move(result);
  return TensorLayout(std::move(axes), layout.device_mesh());
}

Array view_shards(const Array& array, const Shape& new_shape, const TensorLayout& layout) {
  check_view(array.geometry(), new_shape, layout, "view_shards");
  ShardGeometry geometry(layout, new_shape);
  std::vector<Array::Shard> shards;
  shards.reserve(array.local_shards().size());
  for (const Array::Shard& s : array.local_shards()) {
    shards.push_back(
        {s.position, s.device_id, geometry.box(s.position),
         DeviceBuffer::borrowed(const_cast<std::byte*>(s.buffer.data()), s.buffer.size())});
  }
  return Array::from_shards(std::move(geometry), array.dtype(), array.runtime_ptr(),
                            std::move(shards));
}

Array reshape_shards(Array&& array, const Shape& new_shape, const TensorLayout& layout) {
  check_view(array.geometry(), new_shape, layout, "reshape_shards");
  ShardGeometry geometry(layout, new_shape);
  std::vector<Array::Shard> shards;
  shards.reserve(array.local_shards().size());
  for (Array::Shard& s : array.local_shards()) {
    shards.push_back({s.position, s.device_id, geometry.box(s.position), std::move(s.buffer)});
  }
  return Array::from_shards(std::move(geometry), array.dtype(), array.runtime_ptr(),
                            std::move(shards));
}

}  // namespace meshlayout
