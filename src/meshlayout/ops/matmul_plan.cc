#include "meshlayout/ops/matmul_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "meshlayout/array/reshard_plan.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/ops/partial_sum.h"

namespace meshlayout {
namespace {

using Axes = std::vector<std::string>;

/// `None`, `'model'` or `('data', 'model')`, as Python prints a PartitionSpec entry.
std::string axes_repr(const Axes& axes) {
  if (axes.empty()) return "None";
  if (axes.size() == 1) return fmt::format("'{}'", axes[0]);
  std::vector<std::string> q;
  for (const std::string& a : axes) q.push_back(fmt::format("'{}'", a));
  return fmt::format("({})", fmt::join(q, ", "));
}

/// A layout's text without its mesh: `layout[data,None]`.
std::string bare(const TensorLayout& layout) { return TensorLayout(layout.axes()).to_string(); }

DimSharding without(const DimSharding& d, const std::set<std::string>& drop) {
  Axes kept;
  for (const std::string& a : d.axes()) {
    if (!drop.count(a)) kept.push_back(a);
  }
  return DimSharding(std::move(kept));
}

/// Why (x, w) cannot be multiplied shard by shard, or "" if they can.
std::string incompatibility(const TensorLayout& x, const TensorLayout& w) {
  const Axes& kx = x.axes().back().axes();
  const Axes& kw = w.axes()[0].axes();
  if (kx != kw) {
    return fmt::format("x splits K over {} but w splits K over {}", axes_repr(kx), axes_repr(kw));
  }
  const Axes& n = w.axes()[1].axes();
  for (int d = 0; d + 1 < x.rank(); ++d) {
    for (const std::string& a : x.axes()[static_cast<size_t>(d)].axes()) {
      if (std::find(n.begin(), n.end(), a) != n.end()) {
        return fmt::format("axis '{}' splits both x's dimension {} and w's N dimension", a, d);
      }
    }
  }
  return "";
}

/// The layout of the local products: x's batch dims, then w's N dim.
TensorLayout product_layout(const TensorLayout& x, const TensorLayout& w,
                            const std::optional<DeviceMesh>& mesh) {
  std::vector<DimSharding> dims(x.axes().begin(), x.axes().end() - 1);
  dims.push_back(w.axes()[1]);
  return TensorLayout(std::move(dims), mesh);
}

void check_shapes(const Shape& x, const Shape& w) {
  if (x.size() < 2) {
    throw ValueError(
        fmt::format("matmul: x must have rank >= 2 (..., K); got shape {}", shape_to_string(x)));
  }
  if (w.size() != 2) {
    throw ValueError(
        fmt::format("matmul: w must have rank 2 (K, N); got shape {}", shape_to_string(w)));
  }
  if (x.back() != w[0]) {
    throw ValueError(fmt::format(
        "matmul: contracted dimensions differ: x has shape {} (K = {}) but w has shape {} "
        "(K = {})",
        shape_to_string(x), x.back(), shape_to_string(w), w[0]));
  }
}

int64_t reshard_bytes(const ShardGeometry& from, const TensorLayout& to, size_t elem) {
  if (from.layout() == to) return 0;
  return reshard_bytes_moved(from, ShardGeometry(to, from.shape()), elem);
}

int64_t product_of_sizes(const DeviceMesh& mesh, const Axes& axes) {
  int64_t n = 1;
  for (const std::string& a : axes) n *= mesh.axis_size(a);
  return n;
}

struct Candidate {
  TensorLayout x, w;
};

/// The supported pairs the operands may be resharded to (see matmul_plan.h), in preference
/// order for equal costs; the first is (x, w) itself when they are compatible.
std::vector<Candidate> candidates(const TensorLayout& x, const TensorLayout& w) {
  const DeviceMesh& mesh = *x.device_mesh();
  std::vector<Candidate> out;
  const Axes kx = x.axes().back().axes(), kw = w.axes()[0].axes();
  for (const Axes& k : {kx, kw, Axes{}}) {
    const std::set<std::string> kset(k.begin(), k.end());
    std::vector<DimSharding> xd;
    for (int d = 0; d + 1 < x.rank(); ++d)
      xd.push_back(without(x.axes()[static_cast<size_t>(d)], kset));
    DimSharding n = without(w.axes()[1], kset);
    std::set<std::string> conflict;
    for (const DimSharding& b : xd) {
      for (const std::string& a : b.axes()) {
        if (std::find(n.axes().begin(), n.axes().end(), a) != n.axes().end()) conflict.insert(a);
      }
    }
    auto make = [&](const std::vector<DimSharding>& batch, const DimSharding& ndim) {
      std::vector<DimSharding> xs = batch;
      xs.push_back(DimSharding(k));
      return Candidate{TensorLayout(std::move(xs), mesh),
                       TensorLayout({DimSharding(k), ndim}, mesh)};
    };
    if (conflict.empty()) {
      out.push_back(make(xd, n));
      continue;
    }
    out.push_back(make(xd, without(n, conflict)));  // replicate w's N over the conflict
    std::vector<DimSharding> xb;
    for (const DimSharding& b : xd) xb.push_back(without(b, conflict));
    out.push_back(make(xb, n));  // or replicate x's batch dims over it
  }
  return out;
}

/// Bytes the completion of the products moves, summed over devices (a cost model, not exact):
/// an all-reduce over G devices receives 2 (G-1)/G of each block, a sum straight into another
/// layout (G-1) × each target block; without partial sums, the reshard to the output layout.
double completion_cost(const ShardGeometry& product, const Axes& k, const ShardGeometry& target,
                       size_t elem) {
  const int64_t g = product_of_sizes(product.mesh(), k);
  if (g == 1) {
    if (product.layout() == target.layout()) return 0;
    return static_cast<double>(reshard_bytes_moved(product, target, elem));
  }
  double bytes = 0;
  for (int64_t q = 0; q < target.mesh().size(); ++q) {
    bytes += static_cast<double>(target.box(q).num_elements()) * static_cast<double>(elem);
  }
  const double gd = static_cast<double>(g);
  return product.layout() == target.layout() ? bytes * 2 * (gd - 1) / gd : bytes * (gd - 1);
}

/// product_layout with the contracted axes appended (minor) to the output dimension whose
/// blocks are largest: the layout an all-reduce in two steps reduce-scatters into.
TensorLayout scatter_layout(const ShardGeometry& product, const Axes& k) {
  int best = 0;
  int64_t best_extent = -1;
  for (int d = 0; d < product.rank(); ++d) {
    const int64_t n = product.shape()[static_cast<size_t>(d)], b = product.num_blocks(d);
    const int64_t extent = ceil_div(n, b);
    if (extent > best_extent) {
      best = d;
      best_extent = extent;
    }
  }
  std::vector<DimSharding> dims = product.layout().axes();
  Axes axes = dims[static_cast<size_t>(best)].axes();
  axes.insert(axes.end(), k.begin(), k.end());
  dims[static_cast<size_t>(best)] = DimSharding(std::move(axes));
  return TensorLayout(std::move(dims), product.mesh());
}

}  // namespace

std::string_view reduction_name(MatmulReduction reduction) {
  switch (reduction) {
    case MatmulReduction::kNone:
      return "none";
    case MatmulReduction::kAllReduce:
      return "all-reduce";
    case MatmulReduction::kReduceScatter:
      return "reduce-scatter";
  }
  return "unknown";
}

TensorLayout matmul_output_layout(const TensorLayout& x, const TensorLayout& w) {
  if (x.rank() < 2) {
    throw ValueError(
        fmt::format("matmul_output_layout: x layout {} has rank {}; x needs rank >= 2 (..., K)",
                    x.to_string(), x.rank()));
  }
  if (w.rank() != 2) {
    throw ValueError(
        fmt::format("matmul_output_layout: w layout {} has rank {}; w needs rank 2 (K, N)",
                    w.to_string(), w.rank()));
  }
  if (x.device_mesh() && w.device_mesh() && !(*x.device_mesh() == *w.device_mesh())) {
    throw ValueError(fmt::format("matmul_output_layout: x is on {} but w is on {}",
                                 x.device_mesh()->to_string(), w.device_mesh()->to_string()));
  }
  if (std::string why = incompatibility(x, w); !why.empty()) {
    throw ValueError(fmt::format(
        "matmul_output_layout: {} @ {} needs a reshard first: {}; plan_matmul(x, w) shows which "
        "reshard matmul makes",
        bare(x), bare(w), why));
  }
  return product_layout(x, w, x.device_mesh() ? x.device_mesh() : w.device_mesh());
}

MatmulPlan plan_matmul(const Array& x, const Array& w, const MatmulOptions& options) {
  check_shapes(x.shape(), w.shape());
  if (x.dtype() != w.dtype()) {
    throw ValueError(fmt::format(
        "matmul: x is {} but w is {}; both operands must have the same dtype (convert one first)",
        dtype_name(x.dtype()), dtype_name(w.dtype())));
  }
  if (!(x.mesh() == w.mesh())) {
    throw ValueError(
        fmt::format("matmul: x is on {} but w is on {}; both operands must be on the same mesh",
                    x.mesh().to_string(), w.mesh().to_string()));
  }
  if (&x.runtime() != &w.runtime()) {
    throw ValueError(
        "matmul: x and w belong to different runtimes; both operands must live in "
        "the same runtime");
  }
  return plan_matmul(x.geometry(), w.geometry(), x.dtype(), x.runtime().local_device_count(),
                     options);
}

MatmulPlan plan_matmul(const ShardGeometry& x, const ShardGeometry& w, DType dtype,
                       int64_t local_device_count, const MatmulOptions& options) {
  check_shapes(x.shape(), w.shape());
  if (dtype != DType::kF32 && dtype != DType::kF64) {
    throw ValueError(
        fmt::format("matmul: dtype {} is not supported; supported: F32, F64", dtype_name(dtype)));
  }
  if (!(x.mesh() == w.mesh())) {
    throw ValueError(
        fmt::format("matmul: x is on {} but w is on {}; both operands must be on the same mesh",
                    x.mesh().to_string(), w.mesh().to_string()));
  }
  const DeviceMesh& mesh = x.mesh();
  const size_t elem = dtype_size(dtype);
  MatmulPlan plan;
  plan.x_shape = x.shape();
  plan.w_shape = w.shape();
  plan.output_shape = x.shape();
  plan.output_shape.back() = w.shape()[1];
  plan.dtype = dtype;

  std::optional<TensorLayout> requested;
  if (options.output_layout) {
    requested = *options.output_layout;
    if (!requested->device_mesh()) {
      requested->set_device_mesh(mesh);
    } else if (!(*requested->device_mesh() == mesh)) {
      throw ValueError(fmt::format("matmul: output_layout is on {} but the operands are on {}",
                                   requested->device_mesh()->to_string(), mesh.to_string()));
    }
    if (requested->rank() != static_cast<int>(plan.output_shape.size())) {
      throw ValueError(
          fmt::format("matmul: output_layout {} has {} dimension{} but the output has shape {}",
                      bare(*requested), requested->rank(), requested->rank() == 1 ? "" : "s",
                      shape_to_string(plan.output_shape)));
    }
  }

  // A pair of the table is used as it is. Any other pair: the candidate that moves the fewest
  // bytes, counting the operand reshards and the completion of the products.
  double best_cost = 0;
  std::optional<Candidate> best;
  if (incompatibility(x.layout(), w.layout()).empty()) best = Candidate{x.layout(), w.layout()};
  for (Candidate& c : best ? std::vector<Candidate>{} : candidates(x.layout(), w.layout())) {
    const ShardGeometry product(product_layout(c.x, c.w, mesh), plan.output_shape);
    const ShardGeometry target(requested ? *requested : product.layout(), plan.output_shape);
    const double cost =
        static_cast<double>(reshard_bytes(x, c.x, elem) + reshard_bytes(w, c.w, elem)) +
        completion_cost(product, c.x.axes().back().axes(), target, elem);
    if (!best || cost < best_cost) {
      best = std::move(c);
      best_cost = cost;
    }
  }
  plan.x_layout = best->x;
  plan.w_layout = best->w;
  plan.reshard_x = !(plan.x_layout == x.layout());
  plan.reshard_w = !(plan.w_layout == w.layout());
  plan.x_reshard_bytes = reshard_bytes(x, plan.x_layout, elem);
  plan.w_reshard_bytes = reshard_bytes(w, plan.w_layout, elem);
  plan.contracted_axes = plan.x_layout.axes().back().axes();
  plan.product_layout = product_layout(plan.x_layout, plan.w_layout, mesh);
  plan.output_layout = requested ? *requested : plan.product_layout;
  const ShardGeometry product(plan.product_layout, plan.output_shape);
  const ShardGeometry output(plan.output_layout, plan.output_shape);
  if (plan.contracted_axes.empty()) {
    plan.reduction = MatmulReduction::kNone;
    plan.reshard_output = !(plan.output_layout == plan.product_layout);
    if (plan.reshard_output) {
      plan.output_reshard_bytes = reshard_bytes_moved(product, output, elem);
    }
  } else if (plan.output_layout == plan.product_layout) {
    plan.reduction = MatmulReduction::kAllReduce;
    Axes k = plan.contracted_axes;
    std::vector<int> k_axes;
    for (const std::string& a : k) k_axes.push_back(*mesh.axis_index(a));
    internal_ops::PartialLayout partials{product, k_axes, x.shape().back()};
    if (internal_ops::plan_reduction(partials, product, elem, local_device_count).max_processes >
        2) {
      plan.all_reduce_in_two_steps = true;
      plan.scatter_layout = scatter_layout(product, k);
    }
  } else {
    plan.reduction = MatmulReduction::kReduceScatter;
  }
  return plan;
}

std::string MatmulPlan::to_string() const {
  std::string out =
      fmt::format("matmul: x {} @ w {} -> {}, {}, on {}\n", shape_to_string(x_shape),
                  shape_to_string(w_shape), shape_to_string(output_shape), dtype_name(dtype),
                  x_layout.device_mesh() ? x_layout.device_mesh()->to_string() : "?");
  if (reshard_x)
    out += fmt::format("  reshard x -> {} (moves {} bytes)\n", bare(x_layout), x_reshard_bytes);
  if (reshard_w)
    out += fmt::format("  reshard w -> {} (moves {} bytes)\n", bare(w_layout), w_reshard_bytes);
  out += fmt::format("  local products: x {} @ w {} -> {}", bare(x_layout), bare(w_layout),
                     bare(product_layout));
  if (contracted_axes.empty()) {
    out += reshard_output ? "\n" : ", no communication\n";
  } else {
    out += fmt::format(", partial sums over {}\n", axes_repr(contracted_axes));
  }
  switch (reduction) {
    case MatmulReduction::kNone:
      if (reshard_output) {
        out += fmt::format("  reshard output -> {} (moves {} bytes)\n", bare(output_layout),
                           output_reshard_bytes);
      }
      break;
    case MatmulReduction::kAllReduce:
      if (all_reduce_in_two_steps) {
        out += fmt::format(
            "  all-reduce over {} in two steps: reduce-scatter into {}, then all-gather -> {}\n",
            axes_repr(contracted_axes), bare(scatter_layout), bare(output_layout));
      } else {
        out += fmt::format("  all-reduce over {} -> {}\n", axes_repr(contracted_axes),
                           bare(output_layout));
      }
      break;
    case MatmulReduction::kReduceScatter: {
      const std::vector<std::string> used = output_layout.used_axes();
      const bool scatters =
          std::all_of(contracted_axes.begin(), contracted_axes.end(), [&](const std::string& a) {
            return std::find(used.begin(), used.end(), a) != used.end();
          });
      out += fmt::format("  {} over {} -> {}\n",
                         scatters ? "reduce-scatter" : "sum of the partial sums",
                         axes_repr(contracted_axes), bare(output_layout));
      break;
    }
  }
  return out;
}

}  // namespace meshlayout
