// optimizer_registry.cc — the registry behind make_optimizer (keras.optimizers.get) and
// OptimizerArguments, an optimizer's own arguments by name. See optimizer.h.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <mutex>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/train/optimizer.h"

// Every registration's symbol (MESHLAYOUT_REGISTER_OPTIMIZER), from train/CMakeLists.txt's
// MESHLAYOUT_OPTIMIZERS: their addresses below make a program that links this file (any that
// can call make_optimizer) link every optimizer's object file, so each registers itself.
#define MESHLAYOUT_OPTIMIZER(key) extern "C" const bool meshlayout_optimizer_##key;
#include "registered_optimizers.inc"
#undef MESHLAYOUT_OPTIMIZER

namespace meshlayout {

extern const bool* const kRegisteredOptimizers[];
#define MESHLAYOUT_OPTIMIZER(key) &meshlayout_optimizer_##key,
const bool* const kRegisteredOptimizers[] = {
#include "registered_optimizers.inc"
};
#undef MESHLAYOUT_OPTIMIZER

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Function-local, so registrations made while other files' statics are initialised find it.
struct Registry {
  std::mutex mu;
  std::map<std::string, OptimizerRegistration, std::less<>> by_name;
};

Registry& registry() {
  static Registry r;
  return r;
}

const OptimizerRegistration& find_registration(std::string_view name) {
  Registry& r = registry();
  const std::string key = lower(name);
  {
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.by_name.find(key);
    if (it != r.by_name.end()) return it->second;
  }
  std::vector<std::string> quoted;
  for (const std::string& n : optimizer_names()) quoted.push_back(quote(n));
  throw ValueError(fmt::format("Could not interpret optimizer identifier: {}; valid names are {}",
                               quote(name), fmt::join(quoted, ", ")));
}

std::string argument_text(const std::string& name, const OptimizerArgument& value) {
  if (const bool* b = std::get_if<bool>(&value)) return fmt::format("{}={}", name, *b);
  return fmt::format("{}={}", name, std::get<double>(value));
}

}  // namespace

bool register_optimizer(OptimizerRegistration registration) {
  if (registration.name.empty() || registration.name != lower(registration.name) ||
      registration.make == nullptr) {
    throw InternalError(
        fmt::format("register_optimizer: {} must be a non-empty lower-case name with a factory",
                    quote(registration.name)));
  }
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  const std::string name = registration.name;
  if (!r.by_name.emplace(name, std::move(registration)).second) {
    throw InternalError(fmt::format("register_optimizer: {} is registered twice", quote(name)));
  }
  return true;
}

std::vector<std::string> optimizer_names() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> out;
  for (const auto& [name, reg] : r.by_name) out.push_back(name);
  return out;
}

std::unique_ptr<Optimizer> make_optimizer(std::string_view name, const OptimizerOptions& options) {
  return find_registration(name).make(options);
}

std::string stable_optimizer_name(std::string_view name) {
  return find_registration(name).stable_name;
}

OptimizerArguments::OptimizerArguments(const OptimizerOptions& o, std::string_view class_name)
    : class_name_(class_name), left_(o.arguments) {
  auto typed = [&](const char* name, const auto& field) {
    if (!field) return;
    if (left_.count(name) != 0) {
      throw ValueError(fmt::format(
          "{}: `{}` is given twice, as a field ({}) and in arguments ({}); give it once",
          class_name_, name, argument_text(name, OptimizerArgument(*field)),
          argument_text(name, left_.find(name)->second)));
    }
    left_.emplace(name, OptimizerArgument(*field));
  };
  typed("momentum", o.momentum);
  typed("nesterov", o.nesterov);
  typed("beta_1", o.beta_1);
  typed("beta_2", o.beta_2);
  typed("epsilon", o.epsilon);
  typed("amsgrad", o.amsgrad);
}

double OptimizerArguments::number(std::string_view name, double default_value) {
  auto it = left_.find(name);
  if (it == left_.end()) return default_value;
  if (!std::holds_alternative<double>(it->second)) {
    throw ValueError(fmt::format("{}: `{}` must be a float. Received: {}", class_name_, name,
                                 argument_text(it->first, it->second)));
  }
  const double value = std::get<double>(it->second);
  left_.erase(it);
  return value;
}

bool OptimizerArguments::flag(std::string_view name, bool default_value) {
  auto it = left_.find(name);
  if (it == left_.end()) return default_value;
  if (!std::holds_alternative<bool>(it->second)) {
    throw ValueError(fmt::format("{}: `{}` must be a bool. Received: {}", class_name_, name,
                                 argument_text(it->first, it->second)));
  }
  const bool value = std::get<bool>(it->second);
  left_.erase(it);
  return value;
}

void OptimizerArguments::finish() const {
  if (left_.empty()) return;
  std::vector<std::string> bad;
  for (const auto& [name, value] : left_) bad.push_back(argument_text(name, value));
  throw ValueError(
      fmt::format("Argument(s) not recognized by {}: {}", class_name_, fmt::join(bad, ", ")));
}

}  // namespace meshlayout
