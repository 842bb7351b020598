// moe.cc — see moe.h. The experts' blocks are partial sums over the expert (and F) axes, the
// kernels' gradients partial sums over the tokens' axes; both completed by ops/partial_sum.h.
#include "meshlayout/ops/moe.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <string>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/kernels/device_kind.h"
#include "meshlayout/kernels/moe.h"
#include "meshlayout/ops/attention_internal.h"
#include "meshlayout/ops/moe_dispatch.h"
#include "meshlayout/ops/partial_sum.h"

namespace meshlayout {
namespace {

using internal_ops::in_layout;

std::vector<int> axis_indices(const DeviceMesh& mesh, const std::vector<std::string>& names,
                              int64_t* extent) {
  std::vector<int> out;
  *extent = 1;
  for (const std::string& a : names) {
    out.push_back(*mesh.axis_index(a));
    *extent *= mesh.axis_size(a);
  }
  return out;
}

Shape with_last(Shape shape, int64_t last) {
  shape.back() = last;
  return shape;
}

void check_float(std::string_view op, std::string_view what, const Array& a, DType dtype) {
  if (a.dtype() != dtype || (dtype != DType::kF32 && dtype != DType::kF64)) {
    throw ValueError(fmt::format("{}: {} must be F32 or F64 like x ({}), got {}", op, what,
                                 dtype_name(dtype), dtype_name(a.dtype())));
  }
}

// The checks of expert_mixture's operands; returns (E, d, F).
void check_mixture(std::string_view op, const Array& x, const Array& ids, const Array& weights,
                   const Array& gate, const Array& up, const Array& down) {
  const Shape& xs = x.shape();
  if (xs.size() < 2) {
    throw ValueError(
        fmt::format("{}: x must be (…, d) of rank >= 2, got shape {}", op, shape_to_string(xs)));
  }
  check_float(op, "x", x, x.dtype());
  for (auto [name, a] :
       {std::pair{"gate", &gate}, {"up", &up}, {"down", &down}, {"weights", &weights}}) {
    check_float(op, name, *a, x.dtype());
    if (!(a->mesh() == x.mesh())) {
      throw ValueError(fmt::format("{}: {} is on {}, x on {}", op, name, a->mesh().to_string(),
                                   x.mesh().to_string()));
    }
  }
  const int64_t d = xs.back();
  const Shape& g = gate.shape();
  if (g.size() != 3 || g[1] != d || up.shape() != g || down.shape() != Shape{g[0], g[2], g[1]}) {
    throw ValueError(fmt::format(
        "{}: gate and up must be (E, d={}, F) and down (E, F, d), got gate {}, up {}, down {}", op,
        d, shape_to_string(g), shape_to_string(up.shape()), shape_to_string(down.shape())));
  }
  if (ids.dtype() != DType::kI32 || ids.shape() != weights.shape() ||
      ids.shape().size() != xs.size() ||
      !std::equal(xs.begin(), xs.end() - 1, ids.shape().begin())) {
    throw ValueError(fmt::format(
        "{}: ids (I32) and weights must be x's leading shape plus top_k, got ids {} {}, "
        "weights {}, x {}",
        op, dtype_name(ids.dtype()), shape_to_string(ids.shape()), shape_to_string(weights.shape()),
        shape_to_string(xs)));
  }
  const auto& ga = gate.layout().axes();
  const auto& da = down.layout().axes();
  if (!(up.layout() == gate.layout()) || !(da[0] == ga[0]) || !(da[1] == ga[2])) {
    throw ValueError(fmt::format(
        "{}: up must be split as gate ({}) and down as (experts, F) of gate, got up {}, down {}",
        op, gate.layout().to_string(), up.layout().to_string(), down.layout().to_string()));
  }
}

// Everything both directions share: the operands in their compute layouts and the partial
// layouts of the outputs.
struct MixturePlan {
  std::set<std::string> expert_axes;           // experts' and F's mesh axes
  std::optional<TensorLayout> tokens, rows_k;  // x (…, d), ids/weights (…, k): compute layout
  std::optional<TensorLayout> gate_c, down_c;  // the kernels with d whole
  std::vector<int> k_axes;                     // expert axes then F axes
  int64_t k_extent = 1;
  std::vector<int> token_axes;  // the axes the compute layout splits tokens over
  int64_t token_extent = 1;
  // The all-to-all dispatcher's: x with d whole, the expert/F axes that also split the tokens
  // (A) and the others (over which the members' sums are partial), with their extent.
  std::optional<TensorLayout> source;
  std::vector<int> dispatch_axes, rest_axes;
  int64_t rest_extent = 1;
};

MixturePlan plan_mixture(const Array& x, const Array& gate) {
  MixturePlan p;
  const DeviceMesh& mesh = x.mesh();
  const DimSharding& experts = gate.layout().axes()[0];
  const DimSharding& columns = gate.layout().axes()[2];
  std::vector<std::string> names = experts.axes();
  names.insert(names.end(), columns.axes().begin(), columns.axes().end());
  p.expert_axes = std::set<std::string>(names.begin(), names.end());
  p.k_axes = axis_indices(mesh, names, &p.k_extent);
  p.tokens = moe_rows_layout(x.layout(), p.expert_axes);
  p.rows_k = p.tokens;
  p.gate_c = TensorLayout({experts, None, columns}, mesh);
  p.down_c = TensorLayout({experts, columns, None}, mesh);
  std::vector<std::string> token_names;
  for (size_t i = 0; i + 1 < p.tokens->axes().size(); ++i) {
    for (const std::string& a : p.tokens->axes()[i].axes()) token_names.push_back(a);
  }
  p.token_axes = axis_indices(mesh, token_names, &p.token_extent);
  p.source = moe_rows_layout(x.layout(), {});
  std::set<int> split_tokens;
  for (size_t i = 0; i + 1 < p.source->axes().size(); ++i) {
    for (const std::string& a : p.source->axes()[i].axes())
      split_tokens.insert(*mesh.axis_index(a));
  }
  for (int a : p.k_axes) {
    if (split_tokens.contains(a)) {
      p.dispatch_axes.push_back(a);
    } else {
      p.rest_axes.push_back(a);
      p.rest_extent *= mesh.shape()[static_cast<size_t>(a)];
    }
  }
  return p;
}

bool all_to_all(const MixturePlan& plan, MoeDispatch dispatch) {
  return dispatch == MoeDispatch::kAllToAll && !plan.dispatch_axes.empty();
}

int64_t rows_of(const Box& box) { return box.num_elements() / box.shape.back(); }

// The operands in their compute layouts (resharded copies kept here where needed).
struct Operands {
  Operands(const MixturePlan& plan, const TensorLayout& x_layout, const Array& x_in,
           const Array& ids_in, const Array& weights_in, const Array& gate_in, const Array& up_in,
           const Array& down_in)
      : x(in_layout(x_in, x_layout, stores[0])),
        ids(in_layout(ids_in, *plan.rows_k, stores[1])),
        weights(in_layout(weights_in, *plan.rows_k, stores[2])),
        gate(in_layout(gate_in, *plan.gate_c, stores[3])),
        up(in_layout(up_in, *plan.gate_c, stores[4])),
        down(in_layout(down_in, *plan.down_c, stores[5])) {}
  std::optional<Array> stores[6];
  const Array &x, &ids, &weights, &gate, &up, &down;

