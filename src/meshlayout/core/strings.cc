#include "meshlayout/core/strings.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdint>

#include "meshlayout/core/errors.h"

namespace meshlayout {

namespace {

// Length of the valid UTF-8 sequence starting at text[i] (1 for ASCII), or 0 if the bytes there
// are not one (overlong forms, surrogates and code points above U+10FFFF are not).
size_t utf8_length(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char c = byte(i);
  if (c < 0x80) return 1;
  size_t n = 0;
  uint32_t cp = 0;
  if (c >= 0xC2 && c <= 0xDF)
    n = 2, cp = c & 0x1F;
  else if (c >= 0xE0 && c <= 0xEF)
    n = 3, cp = c & 0x0F;
  else if (c >= 0xF0 && c <= 0xF4)
    n = 4, cp = c & 0x07;
  else
    return 0;
  if (i + n > text.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  if ((n == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
      (n == 4 && (cp < 0x10000 || cp > 0x10FFFF))) {
    return 0;
  }
  return n;
}

// Appends text[0, limit) escaped; `quotes` also escapes backslashes and single quotes.
// Returns the number of input bytes consumed (limit, or less to end on a character boundary).
size_t append_escaped(std::string& out, std::string_view text, size_t limit, bool quotes) {
  size_t i = 0;
  while (i < limit) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    const size_t n = utf8_length(text, i);
    if (n > 1) {
      if (i + n > limit) break;
      // U+0080..U+009F (C1 controls, e.g. CSI) are escaped like Python's repr does.
      if (c == 0xC2 && static_cast<unsigned char>(text[i + 1]) < 0xA0) {
        out += fmt::format("\\x{:02x}", static_cast<unsigned char>(text[i + 1]));
      } else {
        out.append(text.substr(i, n));
      }
      i += n;
      continue;
    }
    switch (c) {
      case '\\':
        out += quotes ? "\\\\" : "\\";
        break;
      case '\'':
        out += quotes ? "\\'" : "'";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c < 0x20 || c >= 0x7f) {  // controls, DEL, and bytes that are not UTF-8
          out += fmt::format("\\x{:02x}", c);
        } else {
          out += static_cast<char>(c);
        }
    }
    ++i;
  }
  return i;
}

}  // namespace

std::string quote(std::string_view text) {
  std::string out = "'";
  const size_t shown = append_escaped(out, text, std::min(text.size(), kMaxQuotedBytes), true);
  out += "'";
  if (shown < text.size()) {
    out.insert(out.size() - 1, "…");
    out += fmt::format(" ({} bytes)", text.size());
  }
  return out;
}

std::string escape_controls(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  append_escaped(out, text, text.size(), false);
  return out;
}

std::string repr_list(std::span<const std::string> items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    out += quote(items[i]);
  }
  return out + "]";
}

std::string repr_ints(std::span<const int64_t> values) {
  return fmt::format("[{}]", fmt::join(values, ", "));
}

std::string join(std::span<const std::string> items, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += sep;
    out += items[i];
  }
  return out;
}

std::vector<std::string> split(std::string_view text, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t pos = text.find(sep, start);
    if (pos == std::string_view::npos) {
      out.emplace_back(text.substr(start));
      return out;
    }
    out.emplace_back(text.substr(start, pos - start));
    start = pos + 1;
  }
}

std::string_view trim(std::string_view text) {
  size_t b = 0, e = text.size();
  while (b < e && (text[b] == ' ' || text[b] == '\t')) ++b;
  while (e > b && (text[e - 1] == ' ' || text[e - 1] == '\t')) --e;
  return text.substr(b, e - b);
}

int64_t parse_int64(std::string_view text, std::string_view what) {
  std::string_view t = trim(text);
  int64_t value = 0;
  auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), value);
  if (t.empty() || ec != std::errc() || ptr != t.data() + t.size()) {
    throw ValueError(fmt::format("{} must be a whole number, got {}", what, quote(text)));
  }
  return value;
}

bool is_identifier(std::string_view text) {
  if (text.empty()) return false;
  auto alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  if (!alpha(text[0])) return false;
  for (char c : text) {
    if (!alpha(c) && !(c >= '0' && c <= '9')) return false;
  }
  return true;
}

uint64_t fnv1a_64(std::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : bytes) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace meshlayout
