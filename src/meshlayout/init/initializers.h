// initializers.h — Keras initializers (zeros … lecun_normal) that fill any box of a tensor,
// so each device materialises its own shard of a variable and nothing else (DESIGN §2).
//
// Values are counter-based: element g (row-major global index) of a variable is a pure
// function of (key, g), key = init_key(seed, variable_key(path)), drawn from Philox4x32-10 block
// philox_counter(g). A variable therefore holds the same values, bit for bit, whatever the mesh,
// the layout or the box split — a box of the tensor equals the same slice of the whole tensor,
// as with JAX's partitionable Threefry and unlike PyTorch DTensor's offset-based Philox. See
// NOTE [Initializer streams] in initializers.cc for the exact derivation.
//
// Names, parameters and defaults are Keras': random_uniform(minval=-0.05, maxval=0.05),
// random_normal / truncated_normal(mean=0, stddev=0.05), variance_scaling(scale=1, mode=fan_in,
// distribution=truncated_normal), glorot_*, he_*, lecun_*. Where Keras draws a fresh random seed
// for seed=None, meshlayout uses the global seed (set_global_seed(), default 0): runs are
// reproducible, and variables still differ because their paths do.
//
// Example:
//   Initializer init = Initializer::from_name("glorot_uniform");          // or ::glorot_uniform()
//   Initializer u = Initializer::random_uniform({.minval = -1, .maxval = 1, .seed = 42});
//   u.to_string();   // "random_uniform(minval=-1.0, maxval=1.0, seed=42)"
//   // Rows 4:8 of a (8, 6) float32 kernel, as the device holding them writes them:
//   std::vector<float> shard(4 * 6);
//   fill_box(init, {8, 6}, Box{{4, 0}, {4, 6}}, DType::kF32,
//            reinterpret_cast<std::byte*>(shard.data()), variable_key("dense/kernel"));
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "meshlayout/core/dtype.h"
#include "meshlayout/core/shape.h"
#include "meshlayout/layout/shard_geometry.h"

namespace meshlayout {

enum class InitializerKind {
  kZeros,
  kOnes,
  kConstant,
  kRandomUniform,
  kRandomNormal,
  kTruncatedNormal,
  kVarianceScaling,
  kGlorotUniform,  // variance_scaling(1, fan_avg, uniform)
  kGlorotNormal,   // variance_scaling(1, fan_avg, truncated_normal)
  kHeUniform,      // variance_scaling(2, fan_in, uniform)
  kHeNormal,       // variance_scaling(2, fan_in, truncated_normal)
  kLecunUniform,   // variance_scaling(1, fan_in, uniform)
  kLecunNormal,    // variance_scaling(1, fan_in, truncated_normal)
  kOrthogonal,     // gain * Q of the QR of a normal matrix (see orthogonal())
};

/// Which fan variance_scaling divides by (Keras `mode`: 'fan_in', 'fan_out', 'fan_avg').
enum class FanMode { kFanIn, kFanOut, kFanAvg };

/// Keras `distribution`: 'truncated_normal' (Keras also accepts 'normal' for it),
/// 'untruncated_normal', 'uniform'.
enum class VarianceDistribution { kTruncatedNormal, kUntruncatedNormal, kUniform };

struct RandomUniformOptions {
  double minval = -0.05;
  double maxval = 0.05;
  /// Absent: the global seed (set_global_seed()).
  std::optional<uint64_t> seed;
};

/// For random_normal and truncated_normal.
struct RandomNormalOptions {
  double mean = 0.0;
  double stddev = 0.05;
  std::optional<uint64_t> seed;
};

struct VarianceScalingOptions {
  double scale = 1.0;
  FanMode mode = FanMode::kFanIn;
  VarianceDistribution distribution = VarianceDistribution::kTruncatedNormal;
  std::optional<uint64_t> seed;
};

/// Keras' fans: rank 0 -> (1, 1); rank 1 -> (n, n); rank 2 (in, out) -> (in, out);
/// rank >= 2 in general: receptive field rf = product of all dims but the last two,
/// fan_in = shape[-2] * rf, fan_out = shape[-1] * rf. A conv kernel (3, 3, 16, 32) has
/// fan_in 144 and fan_out 288.
struct Fans {
  int64_t fan_in = 1;
  int64_t fan_out = 1;
  friend bool operator==(const Fans&, const Fans&) = default;
};
Fans compute_fans(const Shape& shape);

/// A Keras initializer as a value: its kind and parameters. Cheap to copy, compared by value.
class Initializer {
 public:
  /// zeros.
  Initializer() = default;

