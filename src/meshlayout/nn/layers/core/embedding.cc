#include "meshlayout/nn/layers/core/embedding.h"

#include <fmt/format.h>

#include <algorithm>
#include <exception>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/kernels/embedding.h"
#include "meshlayout/nn/gradient_ops.h"
#include "meshlayout/ops/partial_sum.h"

namespace meshlayout {
namespace {

std::string position_text(int64_t g, const Shape& shape) {
  Shape coords(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    coords[d] = g % shape[d];
    g /= shape[d];
  }
  return shape_to_string(coords);
}

/// Every process checks its own shards; the first bad id in row-major order is agreed with one
/// all-gather, so all processes throw the same error (or none does).
void check_ids(const Array& x, int64_t input_dim, const std::string& layer_name) {
  struct Bad {
    int64_t index = std::numeric_limits<int64_t>::max();
    int64_t id = 0;
  };
  const auto& shards = x.local_shards();
  std::vector<Bad> found(shards.size());
  const DeviceKind kind = kind_of(x);
  x.runtime().pool().parallel_for(shards.size(), [&](size_t i) {
    const Array::Shard& s = shards[i];
    for (size_t j = 0; j < i; ++j) {
      if (shards[j].box == s.box) return;  // a replica: checked once
    }
    embedding_find_bad_id(kind, {.tokens = &s,
                                 .id_dtype = x.dtype(),
                                 .input_dim = input_dim,
                                 .shape = &x.shape(),
                                 .bad_index = &found[i].index,
                                 .bad_id = &found[i].id});
  });
  Bad mine;
  for (const Bad& b : found) {
    if (b.index < mine.index) mine = b;
  }
  Communicator& comm = x.runtime().comm();
  std::vector<Bad> all(static_cast<size_t>(comm.size()));
  comm.all_gather(&mine, sizeof mine, all.data());
  for (const Bad& b : all) {
    if (b.index < mine.index) mine = b;
  }
  if (mine.index == std::numeric_limits<int64_t>::max()) return;
  throw ValueError(fmt::format(
      "Embedding layer {}: token id {} at position {} of the input of shape {} is out of range: "
      "input_dim is {}, so ids must be in [0, {})",
      quote(layer_name), mine.id, position_text(mine.index, x.shape()), shape_to_string(x.shape()),
      input_dim, input_dim));
}

/// One lookup: the tokens of `tokens` against the table shard `table` (rows [r0, r1), all of
/// its columns) into `out` (tokens × columns, row-major); ids outside the rows give zeros.
struct Lookup {
  const Array::Shard* tokens;
  const Array::Shard* table;
  Array::Shard* out;
  std::vector<Array::Shard*> replicas;
};

void run_lookups(ThreadPool& pool, DeviceKind kind, DType id_dtype, size_t element_size,
                 const std::vector<Lookup>& lookups) {
  pool.parallel_for(lookups.size(), [&](size_t i) {
    const Lookup& l = lookups[i];
    embedding_lookup(kind, {.tokens = l.tokens,
                            .id_dtype = id_dtype,
                            .table = l.table,
                            .out = l.out,
                            .replicas = l.replicas,
                            .element_size = element_size});
  });
}

std::vector<int64_t> block_of(const ShardGeometry& g, int64_t position) {
  std::vector<int64_t> block(static_cast<size_t>(g.rank()));
  for (int d = 0; d < g.rank(); ++d) block[static_cast<size_t>(d)] = g.block_index(position, d);
  return block;
}

/// Tokens on the table's mesh, with no dimension split over an axis the table uses (a mesh
/// axis can appear once in the output layout).
TensorLayout token_layout_for(const Array& x, const Array& table) {
  const DeviceMesh& mesh = table.mesh();
  std::set<std::string> table_axes;
  for (const DimSharding& d : table.layout().axes())
    table_axes.insert(d.axes().begin(), d.axes().end());
  std::vector<DimSharding> token_axes =
      x.mesh() == mesh ? x.layout().axes() : std::vector<DimSharding>(x.shape().size());
  for (DimSharding& d : token_axes) {
    if (std::any_of(d.axes().begin(), d.axes().end(),
                    [&](const std::string& a) { return table_axes.count(a) > 0; })) {
      d = DimSharding();
    }
  }
  return TensorLayout(token_axes, mesh);
}

}  // namespace

Embedding::Embedding(int64_t input_dim, int64_t output_dim, EmbeddingOptions options)
    : Layer("embedding", options.name),
      input_dim_(input_dim),
      output_dim_(output_dim),
      options_(std::move(options)) {
  if (input_dim < 1 || output_dim < 1) {
    throw ValueError(
        fmt::format("Embedding input_dim and output_dim must be at least 1, got "
                    "input_dim={} and output_dim={}",
                    input_dim, output_dim));
  }
}

Shape Embedding::compute_output_shape(const Shape& input_shape) const {
  Shape out = input_shape;
  out.push_back(output_dim_);
  return out;
}

void Embedding::build(const Shape&) {
  embeddings_ = add_weight({.name = "embeddings",
                            .shape = {input_dim_, output_dim_},
                            .initializer = options_.embeddings_initializer,
                            .layout = options_.embeddings_layout});
}

Array Embedding::call(const Array& x) {
  if (x.dtype() != DType::kI32 && x.dtype() != DType::kI64) {
    throw ValueError(fmt::format("Embedding layer {} takes integer token ids (I32 or I64), got {}",
                                 quote(name()), dtype_name(x.dtype())));
  }
  check_ids(x, input_dim_, name());
  const Array& table = embeddings_->value();
  const DType dtype = table.dtype();
  const size_t elem = dtype_size(dtype);
  const DeviceMesh& mesh = table.mesh();
  const TensorLayout token_layout = token_layout_for(x, table);
  std::optional<Array> moved;
  if (!(x.mesh() == mesh) || !(x.layout() == token_layout))
    moved.emplace(distribute_tensor(x, token_layout));
  const Array& tokens = moved ? *moved : x;

  std::vector<DimSharding> out_axes = token_layout.axes();
  out_axes.push_back(table.layout().axes()[1]);
  const TensorLayout product_layout(out_axes, mesh);
  const Shape out_shape = compute_output_shape(x.shape());
  Runtime& rt = table.runtime();

  const DimSharding& vocab = table.layout().axes()[0];
  if (!vocab.is_sharded()) {
    // Column-parallel or replicated: every device looks up its rows directly, each distinct
    // block once per process, copied to local replicas.
    Array out = allocate_agreed(product_layout, out_shape, dtype, table.runtime_ptr());
    std::map<std::vector<int64_t>, size_t> first;
    std::vector<Lookup> lookups;
    for (Array::Shard& s : out.local_shards()) {
      auto [it, added] = first.emplace(block_of(out.geometry(), s.position), lookups.size());
      if (added) {
        lookups.push_back(Lookup{tokens.shard_at(s.position), table.shard_at(s.position), &s, {}});
      } else {
        lookups[it->second].replicas.push_back(&s);
      }
    }
    run_lookups(rt.pool(), kind_of(table), tokens.dtype(), elem, lookups);
    return out;
  }

  // Vocab-parallel: partial lookups (zeros outside a device's rows), summed over the vocab axes.
  std::vector<int> k_axes;
  for (const std::string& a : vocab.axes()) k_axes.push_back(*mesh.axis_index(a));
  internal_ops::PartialLayout layout{ShardGeometry(product_layout, out_shape), k_axes, input_dim_};
  internal_ops::LocalPartials partials = internal_ops::allocate_local_partials(layout, table, elem);
  std::vector<Lookup> lookups;  // a partial is a shard of the product: the kernel fills it
  for (internal_ops::LocalPartial& p : partials) {
    lookups.push_back(Lookup{tokens.shard_at(p.position), table.shard_at(p.position), &p, {}});
  }
  run_lookups(rt.pool(), kind_of(table), tokens.dtype(), elem, lookups);
  Array out = allocate_agreed(product_layout, out_shape, dtype, table.runtime_ptr());
  internal_ops::ReductionPlan reduction =
      internal_ops::plan_reduction(layout, out.geometry(), elem, rt.local_device_count());
  internal_ops::reduce_partials(partials, reduction, out);
  return out;
}

Array Embedding::backward(const Array& x, const Array& dy, Gradients& grads) {
  if (!embeddings_) {
    throw FailedPreconditionError(
        fmt::format("Embedding layer {} is not built: call it before its "
                    "backward",
                    quote(name())));
  }
  if (x.dtype() != DType::kI32 && x.dtype() != DType::kI64) {
    throw ValueError(fmt::format("Embedding layer {} takes integer token ids (I32 or I64), got {}",
                                 quote(name()), dtype_name(x.dtype())));
  }
  const Array& table = embeddings_->value();
  const DType dtype = table.dtype();
  const size_t elem = dtype_size(dtype);
  check_output_gradient(name(), dy, compute_output_shape(x.shape()), dtype);
  const std::shared_ptr<Runtime>& rt = table.runtime_ptr();
  const TensorLayout none_layout = TensorLayout::replicated(1, table.mesh());
  if (!embeddings_->trainable()) return allocate_agreed(none_layout, {0}, DType::kF32, rt);
  check_ids(x, input_dim_, name());
  const DeviceMesh& mesh = table.mesh();
  // Tokens and dy as the call's product: tokens off the table's axes, dy's columns like the
  // table's, so each device scatters its tokens' rows into its own table block.
  const TensorLayout token_layout = token_layout_for(x, table);
  std::optional<Array> moved_tokens, moved_dy;
  const Array& tokens = x.mesh() == mesh && x.layout() == token_layout
                            ? x
                            : moved_tokens.emplace(distribute_tensor(x, token_layout));
  std::vector<DimSharding> dy_axes = token_layout.axes();
  dy_axes.push_back(table.layout().axes()[1]);
  const Array& g = in_layout(dy, TensorLayout(dy_axes, mesh), moved_dy);
  // Each device's partial table block; the partials of different token blocks are summed over
  // the token axes (NOTE [Partial sums]), straight into the table's layout.
  std::vector<int> k_axes;
  for (const DimSharding& d : token_layout.axes()) {
    for (const std::string& a : d.axes()) k_axes.push_back(*mesh.axis_index(a));
  }
  internal_ops::PartialLayout layout{table.geometry(), k_axes, 0};
  layout.k_extent = layout.k_blocks();  // one K block per token block, none empty
  internal_ops::LocalPartials partials =
      internal_ops::allocate_local_partials(layout, tokens, elem);
  const DeviceKind kind = kind_of(table);
  table.runtime().pool().parallel_for(partials.size(), [&](size_t i) {
    Array::Shard& view = partials[i];
    embedding_scatter_add(kind, {.table_grad = &view,
                                 .tokens = tokens.shard_at(view.position),
                                 .id_dtype = tokens.dtype(),
                                 .dy = g.shard_at(view.position),
                                 .dtype = dtype});
  });
  Array d_table = allocate_agreed(table.layout(), table.shape(), dtype, rt);
  const internal_ops::ReductionPlan plan = internal_ops::plan_reduction(
      layout, d_table.geometry(), elem, table.runtime().local_device_count());
  internal_ops::reduce_partials(partials, plan, d_table);
  grads.accumulate(*embeddings_, std::move(d_table));
  return allocate_agreed(none_layout, {0}, DType::kF32, rt);
}

}  // namespace meshlayout
