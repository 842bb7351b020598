// bind_layout_map.cc — LayoutMap for Python, as keras.distribution.LayoutMap: the map keeps
// the TensorLayout objects it was given (a lookup returns the stored object, as Keras does),
// and matching runs in C++ (LayoutMap::match_index: one RE2::Set pass, the seed-003 rules).
// The Python class meshlayout.LayoutMap adds collections.abc.MutableMapping's methods.
//
// Example:
//   lm = _LayoutMap(mesh)             # python/meshlayout/__init__.py subclasses it
//   lm["dense.*kernel"] = (None, "model")
//   lm["dense_1.kernel"]              # the stored TensorLayout, now with lm's mesh
//
// Scopes (`with lm.scope():`) are per thread, as in Keras. They may be exited in any order:
// a scope's exit removes its own entry, and the current map (here and for C++, LayoutMapScope)
// is always the innermost map still open. No Python object is owned by C++ thread-local or
// static storage past the interpreter: the entries' references are dropped when the scope is
// exited, when its thread's Python state ends (a scope left open in a finished thread), or at
// interpreter exit (an atexit hook); what is left after the interpreter has begun finalising
// is deliberately leaked, never released without the GIL.
#include <fmt/format.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "bindings.h"
#include "meshlayout/layout_map/layout_map.h"
#include "meshlayout/layout_map/layout_map_scope.h"

namespace meshlayout::python {
namespace {

struct PyLayoutMap {
  PyLayoutMap(std::optional<DeviceMesh> mesh, const std::string& mode)
      : map(std::move(mesh), parse_match_mode(mode)) {}
  LayoutMap map;
  std::vector<py::object> layouts;  // the TensorLayout objects, in rule order
};

// The scopes open on one thread, innermost last. Each entry owns a reference to its
// LayoutMap (so the C++ map stays alive while it may be current), taken and released with the
// GIL held: by __enter__/__exit__, by the end of the thread's Python state (release_at_thread_end)
// and by the interpreter's atexit hook (bind_layout_map). The thread-local object itself never
// releases one: it is destroyed after the thread's Python state, or the interpreter, is gone.
struct ScopeEntry {
  uint64_t token;
  PyObject* owner;  // a strong reference to the Python LayoutMap
  const LayoutMap* map;
};

struct ThreadScopes {
  std::vector<ScopeEntry> entries;
  // C++'s current map is entries.back().map: exactly one LayoutMapScope while any entry is open
  // (rebuilt on every change, so the order in which entries leave does not matter to it).
  std::optional<LayoutMapScope> cpp;
  bool end_hook_set = false;  // release_at_thread_end is registered in this thread's state

  void sync() {
    cpp.reset();  // back to the map current before the first Python scope on this thread
    if (!entries.empty()) cpp.emplace(*entries.back().map);
  }

