#include "meshlayout/plan/layout_svg.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>

#include "meshlayout/core/strings.h"
#include "meshlayout/plan/png_image.h"
#include "meshlayout/plan/text_format.h"

namespace meshlayout {
namespace {

std::string svg_open(int width, int height) {
  return fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} "
      "{1}\" font-family=\"monospace\" font-size=\"11\">",
      width, height);
}

// The hatch that marks copies (replica_of > 0), one per picture.
std::string hatch_pattern(const std::string& id) {
  return fmt::format(
      "<defs><pattern id=\"{}\" width=\"7\" height=\"7\" patternUnits=\"userSpaceOnUse\" "
      "patternTransform=\"rotate(45)\"><rect width=\"2\" height=\"7\" fill=\"#fff\" "
      "fill-opacity=\"0.5\"/></pattern></defs>",
      id);
}

// Per device: its block index per dimension and its copy number.
struct DeviceBlocks {
  int rank = 0;
  std::vector<int64_t> block;  // position * rank + dim
  std::vector<int64_t> replica;
  std::vector<bool> empty;  // its box holds no element

  explicit DeviceBlocks(const ShardGeometry& g) : rank(g.rank()) {
    const int64_t n = g.mesh().size();
    block.resize(static_cast<size_t>(n * rank));
    replica.resize(static_cast<size_t>(n));
    empty.resize(static_cast<size_t>(n));
    for (int64_t p = 0; p < n; ++p) {
      for (int d = 0; d < rank; ++d) {
        const int64_t b = g.num_blocks(d) == 1 ? 0 : g.block_index(p, d);
        block[static_cast<size_t>(p * rank + d)] = b;
        const auto [start, end] =
            block_range(g.shape()[static_cast<size_t>(d)], g.num_blocks(d), b);
        if (start == end) empty[static_cast<size_t>(p)] = true;
      }
      replica[static_cast<size_t>(p)] = g.num_replicas() == 1 ? 0 : g.replica_of(p);
    }
  }
  int64_t at(int64_t p, int d) const { return block[static_cast<size_t>(p * rank + d)]; }
};

// The blocks of `dim` that hold elements (the last of an uneven split may be empty): the
// colour ramp of box_colour spans these. 1 for no dimension.
int64_t coloured_blocks(const ShardGeometry& g, int dim) {
  if (dim < 0) return 1;
  const int64_t size = g.shape()[static_cast<size_t>(dim)], n = g.num_blocks(dim);
  return size == 0 ? n : ceil_div(size, ceil_div(size, n));
}

// The element at the middle of pixel `k` of `pixels` spanning `size` elements.
int64_t element_at(int64_t k, int64_t pixels, int64_t size) {
  const double at =
      (static_cast<double>(k) + 0.5) * static_cast<double>(size) / static_cast<double>(pixels);
  return std::clamp<int64_t>(static_cast<int64_t>(at), 0, size - 1);
}

std::string dim_axes_text(const ShardGeometry& g, int d) {
  const auto& axes = g.layout().axes()[static_cast<size_t>(d)].axes();
  if (axes.empty()) return "not split";
  return fmt::format("{} block{} over {}", g.num_blocks(d), g.num_blocks(d) == 1 ? "" : "s",
                     join(axes, " x "));
}

// --- the mesh -------------------------------------------------------------------------------

