// lstm.cc — see lstm.h.
#include "meshlayout/nn/layers/rnn/lstm.h"

#include <fmt/format.h>

#include <vector>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/kernels/lstm.h"
#include "meshlayout/kernels/memory.h"

namespace meshlayout {
LSTMCell::LSTMCell(int64_t units, LSTMOptions options)
    : Layer("lstm_cell", "lstm_cell"), units_(units), options_(std::move(options)) {}

Shape LSTMCell::compute_output_shape(const Shape& input_shape) const {
  return {input_shape.empty() ? 1 : input_shape[0], units_};
}

void LSTMCell::build(const Shape& input_shape) {
  const int64_t u = units_;
  kernel_ = add_weight({.name = "kernel",
                        .shape = {input_shape.back(), 4 * u},
                        .initializer = options_.kernel_initializer});
  recurrent_kernel_ = add_weight({.name = "recurrent_kernel",
                                  .shape = {u, 4 * u},
                                  .initializer = options_.recurrent_initializer});
  if (options_.use_bias) {
    VariableSpec spec{.name = "bias", .shape = {4 * u}, .initializer = options_.bias_initializer};
    if (options_.unit_forget_bias) {
      spec.segments = {{u, options_.bias_initializer},
                       {u, Initializer::ones()},
                       {2 * u, options_.bias_initializer}};
    }
    bias_ = add_weight(std::move(spec));
  }
}

Array LSTMCell::call(const Array&) {
  throw ValueError(
      fmt::format("LSTMCell {} runs inside an LSTM layer; call the LSTM", quote(name())));
}

LSTM::LSTM(int64_t units, LSTMOptions options)
    : Layer("lstm", options.name), options_(std::move(options)) {
  if (units <= 0) {
    throw ValueError(
        fmt::format("Received an invalid value for argument `units`, expected a "
                    "positive integer, got {}.",
                    units));
  }
  cell_ = track("cell", std::make_shared<LSTMCell>(units, options_));
}

Shape LSTM::compute_output_shape(const Shape& input_shape) const {
  if (options_.return_sequences) return {input_shape[0], input_shape[1], cell_->units()};
  return {input_shape[0], cell_->units()};
}

void LSTM::build(const Shape& input_shape) {
  if (input_shape.size() != 3) {
    throw ValueError(
        fmt::format("Input 0 of layer {} is incompatible with the layer: expected "
                    "ndim=3, found ndim={}. Full shape received: {}",
                    quote(name()), input_shape.size(), shape_to_string(input_shape)));
  }
  cell_->maybe_build({input_shape[0], input_shape[2]});
}

Array LSTM::call(const Array& x) {
  const Array& kernel = cell_->kernel()->value();
  if (x.shape().size() != 3 || x.shape()[2] != kernel.shape()[0] ||
      (x.dtype() != DType::kF32 && x.dtype() != DType::kF64) || x.dtype() != kernel.dtype()) {
    throw ValueError(fmt::format("LSTM {} was built for {} inputs (batch, time, {}), got {} {}",
                                 quote(name()), dtype_name(kernel.dtype()), kernel.shape()[0],
                                 dtype_name(x.dtype()), shape_to_string(x.shape())));
  }
  const DeviceMesh& mesh = kernel.mesh();
  std::vector<DimSharding> data_axes(3);
  if (x.mesh() == mesh) data_axes[0] = x.layout().axes()[0];
  const Array xs = distribute_tensor(x, TensorLayout(data_axes, mesh));
  const Array k = distribute_tensor(kernel, TensorLayout::replicated(2, mesh));
  const Array r =
      distribute_tensor(cell_->recurrent_kernel()->value(), TensorLayout::replicated(2, mesh));
  std::optional<Array> b;
  if (cell_->bias())
    b.emplace(distribute_tensor(cell_->bias()->value(), TensorLayout::replicated(1, mesh)));
  const bool seq = options_.return_sequences;
  const int64_t steps = x.shape()[1], features = x.shape()[2], u = cell_->units();
  std::vector<DimSharding> out_axes(seq ? 3 : 2);
  out_axes[0] = data_axes[0];
  Array out = allocate_agreed(TensorLayout(out_axes, mesh), compute_output_shape(x.shape()),
                              x.dtype(), xs.runtime_ptr());
  std::vector<Array::Shard>& shards = out.local_shards();
  // Replicas of one batch box compute it once; the others copy it.
  std::vector<size_t> leaders, first(shards.size());
  for (size_t i = 0; i < shards.size(); ++i) {
    first[i] = i;
    for (size_t l : leaders) {
      if (shards[l].box == shards[i].box) first[i] = l;
    }
    if (first[i] == i) leaders.push_back(i);
  }
  const DeviceKind kind = kind_of(out);
  out.runtime().pool().parallel_for(leaders.size(), [&](size_t n) {
    Array::Shard& o = shards[leaders[n]];
    lstm_forward(kind, {.out = &o,
                        .x = xs.shard_at(o.position),
                        .kernel = k.shard_at(o.position),
                        .recurrent = r.shard_at(o.position),
                        .bias = b ? b->shard_at(o.position) : nullptr,
                        .steps = steps,
                        .features = features,
                        .units = u,
                        .return_sequences = seq,
                        .dtype = x.dtype()});
  });
  const size_t elem = dtype_size(x.dtype());
  out.runtime().pool().parallel_for(shards.size(), [&](size_t i) {
    if (first[i] == i) return;
    copy_runs(kind, {.dst = &shards[i],
                     .src = &shards[first[i]],
                     .run_bytes = static_cast<size_t>(shards[i].box.num_elements()) * elem});
  });
  return out;
}

}  // namespace meshlayout
