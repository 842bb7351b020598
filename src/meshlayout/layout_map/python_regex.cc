#include "meshlayout/layout_map/python_regex.h"

#include <fmt/format.h>
#include <re2/re2.h>

#include <algorithm>
#include <cstdint>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"

#include <vector>

namespace meshlayout {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

[[noreturn]] void refuse(std::string_view pattern, std::string_view feature, size_t pos, size_t len,
                         std::string_view hint) {
  throw ValueError(fmt::format(
      "regex {} uses {} ({} at position {}), which Python's re has but meshlayout refuses: "
      "rules run on RE2, whose matching time is linear in the path. {}",
      quote(pattern), feature, quote(pattern.substr(pos, len)), pos, hint));
}

// Length of a valid Python repeat `{m}`, `{m,}`, `{m,n}`, `{,n}` starting at p[i] == '{',
// or 0 when the brace is a literal.
size_t repeat_length(std::string_view p, size_t i) {
  size_t j = i + 1;
  size_t digits_before = 0;
  while (j < p.size() && is_digit(p[j])) ++j, ++digits_before;
  if (j < p.size() && p[j] == '}') return digits_before ? j - i + 1 : 0;
  if (j >= p.size() || p[j] != ',') return 0;
  ++j;
  while (j < p.size() && is_digit(p[j])) ++j;
  if (j < p.size() && p[j] == '}') return j - i + 1;
  return 0;
}

// RE2 refuses a counted repetition over 1000 ({1001}, {0,5000}); Python's re accepts them.
constexpr uint64_t kRe2MaxRepeat = 1000;

// `rep` is a counted repetition ({n}, {m,n}, {,n}, {m,}) at position `pos` of `p`.
void check_repeat_count(std::string_view p, std::string_view rep, size_t pos) {
  uint64_t count = 0;
  for (char c : rep) {
    if (is_digit(c)) {
      count = std::min<uint64_t>(count * 10 + static_cast<uint64_t>(c - '0'), uint64_t{1} << 40);
      if (count > kRe2MaxRepeat) {
        throw ValueError(fmt::format(
            "regex {} has the repetition {} at position {}, over RE2's limit of {} repetitions "
            "(Python's re accepts it, but meshlayout matches with RE2)",
            quote(p), quote(rep), pos, kRe2MaxRepeat));
      }
    } else {
      count = 0;
    }
  }
}

// Python's \d \w \s are Unicode-aware for str patterns; RE2's are ASCII. These sets equal
// CPython's on every code point (checked against CPython 3.11 / Unicode 14).
constexpr std::string_view kUnicodeDigit = "\\p{Nd}";
constexpr std::string_view kUnicodeWord = "\\p{L}\\p{N}_";
constexpr std::string_view kUnicodeSpace = "\\t\\n\\v\\f\\r\\x1c-\\x1f\\x{85}\\p{Z}";
// Under Python's ASCII flag (?a).
constexpr std::string_view kAsciiDigit = "0-9";
constexpr std::string_view kAsciiWord = "0-9A-Za-z_";
constexpr std::string_view kAsciiSpace = "\\t\\n\\v\\f\\r ";

// True when the pattern starts with global flags that include 'a' (ASCII classes).
bool leading_ascii_flag(std::string_view p) {
  size_t i = 0;
  while (p.substr(i, 2) == "(?") {
    size_t j = i + 2;
    bool ascii = false;
    while (j < p.size() && std::string_view("aiLmsux").find(p[j]) != std::string_view::npos) {
      ascii = ascii || p[j] == 'a';
      ++j;
    }
    if (j == i + 2 || j >= p.size() || p[j] != ')') return false;
    if (ascii) return true;
    i = j + 1;
  }
  return false;
}

}  // namespace