void draw_mesh(const ShardGeometry& g, const DeviceBlocks& blocks, const TensorDims& dims,
               const LayoutDrawOptions& o, LayoutDrawing& out) {
  const DeviceMesh& mesh = g.mesh();
  const int64_t n = mesh.size();
  const MeshGrid grid = pick_mesh_grid(mesh);
  const int left = 44, top = 34;
  std::string body;
  int width = 0, height = 0;
  if (n > o.max_device_cells) {
    out.colour_per_device = false;
    const int64_t nr = coloured_blocks(g, dims.row_dim), nc = coloured_blocks(g, dims.col_dim);
    const int64_t side = std::max(grid.rows, grid.cols);
    const int64_t tile = (side + o.max_heatmap_side - 1) / o.max_heatmap_side;
    const int64_t w = (grid.cols + tile - 1) / tile, h = (grid.rows + tile - 1) / tile;
    std::vector<uint8_t> rgb(static_cast<size_t>(w * h * 3), 255);
    for (int64_t y = 0; y < h; ++y) {
      for (int64_t x = 0; x < w; ++x) {
        const int64_t p = y * tile * grid.cols + x * tile;
        if (p >= n) continue;
        const Rgb c = blocks.empty[static_cast<size_t>(p)]
                          ? Rgb{221, 221, 221}
                          : box_colour(dims.row_dim >= 0 ? blocks.at(p, dims.row_dim) : 0, nr,
                                       dims.col_dim >= 0 ? blocks.at(p, dims.col_dim) : 0, nc);
        uint8_t* px = &rgb[static_cast<size_t>((y * w + x) * 3)];
        px[0] = c.r, px[1] = c.g, px[2] = c.b;
      }
    }
    const int64_t scale = std::max<int64_t>(1, 512 / std::max(w, h));
    const int iw = static_cast<int>(w * scale), ih = static_cast<int>(h * scale);
    width = left + iw + 8;
    height = top + ih + 8;
    put(body,
        "<image x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" preserveAspectRatio=\"none\" "
        "style=\"image-rendering:pixelated\" href=\"data:image/png;base64,{}\"/>",
        left, top, iw, ih, base64_encode(encode_png_rgb(w, h, rgb)));
    put(body, "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#333\"/>",
        left, top, iw, ih);
    // Which dimension's blocks the hue follows (box_colour: the more split one).
    const bool hue_down = nr >= nc;
    const int hue_dim = hue_down ? dims.row_dim : dims.col_dim;
    const int light_dim = hue_down ? dims.col_dim : dims.row_dim;
    bool others_split = false;
    for (int d = 0; d < g.rank(); ++d) {
      others_split |= d != dims.row_dim && d != dims.col_dim && g.num_blocks(d) > 1;
    }
    out.notes.push_back(fmt::format(
        "{} devices (more than {}): the mesh is a {} x {} heatmap, {}, coloured by the box each "
        "holds as the tensor's boxes are{}{} (copies of a box share its colour{})",
        n, o.max_device_cells, h, w,
        tile == 1
            ? std::string("one pixel a device")
            : fmt::format("one pixel per {} x {} devices (the colour of the first)", tile, tile),
        hue_dim >= 0 && g.num_blocks(hue_dim) > 1
            ? fmt::format(": the hue follows dim {}'s blocks (red first, violet last)", hue_dim)
            : std::string(),
        light_dim >= 0 && g.num_blocks(light_dim) > 1
            ? fmt::format(", the lightness dim {}'s (dark first)", light_dim)
            : std::string(),
        others_split ? ", and so do boxes differing only in the dims not shown" : ""));
    if (std::find(blocks.empty.begin(), blocks.empty.end(), true) != blocks.empty.end()) {
      out.notes.push_back("light grey devices hold an empty box (an uneven split)");
    }
  } else {
    const bool labelled = n <= o.max_labelled_cells;
    size_t longest = 8;  // the widest label of a labelled cell, in characters
    for (int64_t p = 0; labelled && p < n; ++p) {
      longest = std::max(
          {longest, g.box(p).to_string().size(), mesh.devices()[static_cast<size_t>(p)].size()});
    }
    const double cw = labelled ? std::min(6.7 * static_cast<double>(longest) + 12, 220.0)
                               : std::clamp(640.0 / static_cast<double>(grid.cols), 6.0, 28.0);
    const double ch = labelled ? (g.num_replicas() > 1 ? 50 : 38) : cw;
    width = left + static_cast<int>(std::ceil(cw * static_cast<double>(grid.cols))) + 8;
    height = top + static_cast<int>(std::ceil(ch * static_cast<double>(grid.rows))) + 8;
    const std::string hatch = o.id_prefix + "-copy";
    body += hatch_pattern(hatch);
    for (int64_t p = 0; p < n; ++p) {
      const double x = left + cw * static_cast<double>(p % grid.cols);
      const double y = top + ch * static_cast<double>(p / grid.cols);
      const Rgb c = device_colour(p);
      const int64_t copy = blocks.replica[static_cast<size_t>(p)];
      const std::string box = g.box(p).to_string();
      const std::string& name = mesh.devices()[static_cast<size_t>(p)];
      const std::string copy_text =
          g.num_replicas() > 1 ? fmt::format("copy {}/{}", copy + 1, g.num_replicas()) : "";
      put(body,
          "<g><title>{} {}: box {}{}{}</title><rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" "
          "height=\"{:.1f}\" fill=\"{}\" stroke=\"#fff\" stroke-width=\"{}\"/>",
          xml_escape(name), shape_to_string(mesh.coords(p)), box, copy_text.empty() ? "" : ", ",
          copy_text, x, y, cw, ch, css_colour(c), labelled ? 1 : 0.5);
      if (copy > 0) {
        put(body,
            "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" "
            "fill=\"url(#{})\"/>",
            x, y, cw, ch, hatch);
      }
      if (labelled) {
        const char* ink = text_colour(c);
        put(body,
            "<text x=\"{:.1f}\" y=\"{:.1f}\" fill=\"{}\" stroke=\"{}\" stroke-width=\"3\" "
            "paint-order=\"stroke\"><tspan font-weight=\"bold\">{}</tspan>"
            "<tspan x=\"{:.1f}\" dy=\"13\">{}</tspan>",
            x + 5, y + 14, ink, css_colour(c), xml_escape(name), x + 5,
            6.7 * static_cast<double>(box.size()) + 10 <= cw ? box : "…");
        if (!copy_text.empty())
          put(body, "<tspan x=\"{:.1f}\" dy=\"13\">{}</tspan>", x + 5, copy_text);
        body += "</text>";
      }
      body += "</g>";
    }
    // Heavier lines between the groups of the outer axis of the rows and of the columns.
    const auto inner = [&](int from, int to) {
      int64_t size = 1;
      for (int a = from; a < to; ++a) size *= mesh.shape()[static_cast<size_t>(a)];
      return size;
    };
    if (grid.split > 1) {
      const int64_t every = inner(1, grid.split);
      for (int64_t r = every; r < grid.rows; r += every) {
        put(body,
            "<line x1=\"{}\" x2=\"{:.1f}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#222\" "
            "stroke-width=\"2\"/>",
            left, left + cw * static_cast<double>(grid.cols), top + ch * static_cast<double>(r),
            top + ch * static_cast<double>(r));
      }
    }
    if (grid.split > 0 && mesh.rank() - grid.split > 1) {
      const int64_t every = inner(grid.split + 1, mesh.rank());
      for (int64_t c = every; c < grid.cols; c += every) {
        put(body,
            "<line y1=\"{}\" y2=\"{:.1f}\" x1=\"{:.1f}\" x2=\"{:.1f}\" stroke=\"#222\" "
            "stroke-width=\"2\"/>",
            top, top + ch * static_cast<double>(grid.rows), left + cw * static_cast<double>(c),
            left + cw * static_cast<double>(c));
      }
    }
    if (g.num_replicas() > 1) {
      out.notes.push_back(fmt::format(
          "{} copies of every box: hatched devices (and stripes) hold a copy another device "
          "also holds",
          g.num_replicas()));
    }
  }
  std::string svg = svg_open(width, height);
  put(svg, "<text x=\"{}\" y=\"14\">mesh: {} across</text>", left, xml_escape(grid.cols_label));
  put(svg,
      "<text x=\"14\" y=\"{}\" transform=\"rotate(-90 14 {})\" text-anchor=\"end\">{}{}</text>",
      top, top, xml_escape(grid.rows_label), grid.split == 0 && grid.rows > 1 ? "" : " down");
  svg += body;
  svg += "</svg>";
  out.mesh_svg = std::move(svg);
  out.mesh_width = width;
  out.mesh_height = height;
}

