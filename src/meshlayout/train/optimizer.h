// optimizer.h — the base of the Keras 3 optimizers on distributed variables: Optimizer,
// OptimizerOptions (make_optimizer's arguments), OptimizerArguments (an optimizer's own
// arguments, by name) and the registry behind make_optimizer(name, options)
// (keras.optimizers.get). The optimizers are one per file, each with its own options struct and
// argument check, registered by its Keras name from its own .cc file: sgd.h, adam.h, adamw.h,
// rmsprop.h, adagrad.h, lion.h, adafactor.h (optimizers.h includes them all).
//
// Exactly as Keras 3 (keras/src/optimizers/{base_optimizer,sgd,adam,adamw}.py):
//  * variables `<name>/iteration` (I32, non-trainable) and `<name>/learning_rate` (F32) made
//    at construction under the optimizer's name scope; without a name, Keras >= 3.15's
//    auto_name of the class (keras PR #22972): "sgd", "adam", "adam_w", numbered like layers by
//    a process-wide counter per name shared with them ("adam", "adam_1", …; reset by
//    clear_session(); a constructor that throws after the arguments are recognised still takes
//    its number, as in Keras). Keras <= 3.14 used the fixed "SGD", "adam", "adamw": state saved
//    to a file under names that must not depend on how many optimizers the process made (the
//    CLI's train command) passes stable_optimizer_name() explicitly;
//  * slots from add_variable_from_reference: `<name>/<ref path, '/'→'_'>_<slot>`, created per
//    add_optimizer_variables call, interleaved per variable within a call: Adam
//    [m0, v0, m1, v1, …] then (amsgrad) [vhat0, vhat1, …]; SGD `momentum` only if momentum != 0
//    (each optimizer's header lists its slots);
//  * every slot is born in its variable's layout (same mesh, same boxes, zeros unless the
//    optimizer says otherwise; ZeRO-1 below), never matched against a LayoutMap (Keras >= 3.10:
//    layout=ref._layout) — Adafactor's factored slots in that layout less the reduced dimension;
//  * a step: clip gradients → decoupled weight decay θ ← θ − θ·wd·lr (pre-update θ) →
//    update_step → iteration += 1. The update runs shard by shard on the runtime's thread pool
//    (one KernelOp call per shard, kernels/optimizer.h),
//    with no communication (clipnorm/global_clipnorm sum squares across processes), except for
//    an optimizer that updates whole variables (updates_whole_variables: Adafactor's means
//    and RMS), called once per variable, collectively.
// ZeRO-1 (opt-in, OptimizerOptions::shard_slots_over = a mesh axis, typically the data axis
// "batch"): each slot is born in zero1_slot_layout(variable layout, shape, axis) — the variable's
// layout with the axis added (as the minor axis) to one dimension — so each device holds
// 1/axis_size of the slot of a variable replicated over that axis. A step then slices the
// gradient and the variable to the slot layout (distribute_tensor; a local copy when the
// boxes nest), updates that slice and its slots with the same per-element arithmetic, and
// all-gathers the updated slice back into the variable's layout (reshard_into). The results
// are bit-identical to the unsharded optimizer's; slots keep their Keras paths, so saved
// state loads into either mode (loading reshards). Clipping norms are taken over the whole
// gradients before slicing, as without ZeRO.
// Decision: a non-trainable variable passed to apply() is a ValueError (Keras' trainer never
// passes one; an update to a frozen weight is a bug). A null gradient is skipped, as Keras'
// _filter_empty_gradients; all null is a ValueError.
//
// Example:
//   auto opt = make_optimizer("adam", {.learning_rate = 1e-3});
//   auto rms = make_optimizer("RMSprop", {.momentum = 0.9, .arguments = {{"centered", true}}});
//   const Array* grads[] = {&g_kernel, &g_bias};       // same shapes and layouts as the weights
//   VariablePtr vars[] = {dense->kernel(), dense->bias()};
//   opt->apply(grads, vars);      // builds on the first call: adam/dense_kernel_momentum, …
//   opt->iterations() == 1;
//   make_optimizer("adam")->name() == "adam_1";                          // the second one
//   make_optimizer("adamw", {.name = stable_optimizer_name("adamw")})->name() == "adamw";
//   auto zero = make_optimizer("adam", {.shard_slots_over = "batch"});   // ZeRO-1 over "batch"
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "meshlayout/array/array.h"
#include "meshlayout/kernels/optimizer.h"
#include "meshlayout/nn/variable.h"

