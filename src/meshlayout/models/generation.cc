#include "meshlayout/models/generation.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/input_file.h"
#include "meshlayout/core/json_input.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/init/philox.h"

namespace meshlayout {
namespace {

// The token ids of `value` (a whole number >= 0 or a list of them), errors naming `source`.
std::vector<int64_t> eos_ids(const nlohmann::json& value, const std::string& source) {
  const auto one = [&](const nlohmann::json& v) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0) {
      throw ValueError(fmt::format(
          "{}: eos_token_id {} is not a token id (a whole number >= 0) or a list of them", source,
          json_excerpt(value)));
    }
    return v.get<int64_t>();
  };
  if (value.is_null()) return {};
  if (!value.is_array()) return {one(value)};
  std::vector<int64_t> out;
  for (const nlohmann::json& v : value) out.push_back(one(v));
  return out;
}

// Row b of the gathered (B, 1, V) logits in double (exactly, from F32 or F64).
std::vector<double> logits_row(const HostTensor& logits, int64_t b, int64_t vocab) {
  std::vector<double> row(static_cast<size_t>(vocab));
  for (int64_t v = 0; v < vocab; ++v) {
    row[static_cast<size_t>(v)] = logits.dtype() == DType::kF64
                                      ? logits.data_as<double>()[b * vocab + v]
                                      : logits.data_as<float>()[b * vocab + v];
  }
  return row;
}

}  // namespace

void check_sampling_options(const GenerateOptions& o) {
  if (o.do_sample && (!(o.temperature > 0) || !std::isfinite(o.temperature))) {
    throw ValueError(fmt::format("generate: temperature must be a number > 0 when sampling, got {}",
                                 o.temperature));
  }
  if (o.top_k < 0) {
    throw ValueError(
        fmt::format("generate: top_k must be >= 0 (0: no top-k filter), got {}", o.top_k));
  }
  if (!(o.top_p > 0 && o.top_p <= 1)) {
    throw ValueError(
        fmt::format("generate: top_p must be in (0, 1] (1: no top-p filter), got {}", o.top_p));
  }
}

double sampling_uniform(uint64_t seed, int64_t sequence, int64_t step) {
  const PhiloxBlock r =
      philox4x32_10(philox_counter(static_cast<uint64_t>(step), static_cast<uint64_t>(sequence)),
                    philox_key(seed));
  const uint64_t bits = ((uint64_t{r[0]} << 32) | r[1]) >> 11;  // 53 bits
  return static_cast<double>(bits) * 0x1.0p-53;
}

std::vector<double> sampling_probabilities(std::span<const double> logits,
                                           const GenerateOptions& o) {
  const size_t n = logits.size();
  const double temperature = o.do_sample ? o.temperature : 1.0;
  std::vector<double> scores(n);
  for (size_t v = 0; v < n; ++v) scores[v] = logits[v] / temperature;
  // top-k: every score below the k-th largest is removed (ties with it kept, as Hugging Face's
  // TopKLogitsWarper).
  std::vector<bool> kept(n, true);
  if (o.top_k > 0 && static_cast<size_t>(o.top_k) < n) {
    std::vector<double> sorted = scores;
    std::nth_element(sorted.begin(), sorted.begin() + (o.top_k - 1), sorted.end(),
                     std::greater<>());
    const double kth = sorted[static_cast<size_t>(o.top_k - 1)];
    for (size_t v = 0; v < n; ++v) kept[v] = scores[v] >= kth;
  }
  double top = -INFINITY;
  for (size_t v = 0; v < n; ++v) {
    if (kept[v]) top = std::max(top, scores[v]);
  }
  std::vector<double> p(n, 0.0);
  double sum = 0;
  for (size_t v = 0; v < n; ++v) {
    if (kept[v]) sum += (p[v] = std::exp(scores[v] - top));
  }
  for (double& x : p) x /= sum;
  if (o.top_p < 1) {
    // top-p: the most probable tokens (ties to the lower id) until their sum reaches top_p.
    std::vector<size_t> order(n);
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] > p[b]; });
    double cumulative = 0;
    size_t keep = 0;
    while (keep < n && (keep == 0 || cumulative < o.top_p)) cumulative += p[order[keep++]];
    sum = 0;
    for (size_t i = keep; i < n; ++i) p[order[i]] = 0;
    for (size_t i = 0; i < keep; ++i) sum += p[order[i]];
    for (double& x : p) x /= sum;
  }
  return p;
}

