// trainer_test_util.h — the regression problem of the trainer tests and a float64 host reference
// of fitting a Sequential Dense(relu) → Dense with mean squared error plus the weights'
// regularisation penalties (if make_mlp was given regularisers), written from the formulas
// (forward, backward, the optimizer step of optimizer_test_util.h). Test-only.
//
// Example:
//   auto model = make_mlp();                       // under a distribution scope, or none
//   (make_mlp(mlp_regularizers()): with kernel/bias regularisers, which RefMlp reads)
//   RefMlp ref(*model);                            // the model's initial weights, float64
//   std::vector<double> want = ref.fit(x, y, 8, 3, RefOptimizer("sgd", {.learning_rate = 0.05}));
#pragma once

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <vector>

#include "meshlayout/nn/layers/core/dense.h"
#include "meshlayout/nn/model.h"
#include "meshlayout/train/optimizer_test_util.h"

namespace meshlayout {

constexpr int64_t kRows = 20, kIn = 4, kHidden = 8, kOut = 2;

/// Weight regularisers of the mlp's variables (none by default).
struct MlpRegularizers {
  std::optional<Regularizer> d1_kernel, d1_bias, d2_kernel, d2_bias;
};

/// The regularisers fit's regularisation tests use: L1L2 on d1's kernel, L2 on its bias, L1 on
/// d2's kernel; penalties of the order of the loss.
inline MlpRegularizers mlp_regularizers() {
  return {.d1_kernel = Regularizer::L1L2(0.01, 0.02),
          .d1_bias = Regularizer::L2(0.05),
          .d2_kernel = Regularizer::L1(0.02)};
}

/// Sequential "mlp": d1 = Dense(8, relu), d2 = Dense(2), input (4,), seeded initializers.
inline std::shared_ptr<Sequential> make_mlp(const MlpRegularizers& reg = {}) {
  auto d1 = std::make_shared<Dense>(
      kHidden,
      DenseOptions{.name = "d1",
                   .activation = Activation::kRelu,
                   .kernel_initializer = Initializer::random_normal({.stddev = 0.5, .seed = 1}),
                   .bias_initializer = Initializer::random_normal({.stddev = 0.1, .seed = 2}),
                   .kernel_regularizer = reg.d1_kernel,
                   .bias_regularizer = reg.d1_bias});
  auto d2 = std::make_shared<Dense>(
      kOut,
      DenseOptions{.name = "d2",
                   .kernel_initializer = Initializer::random_normal({.stddev = 0.5, .seed = 3}),
                   .kernel_regularizer = reg.d2_kernel,
                   .bias_regularizer = reg.d2_bias});
  return std::make_shared<Sequential>(std::vector<std::shared_ptr<Layer>>{d1, d2},
                                      SequentialOptions{.name = "mlp", .input_shape = Shape{kIn}});
}

/// x (20, 4) and y (20, 2) = a smooth function of x, F32.
inline std::pair<HostTensor, HostTensor> regression_data(int64_t rows = kRows) {
  HostTensor x(DType::kF32, {rows, kIn}), y(DType::kF32, {rows, kOut});
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < kIn; ++j) {
      x.data_as<float>()[r * kIn + j] =
          static_cast<float>(std::sin(0.7 * static_cast<double>(r) + 1.3 * j));
    }
    const float* xr = x.data_as<float>() + r * kIn;
    y.data_as<float>()[r * kOut] = static_cast<float>(0.5 * xr[0] - 0.3 * xr[1] * xr[2] + 0.2);
    y.data_as<float>()[r * kOut + 1] =
        static_cast<float>(std::cos(static_cast<double>(xr[3])) - 0.4 * xr[0]);
  }
  return {std::move(x), std::move(y)};
}

class RefMlp {
 public:
  /// The model's weights (d1's kernel and bias, d2's, in that order whichever are frozen), and
  /// the regularisers of its trainable ones (Keras' model.losses).
  explicit RefMlp(const Sequential& model) {
    for (const auto& layer : model.layers()) {
      for (const auto& [attr, v] : layer->own_weights()) {
        vars_.push_back({to_doubles(v->value().gather()), v->name(), {}});
        reg_.push_back(v->trainable() ? v->regularizer().value_or(Regularizer{}) : Regularizer{});
      }
    }
  }