// --- the tensor -----------------------------------------------------------------------------

void draw_tensor(const ShardGeometry& g, const DeviceBlocks& blocks, const TensorDims& dims,
                 const LayoutDrawOptions& o, LayoutDrawing& out) {
  const int64_t n = g.mesh().size();
  const int64_t R = dims.row_dim >= 0 ? g.shape()[static_cast<size_t>(dims.row_dim)] : 1;
  const int64_t C = dims.col_dim >= 0 ? g.shape()[static_cast<size_t>(dims.col_dim)] : 1;
  const int64_t nr = dims.row_dim >= 0 ? g.num_blocks(dims.row_dim) : 1;
  const int64_t nc = dims.col_dim >= 0 ? g.num_blocks(dims.col_dim) : 1;
  const int64_t cr = coloured_blocks(g, dims.row_dim), cc = coloured_blocks(g, dims.col_dim);
  const int left = 30, top = 34;
  const double tw = 400;
  const double th =
      dims.row_dim < 0
          ? 56
          : std::clamp(tw * static_cast<double>(R) / static_cast<double>(std::max<int64_t>(C, 1)),
                       60.0, 400.0);
  const int width = left + static_cast<int>(tw) + 8;
  const int height = top + static_cast<int>(th) + 8;
  std::string svg = svg_open(width, height);
  put(svg, "<text x=\"{}\" y=\"14\">{}</text>", left,
      dims.col_dim < 0
          ? std::string("a scalar")
          : fmt::format("dim {}: {} across, {}", dims.col_dim, C, dim_axes_text(g, dims.col_dim)));
  if (dims.row_dim >= 0) {
    put(svg,
        "<text x=\"14\" y=\"{}\" transform=\"rotate(-90 14 {})\" text-anchor=\"end\">dim {}: {} "
        "down, {}</text>",
        top, top, dims.row_dim, R, dim_axes_text(g, dims.row_dim));
  }
  const std::string hatch = o.id_prefix + "-tcopy";
  svg += hatch_pattern(hatch);
  // The slice shows the devices whose other dimensions are at their first block.
  const auto in_slice = [&](int64_t p) {
    for (int d = 0; d < g.rank(); ++d) {
      if (d != dims.row_dim && d != dims.col_dim && blocks.at(p, d) != 0) return false;
    }
    return true;
  };
  const auto x_of = [&](int64_t v) {
    return left + tw * static_cast<double>(v) / static_cast<double>(std::max<int64_t>(C, 1));
  };
  const auto y_of = [&](int64_t v) {
    return top + th * static_cast<double>(v) / static_cast<double>(std::max<int64_t>(R, 1));
  };
  if (R == 0 || C == 0) {
    out.notes.push_back("the tensor is empty: no box holds any element");
  } else if (nr * nc <= o.max_tensor_blocks) {
    std::vector<std::vector<int64_t>> holders(static_cast<size_t>(nr * nc));
    for (int64_t p = 0; p < n; ++p) {
      if (!in_slice(p)) continue;
      const int64_t i = dims.row_dim >= 0 ? blocks.at(p, dims.row_dim) : 0;
      const int64_t j = dims.col_dim >= 0 ? blocks.at(p, dims.col_dim) : 0;
      holders[static_cast<size_t>(i * nc + j)].push_back(p);
    }
    const bool labels = nr * nc <= o.max_labelled_cells;
    int64_t empty = 0;
    bool cut_stripes = false;
    for (int64_t i = 0; i < nr; ++i) {
      const auto [r0, r1] = block_range(R, nr, i);
      for (int64_t j = 0; j < nc; ++j) {
        const auto [c0, c1] = block_range(C, nc, j);
        if (r0 == r1 || c0 == c1) {
          ++empty;
          continue;
        }
        const std::vector<int64_t>& who = holders[static_cast<size_t>(i * nc + j)];
        const double x = x_of(c0), y = y_of(r0), w = x_of(c1) - x, h = y_of(r1) - y;
        const std::string box = who.empty() ? "" : g.box(who.front()).to_string();
        put(svg, "<g><title>box {}: {}</title>", box,
            who.empty() ? std::string("no device")
                        : fmt::format("{} device{}", who.size(), who.size() == 1 ? "" : "s"));
        if (out.colour_per_device) {
          const size_t shown = std::min<size_t>(who.size(), 16);
          cut_stripes |= who.size() > shown;
          for (size_t s = 0; s < shown; ++s) {
            const double sx = x + w * static_cast<double>(s) / static_cast<double>(shown);
            const double sw = w / static_cast<double>(shown);
            put(svg,
                "<rect x=\"{:.2f}\" y=\"{:.2f}\" width=\"{:.2f}\" height=\"{:.2f}\" fill=\"{}\"/>",
                sx, y, sw, h, css_colour(device_colour(who[s])));
            if (blocks.replica[static_cast<size_t>(who[s])] > 0) {
              put(svg,
                  "<rect x=\"{:.2f}\" y=\"{:.2f}\" width=\"{:.2f}\" height=\"{:.2f}\" "
                  "fill=\"url(#{})\"/>",
                  sx, y, sw, h, hatch);
            }
          }
        } else {
          put(svg,
              "<rect x=\"{:.2f}\" y=\"{:.2f}\" width=\"{:.2f}\" height=\"{:.2f}\" fill=\"{}\"/>", x,
              y, w, h, css_colour(box_colour(i, cr, j, cc)));
        }
        put(svg,
            "<rect x=\"{:.2f}\" y=\"{:.2f}\" width=\"{:.2f}\" height=\"{:.2f}\" fill=\"none\" "
            "stroke=\"#222\"/>",
            x, y, w, h);
        if (labels && !who.empty() && w >= 80 && h >= 30) {
          const std::string holder =
              xml_escape(g.mesh().devices()[static_cast<size_t>(who.front())]) +
              (who.size() > 1 ? fmt::format(" +{}", who.size() - 1) : "");
          const size_t chars = std::max(box.size(), holder.size());
          const double lw = std::min(w - 6, 6.7 * static_cast<double>(chars) + 6);
          put(svg,
              "<rect x=\"{:.2f}\" y=\"{:.2f}\" width=\"{:.2f}\" height=\"28\" rx=\"3\" "
              "fill=\"#fff\" fill-opacity=\"0.85\"/><text x=\"{:.2f}\" y=\"{:.2f}\">{}<tspan "
              "x=\"{:.2f}\" dy=\"12\">{}</tspan></text>",
              x + 3, y + 3, lw, x + 6, y + 14,
              6.7 * static_cast<double>(box.size()) + 6 <= w - 6 ? box : "…", x + 6,
              6.7 * static_cast<double>(holder.size()) + 6 <= w - 6 ? holder : "…");
        }
        svg += "</g>";
      }
    }
    if (empty > 0) {
      out.notes.push_back(fmt::format("{} box{} of the slice {} empty (an uneven split)", empty,
                                      empty == 1 ? "" : "es", empty == 1 ? "is" : "are"));
    }
    if (cut_stripes) {
      out.notes.push_back(
          "boxes held by more than 16 devices show the colours of their first 16 holders");
    }
  } else {
    // At most max_heatmap_side pixels a side, each the colour of the box holding the element
    // at its place (so uneven splits keep their proportions and empty boxes never show).
    const int64_t w = std::min({nc, C, o.max_heatmap_side});
    const int64_t h = std::min({nr, R, o.max_heatmap_side});
    const int64_t row_block = ceil_div(R, nr), col_block = ceil_div(C, nc);
    std::vector<uint8_t> rgb(static_cast<size_t>(w * h * 3));
    for (int64_t y = 0; y < h; ++y) {
      const int64_t i = element_at(y, h, R) / row_block;
      for (int64_t x = 0; x < w; ++x) {
        const Rgb c = box_colour(i, cr, element_at(x, w, C) / col_block, cc);
        uint8_t* px = &rgb[static_cast<size_t>((y * w + x) * 3)];
        px[0] = c.r, px[1] = c.g, px[2] = c.b;
      }
    }
    put(svg,
        "<image x=\"{}\" y=\"{}\" width=\"{:.0f}\" height=\"{:.0f}\" preserveAspectRatio=\"none\" "
        "style=\"image-rendering:pixelated\" href=\"data:image/png;base64,{}\"/>",
        left, top, tw, th, base64_encode(encode_png_rgb(w, h, rgb)));
    put(svg,
        "<rect x=\"{}\" y=\"{}\" width=\"{:.0f}\" height=\"{:.0f}\" fill=\"none\" "
        "stroke=\"#222\"/>",
        left, top, tw, th);
    out.notes.push_back(fmt::format(
        "{} x {} boxes in the slice (more than {}): drawn as an image of {} x {} pixels, each "
        "the colour of the box holding its part of the tensor",
        nr, nc, o.max_tensor_blocks, w, h));
  }
  svg += "</svg>";
  out.tensor_svg = std::move(svg);
  out.tensor_width = width;
  out.tensor_height = height;
}

}  // namespace