  // A kernel's arguments for the expert block of the device at `position` (kernels/moe.h):
  // its shards of every operand (x, ids and weights: the rows given, else its own) and the
  // block's extent.
  template <typename Args>
  Args block_args(int64_t position, int64_t rows, GateFunction function,
                  const Array::Shard* rows_x = nullptr, const Array::Shard* rows_ids = nullptr,
                  const Array::Shard* rows_weights = nullptr) const {
    Args a{};
    const Array::Shard* g = gate.shard_at(position);
    a.x = rows_x ? rows_x : x.shard_at(position);
    a.ids = rows_ids ? rows_ids : ids.shard_at(position);
    a.weights = rows_weights ? rows_weights : weights.shard_at(position);
    a.gate = g;
    a.up = up.shard_at(position);
    a.down = down.shard_at(position);
    a.rows = rows;
    a.d = x.shape().back();
    a.top_k = ids.shape().back();
    a.first_expert = g->box.offset[0];
    a.experts = g->box.shape[0];
    a.f = g->box.shape[2];
    a.function = function;
    a.dtype = x.dtype();
    return a;
  }
};

// The all-to-all path (ops/moe_dispatch.h): x stays in its own layout (d whole); each unit's
// routed rows of x (and of any other (…, width) operand) are dispatched to it.
struct Dispatched {
  Dispatched(const MixturePlan& plan, const Operands& o, const Shape& x_shape,
             const Shape& gate_shape)
      : exchange(ShardGeometry(*plan.source, x_shape), ShardGeometry(*plan.tokens, x_shape),
                 ShardGeometry(*plan.gate_c, gate_shape), o.ids, plan.dispatch_axes, o.x.runtime()),
        x(exchange.dispatch(o.x)),
        ids(exchange.gather_local(o.ids)),
        weights(exchange.gather_local(o.weights)) {}

