// adafactor.cc — keras.optimizers.Adafactor. See adafactor.h.
#include "meshlayout/train/adafactor.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/kernels/adafactor.h"
#include "meshlayout/kernels/device_kind.h"
#include "meshlayout/kernels/optimizer.h"

namespace meshlayout {
namespace {

// The layout of a factored slot: `layout` without dimension `drop`.
TensorLayout without_dim(const TensorLayout& layout, int drop) {
  std::vector<DimSharding> axes = layout.axes();
  axes.erase(axes.begin() + drop);
  return TensorLayout(std::move(axes), *layout.device_mesh());
}

Shape without(const Shape& shape, int drop) {
  Shape out = shape;
  out.erase(out.begin() + drop);
  return out;
}

// The sum over the elements of `a` (each box once: the devices of replica 0), across
// processes, of what shard_sum(shard, &sum) adds to a shard's sum (from 0). Each shard's sum
// on the thread pool, added in shard order.
template <typename F>
double global_sum(const Array& a, F&& shard_sum) {
  const std::vector<Array::Shard>& shards = a.local_shards();
  std::vector<double> sums(shards.size(), 0.0);
  a.runtime().pool().parallel_for(shards.size(), [&](size_t s) {
    const Array::Shard& shard = shards[s];
    if (a.geometry().replica_of(shard.position) != 0) return;
    shard_sum(shard, &sums[s]);
  });
  double sum = 0.0;
  for (double x : sums) sum += x;
  Runtime& rt = a.runtime();
  if (rt.num_processes() > 1) rt.comm().all_reduce_sum(&sum, 1, DType::kF64);
  return sum;
}

// f(shard) for each local shard of `a`, on the runtime's thread pool (each writes only its own
// shard's boxes).
template <typename A, typename F>
void each_shard(A& a, F&& f) {
  auto& shards = a.local_shards();
  a.runtime().pool().parallel_for(shards.size(), [&](size_t s) { f(shards[s]); });
}

// An uninitialised array of partial sums over dimension `dim` of a tensor of `shape` in
// `layout`: the same, with `dim` of size num_blocks(dim), one element per block of the tensor.
Array partial_array(const TensorLayout& layout, const ShardGeometry& geometry, int dim, DType dtype,
                    const std::shared_ptr<Runtime>& runtime) {
  Shape shape = geometry.shape();
  shape[static_cast<size_t>(dim)] = geometry.num_blocks(dim);
  return Array::allocate(layout, shape, dtype, runtime);
}

// `partial` with dimension `dim` replicated: every device then holds every block's partial sum.
Array replicate_dim(const Array& partial, int dim) {
  std::vector<DimSharding> axes = partial.layout().axes();
  axes[static_cast<size_t>(dim)] = DimSharding();
  return distribute_tensor(partial, TensorLayout(std::move(axes), partial.mesh()));
}

template <typename T>
void adafactor_update(const VariableStep& s, const AdafactorOptions& o) {
  Array& x = *s.value;
  const Array& g = *s.gradient;
  const Shape& shape = x.shape();
  const int rank = static_cast<int>(shape.size());
  const int64_t total = num_elements(shape);
  if (total == 0) return;
  const DeviceKind kind = kind_of(x);
  const DType dtype = x.dtype();
  const T one = T(1);
  const T t = static_cast<T>(s.iterations + 1);
  T lr = static_cast<T>(s.lr);
  if (o.relative_step) lr = std::min(lr, one / std::sqrt(t));
  const T rho_t = std::min(lr, one / std::sqrt(t));
  const T sum_x = static_cast<T>(global_sum(x, [&](const Array::Shard& sh, double* sum) {
    sum_of_squares(kind, {.shard = &sh, .dtype = dtype, .sum = sum});
  }));
  const T rms_x = std::sqrt(sum_x / static_cast<T>(total));
  const T alpha_t = std::max(static_cast<T>(o.epsilon_2), rms_x) * rho_t;
  const T eps1 = static_cast<T>(o.epsilon_1);
  const T beta = one - std::pow(t, static_cast<T>(o.beta_2_decay));
  const T one_minus_beta = one - beta;
  Variable* r_var = s.slots[0];
  Variable* c_var = s.slots[1];
  Variable* v_var = s.slots[2];
  Array& v_arr = v_var->mutable_value();
  const ShardGeometry& geo = x.geometry();

  if (rank >= 2) {
    const int dm = rank - 2, dn = rank - 1;
    const int64_t m = shape[static_cast<size_t>(dm)], n = shape[static_cast<size_t>(dn)];
    Array& r_arr = r_var->mutable_value();
    Array& c_arr = c_var->mutable_value();
    // Partial row sums (over each box's columns) and column sums (over its rows) of G.
    Array rows = partial_array(x.layout(), geo, dn, dtype, x.runtime_ptr());
    Array cols = partial_array(x.layout(), geo, dm, dtype, x.runtime_ptr());
    each_shard(x, [&](const Array::Shard& xs) {
      adafactor_partial_sums(kind, {.g = g.shard_at(xs.position),
                                    .rows = rows.shard_at(xs.position),
                                    .cols = cols.shard_at(xs.position),
                                    .dtype = dtype,
                                    .dm = dm,
                                    .dn = dn,
                                    .epsilon_1 = eps1});
    });
    const Array rows_all = replicate_dim(rows, dn);
    const Array cols_all = replicate_dim(cols, dm);
    const int64_t kn = geo.num_blocks(dn), km = geo.num_blocks(dm);
    // r and c: each device's boxes are its variable box's rows and columns.
    each_shard(r_arr, [&](Array::Shard& rs) {
      adafactor_rows(kind, {.r = &rs,
                            .sums = rows_all.shard_at(rs.position),
                            .dtype = dtype,
                            .blocks = kn,
                            .n = n,
                            .beta = beta,
                            .one_minus_beta = one_minus_beta});
    });
    each_shard(c_arr, [&](Array::Shard& cs) {
      adafactor_cols(kind, {.c = &cs,
                            .sums = cols_all.shard_at(cs.position),
                            .dtype = dtype,
                            .blocks = km,
                            .m = m,
                            .beta = beta,
                            .one_minus_beta = one_minus_beta});
    });
    // mean(r, −1): r's last dimension is the variable's dm, cut as it is.
    Array r_sums = partial_array(r_arr.layout(), r_arr.geometry(), dm, dtype, x.runtime_ptr());
    each_shard(r_arr, [&](const Array::Shard& rs) {
      adafactor_row_totals(kind, {.r = &rs, .out = r_sums.shard_at(rs.position), .dtype = dtype});
    });
    const Array r_sums_all = replicate_dim(r_sums, dm);
    // v = (r / mean(r, −1))[…, None] · c[…, None, :] on each variable box.
    each_shard(x, [&](const Array::Shard& xs) {
      adafactor_factored_velocity(kind, {.v = v_arr.shard_at(xs.position),
                                         .r = r_arr.shard_at(xs.position),
                                         .c = c_arr.shard_at(xs.position),
                                         .totals = r_sums_all.shard_at(xs.position),
                                         .dtype = dtype,
                                         .dm = dm,
                                         .dn = dn,
                                         .blocks = km,
                                         .m = m});
    });
  } else {
    each_shard(x, [&](const Array::Shard& xs) {
      adafactor_velocity(kind, {.v = v_arr.shard_at(xs.position),
                                .g = g.shard_at(xs.position),
                                .dtype = dtype,
                                .beta = beta,
                                .one_minus_beta = one_minus_beta,
                                .epsilon_1 = eps1});
    });
  }

  // u = g/√v; θ −= α_t · u / max(1, rms(u)/clip_threshold).
  const T sum_u = static_cast<T>(global_sum(x, [&](const Array::Shard& xs, double* sum) {
    adafactor_sum_u_squares(kind, {.g = g.shard_at(xs.position),
                                   .v = v_arr.shard_at(xs.position),
                                   .dtype = dtype,
                                   .sum = sum});
  }));
  const T rms_u = std::sqrt(sum_u / static_cast<T>(total));
  const T divisor = std::max(one, rms_u / static_cast<T>(o.clip_threshold));
  each_shard(x, [&](Array::Shard& xs) {
    adafactor_apply(kind, {.theta = &xs,
                           .g = g.shard_at(xs.position),
                           .v = v_arr.shard_at(xs.position),
                           .dtype = dtype,
                           .alpha_t = alpha_t,
                           .divisor = divisor});
  });
}

}  // namespace

AdafactorOptions AdafactorOptions::from(const OptimizerOptions& options) {
  OptimizerArguments a(options, "Adafactor");
  AdafactorOptions o{.beta_2_decay = a.number("beta_2_decay", -0.8),
                     .epsilon_1 = a.number("epsilon_1", 1e-30),
                     .epsilon_2 = a.number("epsilon_2", 1e-3),
                     .clip_threshold = a.number("clip_threshold", 1.0),
                     .relative_step = a.flag("relative_step", true)};
  a.finish();
  return o;
}

void AdafactorOptions::check() const {
  if (!(beta_2_decay <= 0.0 && std::isfinite(beta_2_decay))) {
    throw ValueError(fmt::format(
        "`beta_2_decay` must be a finite float <= 0. Received: beta_2_decay={}", beta_2_decay));
  }
  for (const auto& [what, v] :
       {std::pair{"epsilon_1", epsilon_1}, std::pair{"epsilon_2", epsilon_2}}) {
    if (!(v >= 0.0 && std::isfinite(v))) {
      throw ValueError(
          fmt::format("`{}` must be a finite float >= 0. Received: {}={}", what, what, v));
    }
  }
  if (!(clip_threshold > 0.0 && std::isfinite(clip_threshold))) {
    throw ValueError(
        fmt::format("`clip_threshold` must be a positive finite float. Received: clip_threshold={}",
                    clip_threshold));
  }
}

Adafactor::Adafactor(const OptimizerOptions& options)
    : Adafactor(AdafactorOptions::from(options), options) {}

Adafactor::Adafactor(const AdafactorOptions& own, const OptimizerOptions& options)
    : Optimizer("Adafactor", 0.001, options), options_(own) {
  options_.check();
  if (options.shard_slots_over) {
    throw ValueError(
        fmt::format("Adafactor: shard_slots_over={} is not supported: its factored slots r and c "
                    "are not in their "
                    "variable's shape; expected no shard_slots_over (ZeRO-1) with Adafactor",
                    quote(*options.shard_slots_over)));
  }
}

std::vector<std::string> Adafactor::slot_names() const { return {"r", "c", "velocity"}; }

std::vector<SlotFootprint> Adafactor::slot_footprints(const SlotFootprint& variable) const {
  const int rank = static_cast<int>(variable.shape.size());
  if (rank < 2) {
    const TensorLayout scalar({}, *variable.layout.device_mesh());
    return {{{}, variable.dtype, scalar}, {{}, variable.dtype, scalar}, variable};
  }
  return {
      {without(variable.shape, rank - 1), variable.dtype, without_dim(variable.layout, rank - 1)},
      {without(variable.shape, rank - 2), variable.dtype, without_dim(variable.layout, rank - 2)},
      variable};
}

void Adafactor::build_slots(std::span<const VariablePtr> variables) {
  for (const VariablePtr& v : variables) {
    const std::vector<SlotFootprint> slots =
        slot_footprints({v->shape(), v->dtype(), v->value().layout()});
    const std::vector<std::string> names = slot_names();
    for (size_t k = 0; k < slots.size(); ++k)
      add_optimizer_variable(v, names[k], slots[k].shape, slots[k].layout);
  }
}

void Adafactor::update_variable(const VariableStep& step) const {
  if (step.value->dtype() == DType::kF32) {
    adafactor_update<float>(step, options_);
  } else {
    adafactor_update<double>(step, options_);
  }
}

void Adafactor::update_shard(DeviceKind /*kind*/, const OptimizerShardStep& /*step*/) const {
  throw InternalError("Adafactor updates whole variables (update_variable), not shards");
}

MESHLAYOUT_REGISTER_OPTIMIZER(adafactor, Adafactor, "adafactor")

}  // namespace meshlayout