MeshGrid pick_mesh_grid(const DeviceMesh& mesh) {
  MeshGrid grid;
  const int rank = mesh.rank();
  const auto label = [&](int from, int to) {
    std::vector<std::string> parts;
    for (int a = from; a < to; ++a) {
      parts.push_back(fmt::format("{}={}", mesh.axis_names()[static_cast<size_t>(a)],
                                  mesh.shape()[static_cast<size_t>(a)]));
    }
    return join(parts, " x ");
  };
  if (rank <= 1) {
    const int64_t n = mesh.size();
    grid.split = 0;
    grid.cols = n <= 16 ? n : static_cast<int64_t>(std::ceil(std::sqrt(static_cast<double>(n))));
    grid.rows = (n + grid.cols - 1) / grid.cols;
    grid.cols_label = label(0, rank);
    grid.rows_label =
        grid.rows == 1 ? "1 row" : fmt::format("wrapped, {} devices a row", grid.cols);
    return grid;
  }
  double best = 0;
  for (int k = 1; k < rank; ++k) {
    int64_t rows = 1;
    for (int a = 0; a < k; ++a) rows *= mesh.shape()[static_cast<size_t>(a)];
    const int64_t cols = mesh.size() / rows;
    // Closest to square; on a tie, more columns than rows (pages are wide).
    const double score = std::abs(std::log(static_cast<double>(rows) / static_cast<double>(cols))) +
                         (rows > cols ? 1e-9 : 0);
    if (k == 1 || score < best) best = score, grid.split = k, grid.rows = rows, grid.cols = cols;
  }
  grid.rows_label = label(0, grid.split);
  grid.cols_label = label(grid.split, rank);
  return grid;
}

