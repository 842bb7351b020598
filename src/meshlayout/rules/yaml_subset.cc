#include "meshlayout/rules/yaml_subset.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "meshlayout/core/errors.h"

namespace meshlayout {
namespace {

using json = nlohmann::ordered_json;

constexpr int kMaxDepth = 64;

class Parser {
 public:
  Parser(std::string_view text, std::string_view source) : text_(text), source_(source) {}

  json document() {
    skip_blank_lines();
    if (at_line_start_marker("---")) {
      pos_ += 3;
      skip_spaces();
      expect_line_end("after the document marker '---'");
      skip_blank_lines();
    }
    json root = nullptr;
    if (!at_end() && !at_line_start_marker("...")) {
      if (column() != 0) fail("the document must start at column 1");
      root = block_node(0, 0);
    }
    skip_blank_lines();
    if (at_line_start_marker("...")) {
      pos_ += 3;
      skip_spaces();
      expect_line_end("after the document end marker '...'");
      skip_blank_lines();
    }
    if (!at_end()) {
      if (at_line_start_marker("---")) {
        fail("a second document ('---'); a rules file holds one document");
      }
      fail(fmt::format("unexpected text at indentation {}; expected the end of the document",
                       column()));
    }
    return root;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw ValueError(fmt::format("{}:{}:{}: {}", source_, line_, column() + 1, what));
  }

  bool at_end() const { return pos_ >= text_.size(); }
  char peek(size_t ahead = 0) const {
    return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0';
  }
  int column() const {
    size_t start = text_.rfind('\n', pos_ == 0 ? 0 : pos_ - 1);
    if (pos_ == 0 || start == std::string_view::npos) return static_cast<int>(pos_);
    if (text_[pos_ - 1] == '\n') return 0;
    return static_cast<int>(pos_ - start - 1);
  }
  bool at_line_start_marker(std::string_view marker) const {
    if (column() != 0 || text_.substr(pos_, marker.size()) != marker) return false;
    char after = pos_ + marker.size() < text_.size() ? text_[pos_ + marker.size()] : '\n';
    return after == '\n' || after == ' ' || after == '\r';
  }
  void advance() {
    if (text_[pos_] == '\n') ++line_;
    ++pos_;
  }
  void skip_spaces() {
    while (!at_end() && (peek() == ' ' || peek() == '\r')) ++pos_;
    if (peek() == '\t') fail("a tab; indent and separate with spaces");
  }
  // Skips a comment to the end of its line (not the newline).
  void skip_comment() {
    if (peek() == '#') {
      while (!at_end() && peek() != '\n') ++pos_;
    }
  }
  void expect_line_end(std::string_view where) {
    skip_comment();
    if (!at_end() && peek() != '\n') {
      fail(fmt::format("unexpected '{}' {}; expected the end of the line", peek(), where));
    }
  }
  // Leaves pos_ on the first character of the next line with content (not blank, not only a
  // comment), or at the end.
  void skip_blank_lines() {
    while (!at_end()) {
      size_t line_start = pos_;
      while (!at_end() && (peek() == ' ' || peek() == '\r')) ++pos_;
      if (peek() == '\t') fail("a tab in the indentation; YAML indents with spaces");
      if (peek() == '#') skip_comment();
      if (at_end()) return;
      if (peek() == '\n') {
        advance();
        continue;
      }
      // A content line: leave pos_ at its first non-space character.
      (void)line_start;
      return;
    }
  }

  static bool is_null_scalar(std::string_view s) {
    return s.empty() || s == "null" || s == "Null" || s == "NULL" || s == "~";
  }

  void check_unsupported(char c) {
    switch (c) {
      case '&':
        fail("an anchor ('&'), outside meshlayout's YAML subset; write the value out");
      case '*':
        fail("an alias ('*'), outside meshlayout's YAML subset; write the value out");
      case '!':
        fail("a tag ('!'), outside meshlayout's YAML subset");
      case '|':
      case '>':
        fail(
            fmt::format("a block scalar ('{}'), outside meshlayout's YAML subset; write the "
                        "value on one line",
                        c));
      case '%':
      case '@':
      case '`':
        fail(fmt::format("'{}' cannot start a plain value; quote it", c));
      default:
        break;
    }
  }

