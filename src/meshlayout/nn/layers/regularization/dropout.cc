#include "meshlayout/nn/layers/regularization/dropout.h"

#include <fmt/format.h>

#include <cmath>
#include <vector>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/init/philox.h"
#include "meshlayout/kernels/dropout.h"
#include "meshlayout/nn/float_compute.h"
#include "meshlayout/nn/gradient_ops.h"

namespace meshlayout {
namespace {
// Dropout has no weights: it computes in floatx() as it was when the layer was made.
constexpr std::string_view kDropoutDtypeWhy = "floatx when the layer was made";
}  // namespace

SeedGenerator::SeedGenerator(int64_t seed, std::string name)
    : Layer("seed_generator", std::move(name)), seed_(seed) {
  state_ = add_weight({.name = "seed_generator_state",
                       .shape = {2},
                       .dtype = DType::kI64,
                       .initializer = Initializer::zeros(),
                       .trainable = false,
                       .rng_state = true});
  if (!state_->is_lazy()) {
    HostTensor initial(DType::kI64, {2});
    initial.data_as<int64_t>()[0] = seed_;
    state_->assign(initial);
    seeded_ = true;
  }
}

std::pair<int64_t, int64_t> SeedGenerator::next() {
  HostTensor st = state_->value().gather();
  int64_t* v = st.data_as<int64_t>();
  if (!seeded_) {
    // Materialised by a model with zeros: the first use writes [seed, 0], unless the state was
    // assigned meanwhile (a restored checkpoint).
    if (v[0] == 0 && v[1] == 0) v[0] = seed_;
    seeded_ = true;
  }
  std::pair<int64_t, int64_t> current{v[0], v[1]};
  v[1] += 1;
  state_->assign(st);
  return current;
}

Array SeedGenerator::call(const Array&) {
  throw FailedPreconditionError(
      fmt::format("seed generator {} is not a layer that can be called", quote(name())));
}

Dropout::Dropout(double rate, DropoutOptions options)
    : Layer("dropout", options.name), rate_(rate), options_(std::move(options)) {
  if (!(rate >= 0 && rate < 1)) {
    throw ValueError(
        fmt::format("Invalid value received for argument `rate` of Dropout: expected "
                    "a float in [0, 1), received rate={}",
                    rate));
  }
  if (rate_ > 0) {
    const uint64_t seed = options_.seed ? *options_.seed : global_seed();
    seed_generator_ = std::make_shared<SeedGenerator>(static_cast<int64_t>(seed));
  }
}

std::vector<std::pair<std::string, std::shared_ptr<Layer>>> Dropout::sublayers() const {
  if (!seed_generator_) return {};
  return {{"seed_generator", seed_generator_}};
}

void Dropout::build(const Shape&) { internal_nn::check_compute_dtype("Dropout", name(), dtype()); }

Array Dropout::call(const Array& x) {
  check_input_dtype("Dropout", name(), x.dtype(), dtype(), kDropoutDtypeWhy);
  Array y = distribute_tensor(x, x.layout());
  if (!training_ || !seed_generator_) return y;
  const auto [seed, step] = seed_generator_->next();
  last_draw_.emplace(seed, step);
  apply_mask(y, seed, step);
  return y;
}

void Dropout::apply_mask(Array& y, int64_t seed, int64_t step) const {
  const DeviceKind kind = kind_of(y);
  y.runtime().pool().parallel_for(y.local_shards().size(), [&](size_t i) {
    dropout_mask(kind, {.y = &y.local_shards()[i],
                        .shape = &y.shape(),
                        .dtype = y.dtype(),
                        .rate = rate_,
                        .key = static_cast<uint64_t>(seed),
                        .counter_high = static_cast<uint64_t>(step)});
  });
}

Array Dropout::recompute(const Array& x) {
  if (!training_ || !seed_generator_ || !last_draw_) return Layer::recompute(x);
  check_input_dtype("Dropout", name(), x.dtype(), dtype(), kDropoutDtypeWhy);
  Array y = distribute_tensor(x, x.layout());
  apply_mask(y, last_draw_->first, last_draw_->second);
  return y;
}

Array Dropout::backward(const Array& x, const Array& dy, Gradients&) {
  check_input_dtype("Dropout", name(), x.dtype(), dtype(), kDropoutDtypeWhy);
  check_output_gradient(name(), dy, x.shape(), x.dtype());
  Array dx = distribute_tensor(dy, x.layout());
  if (!training_ || !seed_generator_) return dx;
  if (!last_draw_) {
    throw FailedPreconditionError(
        fmt::format("backward of Dropout layer {} in training mode before any "
                    "training call: there is no mask to reuse",
                    quote(name())));
  }
  apply_mask(dx, last_draw_->first, last_draw_->second);
  return dx;
}

}  // namespace meshlayout
