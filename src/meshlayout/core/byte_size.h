// byte_size.h — byte counts in text: parsing `16MiB`-style sizes and printing them back.
//
// Example:
//   parse_byte_count("64KiB", "--replicated-warn-bytes")   // 65536
//   parse_byte_count("2G", "MESHLAYOUT_DEVICE_MEMORY")      // 2147483648 (binary units)
//   format_bytes(3 << 20)                                   // "3.0 MiB"
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace meshlayout {

/// Parses a byte count: `1048576`, `512B`, `64KiB`, `16MiB`, `1GiB`, `2TiB` (also K/M/G/T and
/// KB/MB/…, all binary). ValueError naming `what` and the text otherwise, or when the count
/// exceeds 2^62 bytes.
uint64_t parse_byte_count(std::string_view text, std::string_view what);

/// `512 B`, `8.0 KiB`, `32.0 MiB`, `1.5 GiB`, `2.0 TiB` (binary units, one decimal).
std::string format_bytes(uint64_t bytes);

}  // namespace meshlayout
