// trainer.cc — see trainer.h.
#include "meshlayout/train/trainer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <iostream>
#include <numeric>
#include <optional>
#include <utility>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/shape.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/runtime/runtime.h"
#include "meshlayout/train/progress.h"

namespace meshlayout {
namespace {

// Runs `check` on every process and agrees on the outcome: every process throws, or none.
template <typename F>
void agreed(F&& check) {
  std::exception_ptr error;
  try {
    check();
  } catch (...) {
    error = std::current_exception();
  }
  auto rt = default_runtime();
  if (rt->num_processes() > 1) {
    agree_on_failure(rt->comm(), error);
  } else if (error) {
    std::rethrow_exception(error);
  }
}

void check_data(std::string_view what, const HostTensor& x, const HostTensor* y,
                int64_t batch_size) {
  if (batch_size < 1)
    throw ValueError(fmt::format("{}: batch_size must be >= 1, got {}", what, batch_size));
  if (x.shape().empty()) {
    throw ValueError(
        fmt::format("{}: x must have a batch dimension (rows, …), got a scalar", what));
  }
  if (x.shape()[0] == 0) {
    throw ValueError(fmt::format("{}: x has no rows (shape {}); Keras needs at least one sample",
                                 what, shape_to_string(x.shape())));
  }
  if (y == nullptr) return;
  if (y->shape().empty()) {
    throw ValueError(
        fmt::format("{}: y must have a batch dimension (rows, …), got a scalar", what));
  }
  if (y->shape()[0] != x.shape()[0]) {
    throw ValueError(
        fmt::format("{}: x and y must have the same number of rows (samples), got x {} and y {}",
                    what, shape_to_string(x.shape()), shape_to_string(y->shape())));
  }
}

// Keras-style shuffling, the same permutation on every process (splitmix64 + Fisher-Yates).
std::vector<int64_t> row_order(int64_t rows, bool shuffle, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(static_cast<size_t>(rows));
  std::iota(order.begin(), order.end(), 0);
  if (!shuffle) return order;
  uint64_t state = seed ^ (0x9E3779B97F4A7C15ull * static_cast<uint64_t>(epoch + 1));
  auto next = [&state] {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  for (int64_t i = rows - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(next() % static_cast<uint64_t>(i + 1));
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  return order;
}

// Rows order[start + begin .. start + end) of `data`, as a host tensor.
HostTensor copy_rows(const HostTensor& data, const std::vector<int64_t>& order, int64_t start,
                     int64_t begin, int64_t end) {
  Shape shape = data.shape();
  shape[0] = end - begin;
  HostTensor out(data.dtype(), shape);
  const size_t row_bytes = data.num_bytes() / static_cast<size_t>(data.shape()[0]);
  for (int64_t r = begin; r < end; ++r) {
    std::memcpy(
        out.data() + static_cast<size_t>(r - begin) * row_bytes,
        data.data() + static_cast<size_t>(order[static_cast<size_t>(start + r)]) * row_bytes,
        row_bytes);
  }
  return out;
}

// One global batch of `rows` rows starting at `start` in `order`, laid out by the distribution's
// data layout, this process copying only its rows when the batch splits evenly over the shards.
Array feed(const HostTensor& data, const std::vector<int64_t>& order, int64_t start, int64_t rows,
           const Distribution& dist) {
  // Each process feeds its own rows when the batch axis splits the batch into equal blocks that
  // follow the processes' row ranges (Keras' rule); else (a short last batch) every device takes
  // its block from the whole in-memory batch.
  const DeviceMesh& mesh = dist.device_mesh();
  int64_t axis_size = 1;
  for (size_t a = 0; a < mesh.axis_names().size(); ++a) {
    if (mesh.axis_names()[a] == dist.batch_dim_name()) axis_size = mesh.shape()[a];
  }
  if (rows % dist.num_data_shards() == 0 && rows % axis_size == 0) {
    const RowRange mine = dist.process_batch_rows(rows);
    return dist.distribute_process_batch(copy_rows(data, order, start, mine.begin, mine.end), rows);
  }
  return dist.distribute_input(copy_rows(data, order, start, 0, rows));
}

struct Batches {
  int64_t rows, batch_size;
  int64_t count() const { return (rows + batch_size - 1) / batch_size; }
  int64_t start(int64_t k) const { return k * batch_size; }
  int64_t size(int64_t k) const { return std::min(batch_size, rows - k * batch_size); }
};

std::ostream& out_or_cerr(std::ostream* out) { return out != nullptr ? *out : std::cerr; }

bool is_process_zero() { return default_runtime()->process_id() == 0; }

std::vector<VariablePtr> trainable_variables(const Model& model) {
  std::vector<VariablePtr> vars;
  for (const VariablePtr& v : model.variables()) {
    if (v->trainable()) vars.push_back(v);
  }
  return vars;
}

// Keras' sum of model.losses for weight regularisers: the penalty of every trainable variable
// that has a regulariser (Layer._get_regularization_losses reads trainable_weights, each once),
// each computed on its distributed value. Collective (one all-reduce per regularised variable).
double regularization_penalty(const std::vector<VariablePtr>& vars) {
  double penalty = 0;
  for (const VariablePtr& v : vars) {
    if (v->regularizer()) penalty += v->regularization_loss();
  }
  return penalty;
}

}  // namespace

Trainer::Trainer(std::shared_ptr<Model> model, CompileOptions options) : model_(std::move(model)) {
  if (!model_) throw ValueError("compile: the model is null");
  if (options.optimizer_instance) {
    if (options.zero1) {
      throw ValueError(
          fmt::format("compile: zero1 applies to a named optimizer; optimizer {} is already made: "
                      "construct it with shard_slots_over instead",
                      quote(options.optimizer_instance->name())));
    }
    optimizer_ = std::move(options.optimizer_instance);
  } else if (options.optimizer.empty()) {
    throw ValueError(fmt::format("compile: an optimizer is required: a name ({}) or an Optimizer",
                                 repr_list(optimizer_names())));
  } else {
    if (options.zero1) {
      if (options.optimizer_options.shard_slots_over) {
        throw ValueError(
            fmt::format("compile: zero1 (the batch axis) and optimizer_options.shard_slots_over={} "
                        "both choose the slots' axis; set one",
                        quote(*options.optimizer_options.shard_slots_over)));
      }
      options.optimizer_options.shard_slots_over = data_distribution()->batch_dim_name();
    }
    optimizer_ = make_optimizer(options.optimizer, options.optimizer_options);
  }
  if (options.loss.empty()) {
    throw ValueError(
        fmt::format("compile: a loss is required, one of {}", repr_list(loss_names())));
  }
  loss_ = make_loss(options.loss, options.loss_options);
  compiled_loss_ = {loss_->name(), options.loss_options.from_logits,
                    options.loss_options.label_smoothing};
}

Trainer compile(std::shared_ptr<Model> model, CompileOptions options) {
  return Trainer(std::move(model), std::move(options));
}

std::shared_ptr<const Distribution> Trainer::data_distribution() const {
  if (model_->distribution()) return model_->distribution();
  if (model_->layout_map() && model_->layout_map()->device_mesh()) {
    return std::make_shared<ModelParallel>(*model_->layout_map());
  }
  for (const VariablePtr& v : model_->variables()) {
    if (!v->is_lazy()) return std::make_shared<DataParallel>(v->value().mesh());
  }
  throw FailedPreconditionError(fmt::format(
      "model {} is not built and was not constructed under a distribution or a LayoutMap scope: "
      "give the "
      "Sequential an input_shape, call the model once, or construct it under a distribution",
      quote(model_->name())));
}

namespace {

// Keras calls the model with training=True in fit's steps: Dropout drops, BatchNormalization
// uses the batch's statistics; inference again afterwards, also when a step throws.
struct TrainingMode {
  Model& model;
  explicit TrainingMode(Model& m) : model(m) { model.set_training(true); }
  ~TrainingMode() { model.set_training(false); }
  TrainingMode(const TrainingMode&) = delete;
  TrainingMode& operator=(const TrainingMode&) = delete;
};

}  // namespace

double Trainer::train_step(Tensor x, const Array& y, bool terminate_on_nan,
                           const std::function<std::string()>& where,
                           std::optional<Tensor>* y_pred) {
  Gradients grads;
  std::vector<VariablePtr> vars;
  double loss = 0;
  if (std::optional<double> fused =
          model_->fused_loss_and_gradients(x.value(), y, compiled_loss_, grads)) {
    vars = trainable_variables(*model_);
    loss = *fused + regularization_penalty(vars);
    if (terminate_on_nan && !std::isfinite(loss)) {
      throw ValueError(fmt::format(
          "fit: the loss is {} at {} (optimizer iteration {}): stopped before that step's update "
          "(FitOptions::terminate_on_nan)",
          loss, where(), optimizer_->iterations()));
    }
  } else {
    const Tensor pred = (*model_)(x);
    vars = trainable_variables(*model_);  // after the call that builds
    loss_->check(pred.value().shape(), pred.value().dtype(), y.shape(), y.dtype());
    LossResult r = loss_->value_and_gradient(pred.value(), y);
    // Keras' compute_loss: the compiled loss plus the regularisation penalties, on the weights
    // before this step's update, once per batch (not scaled by its rows).
    loss = r.value + regularization_penalty(vars);
    if (terminate_on_nan && !std::isfinite(loss)) {
      throw ValueError(fmt::format(
          "fit: the loss is {} at {} (optimizer iteration {}): stopped before that step's update "
          "(FitOptions::terminate_on_nan)",
          loss, where(), optimizer_->iterations()));
    }
    (void)model_->backward(x.value(), r.gradient, grads);
    if (y_pred != nullptr) y_pred->emplace(pred);
  }
  // The penalty's gradient, in each variable's layout: elementwise, no communication.
  for (const VariablePtr& v : vars) {
    if (v->regularizer()) grads.accumulate(*v, v->regularizer()->gradient(v->value()));
  }
  optimizer_->apply(grads.for_variables(vars), vars);
  return loss;
}

History Trainer::fit(const HostTensor& x, const HostTensor& y, const FitOptions& options) {
  std::shared_ptr<const Distribution> dist;
  ProgressMode mode = ProgressMode::kSilent;
  agreed([&] {
    check_data("fit", x, &y, options.batch_size);
    if (options.epochs < 0)
      throw ValueError(fmt::format("fit: epochs must be >= 0, got {}", options.epochs));
    if (options.first_batch != 0) {
      throw ValueError(fmt::format(
          "fit: first_batch ({}) applies to fit on a BatchDataset; fit on arrays starts at "
          "initial_epoch",
          options.first_batch));
    }
    if (options.steps_per_epoch < 0 || options.initial_epoch < 0) {
      throw ValueError(fmt::format("fit: steps_per_epoch ({}) and initial_epoch ({}) must be >= 0",
                                   options.steps_per_epoch, options.initial_epoch));
    }
    mode = progress_mode(options.verbose);
    dist = data_distribution();
    dist->process_batch_rows(options.batch_size);  // Keras' error for an indivisible batch
  });
  if (!is_process_zero()) mode = ProgressMode::kSilent;
  const Batches batches{x.shape()[0], options.batch_size};
  TrainingMode training_mode(*model_);
  for (const auto& c : options.callbacks) c->on_train_begin(*this);
  History history;
  int64_t steps_run = 0;
  // The position in the passes over the rows (Keras' EpochIterator): pass `pass`, its next batch
  // `next`. An epoch takes `per_epoch` batches or what is left of the pass; a finished pass
  // starts the next one at the next epoch.
  const int64_t per_epoch = options.steps_per_epoch > 0 ? options.steps_per_epoch : batches.count();
  int64_t pass = 0, next = 0;
  auto epoch_batches = [&] { return std::min(per_epoch, batches.count() - next); };
  auto advance = [&](int64_t n) {
    next += n;
    if (next >= batches.count()) {
      ++pass;
      next = 0;
    }
  };
  for (int64_t epoch = 0; epoch < options.initial_epoch; ++epoch) advance(epoch_batches());
  for (int64_t epoch = options.initial_epoch; epoch < options.epochs; ++epoch) {
    const int64_t first = next, n = epoch_batches();
    EpochProgress progress(out_or_cerr(options.out), mode, epoch, options.epochs, per_epoch);
    const std::vector<int64_t> order =
        row_order(batches.rows, options.shuffle, options.shuffle_seed, pass);
    double weighted = 0;
    int64_t seen = 0;
    for (int64_t k = 0; k < n; ++k) {
      const int64_t b = batches.size(first + k), start = batches.start(first + k);
      Tensor xb(feed(x, order, start, b, *dist));
      const Array yb = feed(y, order, start, b, *dist);
      std::optional<Tensor> pred;
      const double loss = train_step(
          std::move(xb), yb, options.terminate_on_nan,
          [&] {
            return fmt::format("epoch {}, step {} (rows [{}, {}) of the pass's order)", epoch, k,
                               start, start + b);
          },
          &pred);
      weighted += loss * static_cast<double>(b);
      seen += b;
      progress.update(k + 1, weighted / static_cast<double>(seen));
      for (const auto& c : options.callbacks)
        c->on_train_batch_end(*this, {.epoch = epoch,
                                      .batch = k,
                                      .step = steps_run,
                                      .loss = loss,
                                      .y_pred = pred ? &pred->value() : nullptr,
                                      .y_true = pred ? &yb : nullptr});
      ++steps_run;
    }
    advance(n);
    const double epoch_loss = weighted / static_cast<double>(seen);
    progress.finish(epoch_loss);
    history.loss.push_back(epoch_loss);
    if (options.on_epoch_end) options.on_epoch_end(epoch, epoch_loss);
    for (const auto& c : options.callbacks) c->on_epoch_end(*this, epoch, epoch_loss);
  }
  for (const auto& c : options.callbacks) c->on_train_end(*this);
  return history;
}

History Trainer::fit(const BatchDataset& data, const FitOptions& options) {
  std::shared_ptr<const Distribution> dist;
  ProgressMode mode = ProgressMode::kSilent;
  const int64_t B = options.batch_size, rows = data.rows(), S = options.steps_per_epoch;
  agreed([&] {
    if (B < 1) throw ValueError(fmt::format("fit: batch_size must be >= 1, got {}", B));
    if (options.epochs < 0)
      throw ValueError(fmt::format("fit: epochs must be >= 0, got {}", options.epochs));
    if (S < 0) throw ValueError(fmt::format("fit: steps_per_epoch must be >= 0, got {}", S));
    if (options.initial_epoch != 0) {
      throw ValueError(fmt::format(
          "fit: initial_epoch ({}) applies to fit on arrays; a BatchDataset fit starts at "
          "first_batch",
          options.initial_epoch));
    }
    if (options.first_batch < 0 || (options.first_batch > 0 && S == 0)) {
      throw ValueError(fmt::format(
          "fit: first_batch must be >= 0 and needs steps_per_epoch (the epoch's batches follow "
          "it), got first_batch {} with steps_per_epoch {}",
          options.first_batch, S));
    }
    if (options.shuffle) {
      throw ValueError(fmt::format(
          "fit: {} is read in order, batch after batch; shuffle applies to fit on arrays (write "
          "the data shuffled instead)",
          data.description()));
    }
    if (rows < 1) {
      throw ValueError(
          fmt::format("fit: {} has no rows; Keras needs at least one sample", data.description()));
    }
    if (S > 0) {
      // first_batch + epochs · S batches of B rows, every product checked (a step count from a
      // command line must not wrap into a negative row count).
      const std::optional<int64_t> batches_total = checked_mul(options.epochs, S);
      const std::optional<int64_t> end_batch =
          batches_total ? checked_add(options.first_batch, *batches_total) : std::nullopt;
      const std::optional<int64_t> rows_needed =
          end_batch ? checked_mul(*end_batch, B) : std::nullopt;
      if (!rows_needed || *rows_needed > rows) {
        throw ValueError(fmt::format(
            "fit: {} has {} rows, but {} epoch(s) of {} batches of {} from batch {} need {}",
            data.description(), rows, options.epochs, S, B, options.first_batch,
            rows_needed ? fmt::format("{}", *rows_needed) : std::string("more than 2^63 - 1")));
      }
    }
    mode = progress_mode(options.verbose);
    dist = data_distribution();
    dist->process_batch_rows(B);  // Keras' error for an indivisible batch
    if (S == 0 && rows % B != 0) dist->process_batch_rows(rows % B);  // the partial last one
  });
  if (!is_process_zero()) mode = ProgressMode::kSilent;
  const int64_t count = S > 0 ? S : (rows + B - 1) / B;
  TrainingMode training_mode(*model_);
  for (const auto& c : options.callbacks) c->on_train_begin(*this);
  History history;
  for (int64_t epoch = 0; epoch < options.epochs; ++epoch) {
    EpochProgress progress(out_or_cerr(options.out), mode, epoch, options.epochs, count);
    double weighted = 0;
    int64_t seen = 0;
    for (int64_t k = 0; k < count; ++k) {
      const int64_t step = S > 0 ? options.first_batch + epoch * S + k : k;
      const int64_t first_row = step * B, b = std::min(B, rows - first_row);
      std::pair<Array, Array> batch = data.read_batch(first_row, b, *dist);
      const double loss =
          train_step(Tensor(std::move(batch.first)), batch.second, options.terminate_on_nan, [&] {
            return fmt::format("epoch {}, step {} (rows [{}, {}) of {})", epoch, k, first_row,
                               first_row + b, data.description());
          });
      next_batch_ = step + 1;
      weighted += loss * static_cast<double>(b);
      seen += b;
      progress.update(k + 1, weighted / static_cast<double>(seen));
      for (const auto& c : options.callbacks)
        c->on_train_batch_end(*this, {.epoch = epoch, .batch = k, .step = step, .loss = loss});
    }
    const double epoch_loss = seen > 0 ? weighted / static_cast<double>(seen) : 0.0;
    progress.finish(epoch_loss);
    history.loss.push_back(epoch_loss);
    if (options.on_epoch_end) options.on_epoch_end(epoch, epoch_loss);
    for (const auto& c : options.callbacks) c->on_epoch_end(*this, epoch, epoch_loss);
  }
  for (const auto& c : options.callbacks) c->on_train_end(*this);
  return history;
}

double Trainer::evaluate(const HostTensor& x, const HostTensor& y, const EvaluateOptions& options) {
  std::shared_ptr<const Distribution> dist;
  ProgressMode mode = ProgressMode::kSilent;
  agreed([&] {
    check_data("evaluate", x, &y, options.batch_size);
    mode = progress_mode(options.verbose);
    dist = data_distribution();
    dist->process_batch_rows(options.batch_size);
  });
  if (!is_process_zero()) mode = ProgressMode::kSilent;
  const Batches batches{x.shape()[0], options.batch_size};
  const std::vector<int64_t> order = row_order(batches.rows, false, 0, 0);
  EpochProgress progress(out_or_cerr(options.out), mode, 0, 0, batches.count());
  // Keras' test_step reports compute_loss too: each batch's loss plus the penalties (the weights
  // do not change during evaluate: computed once, after the first call has built the model).
  std::optional<double> penalty;
  double weighted = 0;
  for (int64_t k = 0; k < batches.count(); ++k) {
    const int64_t b = batches.size(k);
    const Tensor pred = (*model_)(Tensor(feed(x, order, batches.start(k), b, *dist)));
    if (!penalty) penalty = regularization_penalty(trainable_variables(*model_));
    const Array yb = feed(y, order, batches.start(k), b, *dist);
    loss_->check(pred.value().shape(), pred.value().dtype(), yb.shape(), yb.dtype());
    weighted += (loss_->value(pred.value(), yb) + *penalty) * static_cast<double>(b);
    progress.update(k + 1, weighted / static_cast<double>(batches.start(k) + b));
  }
  const double loss = weighted / static_cast<double>(batches.rows);
  progress.finish(loss);
  return loss;
}

HostTensor Trainer::predict(const HostTensor& x, const PredictOptions& options) {
  std::shared_ptr<const Distribution> dist;
  agreed([&] {
    check_data("predict", x, nullptr, options.batch_size);
    dist = data_distribution();
    dist->process_batch_rows(options.batch_size);
  });
  const Batches batches{x.shape()[0], options.batch_size};
  const std::vector<int64_t> order = row_order(batches.rows, false, 0, 0);
  HostTensor out;
  size_t row_bytes = 0;
  for (int64_t k = 0; k < batches.count(); ++k) {
    const int64_t b = batches.size(k);
    const Tensor pred = (*model_)(Tensor(feed(x, order, batches.start(k), b, *dist)));
    const HostTensor part = pred.value().gather();
    if (k == 0) {
      Shape shape = part.shape();
      shape[0] = batches.rows;
      out = HostTensor(part.dtype(), shape);
      row_bytes = part.num_bytes() / static_cast<size_t>(b);
    }
    std::memcpy(out.data() + static_cast<size_t>(batches.start(k)) * row_bytes, part.data(),
                part.num_bytes());
  }
  return out;
}

}  // namespace meshlayout