  std::string single_quoted() {
    advance();  // '
    std::string out;
    while (true) {
      if (at_end()) fail("a single-quoted string that is never closed");
      char c = peek();
      if (c == '\'') {
        if (peek(1) == '\'') {
          out += '\'';
          pos_ += 2;
          continue;
        }
        ++pos_;
        return out;
      }
      if (c == '\n') fail("a single-quoted string that runs past the end of its line");
      out += c;
      ++pos_;
    }
  }

  std::string double_quoted() {
    advance();  // "
    std::string out;
    while (true) {
      if (at_end()) fail("a double-quoted string that is never closed");
      char c = peek();
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (c == '\n') fail("a double-quoted string that runs past the end of its line");
      if (c == '\\') {
        char e = peek(1);
        switch (e) {
          case '"':
          case '\\':
          case '/':
            out += e;
            break;
          case 'n':
            out += '\n';
            break;
          case 't':
            out += '\t';
            break;
          default:
            ++pos_;
            fail(
                fmt::format("the escape '\\{}' in a double-quoted string; meshlayout's YAML "
                            "subset knows \\\" \\\\ \\/ \\n \\t",
                            e == '\0' ? ' ' : e));
        }
        pos_ += 2;
        continue;
      }
      out += c;
      ++pos_;
    }
  }

  // A plain scalar; in flow context it also stops at , [ ] { }. It always stops at ": ",
  // " #" and the end of the line. Trailing spaces are dropped.
  std::string plain(bool flow) {
    check_unsupported(peek());
    if (peek() == '-' && (peek(1) == ' ' || peek(1) == '\n' || peek(1) == '\0')) {
      fail("a '- ' sequence item where a value was expected");
    }
    size_t start = pos_;
    while (!at_end()) {
      char c = peek();
      if (c == '\n') break;
      if (c == ':' && (peek(1) == ' ' || peek(1) == '\n' || peek(1) == '\r' || peek(1) == '\0' ||
                       (flow && (peek(1) == ',' || peek(1) == ']' || peek(1) == '}')))) {
        break;
      }
      if (c == '#' && pos_ > start && (text_[pos_ - 1] == ' ')) break;
      if (flow && (c == ',' || c == '[' || c == ']' || c == '{' || c == '}')) break;
      if (c == '\t') fail("a tab inside a plain value; quote the value");
      ++pos_;
    }
    std::string_view s = text_.substr(start, pos_ - start);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\r')) s.remove_suffix(1);
    return std::string(s);
  }

  json scalar(bool flow) {
    if (peek() == '\'') return single_quoted();
    if (peek() == '"') return double_quoted();
    std::string s = plain(flow);
    if (is_null_scalar(s)) return nullptr;
    return s;
  }

  // Skips spaces, newlines and comments inside a flow collection.
  void skip_flow_space() {
    while (!at_end()) {
      char c = peek();
      if (c == ' ' || c == '\r' || c == '\n') {
        advance();
      } else if (c == '\t') {
        advance();  // tabs separate tokens inside flow collections
      } else if (c == '#') {
        skip_comment();
      } else {
        return;
      }
    }
  }

  std::string flow_key() {
    json k = scalar(true);
    if (k.is_null()) fail("an empty or null mapping key; keys must be names");
    return k.get<std::string>();
  }

