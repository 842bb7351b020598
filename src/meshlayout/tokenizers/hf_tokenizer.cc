#include "meshlayout/tokenizers/hf_tokenizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/json_input.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/tokenizers/hf_json.h"
#include "meshlayout/tokenizers/unicode_text.h"

namespace meshlayout::tokenizers {
namespace {

// Whitespace (Unicode White_Space) ending at `end` / starting at `start` in `text`.
size_t whitespace_before(std::string_view text, size_t end) {
  size_t pos = end;
  while (pos > 0) {
    size_t start = pos - 1;
    while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    const size_t len = utf8_sequence_length(text, start);
    if (len != pos - start || !is_unicode_whitespace(decode_utf8(text, start, len))) break;
    pos = start;
  }
  return pos;
}

size_t whitespace_after(std::string_view text, size_t start) {
  size_t pos = start;
  while (pos < text.size()) {
    const size_t len = utf8_sequence_length(text, pos);
    if (len == 0 || !is_unicode_whitespace(decode_utf8(text, pos, len))) break;
    pos += len;
  }
  return pos;
}

std::vector<std::pair<std::string, std::string>> parse_merges(const nlohmann::json& merges) {
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const nlohmann::json& m = merges[i];
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        throw ValueError(fmt::format(
            "tokenizer.json: model.merges[{}] is {}; expected two tokens separated by one space", i,
            quote(s)));
      }
      out.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      out.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      throw ValueError(
          fmt::format("tokenizer.json: model.merges[{}] is {}; expected \"a b\" or [\"a\", \"b\"]",
                      i, json_excerpt(m)));
    }
  }
  return out;
}

std::unique_ptr<BpeModel> parse_model(const nlohmann::json& model) {
  std::string type;
  if (model.is_object() && !model.contains("type") && model.contains("merges")) {
    type = "BPE";  // old files leave the type out
  } else {
    type = hf_type(model, "model");
  }
  if (type != "BPE") hf_unsupported("model", type, "model", "BPE");
  if (auto it = model.find("dropout");
      it != model.end() && !it->is_null() && !(it->is_number() && it->get<double>() == 0.0)) {
    throw ValueError(fmt::format(
        "tokenizer.json: model.dropout is {}; meshlayout encodes deterministically (expected "
        "null)",
        json_excerpt(*it)));
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (auto it = model.find(key);
        it != model.end() && !it->is_null() && !(it->is_string() && it->get<std::string>() == "")) {
      throw ValueError(fmt::format("tokenizer.json: model.{} is {}; meshlayout supports only null",
                                   key, json_excerpt(*it)));
    }
  }
  const nlohmann::json& vocab_json = hf_field(model, "vocab", "model");
  if (!vocab_json.is_object()) {
    throw ValueError(fmt::format("tokenizer.json: model.vocab is {}; expected an object",
                                 json_excerpt(vocab_json)));
  }
  std::unordered_map<std::string, int64_t> vocab;
  vocab.reserve(vocab_json.size());
  for (const auto& [token, id] : vocab_json.items()) {
    if (!id.is_number_integer()) {
      throw ValueError(fmt::format("tokenizer.json: model.vocab[{}] is {}; expected a token id",
                                   quote(token), json_excerpt(id)));
    }
    vocab.emplace(token, id.get<int64_t>());
  }
  const nlohmann::json& merges = hf_field(model, "merges", "model");
  if (!merges.is_array()) {
    throw ValueError(
        fmt::format("tokenizer.json: model.merges is {}; expected a list", json_excerpt(merges)));
  }
  BpeOptions options;
  if (auto it = model.find("unk_token"); it != model.end() && !it->is_null()) {
    options.unk_token = hf_string(model, "unk_token", "model");
  }
  options.fuse_unk = hf_bool(model, "fuse_unk", "model", false);
  options.byte_fallback = hf_bool(model, "byte_fallback", "model", false);
  options.ignore_merges = hf_bool(model, "ignore_merges", "model", false);
  try {
    return std::make_unique<BpeModel>(std::move(vocab), parse_merges(merges), options);
  } catch (const ValueError& e) {
    throw ValueError(fmt::format("tokenizer.json: model: {}", e.what()));
  }
}

}  // namespace

