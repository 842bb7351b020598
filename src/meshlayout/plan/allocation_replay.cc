// allocation_replay.cc — see allocation_replay.h.
#include "meshlayout/plan/allocation_replay.h"

#include <fmt/format.h>

#include <set>

#include "meshlayout/layout/shard_geometry.h"
#include "meshlayout/ops/matmul_plan.h"

namespace meshlayout::replay {

Hold::~Hold() { replay->release(*this); }

namespace {

Shape with_last(Shape s, int64_t n) {
  s.back() = n;
  return s;
}

}  // namespace

// The partial sums of a contraction split over K: one product block per distinct (K block,
// product block) of the process, on the first device holding it (allocate_local_partials).
std::shared_ptr<Hold> partials(Replay& r, const TensorLayout& product, const Shape& shape,
                               const TensorLayout& x_layout, const Shape& x_shape) {
  auto [it, added] = r.partial_bytes.try_emplace(Replay::cache_key(product, shape) + " " +
                                                 Replay::cache_key(x_layout, x_shape));
  if (added) {
    const ShardGeometry gp(product, shape), gx(x_layout, x_shape);
    const size_t n = static_cast<size_t>(r.mesh().size());
    PerDevice& bytes = it->second;
    bytes.assign(n, 0);
    std::set<std::vector<int64_t>> seen;
    for (size_t p = 0; p < n; ++p) {
      std::vector<int64_t> key{gx.block_index(static_cast<int64_t>(p), gx.rank() - 1)};
      for (int d = 0; d < gp.rank(); ++d) {
        key.push_back(gp.block_index(static_cast<int64_t>(p), d));
      }
      if (!seen.insert(key).second) continue;
      bytes[p] =
          static_cast<uint64_t>(gp.box(static_cast<int64_t>(p)).num_elements()) * r.element_size();
    }
  }
  return r.charge(it->second);
}

Sym matmul(Replay& r, const Sym& x, const Sym& w, std::optional<TensorLayout> output,
           const std::string& what) {
  // Planned once per distinct product (every block of a decoder makes the same ones).
  auto [it, added] = r.matmul_plans.try_emplace(
      Replay::cache_key(x.layout, x.shape) + " @ " + Replay::cache_key(w.layout, w.shape) + " -> " +
      (output ? output->to_string() : std::string("auto")));
  if (added) {
    const ShardGeometry gx(x.layout, x.shape), gw(w.layout, w.shape);
    MatmulOptions options;
    if (output) options.output_layout = *output;
    it->second = plan_matmul(gx, gw, r.dtype(), r.mesh().size(), options);
  }
  const MatmulPlan& plan = it->second;
  const Sym xa = plan.reshard_x ? r.reshard(x, plan.x_layout) : x;
  const Sym wa = plan.reshard_w ? r.reshard(w, plan.w_layout, what) : w;
  const Shape out_shape = with_last(x.shape, w.shape[1]);
  if (plan.reduction == MatmulReduction::kNone) {
    const Sym product = r.alloc(plan.product_layout, out_shape);
    return plan.reshard_output ? r.reshard(product, plan.output_layout) : product;
  }
  const std::shared_ptr<Hold> sums =
      partials(r, plan.product_layout, out_shape, plan.x_layout, x.shape);
  return r.alloc(plan.output_layout, out_shape);
}

// a (…, C) read as rows (M, C): a view with the leading dimensions' split.
Sym as_rows(const Sym& a) {
  const auto& axes = a.layout.axes();
  int64_t m = 1;
  for (size_t i = 0; i + 1 < a.shape.size(); ++i) m *= a.shape[i];
  DimSharding rows;
  for (size_t i = 0; i + 1 < axes.size(); ++i) {
    if (axes[i].is_sharded()) rows = axes[i];
  }
  return Sym{
      TensorLayout({rows, axes.back()}, a.layout.device_mesh()), {m, a.shape.back()}, a.hold};
}

Sym transpose(Replay& r, const Sym& m) {
  return r.alloc(TensorLayout({m.layout.axes()[1], m.layout.axes()[0]}, m.layout.device_mesh()),
                 {m.shape[1], m.shape[0]});
}

Sym matmul_backward_input(Replay& r, const Sym& dy, const Sym& w, const TensorLayout& x_layout) {
  const Sym wt = transpose(r, w);
  return matmul(r, dy, wt, x_layout);
}

Sym matmul_backward_weight(Replay& r, const Sym& x, const Sym& dy, const TensorLayout& w_layout) {
  const Sym xt = transpose(r, as_rows(x));
  return matmul(r, xt, as_rows(dy), w_layout);
}

TensorLayout whole_rows(const TensorLayout& l) {
  std::vector<DimSharding> axes = l.axes();
  axes.back() = DimSharding();
  return TensorLayout(axes, l.device_mesh());
}

Sym rms(Replay& r, const Sym& x) {
  const TensorLayout target = whole_rows(x.layout);
  const Sym src = r.reshard(x, target);
  return r.alloc(target, x.shape);
}

Sym rms_backward(Replay& r, const Sym& x, const Sym& dy, const std::string& scale) {
  const TensorLayout target = whole_rows(x.layout);
  const Sym src = r.reshard(x, target), g = r.reshard(dy, target);
  const Sym dx = r.alloc(target, x.shape);
  {
    const Sym contrib = r.alloc(target, x.shape);
    r.gradient(scale, r.alloc(TensorLayout::replicated(1, r.mesh()), {x.shape.back()}));
  }
  return r.reshard(dx, x.layout);
}

// add(Array&&, b): into a (b moved to a's layout first).
Sym add_into(Replay& r, Sym a, const Sym& b) {
  const Sym moved = r.reshard(b, a.layout);
  return a;
}

Sym swiglu(Replay& r, const Sym& g, const Sym& u) {
  const Sym um = r.reshard(u, g.layout);
  return r.alloc(g.layout, g.shape);
}

}  // namespace meshlayout::replay