  json flow_node(int depth) {
    if (depth > kMaxDepth) fail(fmt::format("nesting deeper than {} levels", kMaxDepth));
    skip_flow_space();
    if (at_end()) fail("the end of the text inside a flow collection");
    if (peek() == '[') {
      advance();
      json list = json::array();
      while (true) {
        skip_flow_space();
        if (at_end()) fail("a '[' list that is never closed with ']'");
        if (peek() == ']') {
          advance();
          return list;
        }
        if (peek() == ',') fail("an empty list item (',' with no value before it)");
        list.push_back(flow_node(depth + 1));
        skip_flow_space();
        if (peek() == ',') {
          advance();
        } else if (peek() != ']') {
          if (at_end()) fail("a '[' list that is never closed with ']'");
          fail(fmt::format("unexpected '{}' in a list; expected ',' or ']'", peek()));
        }
      }
    }
    if (peek() == '{') {
      advance();
      json map = json::object();
      while (true) {
        skip_flow_space();
        if (at_end()) fail("a '{' mapping that is never closed with '}'");
        if (peek() == '}') {
          advance();
          return map;
        }
        std::string key = flow_key();
        skip_flow_space();
        if (peek() != ':') fail(fmt::format("a mapping key '{}' without ':'", key));
        advance();
        if (map.contains(key)) fail(fmt::format("the key '{}' given twice", key));
        skip_flow_space();
        json value = (peek() == ',' || peek() == '}') ? json(nullptr) : flow_node(depth + 1);
        map[key] = std::move(value);
        skip_flow_space();
        if (peek() == ',') {
          advance();
        } else if (peek() != '}') {
          if (at_end()) fail("a '{' mapping that is never closed with '}'");
          fail(fmt::format("unexpected '{}' in a mapping; expected ',' or '}}'", peek()));
        }
      }
    }
    if (peek() == ']' || peek() == '}' || peek() == ',') {
      fail(fmt::format("unexpected '{}' where a value was expected", peek()));
    }
    return scalar(true);
  }

  // A value on the rest of the current line (a flow collection may continue on later lines).
  json inline_value(int depth) {
    if (peek() == '[' || peek() == '{') {
      json v = flow_node(depth);
      skip_spaces();
      expect_line_end("after a flow collection");
      return v;
    }
    json v = scalar(false);
    skip_spaces();
    if (peek() == ':') {
      fail("a mapping inside a value on one line; write it as a block or as {key: value}");
    }
    expect_line_end("after a value");
    return v;
  }

  // True when the content line at pos_ is `key:` (a block mapping entry).
  bool line_is_mapping_entry() {
    size_t save = pos_;
    int save_line = line_;
    bool entry = false;
    try {
      if (peek() == '[' || peek() == '{') {
        entry = false;
      } else {
        (void)scalar(false);
        skip_spaces();
        entry = peek() == ':' && (peek(1) == ' ' || peek(1) == '\n' || peek(1) == '\r' ||
                                  peek(1) == '\0' || peek(1) == '#');
      }
    } catch (const ValueError&) {
      entry = false;
    }
    pos_ = save;
    line_ = save_line;
    return entry;
  }

  bool at_sequence_item() const {
    return peek() == '-' &&
           (peek(1) == ' ' || peek(1) == '\n' || peek(1) == '\r' || peek(1) == '\0');
  }

  // A block node whose first content character is at pos_ (column `indent`).
  json block_node(int indent, int depth) {
    if (depth > kMaxDepth) fail(fmt::format("nesting deeper than {} levels", kMaxDepth));
    if (at_sequence_item()) return block_sequence(indent, depth);
    if (line_is_mapping_entry()) return block_mapping(indent, depth);
    return inline_value(depth);
  }

  // After `key:` or `-` with nothing else on the line: the nested block, or null.
  json nested_value(int parent_indent, bool sequence_allowed_at_parent, int depth) {
    expect_line_end("");
    skip_blank_lines();
    if (at_end()) return nullptr;
    int c = column();
    if (c > parent_indent) return block_node(c, depth + 1);
    if (c == parent_indent && sequence_allowed_at_parent && at_sequence_item()) {
      return block_sequence(c, depth + 1);
    }
    return nullptr;
  }

