// hf_regex.cc — see hf_regex.h.
#include "meshlayout/tokenizers/hf_regex.h"

#include <fmt/format.h>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/tokenizers/hf_json.h"
#include "meshlayout/tokenizers/unicode_text.h"

namespace meshlayout::tokenizers {

std::string translate_hf_regex(std::string_view pattern, std::string_view path) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char n = pattern[++i];
      if (n == 's') {
        out += in_class ? std::string(kWhitespaceClassBody)
                        : fmt::format("[{}]", kWhitespaceClassBody);
      } else if (n == 'S' && !in_class) {
        out += fmt::format("[^{}]", kWhitespaceClassBody);
      } else if (n == 'S') {
        throw ValueError(fmt::format(
            "tokenizer.json: the regex {} at {} uses \\S inside a character class, which "
            "meshlayout does not support",
            quote(pattern), path));
      } else {
        out += c;
        out += n;
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (in_class && c == '[' && i + 1 < pattern.size() && pattern[i + 1] == ':') {
      const size_t close = pattern.find(":]", i + 2);
      if (close != std::string_view::npos) {
        out += pattern.substr(i, close + 2 - i);
        i = close + 1;
        continue;
      }
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

HfRegex::HfRegex(std::string_view pattern, std::string_view path, bool literal) {
  std::string re2_pattern;
  constexpr std::string_view kLookahead = R"(\s+(?!\S)|\s+)";
  if (literal) {
    if (pattern.empty()) {
      throw ValueError(
          fmt::format("tokenizer.json: {} is an empty string; expected text to find", path));
    }
    re2_pattern = RE2::QuoteMeta(re2::StringPiece(pattern.data(), pattern.size()));
  } else if (pattern.ends_with(kLookahead) &&
             (pattern.size() == kLookahead.size() ||
              pattern[pattern.size() - kLookahead.size() - 1] == '|')) {
    std::string_view prefix = pattern.substr(0, pattern.size() - kLookahead.size());
    const std::string run = fmt::format("([{}]+)", kWhitespaceClassBody);
    if (prefix.empty()) {
      re2_pattern = run;
    } else {
      prefix.remove_suffix(1);
      re2_pattern = fmt::format("(?:{})|{}", translate_hf_regex(prefix, path), run);
    }
  } else {
    re2_pattern = translate_hf_regex(pattern, path);
  }
  RE2::Options options;
  options.set_log_errors(false);
  re_ = std::make_unique<RE2>(re2_pattern, options);
  if (!re_->ok()) {
    throw ValueError(fmt::format(
        "tokenizer.json: the regex {} at {} does not compile on RE2: {} (look-around is "
        "supported only as the ending \\s+(?!\\S)|\\s+ of the GPT-2/Llama 3 patterns)",
        quote(pattern), path, re_->error()));
  }
  if (re2_pattern.ends_with(fmt::format("([{}]+)", kWhitespaceClassBody)) && !literal &&
      pattern.ends_with(kLookahead)) {
    lookahead_group_ = re_->NumberOfCapturingGroups();
  }
}

std::vector<std::pair<size_t, size_t>> HfRegex::find_all(std::string_view text) const {
  // Invalid bytes match as \x01 does: neither letter, digit nor whitespace.
  std::string shadow;
  std::string_view subject = text;
  if (first_invalid_utf8(text) != std::string_view::npos) {
    shadow.assign(text);
    for (size_t pos = 0; pos < shadow.size();) {
      const size_t len = utf8_sequence_length(shadow, pos);
      if (len == 0) {
        shadow[pos++] = '\x01';
      } else {
        pos += len;
      }
    }
    subject = shadow;
  }
  const int groups = re_->NumberOfCapturingGroups() + 1;
  std::vector<re2::StringPiece> match(groups);
  std::vector<std::pair<size_t, size_t>> out;
  const re2::StringPiece input(subject.data(), subject.size());
  size_t pos = 0;
  while (pos <= subject.size() &&
         re_->Match(input, pos, subject.size(), RE2::UNANCHORED, match.data(), groups)) {
    const size_t start = match[0].data() - subject.data();
    size_t end = start + match[0].size();
    if (lookahead_group_ > 0 && match[lookahead_group_].data() != nullptr && end < subject.size()) {
      // \s+(?!\S): the run is followed by a non-space, so it gives back its last character
      // (when it has more than one; else the final \s+ alternative takes the one).
      size_t last = end - 1;
      while (last > start && (static_cast<unsigned char>(subject[last]) & 0xC0) == 0x80) --last;
      if (last > start) end = last;
    }
    out.emplace_back(start, end);
    if (end == start) {  // an empty match: step over one character
      if (end >= subject.size()) break;
      const size_t len = utf8_sequence_length(subject, end);
      pos = end + (len == 0 ? 1 : len);
    } else {
      pos = end;
    }
  }
  return out;
}

std::string HfRegex::replace_all(std::string_view text, std::string_view content) const {
  std::string out;
  size_t prev = 0;
  for (const auto& [start, end] : find_all(text)) {
    out.append(text, prev, start - prev);
    out += content;
    prev = end;
  }
  out.append(text, prev);
  return out;
}

std::unique_ptr<HfRegex> parse_pattern(const nlohmann::json& j, const std::string& path) {
  if (j.is_object() && j.size() == 1 && j.contains("String") && j["String"].is_string()) {
    return std::make_unique<HfRegex>(j["String"].get<std::string>(), hf_path(path, "String"),
                                     /*literal=*/true);
  }
  if (j.is_object() && j.size() == 1 && j.contains("Regex") && j["Regex"].is_string()) {
    return std::make_unique<HfRegex>(j["Regex"].get<std::string>(), hf_path(path, "Regex"));
  }
  throw ValueError(fmt::format(
      "tokenizer.json: {} is {}; expected {{\"String\": text}} or {{\"Regex\": pattern}}", path,
      json_excerpt(j)));
}

}  // namespace meshlayout::tokenizers
