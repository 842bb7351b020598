// optimizer_test_util.h — a float64 reference of the Keras 3 optimizers (clipping, decoupled
// weight decay, SGD/Adam/AdamW/RMSprop/Adagrad/Lion/Adafactor update_step, written from
// keras/src/optimizers/*.py, independent of the library's update code), and
// helpers to run the same steps on distributed variables (make_random_vars: variables of
// given names, shapes and layouts; make_dense_vars: a kernel and a bias under "dense"), for
// optimizer_test.cc, optimizer_apply_test.cc, the ZeRO-1
// tests and the mpirun test.
//
// expect_zero1_matches runs an optimizer with and without ZeRO-1 (shard_slots_over) on two
// copies of the same variables and expects bit-identical variables and slots.
//
// Example:
//   RefOptimizer ref("adam", options);
//   std::vector<RefVar> vars = {{theta0, "kernel"}};
//   ref.step(vars, {grad});     // theta, slots updated in float64
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "meshlayout/array/array.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/nn/name_scope.h"
#include "meshlayout/train/optimizers.h"

namespace meshlayout {

struct RefVar {
  std::vector<double> theta;
  std::string name;                        // the leaf name (weight-decay exclusion)
  std::vector<std::vector<double>> slots;  // in slot_names() order, created on first step
  Shape shape;                             // Adafactor factors the last two dimensions
};

class RefOptimizer {
 public:
  RefOptimizer(std::string kind, OptimizerOptions o, std::vector<std::string> exclude = {})
      : kind_(std::move(kind)), o_(std::move(o)), exclude_(std::move(exclude)) {
    const bool sgd = kind_ == "sgd";
    lr_ = static_cast<float>(o_.learning_rate.value_or(sgd ? 0.01 : 0.001));  // an F32 variable
    if (kind_ == "adamw" && !o_.weight_decay) o_.weight_decay = 0.004;
  }

