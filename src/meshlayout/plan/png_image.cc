#include "meshlayout/plan/png_image.h"

#include <fmt/format.h>

#include <array>
#include <cstddef>

#include "meshlayout/core/errors.h"

namespace meshlayout {
namespace {

constexpr std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t n = 0; n < 256; ++n) {
    uint32_t c = n;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    table[n] = c;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kCrcTable = make_crc_table();

void put_u32(std::string& out, uint32_t v) {
  out += static_cast<char>(v >> 24);
  out += static_cast<char>(v >> 16);
  out += static_cast<char>(v >> 8);
  out += static_cast<char>(v);
}

void put_chunk(std::string& out, std::string_view type, std::string_view data) {
  put_u32(out, static_cast<uint32_t>(data.size()));
  const size_t start = out.size();
  out.append(type);
  out.append(data);
  put_u32(out, crc32_of(std::string_view(out).substr(start)));
}

}  // namespace

uint32_t crc32_of(std::string_view bytes, uint32_t crc) {
  crc = ~crc;
  for (unsigned char b : bytes) crc = kCrcTable[(crc ^ b) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

uint32_t adler32_of(std::string_view bytes) {
  uint32_t a = 1, b = 0;
  for (size_t i = 0; i < bytes.size();) {
    const size_t end = std::min(bytes.size(), i + 5552);  // no overflow before the modulo
    for (; i < end; ++i) {
      a += static_cast<unsigned char>(bytes[i]);
      b += a;
    }
    a %= 65521;
    b %= 65521;
  }
  return (b << 16) | a;
}

std::string encode_png_rgb(int64_t width, int64_t height, std::span<const uint8_t> rgb) {
  if (width <= 0 || height <= 0 || width > (1 << 20) || height > (1 << 20)) {
    throw ValueError(fmt::format("a PNG image of {} x {} pixels: each side must be 1 to {}", width,
                                 height, 1 << 20));
  }
  const size_t row_bytes = static_cast<size_t>(width) * 3;
  if (rgb.size() != row_bytes * static_cast<size_t>(height)) {
    throw ValueError(fmt::format("a PNG image of {} x {} RGB pixels needs {} bytes, got {}", width,
                                 height, row_bytes * static_cast<size_t>(height), rgb.size()));
  }
  // The raw scanlines: filter byte 0 (none), then the row.
  std::string raw;
  raw.reserve((row_bytes + 1) * static_cast<size_t>(height));
  for (int64_t y = 0; y < height; ++y) {
    raw += '\0';
    const auto row = rgb.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(y) * row_bytes);
    raw.append(row, row + static_cast<std::ptrdiff_t>(row_bytes));
  }
  // zlib stream: header (deflate, 32 KiB window, no preset dictionary, check bits), stored
  // blocks of at most 65,535 bytes, Adler-32 of the raw data.
  std::string z = {'\x78', '\x01'};
  z.reserve(raw.size() + raw.size() / 65535 * 5 + 16);
  for (size_t at = 0;;) {  // raw is never empty (a filter byte a row)
    const size_t n = std::min<size_t>(65535, raw.size() - at);
    const bool last = at + n == raw.size();
    z += static_cast<char>(last ? 1 : 0);
    z += static_cast<char>(n & 0xFF);
    z += static_cast<char>(n >> 8);
    z += static_cast<char>(~n & 0xFF);
    z += static_cast<char>((~n >> 8) & 0xFF);
    z.append(raw, at, n);
    at += n;
    if (last) break;
  }
  put_u32(z, adler32_of(raw));

  std::string png = "\x89PNG\r\n\x1a\n";
  std::string header;
  put_u32(header, static_cast<uint32_t>(width));
  put_u32(header, static_cast<uint32_t>(height));
  header +=
      {'\x08', '\x02', '\x00', '\x00', '\x00'};  // 8 bits, RGB, deflate, filter 0, no interlace
  put_chunk(png, "IHDR", header);
  put_chunk(png, "IDAT", z);
  put_chunk(png, "IEND", "");
  return png;
}

std::string base64_encode(std::string_view bytes) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t v = static_cast<uint32_t>(static_cast<unsigned char>(bytes[i])) << 16 |
                       static_cast<uint32_t>(static_cast<unsigned char>(bytes[i + 1])) << 8 |
                       static_cast<unsigned char>(bytes[i + 2]);
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  if (i < bytes.size()) {
    uint32_t v = static_cast<uint32_t>(static_cast<unsigned char>(bytes[i])) << 16;
    if (i + 1 < bytes.size())
      v |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[i + 1])) << 8;
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

}  // namespace meshlayout