  /// The regularisation penalty: sum over variables of l1 * sum|w| + l2 * sum w^2.
  double penalty() const {
    double p = 0;
    for (size_t i = 0; i < vars_.size(); ++i) {
      for (const double w : vars_[i].theta) p += reg_[i].l1 * std::abs(w) + reg_[i].l2 * w * w;
    }
    return p;
  }

  /// Model output (rows, kOut) for x (rows, kIn); the hidden pre-activations into *z.
  std::vector<double> forward(const std::vector<double>& x, int64_t rows,
                              std::vector<double>* z = nullptr) const {
    const auto& k1 = vars_[0].theta;
    const auto& b1 = vars_[1].theta;
    const auto& k2 = vars_[2].theta;
    const auto& b2 = vars_[3].theta;
    std::vector<double> pre(static_cast<size_t>(rows * kHidden)),
        out(static_cast<size_t>(rows * kOut));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t h = 0; h < kHidden; ++h) {
        double s = b1[h];
        for (int64_t i = 0; i < kIn; ++i) s += x[r * kIn + i] * k1[i * kHidden + h];
        pre[r * kHidden + h] = s;
      }
      for (int64_t o = 0; o < kOut; ++o) {
        double s = b2[o];
        for (int64_t h = 0; h < kHidden; ++h)
          s += std::max(0.0, pre[r * kHidden + h]) * k2[h * kOut + o];
        out[r * kOut + o] = s;
      }
    }
    if (z) *z = std::move(pre);
    return out;
  }

  static double mse(const std::vector<double>& p, const std::vector<double>& t) {
    double s = 0;
    for (size_t i = 0; i < p.size(); ++i) s += (p[i] - t[i]) * (p[i] - t[i]);
    return s / static_cast<double>(p.size());
  }

  /// One step on a batch: returns the loss (mse plus the penalty) before the update.
  double step(const std::vector<double>& x, const std::vector<double>& t, int64_t rows,
              RefOptimizer& opt) {
    std::vector<double> z;
    const std::vector<double> y = forward(x, rows, &z);
    const double loss = mse(y, t) + penalty();
    const auto& k2 = vars_[2].theta;
    std::vector<std::vector<double>> g(4);
    for (size_t i = 0; i < 4; ++i) g[i].assign(vars_[i].theta.size(), 0.0);
    const double n = static_cast<double>(rows * kOut);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t o = 0; o < kOut; ++o) {
        const double dy = 2.0 * (y[r * kOut + o] - t[r * kOut + o]) / n;
        g[3][o] += dy;
        for (int64_t h = 0; h < kHidden; ++h) {
          const double zh = z[r * kHidden + h];
          g[2][h * kOut + o] += std::max(0.0, zh) * dy;
          if (zh > 0) {
            const double dz = dy * k2[h * kOut + o];
            g[1][h] += dz;
            for (int64_t i = 0; i < kIn; ++i) g[0][i * kHidden + h] += x[r * kIn + i] * dz;
          }
        }
      }
    }
    // The penalty's gradient: l1 * sign(w) + 2 * l2 * w.
    for (size_t i = 0; i < 4; ++i) {
      for (size_t j = 0; j < g[i].size(); ++j) {
        const double w = vars_[i].theta[j];
        g[i][j] += reg_[i].l1 * static_cast<double>((w > 0) - (w < 0)) + 2.0 * reg_[i].l2 * w;
      }
    }
    opt.step(vars_, g);
    return loss;
  }

  /// fit without shuffling: the batch-size-weighted epoch means.
  std::vector<double> fit(const HostTensor& xh, const HostTensor& yh, int64_t batch, int64_t epochs,
                          RefOptimizer opt) {
    const std::vector<double> x = to_doubles(xh), y = to_doubles(yh);
    const int64_t rows = xh.shape()[0];
    std::vector<double> history;
    for (int64_t e = 0; e < epochs; ++e) {
      double weighted = 0;
      for (int64_t start = 0; start < rows; start += batch) {
        const int64_t b = std::min(batch, rows - start);
        const std::vector<double> xb(x.begin() + start * kIn, x.begin() + (start + b) * kIn);
        const std::vector<double> yb(y.begin() + start * kOut, y.begin() + (start + b) * kOut);
        weighted += step(xb, yb, b, opt) * static_cast<double>(b);
      }
      history.push_back(weighted / static_cast<double>(rows));
    }
    return history;
  }

  const std::vector<RefVar>& vars() const { return vars_; }

 private:
  std::vector<RefVar> vars_;      // d1/kernel, d1/bias, d2/kernel, d2/bias
  std::vector<Regularizer> reg_;  // theirs (zero where none, or frozen)
};

