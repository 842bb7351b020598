// The text forms of Initializer: names (keras.initializers.get), to_string and from_string.
#include "meshlayout/init/initializer_text.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <map>
#include <utility>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/init/initializers.h"

namespace meshlayout {
namespace internal_init {

std::string repr_float(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

}  // namespace internal_init

namespace {

using internal_init::repr_float;

// Keras class names, in InitializerKind order (keras.initializers.get accepts both forms).
constexpr std::array<std::string_view, 14> kClassNames = {
    "Zeros",           "Ones",          "Constant",
    "RandomUniform",   "RandomNormal",  "TruncatedNormal",
    "VarianceScaling", "GlorotUniform", "GlorotNormal",
    "HeUniform",       "HeNormal",      "LecunUniform",
    "LecunNormal",     "Orthogonal"};

// Keras aliases (keras/src/initializers/__init__.py).
constexpr std::array<std::pair<std::string_view, InitializerKind>, 4> kAliases = {{
    {"uniform", InitializerKind::kRandomUniform},
    {"normal", InitializerKind::kRandomNormal},
    {"one", InitializerKind::kOnes},
    {"zero", InitializerKind::kZeros},
}};

constexpr std::array<std::string_view, 3> kFanModes = {"fan_in", "fan_out", "fan_avg"};
constexpr std::array<std::string_view, 3> kDistributions = {"truncated_normal",
                                                            "untruncated_normal", "uniform"};

Initializer default_of(InitializerKind kind) {
  switch (kind) {
    case InitializerKind::kZeros:
      return Initializer::zeros();
    case InitializerKind::kOnes:
      return Initializer::ones();
    case InitializerKind::kConstant:
      return Initializer::constant(0.0);
    case InitializerKind::kRandomUniform:
      return Initializer::random_uniform();
    case InitializerKind::kRandomNormal:
      return Initializer::random_normal();
    case InitializerKind::kTruncatedNormal:
      return Initializer::truncated_normal();
    case InitializerKind::kVarianceScaling:
      return Initializer::variance_scaling();
    case InitializerKind::kGlorotUniform:
      return Initializer::glorot_uniform();
    case InitializerKind::kGlorotNormal:
      return Initializer::glorot_normal();
    case InitializerKind::kHeUniform:
      return Initializer::he_uniform();
    case InitializerKind::kHeNormal:
      return Initializer::he_normal();
    case InitializerKind::kLecunUniform:
      return Initializer::lecun_uniform();
    case InitializerKind::kLecunNormal:
      return Initializer::lecun_normal();
    case InitializerKind::kOrthogonal:
      return Initializer::orthogonal();
  }
  throw InternalError("unhandled InitializerKind");
}

/// The keyword arguments each kind takes, in to_string() order.
std::vector<std::string> arguments_of(InitializerKind kind) {
  switch (kind) {
    case InitializerKind::kZeros:
    case InitializerKind::kOnes:
      return {};
    case InitializerKind::kConstant:
      return {"value"};
    case InitializerKind::kRandomUniform:
      return {"minval", "maxval", "seed"};
    case InitializerKind::kRandomNormal:
    case InitializerKind::kTruncatedNormal:
      return {"mean", "stddev", "seed"};
    case InitializerKind::kVarianceScaling:
      return {"scale", "mode", "distribution", "seed"};
    case InitializerKind::kOrthogonal:
      return {"gain", "seed"};
    default:
      return {"seed"};
  }
}

template <size_t N>
size_t index_of(const std::array<std::string_view, N>& names, std::string_view value,
                std::string_view argument) {
  for (size_t i = 0; i < N; ++i) {
    if (names[i] == value) return i;
  }
  std::vector<std::string> valid(names.begin(), names.end());
  throw ValueError(fmt::format("variance_scaling argument {} is {}; expected one of {}",
                               quote(argument), quote(value), repr_list(valid)));
}

struct Argument {
  std::string text;  // as written, unquoted for strings
  bool quoted = false;
};

class ArgumentReader {
 public:
  ArgumentReader(std::string_view source, std::map<std::string, Argument> args)
      : source_(source), args_(std::move(args)) {}

