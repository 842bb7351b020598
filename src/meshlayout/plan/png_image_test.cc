#include "meshlayout/plan/png_image.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "meshlayout/core/errors.h"

namespace meshlayout {
namespace {

uint32_t read_u32(const std::string& s, size_t at) {
  return static_cast<uint32_t>(static_cast<unsigned char>(s[at])) << 24 |
         static_cast<uint32_t>(static_cast<unsigned char>(s[at + 1])) << 16 |
         static_cast<uint32_t>(static_cast<unsigned char>(s[at + 2])) << 8 |
         static_cast<unsigned char>(s[at + 3]);
}

// Reads back what encode_png_rgb writes: checks the signature, every chunk's CRC, the IHDR
// fields, the zlib header, the stored blocks' lengths and the Adler-32; returns the pixels.
std::vector<uint8_t> decode_stored_png(const std::string& png, int64_t* width, int64_t* height) {
  EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  std::string idat;
  for (size_t at = 8; at < png.size();) {
    const uint32_t length = read_u32(png, at);
    const std::string type = png.substr(at + 4, 4);
    const std::string data = png.substr(at + 8, length);
    EXPECT_EQ(read_u32(png, at + 8 + length), crc32_of(png.substr(at + 4, 4 + length))) << type;
    if (type == "IHDR") {
      *width = read_u32(data, 0);
      *height = read_u32(data, 4);
      EXPECT_EQ(data.substr(8), std::string("\x08\x02\x00\x00\x00", 5));
    } else if (type == "IDAT") {
      idat += data;
    }
    at += 12 + length;
  }
  EXPECT_EQ((static_cast<unsigned char>(idat[0]) * 256 + static_cast<unsigned char>(idat[1])) % 31,
            0u);
  std::string raw;
  size_t at = 2;
  for (bool last = false; !last;) {
    last = idat[at] & 1;
    const size_t n = static_cast<unsigned char>(idat[at + 1]) |
                     static_cast<size_t>(static_cast<unsigned char>(idat[at + 2])) << 8;
    const size_t nn = static_cast<unsigned char>(idat[at + 3]) |
                      static_cast<size_t>(static_cast<unsigned char>(idat[at + 4])) << 8;
    EXPECT_EQ(n ^ 0xFFFF, nn);
    raw += idat.substr(at + 5, n);
    at += 5 + n;
  }
  EXPECT_EQ(read_u32(idat, at), adler32_of(raw));
  std::vector<uint8_t> rgb;
  const size_t row = static_cast<size_t>(*width) * 3;
  for (size_t y = 0; y < static_cast<size_t>(*height); ++y) {
    EXPECT_EQ(raw[y * (row + 1)], '\0');  // filter: none
    rgb.insert(rgb.end(), raw.begin() + static_cast<long>(y * (row + 1) + 1),
               raw.begin() + static_cast<long>((y + 1) * (row + 1)));
  }
  return rgb;
}

TEST(PngImage, KnownChecksums) {
  EXPECT_EQ(crc32_of("123456789"), 0xCBF43926u);
  EXPECT_EQ(adler32_of("Wikipedia"), 0x11E60398u);
  EXPECT_EQ(adler32_of(""), 1u);
}

TEST(PngImage, Base64MatchesRfc4648) {
  EXPECT_EQ(base64_encode(""), "");
  EXPECT_EQ(base64_encode("f"), "Zg==");
  EXPECT_EQ(base64_encode("fo"), "Zm8=");
  EXPECT_EQ(base64_encode("foo"), "Zm9v");
  EXPECT_EQ(base64_encode("foobar"), "Zm9vYmFy");
  EXPECT_EQ(base64_encode(std::string("\xff\xfe", 2)), "//4=");
}

TEST(PngImage, SmallImageRoundTrips) {
  const std::vector<uint8_t> rgb = {255, 0, 0, 0, 255, 0, 0, 0, 255, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  int64_t w = 0, h = 0;
  EXPECT_EQ(decode_stored_png(encode_png_rgb(3, 2, rgb), &w, &h), rgb);
  EXPECT_EQ(w, 3);
  EXPECT_EQ(h, 2);
}

TEST(PngImage, LargeImageSpansSeveralStoredBlocks) {
  std::vector<uint8_t> rgb(300 * 257 * 3);
  for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<uint8_t>(i * 7 + i / 1000);
  int64_t w = 0, h = 0;
  const std::string png = encode_png_rgb(300, 257, rgb);
  EXPECT_GT(png.size(), 3 * 65535u);
  EXPECT_EQ(decode_stored_png(png, &w, &h), rgb);
}

TEST(PngImage, RefusesBadSizes) {
  const std::vector<uint8_t> rgb(12);
  EXPECT_THROW(encode_png_rgb(0, 4, rgb), ValueError);
  EXPECT_THROW(encode_png_rgb(2, 3, rgb), ValueError);  // 18 bytes needed
  EXPECT_NO_THROW(encode_png_rgb(2, 2, rgb));
}

}  // namespace
}  // namespace meshlayout
