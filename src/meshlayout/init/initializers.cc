#include "meshlayout/init/initializers.h"
#include "meshlayout/init/orthogonal.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/init/fill_kernels.h"
#include "meshlayout/init/float_convert.h"
#include "meshlayout/init/initializer_text.h"

namespace meshlayout {

// NOTE [Initializer streams]
// The values of a variable are fixed by three numbers and nothing else:
//   v   = variable_key(path)          FNV-1a 64 of the path's bytes
//   key = init_key(seed, v)           mix64(mix64(seed + 0x9E3779B97F4A7C15) ^ v), where
//                                     mix64 is the splitmix64 finaliser and seed defaults to
//                                     the global seed
//   element g (row-major global index): Philox4x32-10 block philox_counter(g, 0) under
//     philox_key(key), turned into a value by sampling_math.h (uniform: word 0; normal:
//     Box-Muller on words 0, 1 — words 0 … 3 for F64); truncated normals redraw from
//     philox_counter(g, a), a = 1, 2, …, until |z| <= 2.
// Nothing depends on the box, the run or the vector width, so any split of a tensor yields
// the bytes of the unsplit one. Changing any of this changes every initialised model: the
// golden values in fill_box_test.cc pin it.

namespace {

std::atomic<uint64_t> g_global_seed{0};

uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
  return z ^ (z >> 31);
}

void check_finite(double v, std::string_view what, std::string_view initializer) {
  if (!std::isfinite(v)) {
    throw ValueError(fmt::format("{} needs a finite {}, got {}={}", initializer, what, what,
                                 internal_init::repr_float(v)));
  }
}

}  // namespace

// ---- Factories ----

const std::vector<std::string>& Initializer::names() {
  static const std::vector<std::string> kNames = {"zeros",
                                                  "ones",
                                                  "constant",
                                                  "random_uniform",
                                                  "random_normal",
                                                  "truncated_normal",
                                                  "variance_scaling",
                                                  "glorot_uniform",
                                                  "glorot_normal",
                                                  "he_uniform",
                                                  "he_normal",
                                                  "lecun_uniform",
                                                  "lecun_normal",
                                                  "orthogonal"};
  return kNames;
}

Initializer Initializer::zeros() { return Initializer(); }

Initializer Initializer::ones() { return Initializer(InitializerKind::kOnes); }

Initializer Initializer::constant(double value) {
  Initializer init(InitializerKind::kConstant);
  init.value_ = value;
  return init;
}

Initializer Initializer::random_uniform(const RandomUniformOptions& options) {
  check_finite(options.minval, "minval", "random_uniform");
  check_finite(options.maxval, "maxval", "random_uniform");
  if (options.minval > options.maxval) {
    throw ValueError(fmt::format("random_uniform needs minval <= maxval, got minval={}, maxval={}",
                                 internal_init::repr_float(options.minval),
                                 internal_init::repr_float(options.maxval)));
  }
  Initializer init(InitializerKind::kRandomUniform);
  init.minval_ = options.minval;
  init.maxval_ = options.maxval;
  init.seed_ = options.seed;
  return init;
}

Initializer Initializer::normal_like(InitializerKind kind, const RandomNormalOptions& options) {
  Initializer init(kind);
  check_finite(options.mean, "mean", init.name());
  check_finite(options.stddev, "stddev", init.name());
  if (options.stddev < 0) {
    throw ValueError(fmt::format("{} needs stddev >= 0, got stddev={}", init.name(),
                                 internal_init::repr_float(options.stddev)));
  }
  init.mean_ = options.mean;
  init.stddev_ = options.stddev;
  init.seed_ = options.seed;
  return init;
}

Initializer Initializer::random_normal(const RandomNormalOptions& options) {
  return normal_like(InitializerKind::kRandomNormal, options);
}

Initializer Initializer::truncated_normal(const RandomNormalOptions& options) {
  return normal_like(InitializerKind::kTruncatedNormal, options);
}

Initializer Initializer::variance_scaling(const VarianceScalingOptions& options) {
  if (!(options.scale > 0) || !std::isfinite(options.scale)) {
    throw ValueError(fmt::format("variance_scaling needs a finite scale > 0, got scale={}",
                                 internal_init::repr_float(options.scale)));
  }
  Initializer init(InitializerKind::kVarianceScaling);
  init.scale_ = options.scale;
  init.mode_ = options.mode;
  init.distribution_ = options.distribution;
  init.seed_ = options.seed;
  return init;
}