  // Closes every scope of this thread (GIL held, interpreter alive), innermost first.
  void release_all() {
    std::vector<ScopeEntry> gone = std::move(entries);
    entries.clear();
    sync();  // no longer points at a map that the releases below may free
    while (!gone.empty()) {
      Py_DECREF(gone.back().owner);
      gone.pop_back();
    }
  }
};

thread_local ThreadScopes t_scopes;
uint64_t g_next_token = 1;  // guarded by the GIL

bool interpreter_finalising() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;
#else
  return _Py_IsFinalizing() != 0;
#endif
}

// A capsule in the thread state's dict: Python clears that dict, on the thread itself and with
// the GIL, when the thread's Python state ends, which closes the scopes it left open.
void release_at_thread_end(void* p) {
  if (p != &t_scopes) return;  // cleared from another thread (a daemon thread at exit): not ours
  t_scopes.end_hook_set = false;
  if (interpreter_finalising()) {  // too late to run destructors: leak the references
    t_scopes.entries.clear();
    t_scopes.sync();
    return;
  }
  t_scopes.release_all();
}

void set_thread_end_hook() {
  if (t_scopes.end_hook_set) return;
  PyObject* dict = PyThreadState_GetDict();
  if (dict == nullptr) return;  // no thread state dict: the atexit hook or a leak at exit
  py::capsule hook(static_cast<void*>(&t_scopes), &release_at_thread_end);
  if (PyDict_SetItemString(dict, "meshlayout._layout_map_scopes", hook.ptr()) != 0) {
    throw py::error_already_set();
  }
  t_scopes.end_hook_set = true;
}

// `with layout_map.scope():` — the map is the thread's current one inside the block, and the
// innermost map still open after it, whatever the block raises. The scope owns its map too.
struct PyScope {
  py::object owner;
  uint64_t token = 0;  // non-zero while entered
  std::thread::id thread;
};

py::object enter_scope(PyScope& s) {
  if (s.token != 0) throw ValueError("this LayoutMap scope is already entered");
  const LayoutMap* map = &s.owner.cast<const PyLayoutMap&>().map;
  set_thread_end_hook();
  t_scopes.entries.push_back(ScopeEntry{g_next_token, s.owner.inc_ref().ptr(), map});
  s.token = g_next_token++;
  s.thread = std::this_thread::get_id();
  t_scopes.sync();
  return s.owner;
}

bool exit_scope(PyScope& s) {
  if (s.token == 0) return false;
  auto& entries = t_scopes.entries;
  for (auto it = entries.begin(); it != entries.end(); ++it) {
    if (it->token != s.token) continue;
    py::object owner = py::reinterpret_steal<py::object>(it->owner);  // released last
    entries.erase(it);
    s.token = 0;
    t_scopes.sync();
    return false;  // exceptions from the block propagate
  }
  if (s.thread != std::this_thread::get_id()) {
    throw FailedPreconditionError("a LayoutMap scope must be exited on the thread that entered it");
  }
  s.token = 0;  // closed already: at interpreter exit, or when its thread's state ended
  return false;
}

size_t rule_index(const LayoutMap& map, std::string_view key) {
  const auto& rules = map.rules();
  for (size_t i = 0; i < rules.size(); ++i) {
    if (rules[i].pattern == key) return i;
  }
  throw NotFoundError(fmt::format("LayoutMap has no key '{}'", key));
}

void set_item(PyLayoutMap& self, const std::string& key, py::object layout) {
  if (self.map.contains(key)) {
    throw ValueError(
        fmt::format("{} already exist in the LayoutMap with value {}. Please make sure to not use "
                    "duplicated keys.",
                    key, std::string(py::str(self.layouts[rule_index(self.map, key)]))));
  }
  if (py::isinstance<py::tuple>(layout)) {  // Keras' shortcut: a tuple of axes (not a list)
    layout = py::module_::import("meshlayout._meshlayout").attr("TensorLayout")(layout);
  }
  if (!py::isinstance<TensorLayout>(layout)) {
    throw ValueError(fmt::format("{} should be a TensorLayout type, got {}",
                                 std::string(py::str(layout)),
                                 std::string(py::str(py::type::of(layout)))));
  }
  auto& tl = layout.cast<TensorLayout&>();
  // As Keras: the caller's object gets the map's mesh (before the key is stored).
  if (!tl.device_mesh() && self.map.device_mesh()) tl.set_device_mesh(*self.map.device_mesh());
  self.map.set(key, tl);  // a key that does not compile is refused here; nothing is stored
  self.layouts.push_back(std::move(layout));
}

py::object del_item(PyLayoutMap& self, std::string_view key) {
  const size_t i = self.map.contains(key) ? rule_index(self.map, key) : 0;
  self.map.erase(key);  // NotFoundError (KeyError) listing the keys when absent
  py::object out = self.layouts[i];
  self.layouts.erase(self.layouts.begin() + static_cast<std::ptrdiff_t>(i));
  return out;
}

py::dict explain(const PyLayoutMap& self, std::string_view path) {
  MatchExplanation e = self.map.explain(path);
  static constexpr const char* kVerdicts[] = {"exact", "matched", "ambiguous", "no_match"};
  auto key_of = [&](std::optional<size_t> i) -> py::object {
    if (!i) return py::none();
    return py::str(self.map.rule(*i).pattern);
  };
  py::list hits;
  for (size_t h : e.regex_hits) hits.append(self.map.rule(h).pattern);
  py::dict d;
  d["path"] = e.path;
  d["mode"] = std::string(match_mode_name(e.mode));
  d["verdict"] = kVerdicts[static_cast<int>(e.verdict)];
  d["exact"] = key_of(e.exact_rule);
  d["matches"] = hits;
  d["chosen"] = key_of(e.chosen_rule);
  d["layout"] = e.chosen_rule ? self.layouts[*e.chosen_rule] : py::none();
  d["text"] = e.to_string(self.map);
  return d;
}

}  // namespace