std::unique_ptr<HfTokenizer> HfTokenizer::from_json(std::string_view text, std::string_view source,
                                                    const nlohmann::json* config) {
  std::unique_ptr<HfTokenizer> tok(new HfTokenizer());
  try {
    nlohmann::json j = parse_json_checked(text);
    if (!j.is_object()) {
      throw ValueError(
          fmt::format("the file holds {}; expected a tokenizer.json object", json_excerpt(j)));
    }
    tok->parse(j, config);
  } catch (const ValueError& e) {
    std::string_view what = e.what();
    if (what.starts_with("tokenizer.json: ")) what.remove_prefix(16);
    throw ValueError(fmt::format("{}: {}", source, what));
  }
  return tok;
}

void HfTokenizer::parse(const nlohmann::json& j, const nlohmann::json* config) {
  if (auto it = j.find("truncation"); it != j.end() && !it->is_null()) {
    throw ValueError(fmt::format("tokenizer.json: truncation is {}; meshlayout expects null",
                                 json_excerpt(*it)));
  }
  model_ = parse_model(hf_field(j, "model", ""));
  int64_t size = 0;
  for (const auto& [token, id] : model_->vocab()) size = std::max(size, id + 1);

  if (auto it = j.find("added_tokens"); it != j.end() && !it->is_null()) {
    if (!it->is_array()) {
      throw ValueError(
          fmt::format("tokenizer.json: added_tokens is {}; expected a list", json_excerpt(*it)));
    }
    for (size_t i = 0; i < it->size(); ++i) {
      const nlohmann::json& a = (*it)[i];
      const std::string path = hf_path("added_tokens", i);
      AddedToken t;
      t.id = hf_int(a, "id", path, -1, 0, INT32_MAX);
      if (t.id < 0) throw ValueError(fmt::format("tokenizer.json: {} has no field \"id\"", path));
      t.content = hf_string(a, "content", path);
      if (t.content.empty()) {
        throw ValueError(fmt::format("tokenizer.json: {}.content is empty", path));
      }
      if (hf_bool(a, "single_word", path, false)) {
        throw ValueError(fmt::format(
            "tokenizer.json: {}.single_word is true ({}); meshlayout supports only false", path,
            quote(t.content)));
      }
      t.special = hf_bool(a, "special", path, false);
      t.lstrip = hf_bool(a, "lstrip", path, false);
      t.rstrip = hf_bool(a, "rstrip", path, false);
      t.normalized = hf_bool(a, "normalized", path, !t.special);
      size = std::max(size, t.id + 1);
      added_.push_back(std::move(t));
    }
  }
  id_to_token_.assign(size, std::nullopt);
  special_.assign(size, false);
  for (const auto& [token, id] : model_->vocab()) id_to_token_[id] = token;
  for (const AddedToken& t : added_) {
    id_to_token_[t.id] = t.content;
    special_[t.id] = t.special;
    added_ids_[t.content] = t.id;
  }
  for (const AddedToken& t : added_) (t.normalized ? normalized_added_ : raw_added_).push_back(&t);

  normalizer_ = parse_normalizer(j.value("normalizer", nlohmann::json()), "normalizer");
  pre_tokenizer_ = parse_pre_tokenizer(j.value("pre_tokenizer", nlohmann::json()), "pre_tokenizer");
  byte_level_ = pre_tokenizer_ && pre_tokenizer_->byte_level();
  decoder_ = parse_decoder(j.value("decoder", nlohmann::json()), "decoder");
  post_processor_ =
      parse_post_processor(j.value("post_processor", nlohmann::json()), "post_processor",
                           [this](std::string_view t) { return token_to_id(t); });
  if (post_processor_) bos_id_ = post_processor_->leading_special();

  if (config != nullptr && config->is_object()) {
    const auto read = [&](const char* key, std::optional<int64_t>& out) {
      auto it = config->find(key);
      if (it == config->end() || it->is_null()) return;
      const nlohmann::json& v = it->is_object() && it->contains("content") ? (*it)["content"] : *it;
      if (!v.is_string()) {
        throw ValueError(fmt::format("tokenizer_config.json: {} is {}; expected a token", key,
                                     json_excerpt(*it)));
      }
      out = token_to_id(v.get<std::string>());
      if (!out) {
        throw ValueError(
            fmt::format("tokenizer_config.json: {} is {}, which is not a token of tokenizer.json",
                        key, quote(v.get<std::string>())));
      }
    };
    read("bos_token", bos_id_);
    read("eos_token", eos_id_);
  }
}

