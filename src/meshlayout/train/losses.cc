// losses.cc — see losses.h.
#include "meshlayout/train/losses.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/kernels/device_kind.h"
#include "meshlayout/kernels/losses.h"
#include "meshlayout/ops/cross_entropy.h"

namespace meshlayout {
namespace {

constexpr std::string_view kMse = "mean_squared_error";

bool is_float(DType d) { return d == DType::kF32 || d == DType::kF64; }

void check_mse(const Shape& pred_shape, DType pred_dtype, const Shape& true_shape,
               DType true_dtype) {
  if (!is_float(pred_dtype) || !is_float(true_dtype)) {
    throw ValueError(
        fmt::format("{}: y_pred and y_true must be F32 or F64, got y_pred {} {} and y_true {} {}",
                    kMse, dtype_name(pred_dtype), shape_to_string(pred_shape),
                    dtype_name(true_dtype), shape_to_string(true_shape)));
  }
  if (pred_shape != true_shape) {
    throw ValueError(fmt::format("{}: y_true of shape {} must have the shape of y_pred {}", kMse,
                                 shape_to_string(true_shape), shape_to_string(pred_shape)));
  }
}

// y_true in y_pred's layout (the targets move, never the predictions).
Array targets_in_layout(const Array& y_pred, const Array& y_true) {
  check_mse(y_pred.shape(), y_pred.dtype(), y_true.shape(), y_true.dtype());
  return distribute_tensor(y_true, y_pred.layout());
}

double mse_value(const Array& p, const Array& t) {
  std::vector<double> sums(p.local_shards().size(), 0.0);
  const DeviceKind kind = kind_of(p);
  p.runtime().pool().parallel_for(p.local_shards().size(), [&](size_t i) {
    const Array::Shard& ps = p.local_shards()[i];
    if (p.geometry().replica_of(ps.position) != 0) return;
    mse_sum(kind, {.pred = &ps,
                   .pred_dtype = p.dtype(),
                   .target = t.shard_at(ps.position),
                   .target_dtype = t.dtype(),
                   .sum = &sums[i]});
  });
  double local = 0;
  for (double s : sums) local += s;  // shard order
  const double total = sum_in_rank_order(p.runtime().comm(), local);
  const int64_t n = num_elements(p.shape());
  return n == 0 ? 0.0 : total / static_cast<double>(n);
}

Array mse_grad(const Array& p, const Array& t, double grad_scale) {
  Array g = allocate_agreed(p.layout(), p.shape(), p.dtype(), p.runtime_ptr());
  const int64_t n = num_elements(p.shape());
  const double coef = n == 0 ? 0.0 : 2.0 * grad_scale / static_cast<double>(n);
  const DeviceKind kind = kind_of(g);
  g.runtime().pool().parallel_for(g.local_shards().size(), [&](size_t i) {
    Array::Shard& gs = g.local_shards()[i];
    mse_gradient(kind, {.grad = &gs,
                        .grad_dtype = g.dtype(),
                        .pred = p.shard_at(gs.position),
                        .pred_dtype = p.dtype(),
                        .target = t.shard_at(gs.position),
                        .target_dtype = t.dtype(),
                        .coef = coef});
  });
  return g;
}

class MeanSquaredError : public Loss {
 public:
  std::string name() const override { return std::string(kMse); }
  void check(const Shape& pred_shape, DType pred_dtype, const Shape& true_shape,
             DType true_dtype) const override {
    check_mse(pred_shape, pred_dtype, true_shape, true_dtype);
  }
  double value(const Array& y_pred, const Array& y_true) const override {
    return mean_squared_error(y_pred, y_true);
  }
  LossResult value_and_gradient(const Array& y_pred, const Array& y_true) const override {
    return mean_squared_error_with_grad(y_pred, y_true);
  }
};

// The cross-entropies of ops/cross_entropy.h with Keras' from_logits / label_smoothing.
class SparseCategoricalCrossentropy : public Loss {
 public:
  explicit SparseCategoricalCrossentropy(bool from_logits) : options_{.from_logits = from_logits} {}
  std::string name() const override { return "sparse_categorical_crossentropy"; }
  void check(const Shape& pred_shape, DType pred_dtype, const Shape& true_shape,
             DType true_dtype) const override {
    const Shape lead =
        pred_shape.empty() ? Shape{} : Shape(pred_shape.begin(), pred_shape.end() - 1);
    if (!is_float(pred_dtype) || (true_dtype != DType::kI32 && true_dtype != DType::kI64) ||
        pred_shape.empty() || true_shape != lead) {
      throw ValueError(
          fmt::format("sparse_categorical_crossentropy: needs F32/F64 {} (…, classes) and I32/I64 "
                      "labels of their shape "
                      "without the class dimension, got {} {} and labels {} {}",
                      what(), dtype_name(pred_dtype), shape_to_string(pred_shape),
                      dtype_name(true_dtype), shape_to_string(true_shape)));
    }
  }
  double value(const Array& y_pred, const Array& y_true) const override {
    return sparse_categorical_crossentropy(y_pred, y_true, options_);
  }
  LossResult value_and_gradient(const Array& y_pred, const Array& y_true) const override {
    CrossEntropyResult r = sparse_categorical_crossentropy_with_grad(y_pred, y_true, options_);
    return {r.loss, std::move(r.dlogits)};
  }

