#include "meshlayout/nn/name_scope.h"

#include <fmt/format.h>

#include <vector>

#include "meshlayout/core/errors.h"

namespace meshlayout {
namespace {

struct Entry {
  std::string name;
  const void* caller;
  std::optional<std::string> override_parent;
};

thread_local std::vector<Entry> t_stack;

}  // namespace

void check_path_component(std::string_view name) {
  if (name.find('/') != std::string_view::npos) {
    throw ValueError(fmt::format(
        "Argument `name` must be a string and cannot contain character `/`. Received: name={}",
        name));
  }
}

NameScope::NameScope(std::string_view name, const void* caller,
                     std::optional<std::string> override_parent) {
  check_path_component(name);
  if (caller != nullptr && !t_stack.empty() && t_stack.back().caller == caller &&
      t_stack.back().name == name) {
    return;  // the caller's own scope is already the innermost one
  }
  t_stack.push_back({std::string(name), caller, std::move(override_parent)});
  pushed_ = true;
}

NameScope::~NameScope() {
  if (pushed_ && !t_stack.empty()) t_stack.pop_back();
}

std::string current_path() {
  std::vector<std::string_view> parts;
  for (const Entry& e : t_stack) {
    if (e.override_parent) {
      parts.clear();
      std::string_view p = *e.override_parent;
      while (!p.empty()) {
        const size_t slash = p.find('/');
        std::string_view part = p.substr(0, slash);
        if (!part.empty()) parts.push_back(part);
        p = slash == std::string_view::npos ? std::string_view() : p.substr(slash + 1);
      }
    }
    parts.push_back(e.name);
  }
  std::string out;
  for (std::string_view part : parts) {
    if (!out.empty()) out += '/';
    out += part;
  }
  return out;
}

}  // namespace meshlayout
