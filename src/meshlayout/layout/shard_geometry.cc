#include "meshlayout/layout/shard_geometry.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"

namespace meshlayout {

std::string Box::to_string() const {
  std::string out = "[";
  for (size_t d = 0; d < shape.size(); ++d) {
    if (d) out += ", ";
    out += fmt::format("{}:{}", offset[d], offset[d] + shape[d]);
  }
  return out + "]";
}

std::pair<int64_t, int64_t> block_range(int64_t n, int64_t k, int64_t i) {
  // i < k and c = ceil(n / k), so i * c and (i + 1) * c can exceed int64 only when they
  // exceed n; compare in 128 bits and clamp to n.
  const __int128 c = ceil_div(n, k);
  const auto clamp = [n](__int128 v) { return static_cast<int64_t>(v < n ? v : n); };
  return {clamp(i * c), clamp((i + 1) * c)};
}

ShardGeometry::ShardGeometry(TensorLayout layout, Shape shape, const GeometryOptions& options,
                             std::string_view what)
    : layout_(std::move(layout)), shape_(std::move(shape)) {
  if (!layout_.device_mesh()) {
    throw ValueError(fmt::format(
        "{} has layout {} without a device mesh; attach one (set_device_mesh) or give the "
        "LayoutMap a mesh",
        what, layout_.to_string()));
  }
  layout_.check_shape(shape_, ShapeCheckOptions{.strict = options.strict}, what);
  for (int64_t extent : shape_) {
    if (extent < 0) {
      throw ValueError(
          fmt::format("{} has shape {} with a negative extent", what, shape_to_string(shape_)));
    }
  }
  try {
    num_elements(shape_);  // every box count and byte size below is derived from this one
  } catch (const ValueError& e) {
    throw ValueError(fmt::format("{}: {}", what, e.what()));
  }
  const DeviceMesh& m = mesh();
  std::vector<bool> used(static_cast<size_t>(m.rank()), false);
  for (const DimSharding& dim : layout_.axes()) {
    std::vector<int> axes;
    int64_t parts = 1;
    for (const std::string& name : dim.axes()) {
      int a = *m.axis_index(name);
      axes.push_back(a);
      used[static_cast<size_t>(a)] = true;
      parts *= m.shape()[static_cast<size_t>(a)];
    }
    dim_axes_.push_back(std::move(axes));
    blocks_.push_back(parts);
  }
  for (int a = 0; a < m.rank(); ++a) {
    if (!used[static_cast<size_t>(a)]) {
      unused_axes_.push_back(a);
      num_replicas_ *= m.shape()[static_cast<size_t>(a)];
    }
  }
}

int64_t ShardGeometry::block_index(int64_t position, int dim) const {
  const std::vector<int64_t> c = mesh().coords(position);
  int64_t index = 0;
  for (int a : dim_axes_[static_cast<size_t>(dim)]) {
    index = index * mesh().shape()[static_cast<size_t>(a)] + c[static_cast<size_t>(a)];
  }
  return index;
}

Box ShardGeometry::block_box(const std::vector<int64_t>& block) const {
  Box box;
  for (size_t d = 0; d < shape_.size(); ++d) {
    auto [start, end] = block_range(shape_[d], blocks_[d], block[d]);
    box.offset.push_back(start);
    box.shape.push_back(end - start);
  }
  return box;
}

Box ShardGeometry::box(int64_t position) const {
  if (position < 0 || position >= mesh().size()) {
    throw ValueError(fmt::format("device position {} is outside {} (0 … {})", position,
                                 mesh().to_string(), mesh().size() - 1));
  }
  const std::vector<int64_t> c = mesh().coords(position);
  std::vector<int64_t> block(shape_.size());
  for (size_t d = 0; d < shape_.size(); ++d) {
    int64_t index = 0;
    for (int a : dim_axes_[d]) {
      index = index * mesh().shape()[static_cast<size_t>(a)] + c[static_cast<size_t>(a)];
    }
    block[d] = index;
  }
  return block_box(block);
}

int64_t ShardGeometry::replica_of(int64_t position) const {
  const std::vector<int64_t> c = mesh().coords(position);
  int64_t r = 0;
  for (int a : unused_axes_) {
    r = r * mesh().shape()[static_cast<size_t>(a)] + c[static_cast<size_t>(a)];
  }
  return r;
}

std::vector<int64_t> ShardGeometry::replica_devices(int64_t replica) const {
  std::vector<int64_t> out;
  for (int64_t p = 0; p < mesh().size(); ++p) {
    if (replica_of(p) == replica) out.push_back(p);
  }
  return out;
}

std::vector<std::vector<int64_t>> ShardGeometry::shard_groups() const {
  std::map<std::vector<int64_t>, std::vector<int64_t>> groups;
  for (int64_t p = 0; p < mesh().size(); ++p) {
    std::vector<int64_t> block(shape_.size());
    for (size_t d = 0; d < shape_.size(); ++d) block[d] = block_index(p, static_cast<int>(d));
    groups[block].push_back(p);
  }
  std::vector<std::vector<int64_t>> out;
  for (auto& [block, positions] : groups) out.push_back(std::move(positions));
  return out;
}

std::vector<UnevenDim> ShardGeometry::uneven_dims() const {
  std::vector<UnevenDim> out;
  for (size_t d = 0; d < shape_.size(); ++d) {
    if (shape_[d] % blocks_[d] != 0) {
      out.push_back({static_cast<int>(d), shape_[d], blocks_[d], layout_.axes()[d].axes()});
    }
  }
  return out;
}

int64_t ShardGeometry::max_box_elements() const {
  Shape largest;
  for (size_t d = 0; d < shape_.size(); ++d) largest.push_back(ceil_div(shape_[d], blocks_[d]));
  return num_elements(largest);  // <= num_elements(shape_), which the constructor checked
}

}  // namespace meshlayout
