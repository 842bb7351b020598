#include "meshlayout/nn/variable.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/kernels/memory.h"
#include "meshlayout/nn/floatx.h"
#include "meshlayout/nn/name_scope.h"

namespace meshlayout {

Variable::Variable(VariableSpec spec) : spec_(std::move(spec)) {
  check_path_component(spec_.name);
  if (!spec_.dtype) spec_.dtype = floatx();
  const std::string parent = current_path();
  path_ = parent.empty() ? spec_.name : parent + "/" + spec_.name;
  for (int64_t e : spec_.shape) {
    if (e < 0) {
      throw ValueError(fmt::format("variable {} has shape {} with a negative extent",
                                   quote(spec_.name), shape_to_string(spec_.shape)));
    }
  }
  if (!spec_.segments.empty()) {
    int64_t total = 0;
    bool negative = false;
    for (const InitializerSegment& s : spec_.segments) {
      negative |= s.length < 0;
      total += s.length;
    }
    if (negative || spec_.shape.empty() || total != spec_.shape.back()) {
      throw ValueError(
          fmt::format("variable {} of shape {}: its initializer segments add up to "
                      "{}, not to the last extent",
                      quote(spec_.name), shape_to_string(spec_.shape), total));
    }
  }
}

void Variable::set_paths(std::string object_path, std::string path) {
  object_path_ = std::move(object_path);
  path_ = std::move(path);
}

std::optional<TensorLayout> Variable::layout() const {
  if (!value_) return std::nullopt;
  return value_->layout();
}

std::string Variable::describe() const {
  const std::string& id = !object_path_.empty() ? object_path_
                          : !path_.empty()      ? path_
                                                : spec_.name;
  return fmt::format("variable {}", quote(id));
}

const Array& Variable::value() const {
  if (!value_) {
    throw FailedPreconditionError(fmt::format(
        "{} with shape {} is lazily initialised and has no value yet: it is materialised once "
        "its path is final (functional/sequential models: when the model is built; subclassed "
        "models: at the first call)",
        describe(), shape_to_string(spec_.shape)));
  }
  return *value_;
}

void Variable::materialize(const TensorLayout& layout, std::shared_ptr<Runtime> runtime,
                           bool strict) {
  if (value_) {
    throw FailedPreconditionError(fmt::format("{} is materialised already with {}", describe(),
                                              value_->layout().to_string()));
  }
  // Checks rank, mesh and (strict) divisibility before any allocation.
  ShardGeometry check(layout, spec_.shape, GeometryOptions{.strict = strict}, describe());
  Array a = Array::allocate(layout, spec_.shape, *spec_.dtype, std::move(runtime),
                            GeometryOptions{.strict = strict});
  const uint64_t key = variable_key(!path_.empty()         ? path_
                                    : object_path_.empty() ? spec_.name
                                                           : object_path_);
  // Fill each distinct box once in this process; replicas of it copy the bytes (far cheaper
  // than drawing them again). The values are the same either way: counter-based init.
  std::vector<Array::Shard>& shards = a.local_shards();
  std::vector<size_t> first(shards.size());
  std::vector<size_t> leaders;
  for (size_t i = 0; i < shards.size(); ++i) {
    first[i] = i;
    for (size_t l : leaders) {
      if (shards[l].box == shards[i].box) first[i] = l;
    }
    if (first[i] == i) leaders.push_back(i);
  }
  const DeviceKind kind = kind_of(a);
  std::vector<InitializerRun> runs;
  for (const InitializerSegment& segment : spec_.segments)
    runs.push_back({segment.length, &segment.initializer});
  a.runtime().pool().parallel_for(leaders.size(), [&](size_t k) {
    fill_initializer(kind, {.shard = &shards[leaders[k]],
                            .initializer = &spec_.initializer,
                            .runs = runs,
                            .shape = &spec_.shape,
                            .dtype = *spec_.dtype,
                            .key = key});
  });
  const size_t elem = dtype_size(*spec_.dtype);
  a.runtime().pool().parallel_for(shards.size(), [&](size_t i) {
    if (first[i] != i) {
      copy_runs(kind, {.dst = &shards[i],
                       .src = &shards[first[i]],
                       .run_bytes = static_cast<size_t>(shards[i].box.num_elements()) * elem});
    }
  });
  value_.emplace(std::move(a));
}

void Variable::assign(const HostTensor& value) {
  const Array& current = this->value();
  if (value.shape() != spec_.shape || value.dtype() != *spec_.dtype) {
    throw ValueError(fmt::format("cannot assign a {} tensor of shape {} to {} ({} {})",
                                 dtype_name(value.dtype()), shape_to_string(value.shape()),
                                 describe(), dtype_name(*spec_.dtype),
                                 shape_to_string(spec_.shape)));
  }
  Array next = distribute_tensor(value, current.layout(), {.runtime = current.runtime_ptr()});
  value_.emplace(std::move(next));
}

void Variable::assign(const Array& value) {
  (void)this->value();  // refuses a lazy variable
  reshard_into(value, *value_);
}

}  // namespace meshlayout

namespace meshlayout {

double Variable::regularization_loss() const {
  if (!spec_.regularizer) return 0.0;
  return (*spec_.regularizer)(value());
}

}  // namespace meshlayout