namespace meshlayout {

/// The value of a keyword argument in OptimizerOptions::arguments: a float or a bool.
using OptimizerArgument = std::variant<double, bool>;

/// Arguments of the Keras optimizers: the base optimizer's, then keyword arguments for the
/// optimizer's own options struct (each optimizer's header). Unset optional ones take the
/// optimizer's default; an argument the optimizer does not have (beta_1 on SGD) is a ValueError.
/// The first optimizers' arguments are typed fields (momentum … amsgrad); every other one
/// (rho, centered, initial_accumulator_value, …) goes in `arguments` by its Keras name.
struct OptimizerOptions {
  std::string name;                     // auto_name of the class ("sgd", "adam_1", …) when empty
  std::optional<double> learning_rate;  // SGD 0.01, Adam/AdamW 0.001
  std::optional<double> weight_decay;   // decoupled; AdamW 0.004, others none
  std::optional<double> clipnorm, clipvalue, global_clipnorm;  // at most one
  // SGD
  std::optional<double> momentum;  // 0.0, in [0, 1]
  std::optional<bool> nesterov;    // false
  // Adam, AdamW
  std::optional<double> beta_1, beta_2, epsilon;  // 0.9, 0.999, 1e-7
  std::optional<bool> amsgrad;                    // false
  // ZeRO-1: shard every slot further over this mesh axis (zero1_slot_layout). Not a Keras
  // argument; unset: slots in their variable's layout. ValueError at build (or
  // slot_bytes_per_device) naming it and the mesh's axes when the mesh has no such axis.
  std::optional<std::string> shard_slots_over;
  // Any other keyword argument of the optimizer by its Keras name: {{"rho", 0.95}, {"centered",
  // true}}.
  std::map<std::string, OptimizerArgument, std::less<>> arguments;
};

/// The layout of a ZeRO-1 slot of a variable of `shape` in `layout`, sharded further over mesh
/// axis `axis`. Rule: unchanged if the layout already uses `axis` or the variable is a scalar;
/// otherwise `axis` is appended (as the minor axis, so each slot box lies inside its device's
/// variable box when the split is even) to the first dimension whose size the dimension's
/// total shard count times axis_size(axis) divides; else — every split being uneven, per
/// DESIGN.md's shard geometry (blocks of ceil(n/k), the last short or empty) — to the first
/// unsharded dimension (its slot boxes still nest), else to dimension 0 (boxes may not nest:
/// the step's slicing then moves bytes between devices). ValueError naming `axis` and listing the
/// mesh's axes if the layout's mesh lacks it.
///   zero1_slot_layout(TensorLayout({None, "model"}, mesh), {8, 12}, "batch") == {"batch", "model"}
///   zero1_slot_layout(TensorLayout({None, "model"}, mesh), {3, 16}, "batch") == {None,
///   ("model","batch")} zero1_slot_layout(TensorLayout({None, "model"}, mesh), {3, 12}, "batch") ==
///   {"batch", "model"}  // uneven
TensorLayout zero1_slot_layout(const TensorLayout& layout, const Shape& shape,
                               const std::string& axis);

/// Shape, dtype and layout of a model variable: enough to size its slots without allocating.
struct SlotFootprint {
  Shape shape;
  DType dtype = DType::kF32;
  TensorLayout layout;
};

/// The arguments of a whole-variable update (Optimizer::update_variable). Collective: every
/// process calls it for the same variables in the same order.
struct VariableStep {
  Array* value;                      // the variable's value, weight decay already applied
  const Array* gradient;             // cast to the variable's dtype and clipped; its layout
  std::span<Variable* const> slots;  // this variable's slots, in slot_names() order
  float lr;                          // the learning rate as stored
  int64_t iterations;                // before this step
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  const std::string& name() const { return name_; }
  /// The learning rate as stored (F32, as Keras' variable).
  double learning_rate() const { return static_cast<double>(lr_); }
  /// optimizer.learning_rate = value (also written into the variable once it has a value).
  void set_learning_rate(double value);
  /// Steps applied so far (optimizer.iterations).
  int64_t iterations() const { return iterations_; }
  std::optional<double> weight_decay() const { return weight_decay_; }
  bool built() const { return built_; }
  /// The ZeRO-1 axis (OptimizerOptions::shard_slots_over), if any.
  const std::optional<std::string>& shard_slots_over() const { return shard_slots_over_; }
  /// The layout a slot of a variable of `shape` in `layout` is born in: `layout` itself, or
  /// zero1_slot_layout(…) under ZeRO-1.
  TensorLayout slot_layout(const TensorLayout& layout, const Shape& shape) const;
  /// Under ZeRO-1: ValueError naming the axis and listing the mesh's axes unless `mesh` has it
  /// (build and slot_bytes_per_device check it too). Nothing otherwise.
  void check_shard_slots_over(const DeviceMesh& mesh) const;