int32_t choose_token(std::span<const double> logits, const GenerateOptions& o, double u) {
  if (!o.do_sample) {
    const auto best = std::max_element(logits.begin(), logits.end());  // first of the ties
    return static_cast<int32_t>(best - logits.begin());
  }
  const std::vector<double> p = sampling_probabilities(logits, o);
  double cumulative = 0;
  int32_t last = 0;
  for (size_t v = 0; v < p.size(); ++v) {
    if (p[v] == 0) continue;
    last = static_cast<int32_t>(v);
    cumulative += p[v];
    if (u < cumulative) return last;
  }
  return last;  // u within rounding of 1
}

CausalLm causal_lm(LlamaModel& model) {
  const LlamaConfig& c = model.config();
  return CausalLm{.mesh = model.mesh(),
                  .vocab_size = c.vocab_size,
                  .max_positions = c.max_position_embeddings,
                  .num_layers = c.num_hidden_layers,
                  .last_logits = [&model](const Array& tokens, std::vector<KVCache>& caches,
                                          int64_t start, int64_t max_length) {
                    return model.last_logits(tokens, caches, start, max_length);
                  }};
}

GenerateResult generate(LlamaModel& model, const std::vector<std::vector<int32_t>>& prompts,
                        const GenerateOptions& options) {
  return generate(causal_lm(model), prompts, options);
}

