// optimizer_apply.cc — Optimizer::apply, the step: the gradients checked against their
// variables, clipping by value or norm (norms summed over each box once, across processes),
// ZeRO-1's slicing to the slots' layout and the all-gather back, weight decay, and the
// per-shard update loop on the runtime's pool. See optimizer.h.
#include "meshlayout/train/optimizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/kernels/device_kind.h"

namespace meshlayout {
namespace {

std::string layout_text(const TensorLayout& layout) {
  return layout.device_mesh()
             ? fmt::format("{} on {}", layout.to_string(), layout.device_mesh()->to_string())
             : layout.to_string();
}

// Positions of a geometry whose box no earlier position holds (each box counted once).
std::vector<bool> first_holders(const ShardGeometry& g) {
  const int64_t n = g.mesh().size();
  std::vector<Box> boxes;
  std::vector<bool> first(static_cast<size_t>(n), true);
  for (int64_t p = 0; p < n; ++p) {
    Box b = g.box(p);
    for (const Box& seen : boxes) {
      if (seen == b) {
        first[static_cast<size_t>(p)] = false;
        break;
      }
    }
    if (first[static_cast<size_t>(p)]) boxes.push_back(std::move(b));
  }
  return first;
}

}  // namespace

void Optimizer::apply_gradients(
    std::span<const std::pair<const Array*, VariablePtr>> grads_and_vars) {
  std::vector<const Array*> grads;
  std::vector<VariablePtr> vars;
  for (const auto& [g, v] : grads_and_vars) {
    grads.push_back(g);
    vars.push_back(v);
  }
  apply(grads, vars);
}

void Optimizer::apply(std::span<const Array* const> gradients,
                      std::span<const VariablePtr> variables) {
  if (gradients.size() != variables.size()) {
    throw ValueError(fmt::format(
        "optimizer {}: got {} gradient(s) for {} variable(s); expected one per variable",
        quote(name_), gradients.size(), variables.size()));
  }
  if (variables.empty()) return;
  struct Pair {
    const Array* grad;
    Variable* var;
    size_t tracked;
  };
  std::vector<Pair> pairs;
  for (size_t i = 0; i < variables.size(); ++i) {
    const VariablePtr& v = variables[i];
    if (!v) throw ValueError(fmt::format("optimizer {}: variable {} is null", quote(name_), i));
    if (gradients[i] == nullptr) continue;  // Keras' _filter_empty_gradients
    const Array& g = *gradients[i];
    if (!v->trainable()) {
      throw ValueError(
          fmt::format("optimizer {}: {} is not trainable; pass only trainable variables",
                      quote(name_), v->describe()));
    }
    if (v->is_lazy()) {
      throw ValueError(
          fmt::format("optimizer {}: {} has no value yet (lazy)", quote(name_), v->describe()));
    }
    const Array& x = v->value();
    if (g.shape() != x.shape() || !(g.layout() == x.layout()) ||
        (g.dtype() != DType::kF32 && g.dtype() != DType::kF64)) {
      throw ValueError(fmt::format(
          "optimizer {}: the gradient of {} must have its shape {} and layout {} (F32 or F64); got "
          "shape {}, layout {}, dtype {}",
          quote(name_), v->describe(), shape_to_string(x.shape()), layout_text(x.layout()),
          shape_to_string(g.shape()), layout_text(g.layout()), dtype_name(g.dtype())));
    }
    pairs.push_back({&g, v.get(), 0});
  }
  if (pairs.empty()) {
    throw ValueError(
        fmt::format("No gradients provided for any variable (optimizer {}, {} variable(s))",
                    quote(name_), variables.size()));
  }
  build(variables);
  for (Pair& p : pairs) {
    size_t k = 0;
    while (k < tracked_.size() && tracked_[k].variable.get() != p.var) ++k;
    if (k == tracked_.size()) {
      throw NotFoundError(fmt::format(
          "optimizer {}: unknown {}: the optimizer was built with {} other variable(s); use a new "
          "optimizer for a new set of variables",
          quote(name_), p.var->describe(), tracked_.size()));
    }
    p.tracked = k;
  }

  // Clipping by norm: sums of squares over each box once, across processes.
  std::vector<std::optional<std::pair<double, double>>> norm_clip(pairs.size());
  if (clipnorm_ || global_clipnorm_) {
    std::vector<double> sums(pairs.size(), 0.0);
    for (size_t i = 0; i < pairs.size(); ++i) {
      const Array& g = *pairs[i].grad;
      const std::vector<bool> first = first_holders(g.geometry());
      const DeviceKind kind = kind_of(g);
      for (const Array::Shard& s : g.local_shards()) {
        if (!first[static_cast<size_t>(s.position)]) continue;
        sum_of_squares(kind, {.shard = &s, .dtype = g.dtype(), .sum = &sums[i]});
      }
    }
    Runtime& rt = pairs.front().grad->runtime();
    if (rt.num_processes() > 1) rt.comm().all_reduce_sum(sums.data(), sums.size(), DType::kF64);
    if (clipnorm_) {
      for (size_t i = 0; i < pairs.size(); ++i) {
        norm_clip[i] = std::pair{*clipnorm_, std::max(std::sqrt(sums[i]), *clipnorm_)};
      }
    } else {
      double total = 0;
      for (double s : sums) total += s;
      const double scale =
          *global_clipnorm_ * std::min(1.0 / std::sqrt(total), 1.0 / *global_clipnorm_);
      for (auto& nc : norm_clip) nc = std::pair{scale, 1.0};
    }
  }

  // ZeRO-1: where the slots' layout is finer than the variable's, the update runs on the
  // gradient and the variable sliced to it (a local copy when the boxes nest), and the updated
  // slice is all-gathered back into the variable below. Collective: every process slices the
  // same pairs in the same order.
  std::vector<std::optional<Array>> slice_x(pairs.size()), slice_g(pairs.size());
  std::vector<Array*> xs(pairs.size());
  std::vector<const Array*> gs(pairs.size());
  for (size_t i = 0; i < pairs.size(); ++i) {
    xs[i] = &pairs[i].var->mutable_value();
    gs[i] = pairs[i].grad;
    const std::map<std::string, VariablePtr>& own = tracked_[pairs[i].tracked].slots;
    if (!shard_slots_over_ || own.empty() ||
        own.begin()->second->value().layout() == xs[i]->layout())
      continue;
    const TensorLayout& layout = own.begin()->second->value().layout();
    slice_g[i].emplace(distribute_tensor(*pairs[i].grad, layout));
    slice_x[i].emplace(distribute_tensor(*xs[i], layout));
    xs[i] = &*slice_x[i];
    gs[i] = &*slice_g[i];
  }

  // One task per (variable, local shard); every slot shard sits on the updated shard's device.
  struct Task {
    size_t pair;
    size_t shard;
  };
  std::vector<Task> tasks;
  std::vector<std::vector<Variable*>> slots(pairs.size());
  const std::vector<std::string> names = slot_names();
  for (size_t i = 0; i < pairs.size(); ++i) {
    for (const std::string& n : names)
      slots[i].push_back(tracked_[pairs[i].tracked].slots.at(n).get());
    for (size_t s = 0; s < xs[i]->local_shards().size(); ++s) tasks.push_back({i, s});
  }
  // Whole-variable updates (Adafactor) take the prepared gradients as arrays.
  const bool whole = updates_whole_variables();
  std::vector<std::optional<Array>> prepared(pairs.size());
  if (whole) {
    for (size_t i = 0; i < pairs.size(); ++i) {
      prepared[i].emplace(
          Array::allocate(xs[i]->layout(), xs[i]->shape(), xs[i]->dtype(), xs[i]->runtime_ptr()));
    }
  }
  std::vector<bool> decay(pairs.size());
  for (size_t i = 0; i < pairs.size(); ++i) decay[i] = use_weight_decay(*pairs[i].var);
  const float lr = lr_;
  const int64_t iterations = iterations_;
  const DeviceKind kind = kind_of(pairs.front().var->value());
  pairs.front().var->value().runtime().pool().parallel_for(tasks.size(), [&](size_t k) {
    const Task& t = tasks[k];
    const Pair& p = pairs[t.pair];
    Array::Shard& x = xs[t.pair]->local_shards()[t.shard];
    std::vector<Array::Shard*> slot_shards;
    if (!whole) {
      for (Variable* s : slots[t.pair])
        slot_shards.push_back(s->mutable_value().shard_at(x.position));
    }
    const OptimizerShardStep step{
        .theta = &x,
        .dtype = p.var->dtype(),
        .grad = gs[t.pair]->shard_at(x.position),
        .grad_dtype = p.grad->dtype(),
        .slots = slot_shards,
        .lr = lr,
        .iterations = iterations,
        .clipvalue = clipvalue_,
        .norm_clip = norm_clip[t.pair],
        .weight_decay = decay[t.pair] ? weight_decay_ : std::nullopt,
    };
    if (whole) {
      optimizer_prepare(kind, {.step = step, .prepared = prepared[t.pair]->shard_at(x.position)});
    } else {
      update_shard(kind, step);
    }
  });

  for (size_t i = 0; i < pairs.size() && whole; ++i) {
    update_variable(VariableStep{xs[i], &*prepared[i], slots[i], lr, iterations});
  }

  for (size_t i = 0; i < pairs.size(); ++i) {
    if (slice_x[i]) reshard_into(*slice_x[i], pairs[i].var->mutable_value());
  }

  ++iterations_;
  const int32_t it = static_cast<int32_t>(iterations_);
  Array& iteration = iteration_var_->mutable_value();
  const DeviceKind iteration_kind = kind_of(iteration);
  for (Array::Shard& s : iteration.local_shards()) {
    write_scalar(iteration_kind, {.shard = &s, .value = &it, .bytes = sizeof(it)});
  }
}
}  // namespace meshlayout