  // The units' (rows × width) outputs summed into `like`'s layout.
  Array complete(const MixturePlan& plan, const Operands& o,
                 const std::vector<Array::Shard>& outputs, const Array& like) const {
    const size_t elem = dtype_size(like.dtype());
    const internal_ops::PartialLayout partial{ShardGeometry(*plan.source, like.shape()),
                                              plan.rest_axes, plan.rest_extent};
    internal_ops::LocalPartials sinks = internal_ops::allocate_local_partials(partial, o.x, elem);
    exchange.combine(outputs, sinks, like.shape().back(), like.dtype());
    Array out = allocate_agreed(like.layout(), like.shape(), like.dtype(), like.runtime_ptr());
    internal_ops::reduce_partials(sinks,
                                  internal_ops::plan_reduction(partial, out.geometry(), elem,
                                                               like.runtime().local_device_count()),
                                  out);
    return out;
  }

  internal_ops::TokenExchange exchange;
  std::vector<Array::Shard> x, ids, weights;
};

}  // namespace

TensorLayout moe_rows_layout(const TensorLayout& layout, const std::set<std::string>& drop) {
  std::vector<DimSharding> axes = layout.axes();
  for (size_t i = 0; i + 1 < axes.size(); ++i) {
    std::vector<std::string> kept;
    for (const std::string& a : axes[i].axes()) {
      if (!drop.contains(a)) kept.push_back(a);
    }
    axes[i] = DimSharding(std::move(kept));
  }
  axes.back() = DimSharding();
  return TensorLayout(std::move(axes), *layout.device_mesh());
}

ExpertRouting route_experts(const Array& logits, int64_t top_k, bool normalize) {
  const Shape& s = logits.shape();
  if (s.size() < 2 || (logits.dtype() != DType::kF32 && logits.dtype() != DType::kF64)) {
    throw ValueError(fmt::format("route_experts: logits must be F32 or F64 (…, experts), got {} {}",
                                 dtype_name(logits.dtype()), shape_to_string(s)));
  }
  const int64_t experts = s.back();
  if (top_k < 1 || top_k > experts) {
    throw ValueError(fmt::format("route_experts: top_k must be in [1, {}] (the experts), got {}",
                                 experts, top_k));
  }
  const TensorLayout layout = moe_rows_layout(logits.layout(), {});
  std::optional<Array> store;
  const Array& l = in_layout(logits, layout, store);
  ExpertRouting r{
      allocate_agreed(layout, with_last(s, top_k), DType::kI32, logits.runtime_ptr()),
      allocate_agreed(layout, with_last(s, top_k), logits.dtype(), logits.runtime_ptr()),
      allocate_agreed(layout, s, logits.dtype(), logits.runtime_ptr())};
  const DeviceKind kind = kind_of(l);
  auto& shards = r.ids.local_shards();
  logits.runtime().pool().parallel_for(shards.size(), [&](size_t i) {
    const int64_t p = shards[i].position;
    moe_route(kind, {.logits = l.shard_at(p),
                     .ids = &shards[i],
                     .weights = r.weights.shard_at(p),
                     .probs = r.probs.shard_at(p),
                     .rows = rows_of(shards[i].box),
                     .experts = experts,
                     .top_k = top_k,
                     .normalize = normalize,
                     .dtype = logits.dtype()});
  });
  return r;
}

Array route_experts_backward(const ExpertRouting& routing, const Array& dweights, bool normalize,
                             const std::vector<double>* probs_grad) {
  const int64_t experts = routing.probs.shape().back();
  const int64_t top_k = routing.ids.shape().back();
  if (dweights.shape() != routing.weights.shape() || dweights.dtype() != routing.weights.dtype()) {
    throw ValueError(fmt::format("route_experts_backward: dweights must be {} {}, got {} {}",
                                 dtype_name(routing.weights.dtype()),
                                 shape_to_string(routing.weights.shape()),
                                 dtype_name(dweights.dtype()), shape_to_string(dweights.shape())));
  }
  if (probs_grad && static_cast<int64_t>(probs_grad->size()) != experts) {
    throw ValueError(fmt::format("route_experts_backward: probs_grad has {} values for {} experts",
                                 probs_grad->size(), experts));
  }
  std::optional<Array> store;
  const Array& dw = in_layout(dweights, routing.weights.layout(), store);
  Array out = allocate_agreed(routing.probs.layout(), routing.probs.shape(), routing.probs.dtype(),
                              routing.probs.runtime_ptr());
  const DeviceKind kind = kind_of(out);
  auto& shards = out.local_shards();
  out.runtime().pool().parallel_for(shards.size(), [&](size_t i) {
    const int64_t p = shards[i].position;
    moe_route_backward(kind, {.dlogits = &shards[i],
                              .probs = routing.probs.shard_at(p),
                              .ids = routing.ids.shard_at(p),
                              .dweights = dw.shard_at(p),
                              .probs_grad = probs_grad ? probs_grad->data() : nullptr,
                              .rows = rows_of(shards[i].box),
                              .experts = experts,
                              .top_k = top_k,
                              .normalize = normalize,
                              .dtype = out.dtype()});
  });
  return out;
}

ExpertStatistics expert_statistics(const ExpertRouting& routing) {
  const int64_t experts = routing.probs.shape().back();
  const int64_t top_k = routing.ids.shape().back();
  const DeviceMesh& mesh = routing.ids.mesh();
  const int rank = static_cast<int>(routing.ids.shape().size());
  // Every token once: the (small) ids and probabilities replicated, counted on one device.
  Array ids = distribute_tensor(routing.ids, TensorLayout::replicated(rank, mesh));
  Array probs = distribute_tensor(routing.probs, TensorLayout::replicated(rank, mesh));
  ExpertStatistics out{std::vector<double>(static_cast<size_t>(experts)),
                       std::vector<double>(static_cast<size_t>(experts)),
                       num_elements(routing.ids.shape()) / top_k};
  if (!ids.local_shards().empty()) {
    const Array::Shard& s = ids.local_shards().front();
    moe_count(kind_of(ids), {.ids = &s,
                             .probs = probs.shard_at(s.position),
                             .rows = out.tokens,
                             .top_k = top_k,
                             .experts = experts,
                             .counts = out.counts.data(),
                             .prob_sums = out.prob_sums.data(),
                             .dtype = probs.dtype()});
  }
  return out;
}

Array expert_mixture(const Array& x, const Array& ids, const Array& weights, const Array& gate,
                     const Array& up, const Array& down, GateFunction function,
                     MoeDispatch dispatch) {
  check_mixture("expert_mixture", x, ids, weights, gate, up, down);
  const MixturePlan plan = plan_mixture(x, gate);
  if (all_to_all(plan, dispatch)) {
    const Operands o(plan, *plan.source, x, ids, weights, gate, up, down);
    const Dispatched rows(plan, o, x.shape(), gate.shape());
    const auto& units = rows.exchange.units();
    std::vector<Array::Shard> outputs =
        rows.exchange.allocate(x.shape().back(), dtype_size(x.dtype()));
    x.runtime().pool().parallel_for(units.size(), [&](size_t i) {
      auto args = o.block_args<MoeExpertsForward>(
          units[i].position, static_cast<int64_t>(units[i].rows.size()), function, &rows.x[i],
          &rows.ids[i], &rows.weights[i]);
      args.out = &outputs[i];
      moe_experts_forward(kind_of(o.x), args);
    });
    return rows.complete(plan, o, outputs, x);
  }
  const Operands o(plan, *plan.tokens, x, ids, weights, gate, up, down);
  const size_t elem = dtype_size(x.dtype());
  const internal_ops::PartialLayout partial{ShardGeometry(*plan.tokens, x.shape()), plan.k_axes,
                                            plan.k_extent};
  internal_ops::LocalPartials parts = internal_ops::allocate_local_partials(partial, o.x, elem);
  const DeviceKind kind = kind_of(o.x);
  x.runtime().pool().parallel_for(parts.size(), [&](size_t i) {
    auto args = o.block_args<MoeExpertsForward>(parts[i].position, rows_of(parts[i].box), function);
    args.out = &parts[i];
    moe_experts_forward(kind, args);
  });
  Array out = allocate_agreed(x.layout(), x.shape(), x.dtype(), x.runtime_ptr());
  const internal_ops::ReductionPlan reduction =
      internal_ops::plan_reduction(partial, out.geometry(), elem, x.runtime().local_device_count());
  internal_ops::reduce_partials(parts, reduction, out);
  return out;
}

ExpertMixtureGrads expert_mixture_backward(const Array& x, const Array& ids, const Array& weights,
                                           const Array& gate, const Array& up, const Array& down,
                                           const Array& dy, GateFunction function,
                                           MoeDispatch dispatch) {
  check_mixture("expert_mixture_backward", x, ids, weights, gate, up, down);
  if (dy.shape() != x.shape() || dy.dtype() != x.dtype()) {
    throw ValueError(fmt::format("expert_mixture_backward: dy must be x's {} {}, got {} {}",
                                 dtype_name(x.dtype()), shape_to_string(x.shape()),
                                 dtype_name(dy.dtype()), shape_to_string(dy.shape())));
  }
  const MixturePlan plan = plan_mixture(x, gate);
  const bool dispatched = all_to_all(plan, dispatch);
  const Operands o(plan, dispatched ? *plan.source : *plan.tokens, x, ids, weights, gate, up, down);
  std::optional<Array> dy_store;
  const Array& dyc = in_layout(dy, dispatched ? *plan.source : *plan.tokens, dy_store);
  const size_t elem = dtype_size(x.dtype());
  // dx and dweights: partial over the expert axes; the kernels' gradients: over the tokens'.
  const internal_ops::PartialLayout px{ShardGeometry(*plan.tokens, x.shape()), plan.k_axes,
                                       plan.k_extent};
  const internal_ops::PartialLayout pw{ShardGeometry(*plan.rows_k, weights.shape()), plan.k_axes,
                                       plan.k_extent};
  const internal_ops::PartialLayout pg{ShardGeometry(*plan.gate_c, gate.shape()), plan.token_axes,
                                       plan.token_extent};
  const internal_ops::PartialLayout pd{ShardGeometry(*plan.down_c, down.shape()), plan.token_axes,
                                       plan.token_extent};
  internal_ops::LocalPartials dg_parts = internal_ops::allocate_local_partials(pg, o.x, elem);
  internal_ops::LocalPartials du_parts = internal_ops::allocate_local_partials(pg, o.x, elem);
  internal_ops::LocalPartials dd_parts = internal_ops::allocate_local_partials(pd, o.x, elem);
  // The same device units in every list (a unit is a token block × an expert block): find each
  // unit's entries by its position.
  const auto find = [](internal_ops::LocalPartials& parts, const internal_ops::PartialLayout& l,
                       int64_t position) -> internal_ops::LocalPartial& {
    const std::vector<int64_t> block = l.product_block_of(position);
    const int64_t kb = l.k_block_of(position);
    for (auto& part : parts) {
      if (part.block == block && part.k_block == kb) return part;
    }
    throw InternalError("expert_mixture_backward: a device unit has no partial");
  };
  const size_t local = static_cast<size_t>(x.runtime().local_device_count());
  const auto reduce = [&](const internal_ops::LocalPartials& parts,
                          const internal_ops::PartialLayout& l, const Array& like) {
    Array out = allocate_agreed(like.layout(), like.shape(), like.dtype(), like.runtime_ptr());
    internal_ops::reduce_partials(
        parts, internal_ops::plan_reduction(l, out.geometry(), elem, static_cast<int64_t>(local)),
        out);
    return out;
  };
  const DeviceKind kind = kind_of(o.x);
  if (dispatched) {
    const Dispatched rows(plan, o, x.shape(), gate.shape());
    const std::vector<Array::Shard> dy_rows = rows.exchange.dispatch(dyc);
    std::vector<Array::Shard> dx_rows = rows.exchange.allocate(x.shape().back(), elem);
    std::vector<Array::Shard> dw_rows = rows.exchange.allocate(weights.shape().back(), elem);
    const auto& units = rows.exchange.units();
    x.runtime().pool().parallel_for(units.size(), [&](size_t i) {
      const int64_t p = units[i].position;
      auto args =
          o.block_args<MoeExpertsBackward>(p, static_cast<int64_t>(units[i].rows.size()), function,
                                           &rows.x[i], &rows.ids[i], &rows.weights[i]);
      args.dy = &dy_rows[i];
      args.dx = &dx_rows[i];
      args.dweights = &dw_rows[i];
      args.dgate = &find(dg_parts, pg, p);
      args.dup = &find(du_parts, pg, p);
      args.ddown = &find(dd_parts, pd, p);
      moe_experts_backward(kind, args);
    });
    return {rows.complete(plan, o, dx_rows, x), rows.complete(plan, o, dw_rows, weights),
            reduce(dg_parts, pg, gate), reduce(du_parts, pg, up), reduce(dd_parts, pd, down)};
  }
  internal_ops::LocalPartials dx_parts = internal_ops::allocate_local_partials(px, o.x, elem);
  internal_ops::LocalPartials dw_parts = internal_ops::allocate_local_partials(pw, o.x, elem);
  x.runtime().pool().parallel_for(dx_parts.size(), [&](size_t i) {
    const int64_t p = dx_parts[i].position;
    auto args = o.block_args<MoeExpertsBackward>(p, rows_of(dx_parts[i].box), function);
    args.dy = dyc.shard_at(p);
    args.dx = &dx_parts[i];
    args.dweights = &find(dw_parts, pw, p);
    args.dgate = &find(dg_parts, pg, p);
    args.dup = &find(du_parts, pg, p);
    args.ddown = &find(dd_parts, pd, p);
    moe_experts_backward(kind, args);
  });
  return {reduce(dx_parts, px, x), reduce(dw_parts, pw, weights), reduce(dg_parts, pg, gate),
          reduce(du_parts, pg, up), reduce(dd_parts, pd, down)};
}

}  // namespace meshlayout