Initializer Initializer::named_variance_scaling(InitializerKind kind, double scale, FanMode mode,
                                                VarianceDistribution distribution,
                                                std::optional<uint64_t> seed) {
  Initializer init =
      variance_scaling({.scale = scale, .mode = mode, .distribution = distribution, .seed = seed});
  init.kind_ = kind;
  return init;
}

Initializer Initializer::glorot_uniform(std::optional<uint64_t> seed) {
  return named_variance_scaling(InitializerKind::kGlorotUniform, 1.0, FanMode::kFanAvg,
                                VarianceDistribution::kUniform, seed);
}
Initializer Initializer::glorot_normal(std::optional<uint64_t> seed) {
  return named_variance_scaling(InitializerKind::kGlorotNormal, 1.0, FanMode::kFanAvg,
                                VarianceDistribution::kTruncatedNormal, seed);
}
Initializer Initializer::he_uniform(std::optional<uint64_t> seed) {
  return named_variance_scaling(InitializerKind::kHeUniform, 2.0, FanMode::kFanIn,
                                VarianceDistribution::kUniform, seed);
}
Initializer Initializer::he_normal(std::optional<uint64_t> seed) {
  return named_variance_scaling(InitializerKind::kHeNormal, 2.0, FanMode::kFanIn,
                                VarianceDistribution::kTruncatedNormal, seed);
}
Initializer Initializer::lecun_uniform(std::optional<uint64_t> seed) {
  return named_variance_scaling(InitializerKind::kLecunUniform, 1.0, FanMode::kFanIn,
                                VarianceDistribution::kUniform, seed);
}
Initializer Initializer::lecun_normal(std::optional<uint64_t> seed) {
  return named_variance_scaling(InitializerKind::kLecunNormal, 1.0, FanMode::kFanIn,
                                VarianceDistribution::kTruncatedNormal, seed);
}

Initializer Initializer::orthogonal(double gain, std::optional<uint64_t> seed) {
  check_finite(gain, "gain", "orthogonal");
  Initializer init(InitializerKind::kOrthogonal);
  init.gain_ = gain;
  init.seed_ = seed;
  return init;
}

// ---- Accessors ----

std::string_view Initializer::name() const { return names()[static_cast<size_t>(kind_)]; }

bool Initializer::is_random() const {
  return kind_ != InitializerKind::kZeros && kind_ != InitializerKind::kOnes &&
         kind_ != InitializerKind::kConstant;
}

bool Initializer::is_variance_scaling() const {
  return kind_ >= InitializerKind::kVarianceScaling && kind_ <= InitializerKind::kLecunNormal;
}

Initializer Initializer::with_seed(std::optional<uint64_t> seed) const {
  Initializer copy = *this;
  if (is_random()) copy.seed_ = seed;
  return copy;
}

std::ostream& operator<<(std::ostream& os, const Initializer& init) {
  return os << init.to_string();
}

// ---- Fans, seeds, keys ----

Fans compute_fans(const Shape& shape) {
  if (shape.empty()) return {1, 1};
  if (shape.size() == 1) return {shape[0], shape[0]};
  int64_t receptive_field = 1;
  for (size_t d = 0; d + 2 < shape.size(); ++d) receptive_field *= shape[d];
  return {shape[shape.size() - 2] * receptive_field, shape.back() * receptive_field};
}

void set_global_seed(uint64_t seed) { g_global_seed.store(seed, std::memory_order_relaxed); }

uint64_t global_seed() { return g_global_seed.load(std::memory_order_relaxed); }

uint64_t variable_key(std::string_view path) {
  uint64_t h = 0xCBF29CE484222325u;  // FNV-1a 64 offset basis
  for (char c : path) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001B3u;  // FNV 64 prime
  }
  return h;
}

uint64_t init_key(std::optional<uint64_t> seed, uint64_t variable_key) {
  return mix64(mix64(seed.value_or(global_seed()) + 0x9E3779B97F4A7C15u) ^ variable_key);
}

