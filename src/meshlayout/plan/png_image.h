// png_image.h — a minimal PNG writer for the pictures of plans (plan_html.h, layout_svg.h): an
// 8-bit RGB image, its pixel rows stored in uncompressed deflate blocks (no zlib needed; the
// heatmaps it draws are at most 256 x 256 pixels, under 200 KB), and base64 for a
// `data:image/png;base64,…` URI inside a self-contained page.
//
// Example:
//   std::vector<uint8_t> rgb(2 * 1 * 3, 255);               // 2 x 1 white pixels
//   std::string png = encode_png_rgb(2, 1, rgb);           // the bytes of a .png file
//   std::string uri = "data:image/png;base64," + base64_encode(png);
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace meshlayout {

/// A PNG file of `width` x `height` 8-bit RGB pixels, row-major, 3 bytes a pixel. ValueError if
/// a side is not positive or `rgb` does not hold width * height * 3 bytes.
std::string encode_png_rgb(int64_t width, int64_t height, std::span<const uint8_t> rgb);

/// Standard base64 (RFC 4648, with '=' padding).
std::string base64_encode(std::string_view bytes);

/// CRC-32 (ISO-HDLC, as PNG chunks use) and Adler-32 (as zlib streams end with).
uint32_t crc32_of(std::string_view bytes, uint32_t crc = 0);
uint32_t adler32_of(std::string_view bytes);

}  // namespace meshlayout