TensorDims pick_tensor_dims(const ShardGeometry& g) {
  TensorDims dims;
  const int rank = g.rank();
  if (rank == 0) return dims;
  if (rank == 1) {
    dims.col_dim = 0;
    return dims;
  }
  std::vector<int> order(static_cast<size_t>(rank));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    if (g.num_blocks(a) != g.num_blocks(b)) return g.num_blocks(a) > g.num_blocks(b);
    return g.shape()[static_cast<size_t>(a)] > g.shape()[static_cast<size_t>(b)];
  });
  dims.row_dim = std::min(order[0], order[1]);
  dims.col_dim = std::max(order[0], order[1]);
  if (rank > 2) {
    std::vector<std::string> others;
    for (int d = 0; d < rank; ++d) {
      if (d == dims.row_dim || d == dims.col_dim) continue;
      const int64_t size = g.shape()[static_cast<size_t>(d)];
      others.push_back(
          g.num_blocks(d) == 1
              ? fmt::format("dim {} (size {}) is not split: every box holds all of it", d, size)
              : fmt::format("dim {} (size {}, {}) is shown at its first block [0:{}]; devices "
                            "holding its other blocks are not in this slice",
                            d, size, dim_axes_text(g, d),
                            block_range(size, g.num_blocks(d), 0).second));
    }
    dims.note = fmt::format(
        "{}-D tensor {} drawn as the 2-D slice of dims {} (down) and {} (across), "
        "the most split then the largest; {}",
        rank, shape_to_string(g.shape()), dims.row_dim, dims.col_dim, join(others, "; "));
  }
  return dims;
}