  bool has(const std::string& key) const { return args_.count(key) != 0; }

  double number(const std::string& key, double fallback) const {
    auto it = args_.find(key);
    if (it == args_.end()) return fallback;
    const std::string& t = it->second.text;
    double v = 0;
    auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (it->second.quoted || ec != std::errc() || end != t.data() + t.size()) {
      throw ValueError(fmt::format("initializer text {}: argument {} must be a number, got {}",
                                   quote(source_), quote(key), t));
    }
    return v;
  }

  std::optional<uint64_t> seed() const {
    auto it = args_.find("seed");
    if (it == args_.end() || (!it->second.quoted && it->second.text == "None")) {
      return std::nullopt;
    }
    const std::string& t = it->second.text;
    uint64_t v = 0;
    auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (it->second.quoted || ec != std::errc() || end != t.data() + t.size()) {
      throw ValueError(fmt::format(
          "initializer text {}: argument 'seed' must be None or an integer in [0, 2^64), got {}",
          quote(source_), t));
    }
    return v;
  }

  std::string_view word(const std::string& key, std::string_view fallback) const {
    auto it = args_.find(key);
    return it == args_.end() ? fallback : std::string_view(it->second.text);
  }

 private:
  std::string_view source_;
  std::map<std::string, Argument> args_;
};

/// Splits `key=value, key=value` (values may be quoted with ' or ").
std::map<std::string, Argument> parse_arguments(std::string_view source, std::string_view body,
                                                const Initializer& init) {
  std::map<std::string, Argument> args;
  const std::vector<std::string> valid = arguments_of(init.kind());
  size_t i = 0;
  auto skip_spaces = [&] {
    while (i < body.size() && (body[i] == ' ' || body[i] == '\t')) ++i;
  };
  skip_spaces();
  while (i < body.size()) {
    const size_t eq = body.find('=', i);
    if (eq == std::string_view::npos) {
      throw ValueError(
          fmt::format("initializer text {}: expected keyword arguments written name=value, as in "
                      "'random_uniform(minval=-1.0, maxval=1.0)'",
                      quote(source)));
    }
    const std::string key(trim(body.substr(i, eq - i)));
    if (std::find(valid.begin(), valid.end(), key) == valid.end()) {
      throw ValueError(fmt::format("initializer {} has no argument {}; its arguments are {}",
                                   quote(init.name()), quote(key), repr_list(valid)));
    }
    if (args.count(key) != 0) {
      throw ValueError(fmt::format("initializer text {}: argument {} is given twice", quote(source),
                                   quote(key)));
    }
    i = eq + 1;
    skip_spaces();
    Argument arg;
    if (i < body.size() && (body[i] == '\'' || body[i] == '"')) {
      const size_t close = body.find(body[i], i + 1);
      if (close == std::string_view::npos) {
        throw ValueError(fmt::format("initializer text {}: unterminated string for argument {}",
                                     quote(source), quote(key)));
      }
      arg = {std::string(body.substr(i + 1, close - i - 1)), true};
      i = close + 1;
    } else {
      const size_t comma = std::min(body.find(',', i), body.size());
      arg = {std::string(trim(body.substr(i, comma - i))), false};
      i = comma;
    }
    args.emplace(key, std::move(arg));
    skip_spaces();
    if (i < body.size()) {
      if (body[i] != ',') {
        throw ValueError(fmt::format("initializer text {}: expected ',' after argument {}",
                                     quote(source), quote(key)));
      }
      ++i;
      skip_spaces();
    }
  }
  return args;
}

}  // namespace

std::string_view fan_mode_name(FanMode mode) { return kFanModes[static_cast<size_t>(mode)]; }

std::string_view variance_distribution_name(VarianceDistribution distribution) {
  return kDistributions[static_cast<size_t>(distribution)];
}

Initializer Initializer::from_name(std::string_view name) {
  const std::vector<std::string>& snake = names();
  for (size_t i = 0; i < snake.size(); ++i) {
    if (name == snake[i] || name == kClassNames[i])
      return default_of(static_cast<InitializerKind>(i));
  }
  for (const auto& [alias, kind] : kAliases) {
    if (name == alias) return default_of(kind);
  }
  throw ValueError(fmt::format(
      "unknown initializer {}; expected one of {} (Keras class names such as 'GlorotUniform' "
      "work too)",
      quote(name), repr_list(snake)));
}

Initializer Initializer::from_string(std::string_view text) {
  const std::string_view t = trim(text);
  const size_t open = t.find('(');
  const Initializer base = from_name(trim(t.substr(0, open)));
  if (open == std::string_view::npos) return base;
  if (t.back() != ')') {
    throw ValueError(
        fmt::format("initializer text {} has no closing ')'; expected the form "
                    "'name(argument=value, …)'",
                    quote(text)));
  }
  const ArgumentReader args(text,
                            parse_arguments(text, t.substr(open + 1, t.size() - open - 2), base));
  switch (base.kind()) {
    case InitializerKind::kZeros:
    case InitializerKind::kOnes:
      return base;
    case InitializerKind::kConstant:
      return constant(args.number("value", 0.0));
    case InitializerKind::kRandomUniform:
      return random_uniform({.minval = args.number("minval", base.minval()),
                             .maxval = args.number("maxval", base.maxval()),
                             .seed = args.seed()});
    case InitializerKind::kRandomNormal:
    case InitializerKind::kTruncatedNormal:
      return normal_like(base.kind(), {.mean = args.number("mean", base.mean()),
                                       .stddev = args.number("stddev", base.stddev()),
                                       .seed = args.seed()});
    case InitializerKind::kVarianceScaling: {
      const auto mode = static_cast<FanMode>(
          index_of(kFanModes, args.word("mode", fan_mode_name(base.mode())), "mode"));
      std::string_view dist = args.word("distribution", "truncated_normal");
      if (dist == "normal") dist = "truncated_normal";  // Keras' alias
      const auto distribution =
          static_cast<VarianceDistribution>(index_of(kDistributions, dist, "distribution"));
      return variance_scaling({.scale = args.number("scale", base.scale()),
                               .mode = mode,
                               .distribution = distribution,
                               .seed = args.seed()});
    }
    case InitializerKind::kOrthogonal:
      return orthogonal(args.number("gain", base.gain()), args.seed());
    default:
      return base.with_seed(args.seed());
  }
}

std::string Initializer::to_string() const {
  std::vector<std::string> parts;
  switch (kind_) {
    case InitializerKind::kZeros:
    case InitializerKind::kOnes:
      break;
    case InitializerKind::kConstant:
      parts.push_back("value=" + repr_float(value_));
      break;
    case InitializerKind::kRandomUniform:
      parts.push_back("minval=" + repr_float(minval_));
      parts.push_back("maxval=" + repr_float(maxval_));
      break;
    case InitializerKind::kRandomNormal:
    case InitializerKind::kTruncatedNormal:
      parts.push_back("mean=" + repr_float(mean_));
      parts.push_back("stddev=" + repr_float(stddev_));
      break;
    case InitializerKind::kVarianceScaling:
      parts.push_back("scale=" + repr_float(scale_));
      parts.push_back("mode=" + quote(fan_mode_name(mode_)));
      parts.push_back("distribution=" + quote(variance_distribution_name(distribution_)));
      break;
    case InitializerKind::kOrthogonal:
      parts.push_back("gain=" + repr_float(gain_));
      break;
    default:
      break;  // the named variance scalings have fixed parameters
  }
  if (seed_) parts.push_back(fmt::format("seed={}", *seed_));
  if (parts.empty()) return std::string(name());
  return fmt::format("{}({})", name(), join(parts, ", "));
}

}  // namespace meshlayout
