#include "meshlayout/plan/text_format.h"

#include <algorithm>

namespace meshlayout {

std::string join_ids(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += fmt::format("{}{}", i ? "," : "", ids[i]);
  return s;
}

std::string plural(size_t n, std::string_view word) {
  return fmt::format("{} {}{}", n, word, n == 1 ? "" : "s");
}

size_t text_width(std::string_view text) {
  size_t n = 0;
  for (char c : text) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

void append_json(std::string& out, const Json& j) {
  out += j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

void append_json_string(std::string& out, std::string_view text) {
  const bool plain = std::all_of(text.begin(), text.end(), [](char c) {
    return c >= 0x20 && c < 0x7F && c != '"' && c != '\\';
  });
  if (!plain) return append_json(out, Json(text));
  out += '"';
  out += text;
  out += '"';
}

std::string json_members(const Json& j) {
  std::string text;
  append_json(text, j);
  return text.substr(1, text.size() - 2);
}

}  // namespace meshlayout
