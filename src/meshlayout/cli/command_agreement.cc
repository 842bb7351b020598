// command_agreement.cc — see command_agreement.h.
#include "meshlayout/cli/command_agreement.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <mutex>

#include "meshlayout/core/memory_budget.h"
#include "meshlayout/core/shape.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/io/safetensors_file.h"
#include "meshlayout/runtime/operation_agreement.h"
#include "meshlayout/runtime/runtime.h"

namespace meshlayout::cli {
namespace {

std::mutex g_mutex;
std::vector<std::string>& recorded() {
  static std::vector<std::string> options;
  return options;
}

// The header as parsed, in a canonical text: what the file says its tensors are.
std::string canonical_header(const SafetensorsHeader& h) {
  std::string text;
  for (const TensorInfo& t : h.tensors) {
    text += fmt::format("{}|{}|{}|{}|{}\n", t.name, t.dtype_name, shape_to_string(t.shape), t.begin,
                        t.end);
  }
  for (const auto& [key, value] : h.metadata) text += fmt::format("{}={}\n", key, value);
  return text;
}

}  // namespace

std::vector<std::string> describe_parsed_options(const CLI::App& command) {
  std::vector<std::string> fields;
  for (const CLI::Option* opt : command.get_options()) {
    if (opt == command.get_help_ptr() || opt == command.get_help_all_ptr()) continue;
    const std::string value = opt->count() == 0 ? "(unset)" : join(opt->results(), ",");
    fields.push_back(fmt::format("{}={}", opt->get_name(), value));
  }
  // Arguments no option took: CLI11 refuses them only after this point, so a process given one
  // must disagree here rather than fail alone after the others went on.
  const std::vector<std::string> extras = command.remaining();
  if (!extras.empty()) fields.push_back(fmt::format("unexpected arguments={}", join(extras, " ")));
  return fields;
}

void record_parsed_options(const CLI::App& command) {
  std::vector<std::string> fields = describe_parsed_options(command);
  std::lock_guard lock(g_mutex);
  recorded() = std::move(fields);
}

void clear_parsed_options() {
  std::lock_guard lock(g_mutex);
  recorded().clear();
}

std::vector<std::string> recorded_parsed_options() {
  std::lock_guard lock(g_mutex);
  return recorded();
}

void InputDigest::add_text(std::string_view label, std::string_view bytes) {
  fields_.push_back(
      fmt::format("{}=fnv1a {:016x}, {} bytes", label, fnv1a_64(bytes), bytes.size()));
}

void InputDigest::add_checkpoint(std::string_view label, const Checkpoint& checkpoint) {
  for (const std::shared_ptr<SafetensorsFile>& file : checkpoint.files()) {
    struct stat st {};
    const int64_t size =
        ::stat(file->path().c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : -1;
    const std::string header = canonical_header(file->header());
    fields_.push_back(fmt::format("{} {}=header fnv1a {:016x} ({} tensors), file {} bytes", label,
                                  quote(file->path()), fnv1a_64(header),
                                  file->header().tensors.size(), size));
  }
}

void InputDigest::add_absent(std::string_view label) {
  fields_.push_back(fmt::format("{}=absent", label));
}

void agree_on_command(Runtime& runtime, std::string_view what, std::vector<std::string> fields,
                      const InputDigest& inputs, const std::exception_ptr& local_error) {
  if (runtime.num_processes() == 1) {
    if (local_error) std::rethrow_exception(local_error);
    return;
  }
  // The environment that sizes what a process may hold: a process with a smaller
  // MESHLAYOUT_DEVICE_MEMORY fails an allocation the others make, and they wait for it.
  std::string budget;
  try {
    const std::optional<int64_t> bytes = device_memory_budget();
    budget = bytes ? std::to_string(*bytes) : "unset";
  } catch (const std::exception& e) {
    budget = fmt::format("invalid ({})", e.what());
  }
  fields.push_back(fmt::format("MESHLAYOUT_DEVICE_MEMORY={}", budget));
  for (const std::string& f : recorded_parsed_options()) fields.push_back(f);
  for (const std::string& f : inputs.fields()) fields.push_back(f);
  agree_on_operation(runtime.comm(), what, join(fields, "; "), local_error);
}

}  // namespace meshlayout::cli
