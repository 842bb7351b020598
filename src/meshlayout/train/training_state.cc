// training_state.cc — see training_state.h.
#include "meshlayout/train/training_state.h"

#include <fmt/format.h>

#include <algorithm>
#include <exception>
#include <filesystem>
#include <set>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/io/array_io.h"
#include "meshlayout/runtime/runtime.h"

namespace meshlayout {
namespace {

namespace fs = std::filesystem;

// Every process throws `failure` (the first one's) or none does.
void agree(const std::exception_ptr& failure) {
  const std::shared_ptr<Runtime> rt = default_runtime();
  if (rt->num_processes() > 1) {
    agree_on_failure(rt->comm(), failure);
  } else if (failure) {
    std::rethrow_exception(failure);
  }
}

template <typename F>
void agreed(F&& work) {
  std::exception_ptr failure;
  try {
    work();
  } catch (...) {
    failure = std::current_exception();
  }
  agree(failure);
}

constexpr const char* kStepPrefix = "step-";

// The step of a state directory's name ("step-00000100" → 100), or -1.
int64_t step_of(const std::string& name) {
  if (name.rfind(kStepPrefix, 0) != 0 || name.size() == std::char_traits<char>::length(kStepPrefix))
    return -1;
  int64_t step = 0;
  for (size_t i = std::char_traits<char>::length(kStepPrefix); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9' || step > (INT64_MAX - 9) / 10) return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

// The complete state directories under `root`, by step, oldest first.
std::vector<std::pair<int64_t, std::string>> complete_states(const std::string& root) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(root, ec)) {
    const int64_t step = step_of(e.path().filename().string());
    if (step < 0 || !e.is_directory(ec)) continue;
    const nlohmann::json marker = read_save_marker(e.path().string());
    if (marker.is_null() || fs::exists(e.path() / kSaveLockFile, ec)) continue;
    out.emplace_back(step, e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

void write_training_state(const std::string& dir, SaveDirectory* claim, const ModelFiles& model,
                          const Optimizer& optimizer, const TrainingPosition& position,
                          const nlohmann::json& extra) {
  if (model.write) model.write(dir);
  std::vector<NamedArray> state;
  for (const VariablePtr& v : optimizer.variables()) state.push_back({v->path(), &v->value()});
  save_arrays((fs::path(dir) / kOptimizerStateFile).string(), state);
  if (claim == nullptr) return;
  std::vector<std::string> files = model.names;
  files.emplace_back(kOptimizerStateFile);
  nlohmann::json marker = {{"format", kTrainingStateFormat},
                           {"optimizer", optimizer.name()},
                           {"iterations", position.iterations},
                           {"next_batch", position.next_batch},
                           {"files", files}};
  for (const auto& [key, value] : extra.items()) marker[key] = value;
  claim->finish(marker);
}

void save_training_state(const std::string& dir, const ModelFiles& model,
                         const Optimizer& optimizer, const TrainingPosition& position,
                         const nlohmann::json& extra) {
  std::optional<SaveDirectory> claim;
  const bool leader = default_runtime()->process_id() == 0;
  agreed([&] {
    if (leader) claim = SaveDirectory::claim(dir, "the training state directory");
  });
  std::exception_ptr failure;
  try {
    write_training_state(dir, claim ? &*claim : nullptr, model, optimizer, position, extra);
  } catch (...) {
    failure = std::current_exception();
    if (claim) claim->abandon();
  }
  agree(failure);
}

std::optional<TrainingPosition> resume_training_state(const std::string& dir, Optimizer& optimizer,
                                                      const std::vector<VariablePtr>& variables) {
  // An interrupted save is not resumed from: its files may be from different steps.
  check_save_complete(dir, std::vector<std::string>{kOptimizerStateFile});
  const fs::path path = fs::path(dir) / kOptimizerStateFile;
  if (!fs::exists(path)) return std::nullopt;
  const Checkpoint state = Checkpoint::open(path.string());
  optimizer.build(variables);
  std::vector<LoadTarget> targets;
  std::set<std::string> wanted;
  for (const VariablePtr& v : optimizer.variables()) {
    targets.push_back({v->path(), &v->mutable_value()});
    wanted.insert(v->path());
  }
  std::set<std::string> present;
  for (const auto& [file, info] : state.tensors()) present.insert(info->name);
  if (present != wanted) {
    std::string missing, unexpected;
    for (const std::string& n : wanted) {
      if (!present.count(n) && missing.empty()) missing = n;
    }
    for (const std::string& n : present) {
      if (!wanted.count(n) && unexpected.empty()) unexpected = n;
    }
    throw ValueError(
        fmt::format("{} holds the state of another optimizer than --optimizer {} ({} tensors, {} "
                    "expected; e.g. {} {}): "
                    "pass the optimizer it was saved with, or train from a directory without {}",
                    quote(path.string()), quote(optimizer.name()), present.size(), wanted.size(),
                    missing.empty() ? "unexpected" : "missing",
                    quote(missing.empty() ? unexpected : missing), kOptimizerStateFile));
  }
  load_arrays(state, targets);
  optimizer.restore_from_variables();
  TrainingPosition position{.iterations = optimizer.iterations(),
                            .next_batch = optimizer.iterations()};
  const nlohmann::json marker = read_save_marker(dir);
  if (marker.is_object() && marker.contains("next_batch")) {
    const nlohmann::json& next = marker["next_batch"];
    if (!next.is_number_integer() || next.get<int64_t>() < 0) {
      throw DataLossError(fmt::format("{}: next_batch must be a non-negative integer, got {}",
                                      quote((fs::path(dir) / kSaveCompleteFile).string()),
                                      next.dump()));
    }
    position.next_batch = next.get<int64_t>();
  }
  return position;
}

TrainingCheckpoint::TrainingCheckpoint(std::string root, ModelFiles model,
                                       TrainingCheckpointOptions options)
    : root_(std::move(root)), model_(std::move(model)), options_(options) {
  if (options_.every_steps < 1 || options_.keep_last < 0) {
    throw ValueError(fmt::format(
        "TrainingCheckpoint: every_steps must be >= 1 and keep_last >= 0 (0 keeps all), got "
        "every_steps {} and keep_last {}",
        options_.every_steps, options_.keep_last));
  }
  std::error_code ec;
  if (fs::exists(root_, ec) && !fs::is_directory(root_, ec)) {
    throw ValueError(
        fmt::format("TrainingCheckpoint: {} is not a directory; expected a directory for the state "
                    "directories step-<iterations>",
                    quote(root_)));
  }
}

void TrainingCheckpoint::on_train_batch_end(Trainer& trainer, const BatchLogs& /*logs*/) {
  const Optimizer& optimizer = trainer.optimizer();
  const int64_t iterations = optimizer.iterations();
  if (iterations % options_.every_steps != 0) return;
  const bool leader = default_runtime()->process_id() == 0;
  agreed([&] {
    if (leader) fs::create_directories(root_);
  });
  const std::string dir =
      (fs::path(root_) / fmt::format("{}{:08d}", kStepPrefix, iterations)).string();
  save_training_state(dir, model_, optimizer,
                      {.iterations = iterations, .next_batch = trainer.next_batch()});
  saved_.push_back(dir);
  if (options_.keep_last == 0) return;
  agreed([&] {
    if (!leader) return;
    std::vector<std::pair<int64_t, std::string>> states = complete_states(root_);
    const size_t keep = static_cast<size_t>(options_.keep_last);
    for (size_t i = 0; i + keep < states.size(); ++i) {
      fs::remove_all(states[i].second);
      saved_.erase(std::remove(saved_.begin(), saved_.end(), states[i].second), saved_.end());
    }
  });
  if (!leader) {  // the other processes mirror the list: the newest keep_last
    while (saved_.size() > static_cast<size_t>(options_.keep_last)) saved_.erase(saved_.begin());
  }
}

std::string TrainingCheckpoint::latest(const std::string& root) {
  const std::vector<std::pair<int64_t, std::string>> states = complete_states(root);
  return states.empty() ? std::string() : states.back().second;
}

}  // namespace meshlayout
