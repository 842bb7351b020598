// optimizer.cc — the base Optimizer's state: its options checked, its variables (iteration,
// learning rate, the slots built in their layouts, ZeRO-1's included), weight decay's
// exclusions. See optimizer.h; the step (apply) is in optimizer_apply.cc, the update rules in
// each optimizer's file (sgd.cc, …), the registry in optimizer_registry.cc.
#include "meshlayout/train/optimizer.h"

#include <fmt/format.h>
#include <re2/re2.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/kernels/device_kind.h"
#include "meshlayout/nn/layer.h"
#include "meshlayout/nn/name_scope.h"

namespace meshlayout {
namespace {

std::string format_opt(const std::optional<double>& v) {
  return v ? fmt::format("{}", *v) : "None";
}

// ValueError unless `mesh` has `axis`, naming it and listing the mesh's axes.
void check_slot_axis(const DeviceMesh& mesh, const std::string& axis, std::string_view what) {
  if (mesh.axis_index(axis)) return;
  throw ValueError(
      fmt::format("{}: shard_slots_over={} is not an axis of the mesh {}; its axes are {}", what,
                  quote(axis), mesh.to_string(), repr_list(mesh.axis_names())));
}

}  // namespace

TensorLayout zero1_slot_layout(const TensorLayout& layout, const Shape& shape,
                               const std::string& axis) {
  if (!layout.device_mesh()) {
    throw ValueError(fmt::format("zero1_slot_layout: layout {} has no device mesh to shard over {}",
                                 layout.to_string(), quote(axis)));
  }
  const DeviceMesh& mesh = *layout.device_mesh();
  check_slot_axis(mesh, axis, "zero1_slot_layout");
  if (static_cast<int>(shape.size()) != layout.rank()) {
    throw ValueError(fmt::format("zero1_slot_layout: layout {} has rank {}, the shape {} rank {}",
                                 layout.to_string(), layout.rank(), shape_to_string(shape),
                                 shape.size()));
  }
  const std::vector<std::string> used = layout.used_axes();
  if (layout.rank() == 0 || std::find(used.begin(), used.end(), axis) != used.end()) return layout;
  const int64_t k = mesh.axis_size(axis);
  // Even first; else the first unsharded dimension (its slot boxes still nest); else 0.
  std::optional<int> even, unsharded;
  for (int d = layout.rank() - 1; d >= 0; --d) {
    const DimSharding& dim_sharding = layout.axes()[static_cast<size_t>(d)];
    int64_t shards = k;
    for (const std::string& a : dim_sharding.axes()) shards *= mesh.axis_size(a);
    if (shape[static_cast<size_t>(d)] % shards == 0) even = d;
    if (!dim_sharding.is_sharded()) unsharded = d;
  }
  const int dim = even.value_or(unsharded.value_or(0));
  std::vector<DimSharding> axes = layout.axes();
  std::vector<std::string> dim_axes = axes[static_cast<size_t>(dim)].axes();
  dim_axes.push_back(axis);
  axes[static_cast<size_t>(dim)] = DimSharding(std::move(dim_axes));
  return TensorLayout(std::move(axes), mesh);
}

Optimizer::Optimizer(std::string_view class_name, double default_lr,
                     const OptimizerOptions& options)
    : name_(options.name.empty() ? auto_name(class_name) : options.name),
      lr_(static_cast<float>(options.learning_rate.value_or(default_lr))),
      weight_decay_(options.weight_decay),
      clipnorm_(options.clipnorm),
      clipvalue_(options.clipvalue),
      global_clipnorm_(options.global_clipnorm),
      shard_slots_over_(options.shard_slots_over) {
  check_path_component(name_);
  if (shard_slots_over_ && shard_slots_over_->empty()) {
    throw ValueError(
        fmt::format("optimizer {}: shard_slots_over is empty; give a mesh axis name (e.g. 'batch')",
                    quote(name_)));
  }
  const int clips =
      int(clipnorm_.has_value()) + int(clipvalue_.has_value()) + int(global_clipnorm_.has_value());
  if (clips > 1) {
    throw ValueError(fmt::format(
        "Only one of `clipnorm`, `clipvalue` and `global_clipnorm` can be set. Received: "
        "clipnorm={}, clipvalue={}, global_clipnorm={}",
        format_opt(clipnorm_), format_opt(clipvalue_), format_opt(global_clipnorm_)));
  }
  for (const auto& [what, v] :
       {std::pair{"clipnorm", clipnorm_}, std::pair{"clipvalue", clipvalue_},
        std::pair{"global_clipnorm", global_clipnorm_}}) {
    if (v && !(*v > 0 && std::isfinite(*v))) {
      throw ValueError(
          fmt::format("`{}` must be a positive finite float. Received: {}={}", what, what, *v));
    }
  }
  if (weight_decay_ && !std::isfinite(*weight_decay_)) {
    throw ValueError(fmt::format("`weight_decay` must be a finite float. Received: weight_decay={}",
                                 *weight_decay_));
  }
  if (!std::isfinite(lr_)) {
    throw ValueError(
        fmt::format("`learning_rate` must be a finite float. Received: learning_rate={}",
                    options.learning_rate.value_or(default_lr)));
  }
  NameScope scope(name_, this, std::nullopt);
  iteration_var_ = std::make_shared<Variable>(
      VariableSpec{.name = "iteration", .shape = {}, .dtype = DType::kI32, .trainable = false});
  learning_rate_var_ =
      std::make_shared<Variable>(VariableSpec{.name = "learning_rate",
                                              .shape = {},
                                              .dtype = DType::kF32,
                                              .initializer = Initializer::constant(lr_),
                                              .trainable = false});
}

void Optimizer::set_learning_rate(double value) {
  if (!std::isfinite(value)) {
    throw ValueError(
        fmt::format("`learning_rate` must be a finite float. Received: learning_rate={}", value));
  }
  lr_ = static_cast<float>(value);
  if (learning_rate_var_->is_lazy()) return;
  Array& rate = learning_rate_var_->mutable_value();
  const DeviceKind kind = kind_of(rate);
  for (Array::Shard& s : rate.local_shards()) {
    write_scalar(kind, {.shard = &s, .value = &lr_, .bytes = sizeof(lr_)});
  }
}

void Optimizer::restore_from_variables() {
  if (!built_ || iteration_var_->is_lazy()) {
    throw FailedPreconditionError(
        fmt::format("optimizer {} has no state to restore until it is built", quote(name_)));
  }
  const HostTensor it = iteration_var_->value().gather();
  const HostTensor lr = learning_rate_var_->value().gather();
  const int32_t iterations = *it.data_as<int32_t>();
  const float rate = *lr.data_as<float>();
  if (iterations < 0 || !std::isfinite(rate)) {
    throw ValueError(
        fmt::format("optimizer {}: restored state has iteration {} and learning_rate {}; expected "
                    "iteration >= 0 and a finite learning rate",
                    quote(name_), iterations, rate));
  }
  iterations_ = iterations;
  lr_ = rate;
}

std::vector<VariablePtr> Optimizer::variables() const {
  std::vector<VariablePtr> out{iteration_var_, learning_rate_var_};
  out.insert(out.end(), slot_order_.begin(), slot_order_.end());
  return out;
}

std::vector<VariablePtr> Optimizer::slots_of(const Variable& variable) const {
  for (const Tracked& t : tracked_) {
    if (t.variable.get() != &variable) continue;
    std::vector<VariablePtr> out;
    for (const std::string& n : slot_names()) out.push_back(t.slots.at(n));
    return out;
  }
  throw NotFoundError(
      fmt::format("{} is not tracked by optimizer {}: it was built with {} variable(s)",
                  variable.describe(), quote(name_), tracked_.size()));
}

void Optimizer::check_shard_slots_over(const DeviceMesh& mesh) const {
  if (shard_slots_over_)
    check_slot_axis(mesh, *shard_slots_over_, fmt::format("optimizer {}", quote(name_)));
}

TensorLayout Optimizer::slot_layout(const TensorLayout& layout, const Shape& shape) const {
  if (!shard_slots_over_) return layout;
  if (layout.device_mesh()) check_shard_slots_over(*layout.device_mesh());
  return zero1_slot_layout(layout, shape, *shard_slots_over_);
}

void Optimizer::build(std::span<const VariablePtr> variables) {
  if (built_) return;
  std::set<const Variable*> seen;
  for (const VariablePtr& v : variables) {
    if (!v) throw ValueError(fmt::format("optimizer {}: build got a null variable", quote(name_)));
    if (!seen.insert(v.get()).second) {
      throw ValueError(fmt::format("optimizer {}: {} is given twice", quote(name_), v->describe()));
    }
    if (v->is_lazy()) {
      throw ValueError(
          fmt::format("optimizer {}: {} has no value yet (lazy); build the model first",
                      quote(name_), v->describe()));
    }
    if (v->dtype() != DType::kF32 && v->dtype() != DType::kF64) {
      throw ValueError(fmt::format("optimizer {} updates F32 or F64 variables; {} is {}",
                                   quote(name_), v->describe(), dtype_name(v->dtype())));
    }
    check_shard_slots_over(v->value().mesh());
  }
  if (!variables.empty()) {
    const Array& first = variables.front()->value();
    const TensorLayout scalar({}, first.mesh());
    iteration_var_->materialize(scalar, first.runtime_ptr());
    learning_rate_var_->materialize(scalar, first.runtime_ptr());
  }
  for (const VariablePtr& v : variables) tracked_.push_back({v, {}});
  build_slots(variables);
  built_ = true;
}

void Optimizer::add_optimizer_variables(std::span<const VariablePtr> variables,
                                        const std::vector<std::string>& names,
                                        double initial_value) {
  for (const VariablePtr& ref : variables) {
    const TensorLayout layout = slot_layout(ref->value().layout(), ref->shape());
    for (const std::string& slot : names) add_slot(ref, slot, ref->shape(), layout, initial_value);
  }
}

void Optimizer::add_optimizer_variable(const VariablePtr& ref, const std::string& slot,
                                       const Shape& shape, const TensorLayout& layout) {
  add_slot(ref, slot, shape, layout, 0.0);
}

void Optimizer::add_slot(const VariablePtr& ref, const std::string& slot, const Shape& shape,
                         const TensorLayout& layout, double initial_value) {
  NameScope scope(name_, this, std::nullopt);
  Tracked* tracked = nullptr;
  for (Tracked& t : tracked_) {
    if (t.variable == ref) tracked = &t;
  }
  if (tracked == nullptr) {
    throw InternalError(
        fmt::format("optimizer {}: slot for untracked {}", quote(name_), ref->describe()));
  }
  std::string base = !ref->path().empty() ? ref->path() : ref->name();
  std::replace(base.begin(), base.end(), '/', '_');
  auto v = std::make_shared<Variable>(
      VariableSpec{.name = base + "_" + slot,
                   .shape = shape,
                   .dtype = ref->dtype(),
                   .initializer = initial_value == 0.0 ? Initializer::zeros()
                                                       : Initializer::constant(initial_value),
                   .trainable = false,
                   .layout = layout});
  v->materialize(layout, ref->value().runtime_ptr());
  tracked->slots[slot] = v;
  slot_order_.push_back(std::move(v));
}

void Optimizer::exclude_from_weight_decay(std::vector<std::string> var_names) {
  for (const std::string& pattern : var_names) {
    RE2 re(pattern, RE2::Quiet);
    if (!re.ok()) {
      throw ValueError(fmt::format("exclude_from_weight_decay: {} is not a valid regex: {}",
                                   quote(pattern), re.error()));
    }
  }
  exclude_names_ = std::move(var_names);
}

bool Optimizer::use_weight_decay(const Variable& v) const {
  if (!weight_decay_ || *weight_decay_ == 0.0) return false;
  for (const std::string& pattern : exclude_names_) {
    if (RE2::PartialMatch(v.name(), RE2(pattern))) return false;
  }
  return true;
}

std::vector<SlotFootprint> Optimizer::slot_footprints(const SlotFootprint& variable) const {
  const SlotFootprint slot{variable.shape, variable.dtype,
                           slot_layout(variable.layout, variable.shape)};
  return std::vector<SlotFootprint>(slot_names().size(), slot);
}

void Optimizer::update_variable(const VariableStep& /*step*/) const {
  throw InternalError(fmt::format(
      "optimizer {} updates shard by shard; update_variable is not its update", quote(name_)));
}

std::map<int64_t, int64_t> Optimizer::slot_bytes_per_device(
    std::span<const SlotFootprint> variables) const {
  std::map<int64_t, int64_t> out;
  for (const SlotFootprint& f : variables) {
    for (const SlotFootprint& slot : slot_footprints(f)) {
      ShardGeometry g(slot.layout, slot.shape, {}, "optimizer slot");
      const std::vector<int64_t>& ids = g.mesh().device_ids();
      for (int64_t p = 0; p < g.mesh().size(); ++p) {
        out[ids[static_cast<size_t>(p)]] +=
            g.box(p).num_elements() * static_cast<int64_t>(dtype_size(slot.dtype));
      }
    }
  }
  return out;
}

}  // namespace meshlayout
