// generation.h — text generation with a key/value cache for any causal language model that
// gives the logits of its last position (CausalLm; LlamaModel and every family it reads):
// batched prompts of different lengths (left padding, masked, each row at its own positions),
// greedy decoding or sampling (temperature, then top-k, then top-p, as Hugging Face orders its
// logits warpers) with counter-based draws, and stopping on end-of-sequence tokens.
//
// Determinism: the draw of sequence b at step s is a Philox4x32-10 word of (seed, b, s) (a pure
// function, no generator state), and every process chooses from the same gathered logits, so
// one seed gives the same tokens on one device, any mesh and any number of processes. A row of
// a padded batch equals that prompt generated alone (positions and masks per row).
//
// Example:
//   LlamaModel model(config, rules);
//   GenerateResult g = generate(model, {{5, 17, 42}, {8}}, {.max_new_tokens = 8});   // greedy
//   GenerateResult s = generate(model, {{5, 17, 42}},
//                               {.max_new_tokens = 8, .do_sample = true, .temperature = 0.7,
//                                .top_k = 50, .top_p = 0.9, .seed = 1,
//                                .eos_token_ids = read_eos_token_ids(dir)});
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "meshlayout/array/array.h"
#include "meshlayout/layout/device_mesh.h"
#include "meshlayout/models/llama.h"
#include "meshlayout/nn/layers/attention/multi_head_attention.h"

namespace meshlayout {

struct GenerateOptions {
  int64_t max_new_tokens = 16;
  /// false: greedy (argmax; ties to the lowest id, as numpy). true: sample from
  /// softmax(logits / temperature) restricted by top_k then top_p (Hugging Face's do_sample).
  bool do_sample = false;
  double temperature = 1.0;  // > 0 when sampling
  int64_t top_k = 0;         // keep the top_k largest logits (ties at the k-th kept); 0: all
  /// Keep the smallest set of most probable tokens whose probability sums to >= top_p (at
  /// least one token); in (0, 1], 1: all.
  double top_p = 1.0;
  uint64_t seed = 0;  // keys the draws (sampling only)
  /// A sequence stops after generating any of these (the EOS is its last token); the others go
  /// on. Empty: every sequence runs max_new_tokens.
  std::vector<int64_t> eos_token_ids;
  /// The token fed in padding slots and to finished sequences (masked or ignored).
  int32_t pad_token_id = 0;
  /// Called on every process after each step, per running sequence: (step, sequence, token,
  /// logprob = log_softmax(logits)[token], the model's own log-probability before any warper).
  std::function<void(int64_t, int64_t, int32_t, double)> on_token;
};

struct GenerateResult {
  std::vector<std::vector<int32_t>> tokens;   // the new tokens of each sequence
  std::vector<std::vector<double>> logprobs;  // log_softmax(logits)[token] of each of them
  std::vector<bool> stopped_on_eos;           // whether each sequence ended on an EOS token
  double prefill_seconds = 0, decode_seconds = 0;
  int64_t prefill_tokens = 0, decode_tokens = 0;
};

/// What generation needs of a causal language model.
struct CausalLm {
  DeviceMesh mesh;
  int64_t vocab_size = 0;
  int64_t max_positions = 0;  // the context window (max_position_embeddings)
  int64_t num_layers = 0;     // one KVCache each
  /// Logits (batch, 1, vocab) of the last position of tokens (batch, seq) I32 placed at slots
  /// start… of the caches (allocated for max_length slots on first use). Collective.
  std::function<Array(const Array& tokens, std::vector<KVCache>& caches, int64_t start,
                      int64_t max_length)>
      last_logits;
};

/// `model` as a CausalLm (its config's vocabulary, window and layers; LlamaModel::last_logits).
CausalLm causal_lm(LlamaModel& model);

/// Generates from every prompt: the prompts left-padded to the longest, one prefill, then one
/// token per step for every running sequence, until each has max_new_tokens or stopped on an
/// EOS token. Collective (every process passes the same arguments and gets the same result).
/// \error ValueError for no prompt, an empty prompt, a token outside [0, vocab), a prompt longer
///   than the context window or prompt + max_new_tokens beyond it (naming the lengths),
///   max_new_tokens < 1, the sampling options' errors (check_sampling_options), or logits that
///   are not finite.
GenerateResult generate(const CausalLm& model, const std::vector<std::vector<int32_t>>& prompts,
                        const GenerateOptions& options = {});
GenerateResult generate(LlamaModel& model, const std::vector<std::vector<int32_t>>& prompts,
                        const GenerateOptions& options = {});

/// ValueError naming the value for temperature <= 0 or not finite (when sampling), top_k < 0,
/// top_p outside (0, 1].
void check_sampling_options(const GenerateOptions& options);

/// The uniform draw in [0, 1) (53 bits) of sequence `sequence` at step `step` under `seed`.
double sampling_uniform(uint64_t seed, int64_t sequence, int64_t step);

/// The distribution sampling draws from for one row of logits: softmax(logits / temperature)
/// with the tokens top_k and top_p remove at 0, renormalised. Greedy options give it too.
std::vector<double> sampling_probabilities(std::span<const double> logits,
                                           const GenerateOptions& options);

/// The token chosen from one row of logits: the argmax (greedy), or the first token whose
/// cumulative sampling probability (in id order) exceeds u.
int32_t choose_token(std::span<const double> logits, const GenerateOptions& options, double u);

/// The end-of-sequence ids of a model directory: generation_config.json's eos_token_id (a
/// number or a list of numbers), else config.json's, else none. ValueError naming the file:
/// for a value that is neither a whole number >= 0 nor a list of them (quoted), or a file that
/// is not a JSON object.
std::vector<int64_t> read_eos_token_ids(const std::string& model_dir);

}  // namespace meshlayout
