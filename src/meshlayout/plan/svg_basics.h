// svg_basics.h — what the plan pictures (layout_svg.h, plan_html.h) share: the device and box
// colours, text colours on them, and XML escaping.
//
// Example:
//   css_colour(device_colour(0));   // "#e6194b": device 0's cells and stripes
//   box_colour(3, 8, 0, 1);         // box (3, 0) of 8 x 1 blocks in a heatmap
//   xml_escape("a<b");              // "a&lt;b"
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace meshlayout {

struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
  friend bool operator==(const Rgb&, const Rgb&) = default;
};

/// `#rrggbb`.
std::string css_colour(Rgb colour);

/// The colour of the device at mesh position `position`: 19 hand-picked colours, then 335
/// hues at three lightnesses: 1,024 distinct colours, none white, black or grey (which the
/// pictures use for lines and text), neighbours far apart in hue.
Rgb device_colour(int64_t position);

/// The colour of the box at block (i, j) of a 2-D slice cut into rows x cols blocks, for
/// meshes too large for a colour per device: a 2-D ramp, the hue (red to violet) along the
/// more split direction and the lightness along the other, so neighbouring boxes get
/// neighbouring colours and a mesh heatmap shows which region of the tensor each device holds.
Rgb box_colour(int64_t i, int64_t rows, int64_t j, int64_t cols);

/// `#111` on light fills, `#fff` on dark ones: text drawn on `fill`.
const char* text_colour(Rgb fill);

/// `text` with & < > " ' escaped for XML/HTML text and attributes.
std::string xml_escape(std::string_view text);

}  // namespace meshlayout