// ---- fill_box ----

namespace {

void check_box(const Shape& shape, const Box& box) {
  if (box.offset.size() != shape.size() || box.shape.size() != shape.size()) {
    throw ValueError(fmt::format("box {} has rank {} but the tensor shape {} has rank {}",
                                 box.to_string(), box.shape.size(), shape_to_string(shape),
                                 shape.size()));
  }
  for (size_t d = 0; d < shape.size(); ++d) {
    if (box.offset[d] < 0 || box.shape[d] < 0 || box.offset[d] + box.shape[d] > shape[d]) {
      throw ValueError(fmt::format(
          "box {} does not fit in a tensor of shape {}: dimension {} spans [{}, {}) of [0, {})",
          box.to_string(), shape_to_string(shape), d, box.offset[d], box.offset[d] + box.shape[d],
          shape[d]));
    }
  }
}

/// `v` as an integer of type T; ValueError unless it is integral and in T's range.
template <class T>
T checked_integer(double v, const Initializer& init, DType dtype) {
  // [lo, hi) in double: both bounds are powers of two (or 0), so they are exact.
  const double lo = static_cast<double>(std::numeric_limits<T>::min());
  const double hi =
      std::is_signed_v<T> ? -lo : static_cast<double>(std::numeric_limits<T>::max()) + 1;
  if (!(v >= lo && v < hi) || v != std::trunc(v)) {
    throw ValueError(
        fmt::format("{} cannot be stored in dtype {}: it takes integral values in [{}, {}]",
                    quote(init.to_string()), dtype_name(dtype), +std::numeric_limits<T>::min(),
                    +std::numeric_limits<T>::max()));
  }
  return static_cast<T>(v);
}

/// The bytes of one element of a non-random initializer in `dtype`.
std::vector<std::byte> constant_element(const Initializer& init, DType dtype) {
  const double v = init.kind() == InitializerKind::kOnes ? 1.0 : init.value();
  std::vector<std::byte> bytes(dtype_size(dtype));
  auto put = [&](auto x) { std::memcpy(bytes.data(), &x, sizeof(x)); };
  switch (dtype) {
    case DType::kF64:
      put(v);
      break;
    case DType::kF32:
      put(static_cast<float>(v));
      break;
    case DType::kBF16:
      put(bf16_from_float(static_cast<float>(v)));
      break;
    case DType::kF16:
      put(f16_from_float(static_cast<float>(v)));
      break;
    case DType::kI8:
      put(checked_integer<int8_t>(v, init, dtype));
      break;
    case DType::kI16:
      put(checked_integer<int16_t>(v, init, dtype));
      break;
    case DType::kI32:
      put(checked_integer<int32_t>(v, init, dtype));
      break;
    case DType::kI64:
      put(checked_integer<int64_t>(v, init, dtype));
      break;
    case DType::kU8:
      put(checked_integer<uint8_t>(v, init, dtype));
      break;
    case DType::kBool:
      put(static_cast<uint8_t>(v != 0 ? 1 : 0));
      break;
  }
  return bytes;
}

void fill_pattern(const std::vector<std::byte>& element, int64_t count, std::byte* out) {
  const size_t total = static_cast<size_t>(count) * element.size();
  if (total == 0) return;
  if (std::all_of(element.begin(), element.end(), [](std::byte b) { return b == std::byte{0}; })) {
    std::memset(out, 0, total);
    return;
  }
  std::memcpy(out, element.data(), element.size());
  for (size_t filled = element.size(); filled < total;) {  // doubling copies
    const size_t n = std::min(filled, total - filled);
    std::memcpy(out + filled, out, n);
    filled += n;
  }
}

internal_init::SamplerSpec sampler_for(const Initializer& init, const Shape& shape) {
  using internal_init::Sampler;
  switch (init.kind()) {
    case InitializerKind::kRandomUniform:
      return {.sampler = Sampler::kUniform, .a = init.minval(), .b = init.maxval()};
    case InitializerKind::kRandomNormal:
      return {.sampler = Sampler::kNormal, .a = init.mean(), .b = init.stddev()};
    case InitializerKind::kTruncatedNormal:
      return {.sampler = Sampler::kTruncatedNormal, .a = init.mean(), .b = init.stddev()};
    default:
      break;
  }
  const Fans fans = compute_fans(shape);
  double fan = 0;
  switch (init.mode()) {
    case FanMode::kFanIn:
      fan = static_cast<double>(fans.fan_in);
      break;
    case FanMode::kFanOut:
      fan = static_cast<double>(fans.fan_out);
      break;
    case FanMode::kFanAvg:
      fan = static_cast<double>(fans.fan_in + fans.fan_out) / 2.0;
      break;
  }
  const double scale = init.scale() / std::max(1.0, fan);
  switch (init.distribution()) {
    case VarianceDistribution::kUniform: {
      const double limit = std::sqrt(3.0 * scale);
      return {.sampler = Sampler::kUniform, .a = -limit, .b = limit};
    }
    case VarianceDistribution::kUntruncatedNormal:
      return {.sampler = Sampler::kNormal, .a = 0.0, .b = std::sqrt(scale)};
    case VarianceDistribution::kTruncatedNormal:
      // Keras: the stddev of a unit normal truncated to [-2, 2] is 0.8796…; dividing by it
      // gives the truncated values the variance `scale`.
      return {.sampler = Sampler::kTruncatedNormal,
              .a = 0.0,
              .b = std::sqrt(scale) / 0.87962566103423978};
  }
  throw InternalError("unhandled VarianceDistribution");
}

}  // namespace