  void step(std::vector<RefVar>& vars, std::vector<std::vector<double>> grads) {
    const double lr = lr_;
    // Clip.
    if (o_.clipvalue) {
      for (auto& g : grads)
        for (double& x : g) x = std::clamp(x, -*o_.clipvalue, *o_.clipvalue);
    } else if (o_.clipnorm) {
      for (auto& g : grads) {
        double s = 0;
        for (double x : g) s += x * x;
        const double d = std::max(std::sqrt(s), *o_.clipnorm);
        for (double& x : g) x = x * *o_.clipnorm / d;
      }
    } else if (o_.global_clipnorm) {
      double s = 0;
      for (auto& g : grads)
        for (double x : g) s += x * x;
      const double scale =
          *o_.global_clipnorm * std::min(1.0 / std::sqrt(s), 1.0 / *o_.global_clipnorm);
      for (auto& g : grads)
        for (double& x : g) x *= scale;
    }
    // Decoupled weight decay on the pre-update θ.
    if (o_.weight_decay) {
      for (RefVar& v : vars) {
        bool excluded = false;
        for (const std::string& e : exclude_) excluded |= v.name.find(e) != std::string::npos;
        if (excluded) continue;
        for (double& x : v.theta) x = x - x * *o_.weight_decay * lr;
      }
    }
    const double t = static_cast<double>(iterations_ + 1);
    for (size_t i = 0; i < vars.size(); ++i) {
      RefVar& v = vars[i];
      const std::vector<double>& g = grads[i];
      const size_t n = v.theta.size();
      if (kind_ == "adafactor") {
        adafactor_step(v, g, lr, t);
        continue;
      }
      if (kind_ == "rmsprop") {
        // keras/src/optimizers/rmsprop.py update_step; slots [velocity, momentum?,
        // average_gradient?].
        const double rho = number("rho", 0.9), mu = number("momentum", 0.0),
                     eps = number("epsilon", 1e-7);
        const bool centered = flag("centered", false);
        if (v.slots.empty()) v.slots.assign(1 + (mu > 0) + centered, std::vector<double>(n, 0.0));
        std::vector<double>& vel = v.slots[0];
        for (size_t k = 0; k < n; ++k) {
          vel[k] = rho * vel[k] + (1 - rho) * g[k] * g[k];
          double denominator = vel[k] + eps;
          if (centered) {
            std::vector<double>& avg = v.slots.back();
            avg[k] = rho * avg[k] + (1 - rho) * g[k];
            denominator = vel[k] - avg[k] * avg[k] + eps;
          }
          const double increment = lr * g[k] / std::sqrt(denominator);
          if (mu > 0) {
            v.slots[1][k] = mu * v.slots[1][k] + increment;
            v.theta[k] -= v.slots[1][k];
          } else {
            v.theta[k] -= increment;
          }
        }
      } else if (kind_ == "adagrad") {
        // keras/src/optimizers/adagrad.py: accumulator starts at initial_accumulator_value.
        const double eps = number("epsilon", 1e-7);
        if (v.slots.empty())
          v.slots.assign(1, std::vector<double>(n, number("initial_accumulator_value", 0.1)));
        std::vector<double>& acc = v.slots[0];
        for (size_t k = 0; k < n; ++k) {
          acc[k] += g[k] * g[k];
          v.theta[k] -= lr * g[k] / std::sqrt(acc[k] + eps);
        }
      } else if (kind_ == "lion") {
        // keras/src/optimizers/lion.py: the sign of the interpolation, then the momentum.
        const double b1 = number("beta_1", 0.9), b2 = number("beta_2", 0.99);
        if (v.slots.empty()) v.slots.assign(1, std::vector<double>(n, 0.0));
        std::vector<double>& m = v.slots[0];
        for (size_t k = 0; k < n; ++k) {
          const double c = m[k] * b1 + g[k] * (1 - b1);
          v.theta[k] -= lr * static_cast<double>((c > 0) - (c < 0));
          m[k] = m[k] * b2 + g[k] * (1 - b2);
        }
      } else if (kind_ == "sgd") {
        const double mu = o_.momentum.value_or(0.0);
        if (mu == 0.0) {
          for (size_t k = 0; k < n; ++k) v.theta[k] -= g[k] * lr;
          continue;
        }
        if (v.slots.empty()) v.slots.assign(1, std::vector<double>(n, 0.0));
        auto& m = v.slots[0];
        for (size_t k = 0; k < n; ++k) {
          m[k] = mu * m[k] - lr * g[k];
          v.theta[k] += o_.nesterov.value_or(false) ? mu * m[k] - lr * g[k] : m[k];
        }
      } else {
        const double b1 = o_.beta_1.value_or(0.9), b2 = o_.beta_2.value_or(0.999);
        const double eps = o_.epsilon.value_or(1e-7);
        const bool ams = o_.amsgrad.value_or(false);
        if (v.slots.empty()) v.slots.assign(ams ? 3 : 2, std::vector<double>(n, 0.0));
        auto &m = v.slots[0], &vel = v.slots[1];
        const double alpha = lr * std::sqrt(1 - std::pow(b2, t)) / (1 - std::pow(b1, t));
        for (size_t k = 0; k < n; ++k) {
          m[k] += (g[k] - m[k]) * (1 - b1);
          vel[k] += (g[k] * g[k] - vel[k]) * (1 - b2);
          double d = vel[k];
          if (ams) d = v.slots[2][k] = std::max(v.slots[2][k], vel[k]);
          v.theta[k] -= m[k] * alpha / (std::sqrt(d) + eps);
        }
      }
    }
    ++iterations_;
  }

