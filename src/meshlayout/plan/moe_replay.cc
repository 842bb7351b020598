// moe_replay.cc — see moe_replay.h. Each function mirrors ops/moe.cc's function of the same
// name: what it allocates, in which layout, and when it is freed.
#include "meshlayout/plan/moe_replay.h"

#include <fmt/format.h>

#include <set>
#include <vector>

#include "meshlayout/layout/shard_geometry.h"
#include "meshlayout/ops/moe.h"

namespace meshlayout::replay {
namespace {

// The rule's layout of a block's kernel, or replicated.
TensorLayout kernel_layout(const LayoutMap& map, const std::string& path, int rank,
                           const DeviceMesh& mesh) {
  const std::optional<TensorLayout> l = map.get(path);
  if (!l || l->rank() != rank) return TensorLayout::replicated(rank, mesh);
  return TensorLayout(l->axes(), mesh);
}

Shape last_replaced(Shape shape, int64_t last) {
  shape.back() = last;
  return shape;
}

// plan_mixture's layouts and axes.
struct Mixture {
  std::set<std::string> expert_axes;
  std::vector<int> k_axes, token_axes, rest_axes;  // mesh axis indices
  TensorLayout tokens = TensorLayout::replicated(0), source = TensorLayout::replicated(0);
  TensorLayout gate_c = TensorLayout::replicated(0), down_c = TensorLayout::replicated(0);
  bool dispatched = false;
};

Mixture mixture_of(const TensorLayout& x, const TensorLayout& gate) {
  const DeviceMesh& mesh = *x.device_mesh();
  Mixture p;
  const DimSharding& experts = gate.axes()[0];
  const DimSharding& columns = gate.axes()[2];
  std::vector<std::string> names = experts.axes();
  names.insert(names.end(), columns.axes().begin(), columns.axes().end());
  p.expert_axes = std::set<std::string>(names.begin(), names.end());
  for (const std::string& a : names) p.k_axes.push_back(*mesh.axis_index(a));
  p.tokens = moe_rows_layout(x, p.expert_axes);
  p.source = moe_rows_layout(x, {});
  p.gate_c = TensorLayout({experts, None, columns}, mesh);
  p.down_c = TensorLayout({experts, columns, None}, mesh);
  std::set<int> split_tokens;
  for (size_t i = 0; i + 1 < p.tokens.axes().size(); ++i) {
    for (const std::string& a : p.tokens.axes()[i].axes()) {
      p.token_axes.push_back(*mesh.axis_index(a));
    }
  }
  for (size_t i = 0; i + 1 < p.source.axes().size(); ++i) {
    for (const std::string& a : p.source.axes()[i].axes()) split_tokens.insert(*mesh.axis_index(a));
  }
  for (int a : p.k_axes) {
    if (split_tokens.contains(a)) {
      p.dispatched = true;
    } else {
      p.rest_axes.push_back(a);
    }
  }
  return p;
}

// allocate_local_partials: one block of `product` per distinct (block over `k_axes`, product
// block), on the first device holding it.
std::shared_ptr<Hold> local_partials(Replay& r, const TensorLayout& product, const Shape& shape,
                                     const std::vector<int>& k_axes) {
  std::string key = fmt::format("moe {} k", Replay::cache_key(product, shape));
  for (int a : k_axes) key += fmt::format(" {}", a);
  auto [it, added] = r.partial_bytes.try_emplace(key);
  if (added) {
    const DeviceMesh& mesh = r.mesh();
    const ShardGeometry g(product, shape);
    PerDevice& bytes = it->second;
    bytes.assign(static_cast<size_t>(mesh.size()), 0);
    std::set<std::vector<int64_t>> seen;
    for (int64_t p = 0; p < mesh.size(); ++p) {
      const std::vector<int64_t> coords = mesh.coords(p);
      std::vector<int64_t> block;
      for (int a : k_axes) block.push_back(coords[static_cast<size_t>(a)]);
      block.push_back(-1);
      for (int d = 0; d < g.rank(); ++d) block.push_back(g.block_index(p, d));
      if (!seen.insert(block).second) continue;
      bytes[static_cast<size_t>(p)] =
          static_cast<uint64_t>(g.box(p).num_elements()) * r.element_size();
    }
  }
  return r.charge(it->second);
}

// The operands in their compute layouts (in_layout: a copy where the layout differs).
struct MoeOperands {
  Sym x, ids, weights, gate, up, down;
};

MoeOperands operands(Replay& r, const Mixture& p, const MoeWeights& w, const Sym& x, const Sym& ids,
                     const Sym& weights) {
  const TensorLayout& rows = p.dispatched ? p.source : p.tokens;
  return MoeOperands{r.reshard(x, rows),
                     r.reshard(ids, p.tokens),
                     r.reshard(weights, p.tokens),
                     r.reshard(w.gate, p.gate_c, w.gate_path),
                     r.reshard(w.up, p.gate_c, w.up_path),
                     r.reshard(w.down, p.down_c, w.down_path)};
}

// The all-to-all path's rows of a (…, width) operand at every unit: in the worst case every
// token of the unit's group, the rows of the tokens layout.
Sym dispatched_rows(Replay& r, const Mixture& p, const Shape& x_shape, int64_t width) {
  return r.alloc(p.tokens, last_replaced(x_shape, width));
}

// Dispatched::complete: the sinks (partial over the expert axes that do not split the
// tokens), then the output in `like`'s layout.
Sym complete_rows(Replay& r, const Mixture& p, const TensorLayout& like, const Shape& shape) {
  const std::shared_ptr<Hold> sinks = local_partials(r, p.source, shape, p.rest_axes);
  return r.alloc(like, shape);
}

}  // namespace

MoeWeights moe_weights(const DecoderShapes& s, const LayoutMap& map, const DeviceMesh& mesh,
                       size_t index) {
  const std::string& block = s.expert_blocks.at(index);
  MoeWeights w{.router_path = block + "sparse_feedforward_gate_dense/kernel",
               .gate_path = block + "experts/expert_feedforward_gate_dense",
               .up_path = block + "experts/expert_feedforward_intermediate_dense",
               .down_path = block + "experts/expert_feedforward_output_dense"};
  const int64_t d = s.hidden, e = s.experts, f = s.expert_intermediate;
  w.router = Sym{kernel_layout(map, w.router_path, 2, mesh), {d, e}};
  w.gate = Sym{kernel_layout(map, w.gate_path, 3, mesh), {e, d, f}};
  w.up = Sym{kernel_layout(map, w.up_path, 3, mesh), {e, d, f}};
  w.down = Sym{kernel_layout(map, w.down_path, 3, mesh), {e, f, d}};
  TensorLayout x = TensorLayout({DimSharding(mesh.axis_names().front()), None, None}, mesh);
  w.dispatched = mixture_of(x, w.gate.layout).dispatched;
  return w;
}

Sym moe_forward(Replay& r, const DecoderShapes& s, const MoeWeights& w, const Sym& m,
                MoeSaved& saved) {
  {  // route_experts(matmul(m, router)): the logits live until the choice is made
    const Sym logits = matmul(r, m, w.router, {}, w.router_path);
    const TensorLayout rows = moe_rows_layout(logits.layout, {});
    const Sym l = r.reshard(logits, rows);
    saved.ids = r.alloc(rows, last_replaced(logits.shape, s.top_k));  // I32: 4 bytes
    saved.weights = r.alloc(rows, last_replaced(logits.shape, s.top_k));
    saved.probs = r.alloc(rows, logits.shape);
  }
  // expert_mixture.
  const Mixture p = mixture_of(m.layout, w.gate.layout);
  const MoeOperands o = operands(r, p, w, m, *saved.ids, *saved.weights);
  if (p.dispatched) {
    const Sym x = dispatched_rows(r, p, m.shape, s.hidden),
              ids = dispatched_rows(r, p, m.shape, s.top_k),
              weights = dispatched_rows(r, p, m.shape, s.top_k),
              out = dispatched_rows(r, p, m.shape, s.hidden);
    return complete_rows(r, p, m.layout, m.shape);
  }
  const std::shared_ptr<Hold> parts = local_partials(r, p.tokens, m.shape, p.k_axes);
  return r.alloc(m.layout, m.shape);
}

Sym moe_backward(Replay& r, const DecoderShapes& s, const MoeWeights& w, const Sym& m,
                 const MoeSaved& saved, const Sym& dy) {
  const Shape gate_shape = w.gate.shape, down_shape = w.down.shape;
  Sym dx, dweights;
  {  // expert_mixture_backward
    const Mixture p = mixture_of(m.layout, w.gate.layout);
    const MoeOperands o = operands(r, p, w, m, *saved.ids, *saved.weights);
    const Sym dyc = r.reshard(dy, p.dispatched ? p.source : p.tokens);
    const std::shared_ptr<Hold> dg = local_partials(r, p.gate_c, gate_shape, p.token_axes),
                                du = local_partials(r, p.gate_c, gate_shape, p.token_axes),
                                dd = local_partials(r, p.down_c, down_shape, p.token_axes);
    Sym dgate, dup, ddown;
    if (p.dispatched) {
      const Sym x = dispatched_rows(r, p, m.shape, s.hidden),
                ids = dispatched_rows(r, p, m.shape, s.top_k),
                weights = dispatched_rows(r, p, m.shape, s.top_k),
                dy_rows = dispatched_rows(r, p, m.shape, s.hidden),
                dx_rows = dispatched_rows(r, p, m.shape, s.hidden),
                dw_rows = dispatched_rows(r, p, m.shape, s.top_k);
      dx = complete_rows(r, p, m.layout, m.shape);
      dweights = complete_rows(r, p, saved.weights->layout, saved.weights->shape);
      dgate = r.alloc(w.gate.layout, gate_shape);
      dup = r.alloc(w.up.layout, gate_shape);
      ddown = r.alloc(w.down.layout, down_shape);
    } else {
      const std::shared_ptr<Hold> dx_parts = local_partials(r, p.tokens, m.shape, p.k_axes),
                                  dw_parts =
                                      local_partials(r, p.tokens, saved.weights->shape, p.k_axes);
      dx = r.alloc(m.layout, m.shape);
      dweights = r.alloc(saved.weights->layout, saved.weights->shape);
      dgate = r.alloc(w.gate.layout, gate_shape);
      dup = r.alloc(w.up.layout, gate_shape);
      ddown = r.alloc(w.down.layout, down_shape);
    }
    r.gradient(w.gate_path, dgate);
    r.gradient(w.up_path, dup);
    r.gradient(w.down_path, ddown);
  }
  // route_experts_backward, the router's gradient and dL/dm = dx + dlogits · routerᵀ.
  const Sym dlogits = r.alloc(saved.probs->layout, saved.probs->shape);
  r.gradient(w.router_path, matmul_backward_weight(r, m, dlogits, w.router.layout));
  const Sym through_router = matmul_backward_input(r, dlogits, w.router, m.layout);
  const Sym moved = r.reshard(through_router, dx.layout);
  return r.alloc(dx.layout, dx.shape);  // add(g.dx, …): a new array
}

}  // namespace meshlayout::replay