  static Initializer zeros();
  static Initializer ones();
  /// Every element `value`. Integer dtypes need an integral value in their range; BOOL takes
  /// value != 0; BF16 and F16 round value as a float.
  static Initializer constant(double value);
  /// Uniform in [minval, maxval). ValueError unless both are finite and minval <= maxval.
  static Initializer random_uniform(const RandomUniformOptions& options = {});
  /// Normal(mean, stddev). ValueError unless mean is finite and stddev finite and >= 0.
  static Initializer random_normal(const RandomNormalOptions& options = {});
  /// Normal(mean, stddev) with draws beyond 2 stddev redrawn, as Keras' TruncatedNormal.
  static Initializer truncated_normal(const RandomNormalOptions& options = {});
  /// Keras VarianceScaling: with n = max(1, fan) per `mode`, uniform in +-sqrt(3 scale / n),
  /// normal(0, sqrt(scale / n)), or truncated normal of stddev sqrt(scale / n) / 0.8796…
  /// (so the truncated values have stddev sqrt(scale / n)). ValueError unless scale > 0.
  static Initializer variance_scaling(const VarianceScalingOptions& options = {});
  static Initializer glorot_uniform(std::optional<uint64_t> seed = std::nullopt);
  static Initializer glorot_normal(std::optional<uint64_t> seed = std::nullopt);
  static Initializer he_uniform(std::optional<uint64_t> seed = std::nullopt);
  static Initializer he_normal(std::optional<uint64_t> seed = std::nullopt);
  static Initializer lecun_uniform(std::optional<uint64_t> seed = std::nullopt);
  static Initializer lecun_normal(std::optional<uint64_t> seed = std::nullopt);
  /// Keras Orthogonal(gain=1): for shape (..., n) seen as a (rows = product of the rest, n)
  /// matrix, gain * Q of the QR decomposition of a normal matrix of shape (max, min), signs
  /// fixed so R's diagonal is positive, transposed when rows < n: orthonormal rows or columns.
  /// Unlike the others it is not element-wise: filling any box computes the whole matrix
  /// (O(rows·n·min(rows, n)) work, cached per process), then copies the box. ValueError for a
  /// shape of rank < 2 (Keras' message) and when filling, for a gain that is not finite.
  static Initializer orthogonal(double gain = 1.0, std::optional<uint64_t> seed = std::nullopt);

  /// By name with default parameters, as keras.initializers.get(): a snake_case name from
  /// names(), a Keras class name ("GlorotUniform") or a Keras alias ("uniform", "normal",
  /// "one", "zero"). ValueError listing the valid names otherwise.
  static Initializer from_name(std::string_view name);
  /// Parses to_string() output: a name, optionally with keyword arguments, for example
  /// `random_normal(stddev=0.02, seed=7)` or `variance_scaling(scale=2, mode='fan_out')`.
  /// ValueError naming the bad argument and the valid ones.
  static Initializer from_string(std::string_view text);
  /// The snake_case names, in InitializerKind order.
  static const std::vector<std::string>& names();

  InitializerKind kind() const { return kind_; }
  /// The snake_case name: "glorot_uniform".
  std::string_view name() const;
  /// False for zeros, ones and constant.
  bool is_random() const;
  /// variance_scaling and the six named forms of it.
  bool is_variance_scaling() const;

  double value() const { return value_; }
  double minval() const { return minval_; }
  double maxval() const { return maxval_; }
  double mean() const { return mean_; }
  double stddev() const { return stddev_; }
  double scale() const { return scale_; }
  double gain() const { return gain_; }
  FanMode mode() const { return mode_; }
  VarianceDistribution distribution() const { return distribution_; }
  std::optional<uint64_t> seed() const { return seed_; }
  /// A copy with another seed (std::nullopt: the global seed). Ignored by non-random kinds.
  Initializer with_seed(std::optional<uint64_t> seed) const;

  /// `glorot_uniform`, `glorot_uniform(seed=3)`, `constant(value=0.5)`,
  /// `random_uniform(minval=-0.05, maxval=0.05)`: every parameter of the kind, then the seed
  /// if set. from_string(to_string()) == *this.
  std::string to_string() const;
  friend bool operator==(const Initializer&, const Initializer&) = default;

 private:
  explicit Initializer(InitializerKind kind) : kind_(kind) {}
  static Initializer normal_like(InitializerKind kind, const RandomNormalOptions& options);
  static Initializer named_variance_scaling(InitializerKind kind, double scale, FanMode mode,
                                            VarianceDistribution distribution,
                                            std::optional<uint64_t> seed);

  InitializerKind kind_ = InitializerKind::kZeros;
  double value_ = 0.0;
  double minval_ = -0.05, maxval_ = 0.05;
  double mean_ = 0.0, stddev_ = 0.05;
  double scale_ = 1.0;
  double gain_ = 1.0;
  FanMode mode_ = FanMode::kFanIn;
  VarianceDistribution distribution_ = VarianceDistribution::kTruncatedNormal;
  std::optional<uint64_t> seed_;
};

std::ostream& operator<<(std::ostream& os, const Initializer& init);

/// "fan_in", "fan_out", "fan_avg".
std::string_view fan_mode_name(FanMode mode);
/// "truncated_normal", "untruncated_normal", "uniform".
std::string_view variance_distribution_name(VarianceDistribution distribution);

/// The seed of initializers created without one (as keras.utils.set_random_seed). Default 0.
/// Thread-safe; affects fills that start after the call.
void set_global_seed(uint64_t seed);
uint64_t global_seed();

/// A stable 64-bit hash of a variable path: FNV-1a 64 of its bytes. Stable across builds,
/// platforms and versions (tested against published FNV vectors).
uint64_t variable_key(std::string_view path);

/// The Philox key of a variable: seed (or the global seed when absent) mixed with its
/// variable key. See NOTE [Initializer streams].
uint64_t init_key(std::optional<uint64_t> seed, uint64_t variable_key);

/// Writes the elements of `box` of a tensor of `global_shape`, row-major, to `out`: the same
/// bytes as the slice `box` of filling the whole tensor, whatever the box.
/// \param out  box.num_elements() * dtype_size(dtype) bytes, any alignment.
/// \param variable_key  variable_key(path) of the variable (any value: it selects the stream).
/// \error ValueError if the box's rank differs from the shape's or the box is not inside it,
///   if a random initializer meets a non-floating dtype, or if a constant does not fit an
///   integer dtype.
void fill_box(const Initializer& init, const Shape& global_shape, const Box& box, DType dtype,
              std::byte* out, uint64_t variable_key);

}  // namespace meshlayout
