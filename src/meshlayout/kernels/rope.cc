#include "meshlayout/kernels/rope.h"

#include <fmt/format.h>

#include <cmath>
#include <numbers>

#include "meshlayout/core/errors.h"

namespace meshlayout {

void Rope::validate() const {
  if (!(theta > 0) || !std::isfinite(theta)) {
    throw ValueError(fmt::format("rotary embedding needs theta > 0, got {}", theta));
  }
  if (!(linear_factor > 0) || !std::isfinite(linear_factor)) {
    throw ValueError(
        fmt::format("linear rope scaling needs factor > 0, got factor={}", linear_factor));
  }
  if (!llama3) return;
  const Llama3RopeScaling& s = *llama3;
  if (!(s.factor >= 1) || !std::isfinite(s.factor)) {
    throw ValueError(fmt::format("llama3 rope scaling needs factor >= 1, got factor={}", s.factor));
  }
  if (!(s.low_freq_factor > 0) || !(s.high_freq_factor > s.low_freq_factor) ||
      !std::isfinite(s.high_freq_factor)) {
    throw ValueError(
        fmt::format("llama3 rope scaling needs 0 < low_freq_factor < high_freq_factor, got "
                    "low_freq_factor={} and high_freq_factor={}",
                    s.low_freq_factor, s.high_freq_factor));
  }
  if (s.original_max_position_embeddings <= 0) {
    throw ValueError(
        fmt::format("llama3 rope scaling needs original_max_position_embeddings > 0, got {}",
                    s.original_max_position_embeddings));
  }
}

std::vector<double> Rope::inverse_frequencies(int64_t head_dim) const {
  validate();
  const int64_t half = head_dim / 2;
  std::vector<double> f(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    f[static_cast<size_t>(i)] =
        std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
  }
  if (linear_factor != 1.0) {
    for (double& inv : f) inv /= linear_factor;
  }
  if (!llama3) return f;
  const Llama3RopeScaling& s = *llama3;
  const double original = static_cast<double>(s.original_max_position_embeddings);
  const double low_wavelength = original / s.low_freq_factor;
  const double high_wavelength = original / s.high_freq_factor;
  for (double& inv : f) {
    const double wavelength = 2.0 * std::numbers::pi / inv;
    if (wavelength < high_wavelength) continue;  // high frequencies: kept
    if (wavelength > low_wavelength) {           // low frequencies: divided by the factor
      inv /= s.factor;
      continue;
    }
    const double smooth =
        (original / wavelength - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
    inv = (1.0 - smooth) * inv / s.factor + smooth * inv;
  }
  return f;
}

}  // namespace meshlayout
