// svg_basics.h — what the plan pictures (layout_svg.h, plan_html.h) share: the device and box
// colours, text colours on them, and XML escaping.
//
// Example:
//   css_colour(device_colour(0));   // "#e6194b": device 0's cells and stripes
//   css_colour(block_colour(7));    // box 7's colour in a heatmap
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

/// The colour of box `block` (a box's index, row-major over its per-dimension block indices)
/// in heatmaps: hues a golden angle apart.
Rgb block_colour(int64_t block);

/// `#111` on light fills, `#fff` on dark ones: text drawn on `fill`.
const char* text_colour(Rgb fill);

/// `text` with & < > " ' escaped for XML/HTML text and attributes.
std::string xml_escape(std::string_view text);

}  // namespace meshlayout
