#include "meshlayout/tokenizers/hf_decoders.h"

#include <fmt/format.h>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/tokenizers/hf_json.h"
#include "meshlayout/tokenizers/hf_pretokenizers.h"
#include "meshlayout/tokenizers/unicode_text.h"

namespace meshlayout::tokenizers {
namespace {

class ByteLevelDecoder final : public Decoder {
 public:
  void apply(std::vector<std::string>& tokens) const override {
    std::string out;
    for (const std::string& token : tokens) {
      std::string bytes;
      bool all = true;
      for (size_t pos = 0; pos < token.size() && all;) {
        const size_t len = utf8_sequence_length(token, pos);
        auto b = len == 0 ? std::nullopt : byte_level_byte(decode_utf8(token, pos, len));
        if (!b) {
          all = false;
        } else {
          bytes += static_cast<char>(*b);
          pos += len;
        }
      }
      out += all ? bytes : token;  // a token outside the alphabet (an added token) as it is
    }
    tokens = {std::move(out)};
  }
};

class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(std::unique_ptr<HfRegex> pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void apply(std::vector<std::string>& tokens) const override {
    for (std::string& token : tokens) token = pattern_->replace_all(token, content_);
  }

 private:
  std::unique_ptr<HfRegex> pattern_;
  std::string content_;
};

std::optional<unsigned char> byte_token(std::string_view token) {
  if (token.size() != 6 || !token.starts_with("<0x") || token.back() != '>') return std::nullopt;
  unsigned value = 0;
  for (char c : token.substr(3, 2)) {
    value <<= 4;
    if (c >= '0' && c <= '9') {
      value |= c - '0';
    } else if (c >= 'A' && c <= 'F') {
      value |= c - 'A' + 10;
    } else if (c >= 'a' && c <= 'f') {
      value |= c - 'a' + 10;
    } else {
      return std::nullopt;
    }
  }
  return static_cast<unsigned char>(value);
}

class ByteFallbackDecoder final : public Decoder {
 public:
  void apply(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string pending;
    const auto flush = [&] {
      if (pending.empty()) return;
      if (first_invalid_utf8(pending) == std::string_view::npos) {
        out.push_back(pending);
      } else {
        for (size_t i = 0; i < pending.size(); ++i) out.push_back("\xEF\xBF\xBD");  // U+FFFD
      }
      pending.clear();
    };
    for (std::string& token : tokens) {
      if (auto b = byte_token(token)) {
        pending += static_cast<char>(*b);
      } else {
        flush();
        out.push_back(std::move(token));
      }
    }
    flush();
    tokens = std::move(out);
  }
};

class FuseDecoder final : public Decoder {
 public:
  void apply(std::vector<std::string>& tokens) const override {
    std::string out;
    for (const std::string& token : tokens) out += token;
    tokens = {std::move(out)};
  }
};

class StripDecoder final : public Decoder {
 public:
  StripDecoder(std::string content, int64_t start, int64_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void apply(std::vector<std::string>& tokens) const override {
    for (std::string& token : tokens) {
      size_t begin = 0, end = token.size();
      for (int64_t i = 0; i < start_ && token.compare(begin, content_.size(), content_) == 0 &&
                          begin + content_.size() <= end;
           ++i) {
        begin += content_.size();
      }
      for (int64_t i = 0; i < stop_ && end >= begin + content_.size() &&
                          token.compare(end - content_.size(), content_.size(), content_) == 0;
           ++i) {
        end -= content_.size();
      }
      token = token.substr(begin, end - begin);
    }
  }

 private:
  std::string content_;
  int64_t start_, stop_;
};

class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool strip_first)
      : replacement_(std::move(replacement)), strip_first_(strip_first) {}
  void apply(std::vector<std::string>& tokens) const override {
    // As Hugging Face: in the first token every replacement character is dropped (unless
    // prepend_scheme is "never"); elsewhere each becomes a space.
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string out;
      const std::string& token = tokens[i];
      for (size_t pos = 0; pos < token.size();) {
        if (token.compare(pos, replacement_.size(), replacement_) == 0) {
          if (!(i == 0 && strip_first_)) out += ' ';
          pos += replacement_.size();
        } else {
          out += token[pos++];
        }
      }
      tokens[i] = std::move(out);
    }
  }

