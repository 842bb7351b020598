#include "meshlayout/core/json_input.h"

#include <fmt/format.h>

#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"

namespace meshlayout {
namespace {

using nlohmann::json;

// "line 3, column 7 (byte 41)" for a 0-based byte offset.
std::string position_text(std::string_view text, size_t offset) {
  size_t line = 1, column = 1;
  for (size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return fmt::format("line {}, column {} (byte {})", line, column, offset);
}

// Refuses nesting deeper than max_depth and raw NUL bytes (nlohmann stops at a NUL as if the
// input ended there). Strings are skipped, so brackets inside them do not count.
void check_structure(std::string_view text, size_t max_depth) {
  size_t depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\0') {
      throw ValueError(fmt::format("not valid JSON: a raw NUL byte at {}", position_text(text, i)));
    }
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character cannot end the string
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) {
        throw ValueError(
            fmt::format("lists and objects are nested deeper than the limit of {} "
                        "levels, at {}",
                        max_depth, position_text(text, i)));
      }
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
}

// nlohmann's "[json.exception.parse_error.101] parse error at line 1, …" without the
// bracketed id, cut so a huge token cannot make a huge message.
std::string short_message(const json::exception& e) {
  std::string what = e.what();
  if (const size_t p = what.find("] "); what.starts_with("[json.exception") && p != what.npos) {
    what = what.substr(p + 2);
  }
  if (what.size() > 300) what = what.substr(0, 300) + fmt::format("… ({} bytes)", what.size());
  return escape_controls(what);
}

}  // namespace

json parse_json_checked(std::string_view text, size_t max_depth) {
  check_structure(text, max_depth);
  // Per open list/object: its path, and for an object the keys seen so far.
  struct Level {
    std::string path;
    std::optional<std::set<std::string>> keys;
    std::string last_key;
  };
  std::vector<Level> levels;
  auto child_path = [&]() -> std::string {
    if (levels.empty()) return "";
    const Level& up = levels.back();
    return up.keys ? up.path + (up.path.empty() ? "" : ".") +
                         json(up.last_key).dump(-1, ' ', false, json::error_handler_t::replace)
                   : up.path + "[…]";
  };
  const json::parser_callback_t callback = [&](int, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
        levels.push_back(Level{child_path(), std::set<std::string>{}, {}});
        break;
      case json::parse_event_t::array_start:
        levels.push_back(Level{child_path(), std::nullopt, {}});
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        if (!levels.empty()) levels.pop_back();
        break;
      case json::parse_event_t::key: {
        Level& level = levels.back();
        std::string key = parsed.get<std::string>();
        if (!level.keys->insert(key).second) {
          throw ValueError(fmt::format(
              "the key {} appears twice in {}; each key may appear "
              "once",
              quote(key),
              level.path.empty() ? "the top-level object" : "the object " + level.path));
        }
        level.last_key = std::move(key);
        break;
      }
      case json::parse_event_t::value:
        break;
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), callback);
  } catch (const json::exception& e) {  // syntax errors, and numbers out of range (1e400)
    throw ValueError("not valid JSON: " + short_message(e));
  }
}

std::string json_excerpt(const json& value, size_t max_chars) {
  std::string out;
  // Each frame: a list or object being written, and the index of its next element.
  struct Frame {
    const json* container;
    json::const_iterator next;
  };
  std::vector<Frame> stack;
  auto scalar = [](const json& j) {
    return j.dump(-1, ' ', false, json::error_handler_t::replace);
  };
  auto open = [&](const json& j) {
    if (j.is_array() || j.is_object()) {
      out += j.is_array() ? '[' : '{';
      stack.push_back(Frame{&j, j.cbegin()});
    } else {
      out += scalar(j);
    }
  };
  open(value);
  while (!stack.empty() && out.size() <= max_chars) {
    Frame& top = stack.back();
    if (top.next == top.container->cend()) {
      out += top.container->is_array() ? ']' : '}';
      stack.pop_back();
      continue;
    }
    if (top.next != top.container->cbegin()) out += ',';
    const json::const_iterator it = top.next++;
    if (top.container->is_object()) out += scalar(json(it.key())) + ':';
    open(*it);  // may reallocate `stack`: `top` is not used after this
  }
  if (out.size() > max_chars) {
    size_t cut = max_chars > 3 ? max_chars - 3 : 0;
    while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xC0) == 0x80) --cut;
    out = out.substr(0, cut) + "...";
  }
  return out;
}

}  // namespace meshlayout