GenerateResult generate(const CausalLm& model, const std::vector<std::vector<int32_t>>& prompts,
                        const GenerateOptions& options) {
  if (prompts.empty()) throw ValueError("generate needs at least one prompt, got none");
  check_sampling_options(options);
  const int64_t B = static_cast<int64_t>(prompts.size()), V = model.vocab_size;
  int64_t T0 = 0;  // the longest prompt: every row is left-padded to it
  for (size_t b = 0; b < prompts.size(); ++b) {
    const int64_t length = static_cast<int64_t>(prompts[b].size());
    if (length == 0) throw ValueError(fmt::format("generate: prompt {} is empty", b));
    if (length > model.max_positions) {
      throw ValueError(
          fmt::format("generate: prompt {} has {} tokens, more than the context window "
                      "(max_position_embeddings {})",
                      b, length, model.max_positions));
    }
    for (size_t t = 0; t < prompts[b].size(); ++t) {
      if (prompts[b][t] < 0 || prompts[b][t] >= V) {
        throw ValueError(
            fmt::format("generate: token {} at position {} of prompt {} is outside the "
                        "vocabulary [0, {})",
                        prompts[b][t], t, b, V));
      }
    }
    T0 = std::max(T0, length);
  }
  if (options.pad_token_id < 0 || options.pad_token_id >= V) {
    throw ValueError(fmt::format("generate: pad_token_id {} is outside the vocabulary [0, {})",
                                 options.pad_token_id, V));
  }
  // max_new_tokens comes from the command line: T0 + max_new_tokens must not wrap.
  const std::optional<int64_t> total_length = checked_add(T0, options.max_new_tokens);
  if (options.max_new_tokens < 1 || !total_length || *total_length > model.max_positions) {
    throw ValueError(
        fmt::format("generate: max_new_tokens must be >= 1 and the prompt ({} tokens) plus "
                    "max_new_tokens ({}) at most the context window (max_position_embeddings {})",
                    T0, options.max_new_tokens, model.max_positions));
  }
  const int64_t max_length = *total_length;
  std::vector<int64_t> padding(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    padding[static_cast<size_t>(b)] =
        T0 - static_cast<int64_t>(prompts[static_cast<size_t>(b)].size());
  }
  const bool padded = std::any_of(padding.begin(), padding.end(), [](int64_t p) { return p > 0; });
  std::vector<KVCache> caches(static_cast<size_t>(model.num_layers));
  if (padded) {
    for (KVCache& c : caches) c.padding = padding;
  }
  const TensorLayout replicated = TensorLayout::replicated(2, model.mesh);
  HostTensor tokens(DType::kI32, {B, T0});
  for (int64_t b = 0; b < B; ++b) {
    int32_t* row = tokens.data_as<int32_t>() + b * T0;
    const std::vector<int32_t>& prompt = prompts[static_cast<size_t>(b)];
    std::fill(row, row + padding[static_cast<size_t>(b)], options.pad_token_id);
    std::copy(prompt.begin(), prompt.end(), row + padding[static_cast<size_t>(b)]);
  }
  GenerateResult result;
  result.tokens.resize(static_cast<size_t>(B));
  result.logprobs.resize(static_cast<size_t>(B));
  result.stopped_on_eos.assign(static_cast<size_t>(B), false);
  std::vector<bool> running(static_cast<size_t>(B), true);
  using Clock = std::chrono::steady_clock;
  auto t0 = Clock::now();
  HostTensor logits =
      model.last_logits(distribute_tensor(tokens, replicated), caches, 0, max_length).gather();
  result.prefill_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  result.prefill_tokens = B * T0;
  t0 = Clock::now();
  for (int64_t step = 0; step < options.max_new_tokens; ++step) {
    HostTensor next(DType::kI32, {B, 1});
    for (int64_t b = 0; b < B; ++b) {
      next.data_as<int32_t>()[b] = options.pad_token_id;
      if (!running[static_cast<size_t>(b)]) continue;
      const std::vector<double> row = logits_row(logits, b, V);
      double top = -INFINITY;
      for (int64_t v = 0; v < V; ++v) {
        // Finite weights can still overflow (a norm scale of 3e38): the argmax of a NaN row
        // is token 0, which generation printed forever with exit 0. The logits are gathered,
        // so every process refuses alike.
        if (!std::isfinite(row[static_cast<size_t>(v)])) {
          throw ValueError(fmt::format(
              "generate: the logit of token {} for prompt {} at step {} is {}: the model's "
              "activations overflow "
              "(the weights are finite but too large for {}), so no token can be chosen",
              v, b, step, row[static_cast<size_t>(v)], dtype_name(logits.dtype())));
        }
        top = std::max(top, row[static_cast<size_t>(v)]);
      }
      double sum = 0;
      for (int64_t v = 0; v < V; ++v) sum += std::exp(row[static_cast<size_t>(v)] - top);
      const int32_t token = choose_token(
          row, options, options.do_sample ? sampling_uniform(options.seed, b, step) : 0.0);
      const double logprob = row[static_cast<size_t>(token)] - top - std::log(sum);
      next.data_as<int32_t>()[b] = token;
      result.tokens[static_cast<size_t>(b)].push_back(token);
      result.logprobs[static_cast<size_t>(b)].push_back(logprob);
      if (std::find(options.eos_token_ids.begin(), options.eos_token_ids.end(), token) !=
          options.eos_token_ids.end()) {
        running[static_cast<size_t>(b)] = false;
        result.stopped_on_eos[static_cast<size_t>(b)] = true;
      }
      if (options.on_token) options.on_token(step, b, token, logprob);
    }
    if (step + 1 == options.max_new_tokens ||
        std::none_of(running.begin(), running.end(), [](bool r) { return r; })) {
      break;
    }
    logits = model.last_logits(distribute_tensor(next, replicated), caches, T0 + step, max_length)
                 .gather();
    result.decode_tokens += B;
  }
  result.decode_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return result;
}

std::vector<int64_t> read_eos_token_ids(const std::string& model_dir) {
  for (const char* name : {"generation_config.json", "config.json"}) {
    const std::filesystem::path path = std::filesystem::path(model_dir) / name;
    std::error_code error;
    if (!std::filesystem::exists(path, error)) continue;
    const std::string source = quote(path.string());
    nlohmann::json j;
    try {
      j = parse_json_checked(read_regular_file(path.string(), kMaxJsonFileBytes, name));
    } catch (const ValueError& e) {
      throw ValueError(fmt::format("{}: {}", source, e.what()));
    }
    if (!j.is_object()) {
      throw ValueError(fmt::format("{} holds {}, expected a JSON object", source, json_excerpt(j)));
    }
    if (j.contains("eos_token_id")) return eos_ids(j["eos_token_id"], source);
  }
  return {};
}

}  // namespace meshlayout