void fill_box(const Initializer& init, const Shape& global_shape, const Box& box, DType dtype,
              std::byte* out, uint64_t variable_key) {
  check_box(global_shape, box);
  if (!init.is_random()) {
    const std::vector<std::byte> element = constant_element(init, dtype);  // checks the value
    fill_pattern(element, box.num_elements(), out);
    return;
  }
  if (!is_floating(dtype)) {
    throw ValueError(fmt::format(
        "initializer {} cannot fill dtype {}: random initializers need a floating dtype (F32, "
        "F64, BF16 or F16)",
        quote(init.to_string()), dtype_name(dtype)));
  }
  if (init.kind() == InitializerKind::kOrthogonal) {
    internal_init::fill_orthogonal_box(init, global_shape, box, dtype, out, variable_key);
    return;
  }
  if (box.empty()) return;
  internal_init::SamplerSpec spec = sampler_for(init, global_shape);
  spec.dtype = dtype;
  spec.key = init_key(init.seed(), variable_key);
  const internal_init::SimdLevel level = internal_init::best_simd_level();
  const size_t element_size = dtype_size(dtype);

  // Runs of consecutive global indices: the box's innermost partial dimension together with
  // every dimension inside it that the box covers whole. Rank 0 and whole tensors: one run.
  const size_t rank = global_shape.size();
  size_t inner = rank;
  while (inner > 0 && box.offset[inner - 1] == 0 &&
         box.shape[inner - 1] == global_shape[inner - 1]) {
    --inner;
  }
  std::vector<uint64_t> strides(rank, 1);
  for (size_t d = rank; d-- > 1;) {
    strides[d - 1] = strides[d] * static_cast<uint64_t>(global_shape[d]);
  }
  if (inner == 0) {
    internal_init::fill_run(level, spec, 0, static_cast<size_t>(box.num_elements()), out);
    return;
  }
  const size_t run_dim = inner - 1;  // runs start at box.offset[run_dim] in this dimension
  const size_t run = static_cast<size_t>(box.shape[run_dim]) * strides[run_dim];
  uint64_t g = 0;
  int64_t runs = 1;
  for (size_t d = 0; d <= run_dim; ++d) g += static_cast<uint64_t>(box.offset[d]) * strides[d];
  for (size_t d = 0; d < run_dim; ++d) runs *= box.shape[d];
  std::vector<int64_t> index(run_dim, 0);  // odometer over the outer dimensions of the box
  for (int64_t r = 0; r < runs; ++r) {
    internal_init::fill_run(level, spec, g, run, out);
    out += run * element_size;
    for (size_t d = run_dim; d-- > 0;) {
      if (++index[d] < box.shape[d]) {
        g += strides[d];
        break;
      }
      index[d] = 0;
      g -= static_cast<uint64_t>(box.shape[d] - 1) * strides[d];
    }
  }
}

}  // namespace meshlayout
