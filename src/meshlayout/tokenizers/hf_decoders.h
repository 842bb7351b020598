// hf_decoders.h — the stages of a Hugging Face tokenizer.json after the model: decoders
// (ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, Sequence), which turn tokens
// back into text, and post-processors (TemplateProcessing, ByteLevel, Sequence), which add
// the special tokens around an encoded text.
//
// Decoders follow Hugging Face's decode_chain one for one, with one difference: ByteLevel
// returns the bytes themselves (Hugging Face replaces invalid UTF-8 with U+FFFD), so
// byte-level BPE decodes any input back exactly, invalid UTF-8 included.
//
// Example:
//   auto dec = parse_decoder(j["decoder"], "decoder");
//   std::vector<std::string> tokens = {"Hello", "Ġworld"};
//   dec->apply(tokens);             // ByteLevel: {"Hello world"}
//   auto post = parse_post_processor(j["post_processor"], "post_processor", token_id);
//   post->process({9906});          // TemplateProcessing "<s> $A": {1, 9906}
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace meshlayout::tokenizers {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void apply(std::vector<std::string>& tokens) const = 0;
};

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  virtual std::vector<int64_t> process(std::vector<int64_t> ids) const = 0;
  /// The first special token the template puts before the text (the BOS), if any.
  virtual std::optional<int64_t> leading_special() const { return std::nullopt; }
};

/// From the JSON at `path` (null gives nullptr). ValueError naming an unsupported type (e.g.
/// WordPiece, CTC) or a malformed field with its path.
std::unique_ptr<Decoder> parse_decoder(const nlohmann::json& j, const std::string& path);

/// `token_id` looks a token up (for TemplateProcessing's special tokens; their ids must
/// exist in the vocabulary). Only the "single" template is used: one text is encoded.
std::unique_ptr<PostProcessor> parse_post_processor(
    const nlohmann::json& j, const std::string& path,
    const std::function<std::optional<int64_t>(std::string_view)>& token_id);

}  // namespace meshlayout::tokenizers