 private:
  std::string replacement_;
  bool strip_first_;
};

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps)
      : steps_(std::move(steps)) {}
  void apply(std::vector<std::string>& tokens) const override {
    for (const auto& step : steps_) step->apply(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

class TemplatePostProcessor final : public PostProcessor {
 public:
  explicit TemplatePostProcessor(std::vector<std::optional<std::vector<int64_t>>> items)
      : items_(std::move(items)) {}
  std::vector<int64_t> process(std::vector<int64_t> ids) const override {
    std::vector<int64_t> out;
    for (const auto& item : items_) {
      if (item) {
        out.insert(out.end(), item->begin(), item->end());
      } else {
        out.insert(out.end(), ids.begin(), ids.end());
      }
    }
    return out;
  }
  std::optional<int64_t> leading_special() const override {
    if (!items_.empty() && items_[0] && !items_[0]->empty()) return items_[0]->front();
    return std::nullopt;
  }

 private:
  std::vector<std::optional<std::vector<int64_t>>> items_;  // nullopt: the text ($A)
};

class SequencePostProcessor final : public PostProcessor {
 public:
  explicit SequencePostProcessor(std::vector<std::unique_ptr<PostProcessor>> steps)
      : steps_(std::move(steps)) {}
  std::vector<int64_t> process(std::vector<int64_t> ids) const override {
    for (const auto& step : steps_) ids = step->process(std::move(ids));
    return ids;
  }
  std::optional<int64_t> leading_special() const override {
    for (const auto& step : steps_) {
      if (auto id = step->leading_special()) return id;
    }
    return std::nullopt;
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> steps_;
};

class IdentityPostProcessor final : public PostProcessor {
 public:
  std::vector<int64_t> process(std::vector<int64_t> ids) const override { return ids; }
};

std::unique_ptr<PostProcessor> parse_template(
    const nlohmann::json& j, const std::string& path,
    const std::function<std::optional<int64_t>(std::string_view)>& token_id) {
  const nlohmann::json& single = hf_list(j, "single", path);
  const nlohmann::json& specials = hf_field(j, "special_tokens", path);
  std::vector<std::optional<std::vector<int64_t>>> items;
  for (size_t i = 0; i < single.size(); ++i) {
    const std::string at = hf_path(hf_path(path, "single"), i);
    const nlohmann::json& item = single[i];
    if (item.is_object() && item.contains("Sequence")) {
      const std::string id = hf_string(item["Sequence"], "id", hf_path(at, "Sequence"));
      if (id != "A") {
        throw ValueError(fmt::format(
            "tokenizer.json: {}.Sequence.id is {}; the single template can only hold \"A\"", at,
            quote(id)));
      }
      items.emplace_back(std::nullopt);
    } else if (item.is_object() && item.contains("SpecialToken")) {
      const std::string name = hf_string(item["SpecialToken"], "id", hf_path(at, "SpecialToken"));
      const std::string sp = hf_path(hf_path(path, "special_tokens"), name);
      if (!specials.is_object() || !specials.contains(name)) {
        throw ValueError(fmt::format(
            "tokenizer.json: {} names the special token {}, which {}.special_tokens lacks", at,
            quote(name), path));
      }
      std::vector<int64_t> ids;
      const nlohmann::json& tokens = hf_list(specials[name], "tokens", sp);
      const nlohmann::json& given = hf_list(specials[name], "ids", sp);
      for (size_t k = 0; k < given.size(); ++k) {
        if (!given[k].is_number_integer() || given[k].get<int64_t>() < 0) {
          throw ValueError(fmt::format("tokenizer.json: {}.ids[{}] is {}; expected a token id", sp,
                                       k, json_excerpt(given[k])));
        }
        const int64_t id = given[k].get<int64_t>();
        if (k < tokens.size() && tokens[k].is_string()) {
          auto known = token_id(tokens[k].get<std::string>());
          if (!known || *known != id) {
            throw ValueError(fmt::format(
                "tokenizer.json: {} gives the token {} the id {}, but the vocabulary {}", sp,
                json_excerpt(tokens[k]), id,
                known ? fmt::format("gives it {}", *known) : std::string("lacks it")));
          }
        }
        ids.push_back(id);
      }
      items.emplace_back(std::move(ids));
    } else {
      throw ValueError(fmt::format(
          "tokenizer.json: {} is {}; expected {{\"SpecialToken\": …}} or {{\"Sequence\": …}}", at,
          json_excerpt(item)));
    }
  }
  return std::make_unique<TemplatePostProcessor>(std::move(items));
}

}  // namespace

std::unique_ptr<Decoder> parse_decoder(const nlohmann::json& j, const std::string& path) {
  if (j.is_null()) return nullptr;
  const std::string type = hf_type(j, path);
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Replace") {
    return std::make_unique<ReplaceDecoder>(
        parse_pattern(hf_field(j, "pattern", path), hf_path(path, "pattern")),
        hf_string(j, "content", path));
  }
  if (type == "Strip") {
    return std::make_unique<StripDecoder>(hf_string(j, "content", path),
                                          hf_int(j, "start", path, 0, 0, INT32_MAX),
                                          hf_int(j, "stop", path, 0, 0, INT32_MAX));
  }
  if (type == "Metaspace") {
    bool strip_first = hf_bool(j, "add_prefix_space", path, true);
    if (j.contains("prepend_scheme")) strip_first = hf_string(j, "prepend_scheme", path) != "never";
    return std::make_unique<MetaspaceDecoder>(hf_string(j, "replacement", path), strip_first);
  }
  if (type == "Sequence") {
    const std::string items = hf_path(path, "decoders");
    const nlohmann::json& list = hf_list(j, "decoders", path);
    std::vector<std::unique_ptr<Decoder>> steps;
    for (size_t i = 0; i < list.size(); ++i) {
      if (auto step = parse_decoder(list[i], hf_path(items, i))) steps.push_back(std::move(step));
    }
    return std::make_unique<SequenceDecoder>(std::move(steps));
  }
  hf_unsupported("decoder", type, path,
                 "ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace and Sequence");
}

std::unique_ptr<PostProcessor> parse_post_processor(
    const nlohmann::json& j, const std::string& path,
    const std::function<std::optional<int64_t>(std::string_view)>& token_id) {
  if (j.is_null()) return nullptr;
  const std::string type = hf_type(j, path);
  if (type == "TemplateProcessing") return parse_template(j, path, token_id);
  if (type == "ByteLevel") return std::make_unique<IdentityPostProcessor>();  // offsets only
  if (type == "Sequence") {
    const std::string items = hf_path(path, "processors");
    const nlohmann::json& list = hf_list(j, "processors", path);
    std::vector<std::unique_ptr<PostProcessor>> steps;
    for (size_t i = 0; i < list.size(); ++i) {
      if (auto step = parse_post_processor(list[i], hf_path(items, i), token_id)) {
        steps.push_back(std::move(step));
      }
    }
    return std::make_unique<SequencePostProcessor>(std::move(steps));
  }
  hf_unsupported("post-processor", type, path, "TemplateProcessing, ByteLevel and Sequence");
}

}  // namespace meshlayout::tokenizers
