// hf_llama_config.h — LlamaConfig: the Hugging Face config.json of a LlamaForCausalLM, read
// strictly (defaults as transformers' LlamaConfig; anything meshlayout's keras-hub-style Llama
// cannot run is refused with the field, its value and what is supported) and written back.
//
// Example:
//   LlamaConfig c = LlamaConfig::from_file("llama/config.json");
//   c.num_key_value_heads;          // num_attention_heads when the file does not say
//   LlamaConfig tiny{.vocab_size = 64, .hidden_size = 16, .intermediate_size = 32,
//                    .num_hidden_layers = 2, .num_attention_heads = 4,
//                    .num_key_value_heads = 2, .head_dim = 4};
//   tiny.validate();                // ValueError naming the field when a value is refused
//   std::string json = tiny.to_json();
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace meshlayout {

struct LlamaConfig {
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  // config.json default: num_attention_heads
  int64_t head_dim = 0;             // config.json default: hidden_size / num_attention_heads
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;  // top-level rope_theta, or rope_parameters.rope_theta
  bool tie_word_embeddings = false;
  int64_t max_position_embeddings = 2048;
  std::string torch_dtype;  // informational ("bfloat16", …); empty when absent

  /// Parses config.json text. `source` names the file in messages. ValueError (naming the
  /// field, its value and what is expected) for: an `architectures` list without
  /// "LlamaForCausalLM", a `model_type` other than "llama", a missing required size, a size
  /// that is not a positive integer, num_attention_heads not a multiple of num_key_value_heads,
  /// a head_dim other than hidden_size / num_attention_heads, rope scaling, attention or MLP
  /// biases, a hidden_act other than "silu", and fields of the wrong JSON type.
  static LlamaConfig from_json(std::string_view text, std::string_view source = "config.json");
  /// Reads and parses `path`. NotFoundError naming the path when it does not exist.
  static LlamaConfig from_file(const std::string& path);

  /// The same checks on the values of this struct (a hand-built config). ValueError naming
  /// the field and its value.
  void validate() const;
  /// config.json text of a LlamaForCausalLM (2-space indented, ends with a newline) that
  /// from_json() reads back to an equal config.
  std::string to_json() const;

  friend bool operator==(const LlamaConfig&, const LlamaConfig&) = default;
};

}  // namespace meshlayout
