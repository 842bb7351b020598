// python_regex.h — accepting the regular expressions Keras users write (Python `re` syntax)
// and running them on RE2, which runs in time linear in the path whatever the pattern.
//
// python_regex_to_re2 checks a pattern and returns the RE2 pattern with the same meaning on
// variable paths. Rewritten: `\d \w \s` (and negations) → the Unicode sets Python uses for str
// patterns (ASCII under a leading `(?a)`), `\Z` → `\z`, `{,n}` → `{0,n}`, `\uXXXX` →
// `\x{…}`, octal escapes → `\x{…}`, `\_` → `_`, `(?#comment)` removed, a literal `{` or `[`
// escaped. Refused with a message saying why: back-references (`\1`, `(?P=name)`), look-ahead
// and look-behind, atomic groups, possessive quantifiers, conditionals, `\N{name}`, the
// verbose and locale flags, a scoped ASCII flag, `\W`/`\S` inside a set, global flags after
// the start, and escapes Python does not know (`\z`, `\p`, `\Q` …: RE2-only syntax).
// Known difference: `\b` and `\B` are ASCII word boundaries in RE2 (Unicode in Python), so
// they differ next to non-ASCII letters; paths are ASCII in practice.
//
// Example:
//   python_regex_to_re2(R"(dense_\d+/kernel\Z)")   // R"(dense_\d+/kernel\z)"
//   python_regex_to_re2(R"((a)\1)")                // ValueError: back-reference …
#pragma once

#include <string>
#include <string_view>

namespace meshlayout {

/// The RE2 pattern equivalent to Python pattern `pattern`; throws ValueError naming the
/// pattern, the offending piece and its position when it uses a Python-only feature or
/// does not compile.
std::string python_regex_to_re2(std::string_view pattern);

}  // namespace meshlayout
