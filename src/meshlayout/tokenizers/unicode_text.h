// unicode_text.h — the UTF-8 helpers the tokenizers share: strict validation (no overlong
// forms, no surrogates, nothing past U+10FFFF — what Python's and Rust's decoders accept),
// decoding one character, appending a code point, and Unicode's White_Space property (what
// `\s` means in the regexes of Hugging Face tokenizer files).
//
// Example:
//   utf8_sequence_length("\xC3\xA9", 0)      // 2 (é)
//   first_invalid_utf8("ab\xFF")             // 2
//   check_utf8(text, "the text to encode");  // ValueError naming the byte and its offset
//   std::string s; append_utf8(s, U'▁');     // "\xE2\x96\x81"
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace meshlayout::tokenizers {

/// Bytes of the valid UTF-8 character starting at text[pos] (1 to 4), or 0 when the bytes
/// there do not start a valid character (a stray continuation byte, a truncated sequence,
/// an overlong form, a surrogate, a value above U+10FFFF). `pos` must be < text.size().
size_t utf8_sequence_length(std::string_view text, size_t pos);

/// Offset of the first byte that is not part of a valid UTF-8 character, or npos.
size_t first_invalid_utf8(std::string_view text);

/// Throws ValueError when `text` is not valid UTF-8, naming `what`, the offending byte (hex)
/// and its offset.
void check_utf8(std::string_view text, std::string_view what);

/// The code point of the valid character of `len` bytes at text[pos].
char32_t decode_utf8(std::string_view text, size_t pos, size_t len);

/// Appends the UTF-8 encoding of `cp` (a scalar value) to `out`.
void append_utf8(std::string& out, char32_t cp);

/// Unicode's White_Space property: U+0009–U+000D, U+0020, U+0085, U+00A0, U+1680,
/// U+2000–U+200A, U+2028, U+2029, U+202F, U+205F, U+3000.
bool is_unicode_whitespace(char32_t cp);

/// The White_Space set as the body of an RE2 character class (without the brackets).
inline constexpr std::string_view kWhitespaceClassBody =
    "\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}"
    "\\x{3000}";

}  // namespace meshlayout::tokenizers