inline void expect_history_near(const std::vector<double>& got, const std::vector<double>& want,
                                double rel) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t e = 0; e < got.size(); ++e) {
    EXPECT_LE(std::abs(got[e] - want[e]), rel * std::abs(want[e]))
        << "epoch " << e << ": " << got[e] << " vs " << want[e];
  }
}

// --- A softmax classifier (categorical cross-entropy) ---------------------------------------

constexpr int64_t kClasses = 5;

/// Sequential "clf": d1 = Dense(8, relu), d2 = Dense(5, softmax) (or linear: logits), seeded.
inline std::shared_ptr<Sequential> make_classifier(bool softmax) {
  auto d1 = std::make_shared<Dense>(
      kHidden,
      DenseOptions{.name = "d1",
                   .activation = Activation::kRelu,
                   .kernel_initializer = Initializer::random_normal({.stddev = 0.5, .seed = 1}),
                   .bias_initializer = Initializer::random_normal({.stddev = 0.1, .seed = 2})});
  auto d2 = std::make_shared<Dense>(
      kClasses,
      DenseOptions{.name = "d2",
                   .activation = softmax ? Activation::kSoftmax : Activation::kLinear,
                   .kernel_initializer = Initializer::random_normal({.stddev = 0.5, .seed = 3}),
                   .bias_initializer = Initializer::random_normal({.stddev = 0.1, .seed = 4})});
  return std::make_shared<Sequential>(std::vector<std::shared_ptr<Layer>>{d1, d2},
                                      SequentialOptions{.name = "clf", .input_shape = Shape{kIn}});
}

/// x (20, 4) as regression_data's and one-hot targets (20, 5) F32: the class of a smooth
/// function of x; rows 3, 9 and 15 are probability rows (soft targets).
inline std::pair<HostTensor, HostTensor> classification_data(int64_t rows = kRows) {
  HostTensor x = regression_data(rows).first;
  HostTensor y(DType::kF32, {rows, kClasses});
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x.data_as<float>() + r * kIn;
    const double f = 2.5 * (xr[0] + 0.5 * xr[1] * xr[2] - 0.3 * xr[3]) + 2.5;
    const int64_t c = std::clamp<int64_t>(static_cast<int64_t>(std::floor(f)), 0, kClasses - 1);
    for (int64_t j = 0; j < kClasses; ++j) {
      y.data_as<float>()[r * kClasses + j] =
          r % 6 == 3 ? (j == c ? 0.6f : 0.1f) : (j == c ? 1.0f : 0.0f);
    }
  }
  return {std::move(x), std::move(y)};
}

/// Float64 fit of make_classifier with categorical_crossentropy, from the formulas: from logits
/// −Σ t·log_softmax(z), dz = softmax(z)·Σt − t; from probabilities (a softmax output p)
/// q = p / Σp, c = clip(q, 1e-7, 1 − 1e-7), −Σ t·log c, dp = ((in band ? −t/q : 0) + Σ_{in band}
/// t)/Σp, then the softmax backward dz = p·(dp − Σ dp·p); the mean over rows.
class RefClassifier {
 public:
  RefClassifier(const Sequential& model, bool softmax) : softmax_(softmax) {
    for (const auto& layer : model.layers()) {
      for (const auto& [attr, v] : layer->own_weights())
        vars_.push_back({to_doubles(v->value().gather()), v->name(), {}});
    }
  }

