// name_scope.h — Keras 3 name scopes: the prefix of every variable path (keras.name_scope,
// keras/src/backend/common/name_scope.py).
//
// A thread-local stack of scopes; current_path() joins their names with '/'. A scope opened by
// a layer carries the layer as its caller: re-opening the same caller's scope on top of itself
// does not nest (deduplication), and a layer that has a recorded parent path re-enters at that
// parent (override_parent), so a layer's path is fixed where it was first built.
//
// Example:
//   { NameScope a("a"); { NameScope b("b"); current_path() == "a/b"; } }
//   Variable v(VariableSpec{.name = "w"});   // under NameScope("a"): v.path() == "a/w"
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace meshlayout {

/// RAII: pushes a scope on this thread's name-scope stack while it lives.
class [[nodiscard]] NameScope {
 public:
  /// keras.name_scope(name). ValueError (Keras' message) if `name` contains '/'.
  explicit NameScope(std::string_view name) : NameScope(name, nullptr, std::nullopt) {}
  /// A layer's scope: `caller` identifies the layer (deduplication); `override_parent`, when
  /// set, replaces every enclosing scope by this absolute path.
  NameScope(std::string_view name, const void* caller, std::optional<std::string> override_parent);
  NameScope(const NameScope&) = delete;
  NameScope& operator=(const NameScope&) = delete;
  ~NameScope();

 private:
  bool pushed_ = false;
};

/// The '/'-joined names of the open scopes of this thread ("" when none).
std::string current_path();

/// ValueError in Keras' words unless `name` is a valid scope, layer or variable name (no '/').
void check_path_component(std::string_view name);

}  // namespace meshlayout