 private:
  // keras/src/optimizers/adafactor.py update_step on the whole tensor; slots [r, c, velocity]
  // (r, c scalar placeholders below rank 2).
  void adafactor_step(RefVar& v, const std::vector<double>& g, double lr, double t) const {
    const double decay = number("beta_2_decay", -0.8), eps1 = number("epsilon_1", 1e-30);
    const double eps2 = number("epsilon_2", 1e-3), clip = number("clip_threshold", 1.0);
    const size_t total = v.theta.size(), rank = v.shape.size();
    const size_t m = rank >= 2 ? static_cast<size_t>(v.shape[rank - 2]) : 1;
    const size_t n = rank >= 2 ? static_cast<size_t>(v.shape[rank - 1]) : 1;
    const size_t lead = rank >= 2 ? total / (m * n) : 1;
    if (v.slots.empty()) {
      v.slots = {std::vector<double>(rank >= 2 ? lead * m : 1, 0.0),
                 std::vector<double>(rank >= 2 ? lead * n : 1, 0.0),
                 std::vector<double>(total, 0.0)};
    }
    if (flag("relative_step", true)) lr = std::min(lr, 1 / std::sqrt(t));
    const double rho_t = std::min(lr, 1 / std::sqrt(t));
    double sq = 0;
    for (double x : v.theta) sq += x * x;
    const double alpha_t = std::max(eps2, std::sqrt(sq / static_cast<double>(total))) * rho_t;
    const double beta = 1 - std::pow(t, decay);
    std::vector<double> reg(total);
    for (size_t k = 0; k < total; ++k) reg[k] = g[k] * g[k] + eps1;
    std::vector<double>&r = v.slots[0], &c = v.slots[1], &vel = v.slots[2];
    if (rank >= 2) {
      for (size_t l = 0; l < lead; ++l) {
        for (size_t i = 0; i < m; ++i) {
          double row = 0;
          for (size_t j = 0; j < n; ++j) row += reg[(l * m + i) * n + j];
          r[l * m + i] = beta * r[l * m + i] + (1 - beta) * row / static_cast<double>(n);
        }
        for (size_t j = 0; j < n; ++j) {
          double col = 0;
          for (size_t i = 0; i < m; ++i) col += reg[(l * m + i) * n + j];
          c[l * n + j] = beta * c[l * n + j] + (1 - beta) * col / static_cast<double>(m);
        }
        double r_mean = 0;
        for (size_t i = 0; i < m; ++i) r_mean += r[l * m + i] / static_cast<double>(m);
        for (size_t i = 0; i < m; ++i) {
          for (size_t j = 0; j < n; ++j)
            vel[(l * m + i) * n + j] = r[l * m + i] / r_mean * c[l * n + j];
        }
      }
    } else {
      for (size_t k = 0; k < total; ++k) vel[k] = beta * vel[k] + (1 - beta) * reg[k];
    }
    std::vector<double> u(total);
    double uu = 0;
    for (size_t k = 0; k < total; ++k) {
      u[k] = g[k] / std::sqrt(vel[k]);
      uu += u[k] * u[k];
    }
    const double divisor = std::max(1.0, std::sqrt(uu / static_cast<double>(total)) / clip);
    for (size_t k = 0; k < total; ++k) v.theta[k] -= alpha_t * u[k] / divisor;
  }

  // A keyword argument of the optimizer: its typed field or its entry in `arguments`.
  double number(const std::string& name, double fallback) const {
    if (name == "momentum" && o_.momentum) return *o_.momentum;
    if (name == "epsilon" && o_.epsilon) return *o_.epsilon;
    if (name == "beta_1" && o_.beta_1) return *o_.beta_1;
    if (name == "beta_2" && o_.beta_2) return *o_.beta_2;
    auto it = o_.arguments.find(name);
    return it == o_.arguments.end() ? fallback : std::get<double>(it->second);
  }
  bool flag(const std::string& name, bool fallback) const {
    auto it = o_.arguments.find(name);
    return it == o_.arguments.end() ? fallback : std::get<bool>(it->second);
  }