  json block_mapping(int indent, int depth) {
    json map = json::object();
    while (true) {
      if (at_sequence_item()) fail("a '- ' sequence item among the keys of a mapping");
      if (peek() == '?') fail("a complex key ('?'), outside meshlayout's YAML subset");
      json k = scalar(false);
      if (k.is_null()) fail("an empty or null mapping key; keys must be names");
      std::string key = k.get<std::string>();
      skip_spaces();
      if (peek() != ':') fail(fmt::format("the line '{}' is not 'key: value'", key));
      ++pos_;
      if (map.contains(key)) fail(fmt::format("the key '{}' given twice", key));
      skip_spaces();
      json value;
      if (at_end() || peek() == '\n' || peek() == '#') {
        value = nested_value(indent, true, depth);
      } else {
        value = inline_value(depth + 1);
      }
      map[key] = std::move(value);
      skip_blank_lines();
      if (at_end()) return map;
      int c = column();
      if (c < indent) return map;
      if (c > indent) {
        fail(fmt::format("unexpected indentation {} inside a mapping indented {}", c, indent));
      }
      if (at_line_start_marker("---") || at_line_start_marker("...")) return map;
    }
  }

  json block_sequence(int indent, int depth) {
    json list = json::array();
    while (true) {
      if (!at_sequence_item()) {
        fail(fmt::format("expected a '- ' item of the sequence indented {}", indent));
      }
      ++pos_;  // -
      skip_spaces();
      if (at_end() || peek() == '\n' || peek() == '#') {
        list.push_back(nested_value(indent, false, depth));
      } else {
        if (at_sequence_item()) {
          fail("a nested block sequence on the item's line; write it as a flow list [a, b]");
        }
        if (line_is_mapping_entry()) {
          fail(
              "a mapping inside a sequence item, outside meshlayout's YAML subset; write it "
              "as {key: value}");
        }
        list.push_back(inline_value(depth + 1));
      }
      skip_blank_lines();
      if (at_end()) return list;
      int c = column();
      if (c < indent) return list;
      if (c > indent) {
        fail(fmt::format("unexpected indentation {} inside a sequence indented {}", c, indent));
      }
      if (!at_sequence_item()) return list;  // `key:\n- a\nnext:` at the key's indent
    }
  }

  std::string_view text_;
  std::string_view source_;
  size_t pos_ = 0;
  int line_ = 1;
};

std::string quote_yaml(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\n') throw ValueError("write_yaml_subset: a string with a newline cannot be written");
    out += c;
    if (c == '\'') out += '\'';
  }
  return out + "'";
}

std::string flow(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_string()) return quote_yaml(v.get<std::string>());
  if (v.is_array()) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + flow(v[i]);
    return out + "]";
  }
  if (v.is_object()) {
    std::string out = "{";
    bool first = true;
    for (const auto& [k, x] : v.items()) {
      out += (first ? "" : ", ") + quote_yaml(k) + ": " + flow(x);
      first = false;
    }
    return out + "}";
  }
  return quote_yaml(v.dump());
}

void write_block(const json& v, int indent, std::string& out) {
  const std::string pad(static_cast<size_t>(indent), ' ');
  if (v.is_object()) {
    for (const auto& [k, x] : v.items()) {
      out += pad + quote_yaml(k) + ":";
      if (x.is_object() && !x.empty()) {
        out += "\n";
        write_block(x, indent + 2, out);
      } else if (x.is_array() && !x.empty() &&
                 std::any_of(x.begin(), x.end(), [](const json& e) { return e.is_structured(); })) {
        out += "\n";
        for (const json& item : x) out += pad + "  - " + flow(item) + "\n";
      } else {
        // Appended piece by piece: g++ 12 at -O3 flags `" " + std::string&&` (-Wrestrict, a
        // known false positive).
        out += ' ';
        out += flow(x);
        out += '\n';
      }
    }
    return;
  }
  out += pad + flow(v) + "\n";
}

}  // namespace

nlohmann::ordered_json parse_yaml_subset(std::string_view text, std::string_view source) {
  return Parser(text, source).document();
}

std::string write_yaml_subset(const nlohmann::ordered_json& value) {
  std::string out;
  write_block(value, 0, out);
  return out;
}

}  // namespace meshlayout