std::string python_regex_to_re2(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 8);
  bool in_class = false;
  size_t class_start = 0;         // index just after '[' or '[^'
  bool after_quantifier = false;  // the previous token was *, +, ? or {…}
  bool after_lazy = false;        // …and was followed by a lazy '?'
  const bool ascii = leading_ascii_flag(p);
  const std::string_view digit = ascii ? kAsciiDigit : kUnicodeDigit;
  const std::string_view word = ascii ? kAsciiWord : kUnicodeWord;
  const std::string_view space = ascii ? kAsciiSpace : kUnicodeSpace;
  bool at_start = true;  // only global flag groups seen so far
  // A set holding \W or \S (which RE2 cannot nest in a set) becomes (?:[rest]|[^word]).
  size_t class_out_start = 0;
  bool class_negated = false;
  std::vector<std::string> class_extras;
  size_t i = 0;
  while (i < p.size()) {
    const char c = p[i];
    const bool token_at_start = at_start;
    at_start = false;
    if (c == '\\') {
      if (i + 1 >= p.size()) {
        throw ValueError(fmt::format("regex {} ends with a lone backslash", quote(p)));
      }
      const char d = p[i + 1];
      after_quantifier = after_lazy = false;
      if (is_digit(d) && d != '0' && !in_class) {
        size_t len = 2 + (i + 2 < p.size() && is_digit(p[i + 2]) ? 1 : 0);
        refuse(p, "a back-reference", i, len,
               "Repeat the group's text explicitly or list the alternatives instead.");
      }
      if (is_digit(d)) {  // octal escape: \0, \012, or in a class \1
        size_t j = i + 1;
        int value = 0;
        while (j < p.size() && j < i + 4 && p[j] >= '0' && p[j] <= '7') {
          value = value * 8 + (p[j] - '0');
          ++j;
        }
        if (j == i + 1) {
          throw ValueError(fmt::format("regex {} has a bad escape {} at position {}", quote(p),
                                       quote(p.substr(i, 2)), i));
        }
        out += fmt::format("\\x{{{:x}}}", value);
        i = j;
        continue;
      }
      if (d == 'd' || d == 'w' || d == 's' || d == 'D' || d == 'W' || d == 'S') {
        const char lower = static_cast<char>(d | 0x20);
        const std::string_view set = lower == 'd' ? digit : lower == 'w' ? word : space;
        const bool negated = d != lower;
        if (!in_class) {
          out += negated ? "[^" : "[";
          out += set;
          out += "]";
        } else if (!negated) {
          out += set;
        } else if (d == 'D' && !ascii) {
          out += "\\P{Nd}";
        } else if (!class_negated) {
          class_extras.push_back("[^" + std::string(set) + "]");
        } else {
          refuse(p, "a negated class escape inside a negated character set", i, 2,
                 "Write the set without it, listing what to exclude.");
        }
        i += 2;
        continue;
      }
      if (d == 'x') {
        if (i + 3 >= p.size() || !is_hex(p[i + 2]) || !is_hex(p[i + 3])) {
          throw ValueError(fmt::format(
              "regex {} has a bad escape {} at position {}: \\x takes exactly two hex digits",
              quote(p), quote(p.substr(i, 4)), i));
        }
        out += p.substr(i, 4);
        i += 4;
        continue;
      }
      if ((d >= 'a' && d <= 'z') || (d >= 'A' && d <= 'Z')) {
        constexpr std::string_view kPythonEscapes = "abfnrtvAZBuUN";
        if (kPythonEscapes.find(d) == std::string_view::npos ||
            (in_class && (d == 'A' || d == 'Z' || d == 'B'))) {
          throw ValueError(fmt::format(
              "regex {} has a bad escape {} at position {} (Python's re does not know it)",
              quote(p), quote(p.substr(i, 2)), i));
        }
      }
      if (d == 'Z' && !in_class) {
        out += "\\z";
      } else if (d == 'u' || d == 'U') {
        size_t n = d == 'u' ? 4 : 8;
        if (i + 2 + n > p.size()) {
          throw ValueError(fmt::format("regex {} has an incomplete escape {} at position {}",
                                       quote(p), quote(p.substr(i)), i));
        }
        for (size_t k = 0; k < n; ++k) {
          if (!is_hex(p[i + 2 + k])) {
            throw ValueError(fmt::format("regex {} has a bad escape {} at position {}", quote(p),
                                         quote(p.substr(i, 2 + n)), i));
          }
        }
        out += fmt::format("\\x{{{}}}", p.substr(i + 2, n));
        i += 2 + n;
        continue;
      } else if (d == 'N') {
        refuse(p, "a named Unicode escape", i, 2, "Write the character itself or \\uXXXX.");
      } else if (d == 'b' && in_class) {
        out += "\\x08";  // Python: backspace inside a class
      } else if (d == '_' || static_cast<unsigned char>(d) >= 0x80) {
        out += d;  // Python: an escaped non-ASCII-alphanumeric is the character itself
      } else {
        out += c;
        out += d;
      }
      i += 2;
      continue;
    }
    if (in_class) {
      if (c == ']' && i != class_start) {
        in_class = false;
        out += c;
        if (!class_extras.empty()) {
          std::string set_text = out.substr(class_out_start);
          out.resize(class_out_start);
          out += "(?:";
          if (set_text != "[]") out += set_text + "|";
          for (size_t e = 0; e < class_extras.size(); ++e) out += (e ? "|" : "") + class_extras[e];
          out += ")";
          class_extras.clear();
        }
      } else if (c == '[') {
        out += "\\[";  // literal in Python; RE2 would read [: as a POSIX class
      } else if (c == ']') {
        out += "\\]";  // ']' first in a class is literal in Python
      } else {
        out += c;
      }
      ++i;
      continue;
    }
    if (c == '[') {
      in_class = true;
      after_quantifier = after_lazy = false;
      class_out_start = out.size();
      class_negated = false;
      out += c;
      ++i;
      if (i < p.size() && p[i] == '^') {
        out += '^';
        class_negated = true;
        ++i;
      }
      class_start = i;
      continue;
    }
    if (c == '(' && i + 1 < p.size() && p[i + 1] == '?') {
      after_quantifier = after_lazy = false;
      const char k = i + 2 < p.size() ? p[i + 2] : '\0';
      if (k == '=' || k == '!') {
        refuse(p, "a look-ahead", i, 3, "Match the following text explicitly instead.");
      }
      if (k == '<' && i + 3 < p.size() && (p[i + 3] == '=' || p[i + 3] == '!')) {
        refuse(p, "a look-behind", i, 4, "Match the preceding text explicitly instead.");
      }
      if (k == '>') refuse(p, "an atomic group", i, 3, "Use a plain group (?:...).");
      if (k == '(') refuse(p, "a conditional group", i, 3, "Write the alternatives with |.");
      if (k == 'P' && i + 3 < p.size() && p[i + 3] == '=') {
        refuse(p, "a named back-reference", i, 4,
               "Repeat the group's text explicitly or list the alternatives instead.");
      }
      if (k == '#') {  // comment: up to the first ')'
        size_t close = p.find(')', i);
        if (close == std::string_view::npos) {
          throw ValueError(
              fmt::format("regex {} has an unterminated comment at position {}", quote(p), i));
        }
        i = close + 1;
        at_start = token_at_start;  // a comment does not end the leading flags
        continue;
      }
      // Inline flags (?aiLmsux-imsx) or (?flags:...)
      size_t j = i + 2;
      std::string flags;
      while (j < p.size() && std::string_view("aiLmsux-").find(p[j]) != std::string_view::npos) {
        if (p[j] == 'x') {
          refuse(p, "the verbose flag", j, 1, "Remove the flag and the pattern's free spacing.");
        }
        if (p[j] == 'L') refuse(p, "the locale flag", j, 1, "Remove the flag.");
        if (p[j] != 'a' && p[j] != 'u') flags += p[j];  // \w \d \s are ASCII in RE2 already
        ++j;
      }
      if (j > i + 2 && j < p.size() && p[j] == ')' && !token_at_start) {
        throw ValueError(fmt::format(
            "regex {} sets global flags {} at position {}; Python's re accepts them only at the "
            "start of the pattern (or use a scoped group like (?i:...))",
            quote(p), quote(p.substr(i, j - i + 1)), i));
      }
      if (j > i + 2 && j < p.size() && p[j] == ':' &&
          p.substr(i + 2, j - i - 2).find('a') != std::string_view::npos) {
        refuse(p, "a scoped ASCII flag", i, j - i + 1,
               "Put (?a) at the start of the pattern to make every class ASCII.");
      }
      if (j > i + 2 && j < p.size() && (p[j] == ')' || p[j] == ':')) {
        if (p[j] == ')') at_start = token_at_start;
        if (flags.empty() || flags == "-") {
          if (p[j] == ':') out += "(?:";
        } else {
          out += "(?" + flags + p[j];
        }
        i = j + 1;
        continue;
      }
      if (k == ':' || (k == 'P' && i + 3 < p.size() && p[i + 3] == '<')) {
        out += "(?";
        i += 2;
        continue;
      }
      throw ValueError(fmt::format("regex {} has an unknown group extension {} at position {}",
                                   quote(p), quote(p.substr(i, 3)), i));
    }
    if (c == '*' || c == '+' || c == '?') {
      if (after_quantifier && !after_lazy && c == '+') {
        refuse(p, "a possessive quantifier", i - 1, 2, "Use the plain quantifier.");
      }
      if (after_quantifier && !after_lazy && c == '?') {
        after_lazy = true;
      } else {
        after_quantifier = true;
        after_lazy = false;
      }
      out += c;
      ++i;
      continue;
    }
    if (c == '{') {
      size_t len = repeat_length(p, i);
      if (len > 0) {
        if (after_quantifier && !after_lazy) {
          // Let RE2 report "bad repetition operator" for a repeat of a repeat.
        }
        std::string_view rep = p.substr(i, len);
        check_repeat_count(p, rep, i);
        out += rep[1] == ',' ? "{0" + std::string(rep.substr(1)) : std::string(rep);
        i += len;
        after_quantifier = true;
        after_lazy = false;
        continue;
      }
      out += "\\{";  // a literal brace, as Python reads it
      ++i;
      after_quantifier = after_lazy = false;
      continue;
    }
    if (c == '}') {
      out += "\\}";
      ++i;
      after_quantifier = after_lazy = false;
      continue;
    }
    out += c;
    ++i;
    after_quantifier = after_lazy = false;
  }
  if (in_class) {
    throw ValueError(
        fmt::format("regex {} does not compile: unterminated character set starting at position {}",
                    quote(p), class_start > 0 ? class_start - 1 : 0));
  }
  RE2::Options options;
  options.set_log_errors(false);
  RE2 re(out, options);
  if (!re.ok()) {
    if (re.error_code() == RE2::ErrorRepeatSize) {  // nested repeats multiply past 1000
      throw ValueError(fmt::format(
          "regex {} does not compile: its repetitions exceed RE2's limit of {} (nested "
          "repeats count multiplied: {}); Python's re accepts it, but meshlayout matches with "
          "RE2",
          quote(p), kRe2MaxRepeat, quote(re.error_arg())));
    }
    // RE2's message ends with the offending text (error_arg), which may be the whole pattern.
    std::string what = re.error();
    if (const std::string& arg = re.error_arg(); !arg.empty() && what.ends_with(arg)) {
      what = what.substr(0, what.size() - arg.size()) + quote(arg);
    }
    throw ValueError(fmt::format("regex {} does not compile: {}", quote(p), what));
  }
  return out;
}

}  // namespace meshlayout
