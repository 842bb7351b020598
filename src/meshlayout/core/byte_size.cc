#include "meshlayout/core/byte_size.h"

#include <fmt/format.h>

#include <cctype>
#include <iterator>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"

namespace meshlayout {

uint64_t parse_byte_count(std::string_view text, std::string_view what) {
  const std::string_view t = trim(text);
  size_t digits = 0;
  while (digits < t.size() && std::isdigit(static_cast<unsigned char>(t[digits]))) ++digits;
  std::string_view unit = trim(t.substr(digits));
  int shift = -1;
  if (unit.empty() || unit == "B") {
    shift = 0;
  } else {
    static constexpr std::string_view kUnits = "KMGT";
    const size_t u = unit.size() <= 3 ? kUnits.find(unit[0]) : std::string_view::npos;
    if (u != std::string_view::npos &&
        (unit.size() == 1 || unit.substr(1) == "iB" || unit.substr(1) == "B")) {
      shift = 10 * static_cast<int>(u + 1);
    }
  }
  if (digits == 0 || shift < 0) {
    throw ValueError(
        fmt::format("{} {} is not a byte count; write a whole number with an "
                    "optional binary unit, as in 1048576, 64KiB, 16MiB or 1GiB",
                    what, quote(text)));
  }
  if (digits > 18) {
    throw ValueError(fmt::format("{} {} is too large; the limit is 2^62 bytes", what, quote(text)));
  }
  const int64_t n = parse_int64(t.substr(0, digits), what);
  if (n > (int64_t{1} << (62 - shift))) {
    throw ValueError(fmt::format("{} {} is too large; the limit is 2^62 bytes", what, quote(text)));
  }
  return static_cast<uint64_t>(n) << shift;
}

std::string format_bytes(uint64_t bytes) {
  if (bytes < 1024) return fmt::format("{} B", bytes);
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = static_cast<double>(bytes) / 1024.0;
  size_t unit = 0;
  // 1023.95 and up would print as "1024.0": move to the next unit instead.
  while (value >= 1023.95 && unit + 1 < std::size(kUnits)) {
    value /= 1024.0;
    ++unit;
  }
  return fmt::format("{:.1f} {}", value, kUnits[unit]);
}

}  // namespace meshlayout