/// The C++ map under a Python LayoutMap (used by the checkpoint binder).
const LayoutMap& layout_map_of(const py::handle& obj) { return obj.cast<const PyLayoutMap&>().map; }

void bind_layout_map(py::module_& m) {
  py::class_<PyScope>(m, "_LayoutMapScope")
      .def("__enter__", &enter_scope)
      .def("__exit__", [](PyScope& s, const py::args&) { return exit_scope(s); });

  // Scopes still open on the main thread at exit close while the interpreter can still free
  // their maps (atexit runs before finalisation; the hook is owned by Python's atexit module).
  py::module_::import("atexit").attr("register")(
      py::cpp_function([]() { t_scopes.release_all(); }));

  py::class_<PyLayoutMap>(m, "_LayoutMap", py::dynamic_attr())
      .def(py::init([](const py::object& mesh, const std::string& mode) {
             return std::make_unique<PyLayoutMap>(mesh_argument(mesh, "LayoutMap device_mesh"),
                                                  mode);
           }),
           py::arg("device_mesh") = py::none(), py::arg("mode") = "search")
      .def("__getitem__",
           [](const PyLayoutMap& self, std::string_view key) -> py::object {
             std::optional<size_t> i = self.map.match_index(key);
             return i ? self.layouts[*i] : py::none();
           })
      .def("__setitem__", &set_item)
      .def("__delitem__", [](PyLayoutMap& self, std::string_view key) { del_item(self, key); })
      .def("__len__", [](const PyLayoutMap& self) { return self.map.size(); })
      .def("__iter__", [](const PyLayoutMap& self) { return py::iter(py::cast(self.map.keys())); })
      .def_property_readonly("device_mesh",
                             [](const PyLayoutMap& s) { return s.map.device_mesh(); })
      .def_property_readonly("mode",
                             [](const PyLayoutMap& s) { return match_mode_name(s.map.mode()); })
      .def("explain", &explain, py::arg("path"),
           "Every rule that matches `path` and the verdict, without raising on ambiguity.")
      .def(
          "unused_rules",
          [](const PyLayoutMap& self, const std::vector<std::string>& paths) {
            std::vector<std::string> keys;
            for (size_t i : self.map.unused_rules(paths)) keys.push_back(self.map.rule(i).pattern);
            return keys;
          },
          py::arg("paths"), "Keys that decide none of `paths` (typos, stale rules).")
      .def(
          "scope",
          [](py::object self) {
            return PyScope{std::move(self), 0, {}};
          },
          "Context manager: the map is the thread's current LayoutMap inside the block. "
          "Scopes may be exited in any order (the current map is the innermost one still "
          "open), on the thread that entered them; one left open closes when its thread "
          "ends or the interpreter exits.");

  m.def(
      "current_layout_map",
      []() -> py::object {
        // What C++ sees (LayoutMapScope), as the Python object that was entered.
        const LayoutMap* current = current_layout_map();
        for (auto it = t_scopes.entries.rbegin(); it != t_scopes.entries.rend(); ++it) {
          if (it->map == current) return py::reinterpret_borrow<py::object>(it->owner);
        }
        return py::none();
      },
      "The LayoutMap of the innermost open `layout_map.scope()` on this thread, or None.");
}

}  // namespace meshlayout::python