  /// One step on a batch: the loss before the update.
  double step(const std::vector<double>& x, const std::vector<double>& t, int64_t rows,
              RefOptimizer& opt) {
    const auto& k1 = vars_[0].theta;
    const auto& b1 = vars_[1].theta;
    const auto& k2 = vars_[2].theta;
    const auto& b2 = vars_[3].theta;
    std::vector<std::vector<double>> g(4);
    for (size_t i = 0; i < 4; ++i) g[i].assign(vars_[i].theta.size(), 0.0);
    const double n = static_cast<double>(rows), eps = 1e-7;
    double loss = 0;
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<double> z1(kHidden), z2(kClasses), dz(kClasses);
      for (int64_t h = 0; h < kHidden; ++h) {
        z1[h] = b1[h];
        for (int64_t i = 0; i < kIn; ++i) z1[h] += x[r * kIn + i] * k1[i * kHidden + h];
      }
      for (int64_t o = 0; o < kClasses; ++o) {
        z2[o] = b2[o];
        for (int64_t h = 0; h < kHidden; ++h) z2[o] += std::max(0.0, z1[h]) * k2[h * kClasses + o];
      }
      const double m = *std::max_element(z2.begin(), z2.end());
      double se = 0, ts = 0;
      for (int64_t o = 0; o < kClasses; ++o) se += std::exp(z2[o] - m), ts += t[r * kClasses + o];
      std::vector<double> sm(kClasses);
      for (int64_t o = 0; o < kClasses; ++o) sm[o] = std::exp(z2[o] - m) / se;
      const double* tr = t.data() + r * kClasses;
      if (!softmax_) {
        for (int64_t o = 0; o < kClasses; ++o) {
          loss -= tr[o] * (z2[o] - m - std::log(se));
          dz[o] = (sm[o] * ts - tr[o]) / n;
        }
      } else {
        double s = 0, band = 0, dot = 0;
        for (int64_t o = 0; o < kClasses; ++o) s += sm[o];
        std::vector<double> dp(kClasses);
        for (int64_t o = 0; o < kClasses; ++o) {
          const double q = sm[o] / s;
          loss -= tr[o] * std::log(std::clamp(q, eps, 1 - eps));
          if (q >= eps && q <= 1 - eps) band += tr[o];
        }
        for (int64_t o = 0; o < kClasses; ++o) {
          const double q = sm[o] / s;
          dp[o] = ((q >= eps && q <= 1 - eps ? -tr[o] / q : 0.0) + band) / s / n;
          dot += dp[o] * sm[o];
        }
        for (int64_t o = 0; o < kClasses; ++o) dz[o] = sm[o] * (dp[o] - dot);
      }
      for (int64_t o = 0; o < kClasses; ++o) {
        g[3][o] += dz[o];
        for (int64_t h = 0; h < kHidden; ++h) {
          g[2][h * kClasses + o] += std::max(0.0, z1[h]) * dz[o];
          if (z1[h] > 0) {
            g[1][h] += dz[o] * k2[h * kClasses + o];
            for (int64_t i = 0; i < kIn; ++i)
              g[0][i * kHidden + h] += x[r * kIn + i] * dz[o] * k2[h * kClasses + o];
          }
        }
      }
    }
    opt.step(vars_, g);
    return loss / n;
  }

  /// fit without shuffling: the batch-size-weighted epoch means.
  std::vector<double> fit(const HostTensor& xh, const HostTensor& yh, int64_t batch, int64_t epochs,
                          RefOptimizer opt) {
    const std::vector<double> x = to_doubles(xh), y = to_doubles(yh);
    const int64_t rows = xh.shape()[0];
    std::vector<double> history;
    for (int64_t e = 0; e < epochs; ++e) {
      double weighted = 0;
      for (int64_t start = 0; start < rows; start += batch) {
        const int64_t b = std::min(batch, rows - start);
        const std::vector<double> xb(x.begin() + start * kIn, x.begin() + (start + b) * kIn);
        const std::vector<double> yb(y.begin() + start * kClasses,
                                     y.begin() + (start + b) * kClasses);
        weighted += step(xb, yb, b, opt) * static_cast<double>(b);
      }
      history.push_back(weighted / static_cast<double>(rows));
    }
    return history;
  }

  const std::vector<RefVar>& vars() const { return vars_; }

 private:
  bool softmax_;
  std::vector<RefVar> vars_;  // d1/kernel, d1/bias, d2/kernel, d2/bias
};

}  // namespace meshlayout
