#include "meshlayout/plan/svg_basics.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>

namespace meshlayout {
namespace {

constexpr std::array<Rgb, 19> kPalette = {{{230, 25, 75},
                                           {60, 180, 75},
                                           {255, 225, 25},
                                           {67, 99, 216},
                                           {245, 130, 49},
                                           {145, 30, 180},
                                           {66, 212, 244},
                                           {240, 50, 230},
                                           {191, 239, 69},
                                           {250, 190, 212},
                                           {70, 153, 144},
                                           {220, 190, 255},
                                           {154, 99, 36},
                                           {255, 250, 200},
                                           {128, 0, 0},
                                           {170, 255, 195},
                                           {128, 128, 0},
                                           {255, 216, 177},
                                           {0, 0, 117}}};

Rgb hsl(double hue, double saturation, double lightness) {
  const double c = (1 - std::abs(2 * lightness - 1)) * saturation;
  const double h = std::fmod(hue, 360.0) / 60.0;
  const double x = c * (1 - std::abs(std::fmod(h, 2.0) - 1));
  double r = 0, g = 0, b = 0;
  if (h < 1)
    r = c, g = x;
  else if (h < 2)
    r = x, g = c;
  else if (h < 3)
    g = c, b = x;
  else if (h < 4)
    g = x, b = c;
  else if (h < 5)
    r = x, b = c;
  else
    r = c, b = x;
  const double m = lightness - c / 2;
  const auto byte = [](double v) {
    return static_cast<uint8_t>(std::lround(std::clamp(v, 0.0, 1.0) * 255));
  };
  return {byte(r + m), byte(g + m), byte(b + m)};
}

}  // namespace

const char* text_colour(Rgb fill) {
  return 0.299 * fill.r + 0.587 * fill.g + 0.114 * fill.b > 140 ? "#111" : "#fff";
}

std::string css_colour(Rgb c) { return fmt::format("#{:02x}{:02x}{:02x}", c.r, c.g, c.b); }

Rgb device_colour(int64_t position) {
  if (position >= 0 && position < static_cast<int64_t>(kPalette.size())) {
    return kPalette[static_cast<size_t>(position)];
  }
  // 335 hue slots visited 137 apart (coprime: each once) at three lightnesses: 1,005 more
  // distinct colours, 1,024 in all; further devices reuse them, shifted by half a slot.
  const int64_t i = position - static_cast<int64_t>(kPalette.size());
  static constexpr double kLightness[3] = {0.42, 0.58, 0.74};
  const int64_t slot = (i % 335) * 137 % 335;
  const double shift = static_cast<double>(i / 1005 % 2) * 0.5;
  return hsl((static_cast<double>(slot) + shift) * 360.0 / 335.0, 0.7, kLightness[i / 335 % 3]);
}

Rgb box_colour(int64_t i, int64_t rows, int64_t j, int64_t cols) {
  const bool hue_down = rows >= cols;  // hue along the more split direction
  const int64_t hue_at = hue_down ? i : j, hue_of = hue_down ? rows : cols;
  const int64_t light_at = hue_down ? j : i, light_of = hue_down ? cols : rows;
  const double a = hue_of > 1 ? static_cast<double>(hue_at) / static_cast<double>(hue_of - 1) : 0;
  const double b =
      light_of > 1 ? static_cast<double>(light_at) / static_cast<double>(light_of - 1) : 0.5;
  return hsl(280 * a, 0.75, 0.30 + 0.45 * b);
}

std::string xml_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace meshlayout