LayoutDrawing draw_layout(const ShardGeometry& geometry, const LayoutDrawOptions& options) {
  LayoutDrawing out;
  const DeviceBlocks blocks(geometry);
  const TensorDims dims = pick_tensor_dims(geometry);
  if (!dims.note.empty()) out.notes.push_back(dims.note);
  draw_mesh(geometry, blocks, dims, options, out);  // decides colour_per_device first
  draw_tensor(geometry, blocks, dims, options, out);
  return out;
}

std::string render_layout_svg_document(const ShardGeometry& geometry,
                                       const LayoutDrawOptions& options) {
  const LayoutDrawing d = draw_layout(geometry, options);
  std::vector<std::string> lines;
  lines.push_back(fmt::format("tensor {} as {}", shape_to_string(geometry.shape()),
                              geometry.layout().to_string()));
  std::string blocks;
  for (int i = 0; i < geometry.rank(); ++i) {
    blocks += fmt::format("{}{}", i ? " x " : "", geometry.num_blocks(i));
  }
  lines.push_back(fmt::format("blocks {}; {} cop{} of each box; largest box {} elements",
                              blocks.empty() ? "1" : blocks, geometry.num_replicas(),
                              geometry.num_replicas() == 1 ? "y" : "ies",
                              geometry.max_box_elements()));
  for (const std::string& note : d.notes) lines.push_back(note);
  size_t longest = 0;
  for (const std::string& line : lines) longest = std::max(longest, text_width(line));
  const int head = 10 + 16 * static_cast<int>(lines.size());
  const int width = std::max({d.tensor_width + 24 + d.mesh_width, 640,
                              static_cast<int>(6.7 * static_cast<double>(longest)) + 24});
  const int height = head + std::max(d.tensor_height, d.mesh_height) + 8;
  std::string svg = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  svg += svg_open(width, height);
  put(svg, "<rect width=\"{}\" height=\"{}\" fill=\"#fff\"/>", width, height);
  for (size_t i = 0; i < lines.size(); ++i) {
    put(svg, "<text x=\"8\" y=\"{}\"{}>{}</text>", 18 + 16 * static_cast<int>(i),
        i == 0 ? " font-weight=\"bold\"" : "", xml_escape(lines[i]));
  }
  put(svg, "<g transform=\"translate(0 {})\">{}</g>", head, d.tensor_svg);
  put(svg, "<g transform=\"translate({} {})\">{}</g>", d.tensor_width + 24, head, d.mesh_svg);
  svg += "</svg>\n";
  return svg;
}

}  // namespace meshlayout
