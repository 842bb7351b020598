// strings.h — small text helpers shared by every module: quoting values the way Python's
// repr() does (so messages read like Keras'), joining, splitting and checked integer parsing.
//
// Example:
//   quote("d1.kernel")                 // "'d1.kernel'"
//   repr_list({"data", "model"})       // "['data', 'model']"
//   parse_int64("12", "mesh axis size") // 12, or ValueError naming the text and its role
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace meshlayout {

/// Longest text quote() shows whole; longer text is cut (at a character boundary) there.
inline constexpr size_t kMaxQuotedBytes = 200;

/// `text` in single quotes with backslashes, quotes and control characters escaped, as
/// Python's repr() of a str; NUL, C0/C1 controls, DEL and bytes that are not valid UTF-8
/// become \xNN, so the result is printable, valid UTF-8 and never cut short by a NUL. Text
/// over kMaxQuotedBytes is cut: `'abc…' (52428800 bytes)`.
std::string quote(std::string_view text);

/// `text` with the same escapes as quote() (controls, DEL, invalid UTF-8; not quotes or
/// backslashes) and no cut: for names printed as plain text, so a tensor name cannot move
/// the cursor or inject terminal escapes. Printable text is returned unchanged.
std::string escape_controls(std::string_view text);

/// Python list repr of strings: `['a', 'b']`.
std::string repr_list(std::span<const std::string> items);

/// Integers joined as `[2, 4]`.
std::string repr_ints(std::span<const int64_t> values);

/// `items` joined with `sep`.
std::string join(std::span<const std::string> items, std::string_view sep);

/// `text` split at every `sep` (empty pieces kept).
std::vector<std::string> split(std::string_view text, char sep);

/// `text` without leading and trailing spaces and tabs.
std::string_view trim(std::string_view text);

/// Parses a whole decimal integer; throws ValueError naming `what` and the text otherwise.
int64_t parse_int64(std::string_view text, std::string_view what);

/// True for `[A-Za-z_][A-Za-z0-9_]*`.
bool is_identifier(std::string_view text);

/// FNV-1a, 64 bits, of the bytes: the same on every process, compiler and machine (std::hash is
/// not). For comparing what processes read or were told, not against an adversary.
uint64_t fnv1a_64(std::string_view bytes);

}  // namespace meshlayout
