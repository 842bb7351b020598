// rope.h — the rotary position embedding's frequencies: Rope (theta, and Llama 3's optional
// "llama3" rescaling of the low frequencies). ops/attention.h's apply_rotary_embedding rotates by
// them; model configs (models/hf_llama_config.h) carry them.
//
// Example:
//   Rope plain(10000.0);                                  // theta^(−2i/D)
//   Rope llama31(500000.0, Llama3RopeScaling{.factor = 8.0, .low_freq_factor = 1.0,
//                                            .high_freq_factor = 4.0,
//                                            .original_max_position_embeddings = 8192});
//   std::vector<double> f = llama31.inverse_frequencies(/*head_dim=*/128);   // 64 values
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace meshlayout {

/// Llama 3's "llama3" rope_scaling (Hugging Face's _compute_llama3_parameters): with
/// wavelength λ = 2π / f of each frequency f = theta^(−2i/D), frequencies with
/// λ > original_max_position_embeddings / low_freq_factor are divided by `factor`, those with
/// λ < original_max_position_embeddings / high_freq_factor are kept, and the ones between are
/// blended: (1 − s)·f/factor + s·f, s = (original / λ − low_freq_factor) / (high_freq_factor −
/// low_freq_factor).
struct Llama3RopeScaling {
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
  friend bool operator==(const Llama3RopeScaling&, const Llama3RopeScaling&) = default;
};

/// The rotary embedding's frequencies: theta^(−2i/D) (i < D/2), optionally rescaled. Converts
/// from a plain theta, so apply_rotary_embedding(x, p, 10000.0) reads as before.
struct Rope {
  double theta = 10000.0;
  std::optional<Llama3RopeScaling> llama3;  // Llama 3 / 3.1 rope_scaling
  /// Hugging Face's "linear" rope_scaling (Gemma 3's global layers): every frequency divided by
  /// this factor (positions stretched by it). 1: none.
  double linear_factor = 1.0;

  Rope(double theta = 10000.0) : theta(theta) {}  // NOLINT(google-explicit-constructor)
  Rope(double theta, std::optional<Llama3RopeScaling> scaling)
      : theta(theta), llama3(std::move(scaling)) {}
  /// The D/2 inverse frequencies, in double. ValueError naming the value for theta <= 0, a
  /// linear_factor <= 0, a factor < 1, low_freq_factor >= high_freq_factor, low_freq_factor <= 0 or
  /// an original_max_position_embeddings <= 0.
  std::vector<double> inverse_frequencies(int64_t head_dim) const;
  /// The same checks without computing anything.
  void validate() const;
  friend bool operator==(const Rope&, const Rope&) = default;
};

}  // namespace meshlayout
