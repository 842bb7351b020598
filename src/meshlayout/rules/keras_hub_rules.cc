// keras-hub's get_layout_map (as JSON, or as Python prints the dict) and meshlayout's rules
// file, read; the lines both are written with (rule_dialects.h says what each holds).
#include <fmt/format.h>

#include <cctype>
#include <nlohmann/json.hpp>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/layout_map/rules_file.h"
#include "meshlayout/rules/rules_internal.h"

namespace meshlayout::rules_internal {
namespace {

// A Python dict literal of the layout map, as Python prints one:
//   {'token_embedding/embeddings': ('model', 'batch'), r'dense.*kernel': (None, 'model')}
// (strings '…' or "…", r-prefixed raw or with Python's escapes, unknown escapes such as \d
// kept as written; tuples or lists; None; trailing commas; # comments) as JSON.
class PythonLiteral {
 public:
  PythonLiteral(std::string_view text, std::string_view source) : t_(text), source_(source) {}

  ojson document() {
    ojson v = value(0);
    space();
    if (i_ < t_.size()) error("unexpected text after the dict");
    return v;
  }

 private:
  [[noreturn]] void error(const std::string& what) const {
    size_t line = 1, col = 1;
    for (size_t k = 0; k < i_ && k < t_.size(); ++k) {
      col = t_[k] == '\n' ? 1 : col + 1;
      line += t_[k] == '\n' ? 1 : 0;
    }
    throw ValueError(fmt::format("{}:{}:{}: not a Python dict literal of layouts: {}", source_,
                                 line, col, what));
  }
  void space() {
    while (i_ < t_.size()) {
      if (std::isspace(static_cast<unsigned char>(t_[i_]))) {
        ++i_;
      } else if (t_[i_] == '#') {
        while (i_ < t_.size() && t_[i_] != '\n') ++i_;
      } else {
        return;
      }
    }
  }
  std::string string() {
    bool raw = false;
    if (t_[i_] == 'r' || t_[i_] == 'R') {
      raw = true;
      ++i_;
    }
    const char q = t_[i_++];
    std::string out;
    while (true) {
      if (i_ >= t_.size() || t_[i_] == '\n') error("a string that is never closed");
      const char c = t_[i_++];
      if (c == q) return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i_ >= t_.size()) error("a string that is never closed");
      const char e = t_[i_++];
      if (raw) {
        out += '\\';
        out += e;
        continue;
      }
      switch (e) {
        case '\\':
        case '\'':
        case '"':
          out += e;
          break;
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        default:  // Python keeps an unknown escape (\d, \.) as written
          out += '\\';
          out += e;
      }
    }
  }
  ojson value(int depth) {
    if (depth > 64) error("nested deeper than 64 levels");
    space();
    if (i_ >= t_.size()) error("the text ends where a value was expected");
    const char c = t_[i_];
    if (c == '{') {
      ++i_;
      ojson obj = ojson::object();
      while (true) {
        space();
        if (i_ < t_.size() && t_[i_] == '}') {
          ++i_;
          return obj;
        }
        ojson key = value(depth + 1);
        if (!key.is_string()) error("a key that is not a string (a regex)");
        space();
        if (i_ >= t_.size() || t_[i_] != ':') error("a key without ':'");
        ++i_;
        if (obj.contains(key.get<std::string>())) {
          error(fmt::format("the key {} given twice", quote(key.get<std::string>())));
        }
        obj[key.get<std::string>()] = value(depth + 1);
        space();
        if (i_ < t_.size() && t_[i_] == ',') {
          ++i_;
        } else if (i_ >= t_.size() || t_[i_] != '}') {
          error("expected ',' or '}' in the dict");
        }
      }
    }
    if (c == '(' || c == '[') {
      const char close = c == '(' ? ')' : ']';
      ++i_;
      ojson list = ojson::array();
      while (true) {
        space();
        if (i_ < t_.size() && t_[i_] == close) {
          ++i_;
          return list;
        }
        list.push_back(value(depth + 1));
        space();
        if (i_ < t_.size() && t_[i_] == ',') {
          ++i_;
        } else if (i_ >= t_.size() || t_[i_] != close) {
          error(fmt::format("expected ',' or '{}'", close));
        }
      }
    }
    if (c == '\'' || c == '"' ||
        ((c == 'r' || c == 'R') && i_ + 1 < t_.size() &&
         (t_[i_ + 1] == '\'' || t_[i_ + 1] == '"'))) {
      return string();
    }
    if (t_.substr(i_, 4) == "None") {
      i_ += 4;
      return nullptr;
    }
    error(fmt::format("unexpected '{}'; expected a string, None, a tuple, a list or a dict", c));
  }

  std::string_view t_;
  std::string_view source_;
  size_t i_ = 0;
};

}  // namespace

RuleSet read_keras_hub(std::string_view text, const ConvertOptions& options,
                       std::string_view source) {
  // JSON, or the dict as Python prints it (single quotes, tuples, None).
  ojson root;
  try {
    root = parse_json_ordered(text, source);
  } catch (const ValueError& json_error) {
    try {
      root = PythonLiteral(text, source).document();
    } catch (const ValueError& python_error) {
      throw ValueError(fmt::format("{} (read as JSON); {} (read as Python)", json_error.what(),
                                   python_error.what()));
    }
  }
  if (!root.is_object()) {
    fail(source, "top level",
         "must be an object {regex: layout} (keras-hub's get_layout_map as JSON), got " +
             type_of(root));
  }
  RuleSet out;
  for (const auto& [pattern, layout] : root.items()) {
    const std::string where = fmt::format("rule {}", quote(pattern));
    ConvertedRule r{.pattern = pattern,
                    .layout = parse_layout(layout, source, where),
                    .origin = fmt::format("{} {}", source, where)};
    check_layout(r, options.mesh);
    out.rules.push_back(std::move(r));
  }
  return out;
}

RuleSet read_meshlayout(std::string_view text, const ConvertOptions& options,
                        std::string_view source) {
  RulesFile file = parse_rules_json(text, source);
  RuleSet out;
  out.mesh = file.mesh;
  out.mode = file.mode;
  for (size_t i = 0; i < file.rules.size(); ++i) {
    ConvertedRule r{
        .pattern = file.rules[i].first,
        .layout = file.rules[i].second,
        .origin = fmt::format("{} rules[{}] ({})", source, i, quote(file.rules[i].first)),
        .reason = i < file.reasons.size() ? file.reasons[i] : std::string()};
    check_layout(r, options.mesh ? options.mesh : file.mesh);
    out.rules.push_back(std::move(r));
  }
  return out;
}

std::string rules_lines(const RuleSet& rules, bool as_object) {
  std::string out;
  for (size_t i = 0; i < rules.rules.size(); ++i) {
    const ConvertedRule& r = rules.rules[i];
    const std::string pattern =
        ojson(r.pattern).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    const std::string layout = layout_text(r.layout);
    const std::string sep = i + 1 < rules.rules.size() ? "," : "";
    if (as_object) {
      out += fmt::format("  {}: {}{}\n", pattern, layout, sep);
    } else if (r.reason.empty()) {
      out += fmt::format("    [{}, {}]{}\n", pattern, layout, sep);
    } else {  // meshlayout's third element: why
      out += fmt::format(
          "    [{}, {},\n     {}]{}\n", pattern, layout,
          ojson(r.reason).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), sep);
    }
  }
  return out;
}

}  // namespace meshlayout::rules_internal