void HfTokenizer::split_added(
    std::string_view text, const std::vector<const AddedToken*>& set,
    std::vector<std::pair<std::string, std::optional<int64_t>>>& out) const {
  std::array<bool, 256> first_byte{};
  for (const AddedToken* t : set) first_byte[static_cast<unsigned char>(t->content[0])] = true;
  size_t prev = 0;  // start of the text not yet emitted
  for (size_t pos = 0; pos < text.size();) {
    if (!first_byte[static_cast<unsigned char>(text[pos])]) {
      ++pos;
      continue;
    }
    const AddedToken* best = nullptr;
    for (const AddedToken* t : set) {
      if (text.compare(pos, t->content.size(), t->content) == 0 &&
          (best == nullptr || t->content.size() > best->content.size())) {
        best = t;
      }
    }
    if (best == nullptr) {
      ++pos;
      continue;
    }
    size_t start = pos, end = pos + best->content.size();
    if (best->lstrip) start = std::max(prev, whitespace_before(text, start));
    if (best->rstrip) end = whitespace_after(text, end);
    if (start > prev) out.emplace_back(std::string(text.substr(prev, start - prev)), std::nullopt);
    out.emplace_back(best->content, best->id);
    prev = pos = end;
  }
  if (prev < text.size()) out.emplace_back(std::string(text.substr(prev)), std::nullopt);
}

std::vector<int64_t> HfTokenizer::encode(std::string_view text, bool add_special_tokens) const {
  if (!byte_level_) check_utf8(text, "the text to encode");
  std::vector<std::pair<std::string, std::optional<int64_t>>> raw;
  split_added(text, raw_added_, raw);
  std::vector<int64_t> ids;
  bool at_start = true;  // the piece begins the original text
  for (auto& [piece, id] : raw) {
    if (id) {
      ids.push_back(*id);
      at_start = false;
      continue;
    }
    std::string normalized = normalizer_ ? normalizer_->apply(piece) : piece;
    std::vector<std::pair<std::string, std::optional<int64_t>>> parts;
    split_added(normalized, normalized_added_, parts);
    for (auto& [part, part_id] : parts) {
      if (part_id) {
        ids.push_back(*part_id);
      } else {
        std::vector<Piece> pieces = {{std::move(part), at_start}};
        if (pre_tokenizer_) pre_tokenizer_->apply(pieces);
        for (const Piece& p : pieces) model_->tokenize(p.text, ids);
      }
      at_start = false;
    }
    at_start = false;
  }
  if (add_special_tokens && post_processor_) ids = post_processor_->process(std::move(ids));
  return ids;
}

std::string HfTokenizer::decode(std::span<const int64_t> ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int64_t id : ids) {
    std::string token = id_to_token(id);
    if (skip_special_tokens && special_[id]) continue;
    tokens.push_back(std::move(token));
  }
  if (decoder_) {
    decoder_->apply(tokens);
    std::string out;
    for (const std::string& t : tokens) out += t;
    return out;
  }
  return join(tokens, " ");
}

std::optional<int64_t> HfTokenizer::token_to_id(std::string_view token) const {
  const std::string key(token);
  if (auto it = added_ids_.find(key); it != added_ids_.end()) return it->second;
  if (auto it = model_->vocab().find(key); it != model_->vocab().end()) return it->second;
  return std::nullopt;
}

std::string HfTokenizer::id_to_token(int64_t id) const {
  if (id < 0 || id >= vocab_size() || !id_to_token_[id]) {
    throw NotFoundError(fmt::format("token id {} is not in the vocabulary (ids 0 to {}{})", id,
                                    vocab_size() - 1,
                                    id >= 0 && id < vocab_size() ? ", this one unused" : ""));
  }
  return *id_to_token_[id];
}

std::string HfTokenizer::describe() const {
  const char* kind = byte_level_                       ? "byte-level BPE"
                     : model_->options().byte_fallback ? "BPE with byte fallback"
                                                       : "BPE";
  return fmt::format("{} from tokenizer.json ({} tokens, {} added)", kind, vocab_size(),
                     added_.size());
}

}  // namespace meshlayout::tokenizers