  std::string kind_;
  OptimizerOptions o_;
  std::vector<std::string> exclude_;
  float lr_;
  int64_t iterations_ = 0;
};

/// The whole tensor as float64 (F32 or F64).
inline std::vector<double> to_doubles(const HostTensor& t) {
  std::vector<double> out(static_cast<size_t>(t.num_elements()));
  for (size_t k = 0; k < out.size(); ++k) {
    out[k] = t.dtype() == DType::kF32 ? t.data_as<float>()[k] : t.data_as<double>()[k];
  }
  return out;
}

/// A deterministic gradient of `shape` for step `step` of variable `which` (values in ±1.5).
inline HostTensor test_gradient(const Shape& shape, DType dtype, int step, int which) {
  HostTensor t(dtype, shape);
  for (int64_t k = 0; k < t.num_elements(); ++k) {
    const double x = 1.5 * std::sin(0.37 * static_cast<double>(k) + 1.3 * step + 0.7 * which);
    if (dtype == DType::kF32) {
      t.data_as<float>()[k] = static_cast<float>(x);
    } else {
      t.data_as<double>()[k] = x;
    }
  }
  return t;
}

/// Largest |a−b| / max(1, |b|).
inline double max_rel_error(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = a.size() == b.size() ? 0.0 : 1e300;
  for (size_t k = 0; k < std::min(a.size(), b.size()); ++k) {
    worst = std::max(worst, std::abs(a[k] - b[k]) / std::max(1.0, std::abs(b[k])));
  }
  return worst;
}

/// A variable of the tests: its name, shape and layout.
struct VariableCase {
  std::string name;
  Shape shape;
  TensorLayout layout;
};

/// Random variables of `dtype` under the name scope `scope`, one per case: all created, then
/// each materialized in its layout, in order.
inline std::vector<VariablePtr> make_random_vars(const std::string& scope,
                                                 const std::vector<VariableCase>& cases,
                                                 DType dtype = DType::kF32) {
  std::vector<VariablePtr> vars;
  NameScope name_scope(scope);
  for (const VariableCase& c : cases) {
    vars.push_back(
        std::make_shared<Variable>(VariableSpec{.name = c.name,
                                                .shape = c.shape,
                                                .dtype = dtype,
                                                .initializer = Initializer::random_normal()}));
  }
  for (size_t i = 0; i < cases.size(); ++i) vars[i]->materialize(cases[i].layout);
  return vars;
}

/// kernel (6, 8) over 'model', bias (8,) replicated, both under the scope "dense", random.
inline std::vector<VariablePtr> make_dense_vars(const DeviceMesh& mesh, DType dtype = DType::kF32) {
  return make_random_vars("dense",
                          {{"kernel", {6, 8}, TensorLayout({None, "model"}, mesh)},
                           {"bias", {8}, TensorLayout({None}, mesh)}},
                          dtype);
}

/// `steps` steps of make_optimizer(kind, options) and of the same with shard_slots_over = axis
/// (both named options.name, else stable_optimizer_name(kind)),
/// on two copies of the `cases` variables (random values, the same in both), with the same
/// gradients: expects every variable and slot bit-identical after each step, the variables
/// in their layouts and the ZeRO slots in zero1_slot_layout. Returns the ZeRO optimizer.
inline std::unique_ptr<Optimizer> expect_zero1_matches(const std::string& kind,
                                                       const OptimizerOptions& options,
                                                       const std::string& axis,
                                                       const std::vector<VariableCase>& cases,
                                                       int steps) {
  // One name for both, so the slots' paths match (two unnamed optimizers are numbered apart).
  OptimizerOptions plain_options = options;
  if (plain_options.name.empty()) plain_options.name = stable_optimizer_name(kind);
  OptimizerOptions zero_options = plain_options;
  zero_options.shard_slots_over = axis;
  auto plain = make_optimizer(kind, plain_options);
  auto zero = make_optimizer(kind, zero_options);
  std::vector<VariablePtr> a, b;
  {
    NameScope scope("model");
    for (const VariableCase& c : cases) {
      a.push_back(std::make_shared<Variable>(VariableSpec{
          .name = c.name, .shape = c.shape, .initializer = Initializer::random_normal()}));
      b.push_back(std::make_shared<Variable>(VariableSpec{.name = c.name, .shape = c.shape}));
      a.back()->materialize(c.layout);
      b.back()->materialize(c.layout);
      reshard_into(a.back()->value(), b.back()->mutable_value());
    }
  }
  for (int step = 0; step < steps; ++step) {
    std::vector<Array> grads;
    for (size_t i = 0; i < cases.size(); ++i) {
      grads.push_back(distribute_tensor(
          test_gradient(cases[i].shape, DType::kF32, step, static_cast<int>(i)), cases[i].layout));
    }
    std::vector<const Array*> gp;
    for (const Array& g : grads) gp.push_back(&g);
    plain->apply(gp, a);
    zero->apply(gp, b);
    for (size_t i = 0; i < cases.size(); ++i) {
      SCOPED_TRACE(fmt::format("{} step {} {}", kind, step, cases[i].name));
      EXPECT_EQ(b[i]->value().layout(), cases[i].layout);
      EXPECT_EQ(to_doubles(b[i]->value().gather()), to_doubles(a[i]->value().gather()));
      const std::vector<VariablePtr> sa = plain->slots_of(*a[i]), sb = zero->slots_of(*b[i]);
      EXPECT_EQ(sa.size(), sb.size());
      for (size_t s = 0; s < std::min(sa.size(), sb.size()); ++s) {
        EXPECT_EQ(sb[s]->path(), sa[s]->path());
        EXPECT_EQ(sb[s]->value().layout(),
                  zero1_slot_layout(cases[i].layout, cases[i].shape, axis));
        EXPECT_EQ(to_doubles(sb[s]->value().gather()), to_doubles(sa[s]->value().gather()))
            << sb[s]->path();
      }
    }
  }
  return zero;
}

}  // namespace meshlayout