  /// Every optimizer variable in Keras' order: iteration, learning_rate, then the slots.
  std::vector<VariablePtr> variables() const;
  /// The slots of `variable` in slot_names() order; NotFoundError if it is not tracked.
  std::vector<VariablePtr> slots_of(const Variable& variable) const;
  /// Slot names per variable, in the order update kernels see them ("momentum", "velocity").
  virtual std::vector<std::string> slot_names() const = 0;

  /// Creates the slots of `variables` (each in slot_layout(variable's layout)) and gives iteration
  /// and learning_rate their values (replicated on the first variable's mesh). Once only: later
  /// calls do nothing, as Keras. ValueError for a lazy variable, a dtype other than F32/F64, or
  /// a variable given twice.
  void build(std::span<const VariablePtr> variables);

  /// One step: builds on the first call, then updates each variable from its gradient.
  /// \error ValueError naming the variable if the counts differ, a gradient's shape, dtype
  ///   (F32/F64) or layout differs from its variable's, or the variable is not trainable;
  ///   NotFoundError for a variable the optimizer was not built with. All checks are made on
  ///   replicated metadata before anything is written.
  void apply(std::span<const Array* const> gradients, std::span<const VariablePtr> variables);
  /// apply() on (gradient, variable) pairs (optimizer.apply_gradients).
  void apply_gradients(std::span<const std::pair<const Array*, VariablePtr>> grads_and_vars);

  /// After variables() were overwritten (a checkpoint loaded into them): takes the step count
  /// and the learning rate back from the `iteration` and `learning_rate` variables, so the
  /// next step continues the saved trajectory. FailedPreconditionError before build();
  /// ValueError for a negative iteration or a non-finite learning rate in the variables.
  void restore_from_variables();

  /// Keras exclude_from_weight_decay(var_names=…): a variable whose name (the leaf, e.g.
  /// "bias") matches one of these regexes anywhere (re.search) gets no weight decay.
  void exclude_from_weight_decay(std::vector<std::string> var_names);

  /// Bytes of the slots on each device (global device id → bytes) for variables of these
  /// footprints, without allocating: each slot's shard is its box under slot_layout (its
  /// variable's shard, or 1/axis_size of it under ZeRO-1).
  std::map<int64_t, int64_t> slot_bytes_per_device(std::span<const SlotFootprint> variables) const;

  /// The update of one shard on a device of `kind`: the optimizer's KernelOp
  /// (kernels/optimizer.h), which prepares the step (cast, clipping, weight decay, as `step`
  /// says) and applies the optimizer's rule.
  virtual void update_shard(DeviceKind kind, const OptimizerShardStep& step) const = 0;

  /// True for an optimizer whose update needs reductions over a whole variable (Adafactor's
  /// row and column means and RMS): apply() then calls update_variable once per variable, after
  /// clipping and weight decay, instead of update_shard.
  virtual bool updates_whole_variables() const { return false; }
  /// The update of one whole variable (see updates_whole_variables). The base's throws
  /// InternalError.
  virtual void update_variable(const VariableStep& step) const;
  /// The shapes, dtypes and layouts of the slots of a variable of `variable`'s footprint, in
  /// slot_names() order: by default its shape and dtype in slot_layout(its layout). What
  /// slot_bytes_per_device counts.
  virtual std::vector<SlotFootprint> slot_footprints(const SlotFootprint& variable) const;

 protected:
  /// `class_name` is the Keras class ("Adam"): without options.name the optimizer is named
  /// auto_name(class_name) (layer.h); `default_lr` is the learning rate's default.
  Optimizer(std::string_view class_name, double default_lr, const OptimizerOptions& options);
  /// Keras build(): calls add_optimizer_variables, in Keras' order.
  virtual void build_slots(std::span<const VariablePtr> variables) = 0;
  /// Keras add_optimizer_variables(variables, names): for each variable, one slot per name
  /// (interleaved), under the optimizer's name scope, born in slot_layout(variable's layout),
  /// holding `initial_value` (Keras' initializer=Constant; zeros by default).
  void add_optimizer_variables(std::span<const VariablePtr> variables,
                               const std::vector<std::string>& names, double initial_value = 0.0);
  /// One slot of `ref` named as add_optimizer_variables names it, of `shape` in `layout`
  /// (zeros, ref's dtype): for slots not shaped as their variable (Adafactor's factored ones).
  void add_optimizer_variable(const VariablePtr& ref, const std::string& slot, const Shape& shape,
                              const TensorLayout& layout);

