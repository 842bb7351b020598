#include "meshlayout/ops/matmul.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>

#include "meshlayout/core/errors.h"
#include "meshlayout/kernels/cpu/blas.h"
#include "meshlayout/kernels/device_kind.h"
#include "meshlayout/kernels/matmul.h"
#include "meshlayout/ops/partial_sum.h"

namespace meshlayout {
namespace {

// A device's product is cut into row chunks when there are fewer products than pool threads;
// chunks keep at least this many rows so the BLAS still runs at full speed.
constexpr int64_t kMinChunkRows = 64;

/// One local product: x_shard @ w_shard into `out` (the product block, of shape (batch..., n)),
/// then copied into `replicas` (devices of this process holding the same block).
struct Product {
  const Array::Shard* x;
  const Array::Shard* w;
  Array::Shard* out;
  std::vector<Array::Shard*> replicas;
};

void run_products(ThreadPool& pool, DeviceKind kind, DType dtype,
                  const std::vector<Product>& products) {
  struct Chunk {
    const Product* p;
    int64_t m, k, n, row, rows;
  };
  std::vector<Chunk> chunks;
  // A GPU runs each product whole (cuBLAS fills the device; chunks would only queue up behind
  // one another on its stream).
  const size_t pieces =
      products.empty() || kind != DeviceKind::kCpu
          ? 1
          : std::max<size_t>(1, (pool.size() + products.size() - 1) / products.size());
  for (const Product& p : products) {
    const Box& xb = p.x->box;
    const Box& wb = p.w->box;
    if (xb.offset.back() != wb.offset[0] || xb.shape.back() != wb.shape[0]) {
      throw InternalError(fmt::format(
          "matmul: the x shard {} and the w shard {} of mesh position {} hold different K ranges",
          xb.to_string(), wb.to_string(), p.x->position));
    }
    const int64_t k = xb.shape.back(), n = wb.shape[1];
    const int64_t m = num_elements(Shape(xb.shape.begin(), xb.shape.end() - 1));
    if (m == 0 || n == 0) continue;
    const int64_t parts = std::clamp<int64_t>(static_cast<int64_t>(pieces), 1,
                                              std::max<int64_t>(1, m / kMinChunkRows));
    const int64_t rows = ceil_div(m, parts);
    for (int64_t row = 0; row < m; row += rows) {
      chunks.push_back(Chunk{&p, m, k, n, row, std::min(rows, m - row)});
    }
  }
  pool.parallel_for(chunks.size(), [&](size_t i) {
    const Chunk& c = chunks[i];
    matmul_rows(kind, {.x = c.p->x,
                       .w = c.p->w,
                       .out = c.p->out,
                       .replicas = c.p->replicas,
                       .k = c.k,
                       .n = c.n,
                       .row = c.row,
                       .rows = c.rows,
                       .dtype = dtype});
  });
}

std::vector<int64_t> block_of(const ShardGeometry& g, int64_t position) {
  std::vector<int64_t> block(static_cast<size_t>(g.rank()));
  for (int d = 0; d < g.rank(); ++d) block[static_cast<size_t>(d)] = g.block_index(position, d);
  return block;
}

// `addend` in `layout` (itself when it already is).
const Array& in_layout(const Array& addend, const TensorLayout& layout,
                       std::optional<Array>& holder) {
  return addend.layout() == layout ? addend : holder.emplace(distribute_tensor(addend, layout));
}

/// K not split: each block of the product layout is computed once per process, straight into
/// the output shard of its first local device, and copied to the others.
Array products_without_partials(const Array& x, const Array& w, const MatmulPlan& plan,
                                const Array* addend) {
  Array out = allocate_agreed(plan.product_layout, plan.output_shape, plan.dtype, x.runtime_ptr());
  std::map<std::vector<int64_t>, size_t> first;  // product block → index in products
  std::vector<Product> products;
  for (Array::Shard& s : out.local_shards()) {
    auto [it, added] = first.emplace(block_of(out.geometry(), s.position), products.size());
    if (added) {
      products.push_back(Product{x.shard_at(s.position), w.shard_at(s.position), &s, {}});
    } else {
      products[it->second].replicas.push_back(&s);
    }
  }
  const DeviceKind kind = kind_of(out);
  run_products(x.runtime().pool(), kind, plan.dtype, products);
  if (addend != nullptr) {
    std::optional<Array> holder;
    const Array& a = in_layout(*addend, out.layout(), holder);
    out.runtime().pool().parallel_for(out.local_shards().size(), [&](size_t i) {
      Array::Shard& s = out.local_shards()[i];
      add_into(kind, {.dst = &s,
                      .src = a.shard_at(s.position),
                      .n = s.box.num_elements(),
                      .dtype = plan.dtype});
    });
  }
  return out;
}

/// K split: each device's product is a partial sum, completed by reduce_partials (NOTE
/// [Partial sums]).
Array products_with_partials(const Array& x, const Array& w, const MatmulPlan& plan,
                             const Array* addend) {
  Runtime& rt = x.runtime();
  const DeviceMesh& mesh = x.mesh();
  std::vector<int> k_axes;
  for (const std::string& a : plan.contracted_axes) k_axes.push_back(*mesh.axis_index(a));
  internal_ops::PartialLayout layout{ShardGeometry(plan.product_layout, plan.output_shape), k_axes,
                                     plan.x_shape.back()};
  const size_t elem = dtype_size(plan.dtype);
  internal_ops::LocalPartials partials = internal_ops::allocate_local_partials(layout, x, elem);
  std::vector<Product> products;
  for (internal_ops::LocalPartial& p : partials) {
    products.push_back(Product{x.shard_at(p.position), w.shard_at(p.position), &p, {}});
  }
  const DeviceKind kind = kind_of(x);
  run_products(rt.pool(), kind, plan.dtype, products);
  if (addend != nullptr) {
    // Into the first contracted block's partial of each output block: the reduction then adds
    // it exactly once to every element, whatever the replicas.
    std::optional<Array> holder;
    const Array& a = in_layout(*addend, plan.product_layout, holder);
    rt.pool().parallel_for(partials.size(), [&](size_t i) {
      internal_ops::LocalPartial& p = partials[i];
      if (p.k_block != 0) return;
      add_into(kind, {.dst = &p,
                      .src = a.shard_at(p.position),
                      .n = p.box.num_elements(),
                      .dtype = plan.dtype});
    });
  }

  const TensorLayout& target =
      plan.all_reduce_in_two_steps ? plan.scatter_layout : plan.output_layout;
  Array out = allocate_agreed(target, plan.output_shape, plan.dtype, x.runtime_ptr());
  internal_ops::ReductionPlan reduction =
      internal_ops::plan_reduction(layout, out.geometry(), elem, rt.local_device_count());
  internal_ops::reduce_partials(partials, reduction, out);
  partials.clear();
  if (plan.all_reduce_in_two_steps) return distribute_tensor(out, plan.output_layout);
  return out;
}

}  // namespace

Array matmul(const Array& x, const Array& w, const MatmulOptions& options) {
  MatmulPlan plan = plan_matmul(x, w, options);
  if (const Array* a = options.add_to_output;
      a != nullptr &&
      (a->shape() != plan.output_shape || a->dtype() != plan.dtype || !(a->mesh() == x.mesh()))) {
    throw ValueError(
        fmt::format("matmul: add_to_output must have the output's shape {} and dtype {} on the "
                    "operands' mesh, got {} {}",
                    shape_to_string(plan.output_shape), dtype_name(plan.dtype),
                    shape_to_string(a->shape()), dtype_name(a->dtype())));
  }
  cpu_kernels::use_single_threaded_blas();
  std::optional<Array> xr, wr;
  if (plan.reshard_x) xr.emplace(distribute_tensor(x, plan.x_layout));
  if (plan.reshard_w) wr.emplace(distribute_tensor(w, plan.w_layout));
  const Array& xa = xr ? *xr : x;
  const Array& wa = wr ? *wr : w;
  Array out = plan.contracted_axes.empty()
                  ? products_without_partials(xa, wa, plan, options.add_to_output)
                  : products_with_partials(xa, wa, plan, options.add_to_output);
  if (plan.reshard_output) out = distribute_tensor(out, plan.output_layout);
  if (options.plan_out) *options.plan_out = std::move(plan);
  return out;
}

}  // namespace meshlayout
