#include "meshlayout/layout/layout_grid.h"

#include <fmt/format.h>

#include <algorithm>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"

namespace meshlayout {

std::string render_layout_grid(const ShardGeometry& g) {
  if (g.rank() > 2) {
    throw ValueError(
        fmt::format("a layout grid draws tensors of rank 0, 1 or 2; shape {} has rank {} (use the "
                    "per-device box list instead)",
                    shape_to_string(g.shape()), g.rank()));
  }
  const int64_t rows = g.rank() == 2 ? g.num_blocks(0) : 1;
  const int64_t cols = g.rank() == 0 ? 1 : g.num_blocks(g.rank() - 1);
  // cell[r][c] = {devices line, slice line}
  std::vector<std::vector<std::vector<std::string>>> cell(
      static_cast<size_t>(rows), std::vector<std::vector<std::string>>(static_cast<size_t>(cols)));
  for (int64_t p = 0; p < g.mesh().size(); ++p) {
    int64_t r = g.rank() == 2 ? g.block_index(p, 0) : 0;
    int64_t c = g.rank() == 0 ? 0 : g.block_index(p, g.rank() - 1);
    auto& lines = cell[static_cast<size_t>(r)][static_cast<size_t>(c)];
    if (lines.empty()) {
      Box box = g.box(p);
      lines = {g.mesh().devices()[static_cast<size_t>(p)],
               box.empty() ? box.to_string() + " empty" : box.to_string()};
    } else {
      lines[0] += "," + g.mesh().devices()[static_cast<size_t>(p)];
    }
  }
  std::vector<size_t> width(static_cast<size_t>(cols), 0);
  for (const auto& row : cell) {
    for (size_t c = 0; c < row.size(); ++c) {
      for (const std::string& line : row[c]) width[c] = std::max(width[c], line.size());
    }
  }
  std::string rule = "+";
  for (size_t w : width) rule += std::string(w + 2, '-') + "+";
  std::string out = rule + "\n";
  for (const auto& row : cell) {
    for (size_t line = 0; line < 2; ++line) {
      out += "|";
      for (size_t c = 0; c < row.size(); ++c) {
        out += fmt::format(" {:<{}} |", row[c][line], width[c]);
      }
      out += "\n";
    }
    out += rule + "\n";
  }
  return out;
}

std::string render_device_boxes(const ShardGeometry& g, int64_t max_devices) {
  std::string out;
  size_t name_width = 0;
  const int64_t n = g.mesh().size();
  const int64_t shown = max_devices > 0 ? std::min(n, max_devices) : n;
  for (int64_t p = 0; p < shown; ++p) {
    name_width = std::max(name_width, g.mesh().devices()[static_cast<size_t>(p)].size());
  }
  for (int64_t p = 0; p < shown; ++p) {
    Box box = g.box(p);
    out += fmt::format("{:<{}}  coords {}  box {}  shape {}  {} elements  replica {}\n",
                       g.mesh().devices()[static_cast<size_t>(p)], name_width,
                       shape_to_string(g.mesh().coords(p)), box.to_string(),
                       shape_to_string(box.shape), box.num_elements(), g.replica_of(p));
  }
  if (shown < n) {
    out += fmt::format("… {} more devices not listed ({} in all)\n", n - shown, n);
  }
  return out;
}

}  // namespace meshlayout
