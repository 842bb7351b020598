// adafactor.cc — keras.optimizers.Adafactor. See adafactor.h.
#include "meshlayout/train/adafactor.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"

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

// Sum over the elements of `a` (each box once: the devices of replica 0), across processes, of
// f(shard, k) for the k-th element of each such local shard.
// Each shard's sum on the thread pool, added in shard order.
template <typename F>
double global_sum(const Array& a, F&& f) {
  const std::vector<Array::Shard>& shards = a.local_shards();
  std::vector<double> sums(shards.size(), 0.0);
  a.runtime().pool().parallel_for(shards.size(), [&](size_t s) {
    const Array::Shard& shard = shards[s];
    if (a.geometry().replica_of(shard.position) != 0) return;
    const int64_t n = shard.box.num_elements();
    for (int64_t k = 0; k < n; ++k) sums[s] += f(shard, k);
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
T* data(Array::Shard* s) {
  return reinterpret_cast<T*>(s->buffer.data());
}

template <typename T>
void adafactor_update(const VariableStep& s, const AdafactorOptions& o) {
  Array& x = *s.value;
  const Array& g = *s.gradient;
  const Shape& shape = x.shape();
  const int rank = static_cast<int>(shape.size());
  const int64_t total = num_elements(shape);
  if (total == 0) return;
  const T one = T(1);
  const T t = static_cast<T>(s.iterations + 1);
  T lr = static_cast<T>(s.lr);
  if (o.relative_step) lr = std::min(lr, one / std::sqrt(t));
  const T rho_t = std::min(lr, one / std::sqrt(t));
  const T sum_x = static_cast<T>(global_sum(x, [](const Array::Shard& sh, int64_t k) {
    const double v = reinterpret_cast<const T*>(sh.buffer.data())[k];
    return v * v;
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
  const auto reg = [&](T gk) { return gk * gk + eps1; };

  if (rank >= 2) {
    const int dm = rank - 2, dn = rank - 1;
    const int64_t m = shape[static_cast<size_t>(dm)], n = shape[static_cast<size_t>(dn)];
    const DType dtype = x.dtype();
    Array& r_arr = r_var->mutable_value();
    Array& c_arr = c_var->mutable_value();
    // Partial row sums (over each box's columns) and column sums (over its rows) of G.
    Array rows = partial_array(x.layout(), geo, dn, dtype, x.runtime_ptr());
    Array cols = partial_array(x.layout(), geo, dm, dtype, x.runtime_ptr());
    each_shard(x, [&](const Array::Shard& xs) {
      const Box& b = xs.box;
      const int64_t bm = b.shape[static_cast<size_t>(dm)], bn = b.shape[static_cast<size_t>(dn)];
      const int64_t lead = bm * bn == 0 ? 0 : b.num_elements() / (bm * bn);
      const T* gp = reinterpret_cast<const T*>(g.shard_at(xs.position)->buffer.data());
      T* row = data<T>(rows.shard_at(xs.position));
      T* col = data<T>(cols.shard_at(xs.position));
      std::fill(row, row + num_elements(rows.shard_at(xs.position)->box.shape), T(0));
      std::fill(col, col + num_elements(cols.shard_at(xs.position)->box.shape), T(0));
      for (int64_t l = 0; l < lead; ++l) {
        for (int64_t i = 0; i < bm; ++i) {
          for (int64_t j = 0; j < bn; ++j) {
            const T q = reg(gp[(l * bm + i) * bn + j]);
            row[l * bm + i] += q;
            col[l * bn + j] += q;
          }
        }
      }
    });
    const Array rows_all = replicate_dim(rows, dn);
    const Array cols_all = replicate_dim(cols, dm);
    const int64_t kn = geo.num_blocks(dn), km = geo.num_blocks(dm);
    // r and c: each device's boxes are its variable box's rows and columns.
    each_shard(r_arr, [&](Array::Shard& rs) {
      const int64_t count = rs.box.num_elements();
      const T* sums = reinterpret_cast<const T*>(rows_all.shard_at(rs.position)->buffer.data());
      T* r = reinterpret_cast<T*>(rs.buffer.data());
      for (int64_t k = 0; k < count; ++k) {
        T sum = T(0);
        for (int64_t kb = 0; kb < kn; ++kb) sum += sums[k * kn + kb];
        r[k] = beta * r[k] + one_minus_beta * (sum / static_cast<T>(n));
      }
    });
    each_shard(c_arr, [&](Array::Shard& cs) {
      const int64_t bn = cs.box.shape.back();
      const int64_t lead = bn == 0 ? 0 : cs.box.num_elements() / bn;
      const T* sums = reinterpret_cast<const T*>(cols_all.shard_at(cs.position)->buffer.data());
      T* c = reinterpret_cast<T*>(cs.buffer.data());
      for (int64_t l = 0; l < lead; ++l) {
        for (int64_t j = 0; j < bn; ++j) {
          T sum = T(0);
          for (int64_t kb = 0; kb < km; ++kb) sum += sums[(l * km + kb) * bn + j];
          c[l * bn + j] = beta * c[l * bn + j] + one_minus_beta * (sum / static_cast<T>(m));
        }
      }
    });
    // mean(r, −1): r's last dimension is the variable's dm, cut as it is.
    Array r_sums = partial_array(r_arr.layout(), r_arr.geometry(), dm, dtype, x.runtime_ptr());
    each_shard(r_arr, [&](const Array::Shard& rs) {
      const int64_t bm = rs.box.shape.back();
      T* out = data<T>(r_sums.shard_at(rs.position));
      const int64_t lead = num_elements(r_sums.shard_at(rs.position)->box.shape);
      const T* r = reinterpret_cast<const T*>(rs.buffer.data());
      for (int64_t l = 0; l < lead; ++l) {
        T sum = T(0);
        for (int64_t i = 0; i < bm; ++i) sum += r[l * bm + i];
        out[l] = sum;
      }
    });
    const Array r_sums_all = replicate_dim(r_sums, dm);
    // v = (r / mean(r, −1))[…, None] · c[…, None, :] on each variable box.
    each_shard(x, [&](const Array::Shard& xs) {
      const Box& b = xs.box;
      const int64_t bm = b.shape[static_cast<size_t>(dm)], bn = b.shape[static_cast<size_t>(dn)];
      const int64_t lead = bm * bn == 0 ? 0 : b.num_elements() / (bm * bn);
      const T* r = reinterpret_cast<const T*>(r_arr.shard_at(xs.position)->buffer.data());
      const T* c = reinterpret_cast<const T*>(c_arr.shard_at(xs.position)->buffer.data());
      const T* rs = reinterpret_cast<const T*>(r_sums_all.shard_at(xs.position)->buffer.data());
      T* v = data<T>(v_arr.shard_at(xs.position));
      for (int64_t l = 0; l < lead; ++l) {
        T sum = T(0);
        for (int64_t kb = 0; kb < km; ++kb) sum += rs[l * km + kb];
        const T r_mean = sum / static_cast<T>(m);
        for (int64_t i = 0; i < bm; ++i) {
          const T ri = r[l * bm + i] / r_mean;
          for (int64_t j = 0; j < bn; ++j) v[(l * bm + i) * bn + j] = ri * c[l * bn + j];
        }
      }
    });
  } else {
    each_shard(x, [&](const Array::Shard& xs) {
      const int64_t count = xs.box.num_elements();
      const T* gp = reinterpret_cast<const T*>(g.shard_at(xs.position)->buffer.data());
      T* v = data<T>(v_arr.shard_at(xs.position));
      for (int64_t k = 0; k < count; ++k) v[k] = beta * v[k] + one_minus_beta * reg(gp[k]);
    });
  }

  // u = g/√v; θ −= α_t · u / max(1, rms(u)/clip_threshold).
  const auto u_at = [&](const Array::Shard& xs, int64_t k) {
    const T gk = reinterpret_cast<const T*>(g.shard_at(xs.position)->buffer.data())[k];
    const T vk = reinterpret_cast<const T*>(v_arr.shard_at(xs.position)->buffer.data())[k];
    return gk / std::sqrt(vk);
  };
  const T sum_u = static_cast<T>(global_sum(x, [&](const Array::Shard& xs, int64_t k) {
    const double u = u_at(xs, k);
    return u * u;
  }));
  const T rms_u = std::sqrt(sum_u / static_cast<T>(total));
  const T divisor = std::max(one, rms_u / static_cast<T>(o.clip_threshold));
  each_shard(x, [&](Array::Shard& xs) {
    T* theta = reinterpret_cast<T*>(xs.buffer.data());
    const int64_t count = xs.box.num_elements();
    for (int64_t k = 0; k < count; ++k) theta[k] -= alpha_t * (u_at(xs, k) / divisor);
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

void Adafactor::update_shard(const ShardStep<float>& /*step*/) const {
  throw InternalError("Adafactor updates whole variables (update_variable), not shards");
}
void Adafactor::update_shard(const ShardStep<double>& /*step*/) const {
  throw InternalError("Adafactor updates whole variables (update_variable), not shards");
}

MESHLAYOUT_REGISTER_OPTIMIZER(adafactor, Adafactor, "adafactor")

}  // namespace meshlayout
