// layout_grid.h — plain-text pictures of a sharding, as jax.debug.visualize_array_sharding.
//
// render_layout_grid draws the distinct blocks of a 0-, 1- or 2-D tensor as a table; each cell
// lists the devices holding that block and its numpy slice. render_device_boxes lists every
// device's box for any rank.
//
// Example: shape (8, 6), layout[data,None]@mesh[data=2,model=4]
//   +-------------------------+
//   | cpu:0,cpu:1,cpu:2,cpu:3 |
//   | [0:4, 0:6]              |
//   +-------------------------+
//   | cpu:4,cpu:5,cpu:6,cpu:7 |
//   | [4:8, 0:6]              |
//   +-------------------------+
#pragma once

#include <string>

#include "meshlayout/layout/shard_geometry.h"

namespace meshlayout {

/// The block table of a tensor of rank 0, 1 or 2; ValueError for a higher rank.
std::string render_layout_grid(const ShardGeometry& geometry);

/// One line per device:
/// `cpu:5  coords (1, 1)  box [4:8, 0:6]  shape (4, 6)  24 elements  replica 1`.
/// With `max_devices` > 0, lists the first `max_devices` devices and then one line saying
/// how many more there are (a mesh may have up to 2^20 devices).
std::string render_device_boxes(const ShardGeometry& geometry, int64_t max_devices = 0);

}  // namespace meshlayout