 private:
  std::string_view what() const { return options_.from_logits ? "logits" : "probabilities"; }
  CrossEntropyOptions options_;
};

class CategoricalCrossentropy : public Loss {
 public:
  CategoricalCrossentropy(bool from_logits, double label_smoothing)
      : options_{.from_logits = from_logits, .label_smoothing = label_smoothing} {}
  std::string name() const override { return "categorical_crossentropy"; }
  void check(const Shape& pred_shape, DType pred_dtype, const Shape& true_shape,
             DType true_dtype) const override {
    if (!is_float(pred_dtype) || !is_float(true_dtype) || pred_shape.empty() ||
        true_shape != pred_shape) {
      throw ValueError(fmt::format(
          "categorical_crossentropy: needs F32/F64 {} (…, classes) and F32/F64 targets (one-hot or "
          "probability "
          "rows) of the same shape, got {} {} and targets {} {}",
          options_.from_logits ? "logits" : "probabilities", dtype_name(pred_dtype),
          shape_to_string(pred_shape), dtype_name(true_dtype), shape_to_string(true_shape)));
    }
  }
  double value(const Array& y_pred, const Array& y_true) const override {
    return categorical_crossentropy(y_pred, y_true, options_);
  }
  LossResult value_and_gradient(const Array& y_pred, const Array& y_true) const override {
    CrossEntropyResult r = categorical_crossentropy_with_grad(y_pred, y_true, options_);
    return {r.loss, std::move(r.dlogits)};
  }

 private:
  CrossEntropyOptions options_;
};

}  // namespace

double mean_squared_error(const Array& y_pred, const Array& y_true) {
  const Array t = targets_in_layout(y_pred, y_true);
  return mse_value(y_pred, t);
}

Array mean_squared_error_backward(const Array& y_pred, const Array& y_true, double grad_scale) {
  if (!std::isfinite(grad_scale)) {
    throw ValueError(fmt::format("{}: grad_scale must be finite, got {}", kMse, grad_scale));
  }
  const Array t = targets_in_layout(y_pred, y_true);
  return mse_grad(y_pred, t, grad_scale);
}

LossResult mean_squared_error_with_grad(const Array& y_pred, const Array& y_true) {
  const Array t = targets_in_layout(y_pred, y_true);
  const double value = mse_value(y_pred, t);
  return {value, mse_grad(y_pred, t, 1.0)};
}

Array mean_squared_error_values(const Array& y_pred, const Array& y_true) {
  check_mse(y_pred.shape(), y_pred.dtype(), y_true.shape(), y_true.dtype());
  if (y_pred.shape().empty()) {
    throw ValueError(
        fmt::format("{}: y_pred needs a last dimension to average over, got y_pred {} {}", kMse,
                    dtype_name(y_pred.dtype()), shape_to_string(y_pred.shape())));
  }
  // Every row whole on its devices: y_pred (if its last dim is split) and y_true are brought to
  // y_pred's layout with the last dim not split; the lead dims keep y_pred's sharding.
  std::vector<DimSharding> axes = y_pred.layout().axes();
  axes.back() = None;
  const TensorLayout whole(axes, y_pred.mesh());
  std::optional<Array> resharded;
  if (y_pred.layout() != whole) resharded = distribute_tensor(y_pred, whole);
  const Array& p = resharded ? *resharded : y_pred;
  const Array t = distribute_tensor(y_true, whole);
  axes.pop_back();
  const Shape shape(y_pred.shape().begin(), y_pred.shape().end() - 1);
  Array out = allocate_agreed(TensorLayout(axes, y_pred.mesh()), shape, y_pred.dtype(),
                              y_pred.runtime_ptr());
  const int64_t last = y_pred.shape().back();
  const DeviceKind kind = kind_of(out);
  out.runtime().pool().parallel_for(out.local_shards().size(), [&](size_t i) {
    Array::Shard& os = out.local_shards()[i];
    mse_row_means(kind, {.out = &os,
                         .out_dtype = out.dtype(),
                         .pred = p.shard_at(os.position),
                         .pred_dtype = p.dtype(),
                         .target = t.shard_at(os.position),
                         .target_dtype = t.dtype(),
                         .last = last});
  });
  return out;
}

double Loss::value(const Array& y_pred, const Array& y_true) const {
  return value_and_gradient(y_pred, y_true).value;
}

std::vector<std::string> loss_names() {
  return {"mean_squared_error", "mse", "categorical_crossentropy",
          "sparse_categorical_crossentropy"};
}

std::unique_ptr<Loss> make_loss(std::string_view name, const LossOptions& options) {
  const bool categorical = name == "categorical_crossentropy";
  if (categorical) {
    if (!(options.label_smoothing >= 0.0 && options.label_smoothing <= 1.0)) {
      throw ValueError(
          fmt::format("categorical_crossentropy: label_smoothing must be in [0, 1], got {}",
                      options.label_smoothing));
    }
    return std::make_unique<CategoricalCrossentropy>(options.from_logits, options.label_smoothing);
  }
  const std::vector<std::string> names = loss_names();
  if (std::find(names.begin(), names.end(), name) == names.end()) {
    throw ValueError(
        fmt::format("unknown loss {}; valid names: {}", quote(name), repr_list(names)));
  }
  if (options.label_smoothing != 0.0) {
    throw ValueError(fmt::format(
        "loss {}: label_smoothing is an argument of categorical_crossentropy only, got {}",
        quote(name), options.label_smoothing));
  }
  if (name == "sparse_categorical_crossentropy") {
    return std::make_unique<SparseCategoricalCrossentropy>(options.from_logits);
  }
  return std::make_unique<MeanSquaredError>();
}

}  // namespace meshlayout