 private:
  struct Tracked {
    VariablePtr variable;
    std::map<std::string, VariablePtr> slots;
  };
  bool use_weight_decay(const Variable& v) const;
  void add_slot(const VariablePtr& ref, const std::string& slot, const Shape& shape,
                const TensorLayout& layout, double initial_value);

  std::string name_;
  float lr_;
  int64_t iterations_ = 0;
  std::optional<double> weight_decay_, clipnorm_, clipvalue_, global_clipnorm_;
  std::optional<std::string> shard_slots_over_;
  std::vector<std::string> exclude_names_;
  VariablePtr iteration_var_, learning_rate_var_;
  std::vector<VariablePtr> slot_order_;  // creation order
  std::vector<Tracked> tracked_;
  bool built_ = false;
};

/// The keyword arguments of `options` beyond the base optimizer's, for an optimizer's own
/// options struct to take by name: the typed fields that are set (momentum, nesterov, beta_1,
/// beta_2, epsilon, amsgrad) and every entry of `arguments`. finish() refuses what was not
/// taken, as Keras' "Argument(s) not recognized" (before the optimizer takes a number).
///   OptimizerArguments a(options, "RMSprop");
///   RMSpropOptions r{.rho = a.number("rho", 0.9), .centered = a.flag("centered", false)};
///   a.finish();   // ValueError "Argument(s) not recognized by RMSprop: beta_1=0.5"
class OptimizerArguments {
 public:
  /// ValueError naming the argument if a typed field and `arguments` both give it.
  OptimizerArguments(const OptimizerOptions& options, std::string_view class_name);
  /// The number `name`, else `default_value`. ValueError if it was given as a bool.
  double number(std::string_view name, double default_value);
  /// The bool `name`, else `default_value`. ValueError if it was given as a number.
  bool flag(std::string_view name, bool default_value);
  /// ValueError listing every argument not taken ("name=value").
  void finish() const;

 private:
  std::string class_name_;
  std::map<std::string, OptimizerArgument, std::less<>> left_;
};

/// Builds the optimizer a registration names from make_optimizer's options.
using OptimizerFactory = std::unique_ptr<Optimizer> (*)(const OptimizerOptions& options);

/// One entry of the registry make_optimizer looks names up in.
struct OptimizerRegistration {
  std::string name;         // the keras.optimizers.get name, lower case ("rmsprop")
  std::string stable_name;  // Keras 3.0–3.14's fixed default name ("SGD", "rmsprop")
  OptimizerFactory make;
};

/// Adds `registration` to the registry (from an optimizer's own .cc file, through
/// MESHLAYOUT_REGISTER_OPTIMIZER); returns true. InternalError for a name registered twice or
/// not lower case.
bool register_optimizer(OptimizerRegistration registration);

/// The registration, in the optimizer's .cc file, of class `Class` under keras.optimizers.get's
/// name `key` (an identifier, lower case) with Keras 3.0–3.14's default name `stable`:
///   MESHLAYOUT_REGISTER_OPTIMIZER(rmsprop, RMSprop, "rmsprop");
/// It defines the symbol meshlayout_optimizer_<key>; `key` must also be listed in
/// train/CMakeLists.txt's MESHLAYOUT_OPTIMIZERS, so the registry refers to the symbol and every
/// program that can call make_optimizer links the file.
#define MESHLAYOUT_REGISTER_OPTIMIZER(key, Class, stable)                                        \
  extern "C" {                                                                                   \
  extern const bool meshlayout_optimizer_##key;                                                  \
  const bool meshlayout_optimizer_##key = ::meshlayout::register_optimizer(                      \
      {#key, stable,                                                                             \
       [](const ::meshlayout::OptimizerOptions& o) -> std::unique_ptr<::meshlayout::Optimizer> { \
         return std::make_unique<Class>(o);                                                      \
       }});                                                                                      \
  }

/// The names make_optimizer accepts, sorted: "adafactor", "adagrad", "adam", "adamw", "lion",
/// "rmsprop", "sgd".
std::vector<std::string> optimizer_names();

/// keras.optimizers.get(name) with arguments (case-insensitive; an automatic name as the
/// constructors, Keras >= 3.15), found in the registry. ValueError listing the valid names
/// otherwise.
std::unique_ptr<Optimizer> make_optimizer(std::string_view name,
                                          const OptimizerOptions& options = {});

/// The fixed name Keras 3.0–3.14 gave the optimizer `name` of make_optimizer: "SGD", "adam",
/// "adamw", "rmsprop", … For state saved under the optimizer's paths (`adamw/iteration`, …)
/// that a new process must find again whatever it constructed before: pass it as
/// OptimizerOptions::name. ValueError as make_optimizer for an unknown name.
std::string stable_optimizer_name(std::string_view name);

}  // namespace meshlayout
