// bind_layout_map.cc — LayoutMap for Python, as keras.distribution.LayoutMap: the map keeps
// the TensorLayout objects it was given (a lookup returns the stored object, as Keras does),
// and matching runs in C++ (LayoutMap::match_index: one RE2::Set pass, the seed-003 rules).
// The Python class meshlayout.LayoutMap adds collections.abc.MutableMapping's methods.
//
// Example:
//   lm = _LayoutMap(mesh)             # python/meshlayout/__init__.py subclasses it
//   lm["dense.*kernel"] = (None, "model")
//   lm["dense_1.kernel"]              # the stored TensorLayout, now with lm's mesh
#include <fmt/format.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
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

// The scopes open on this thread, innermost last (LayoutMapScope is thread-local too).
thread_local std::vector<py::object> t_scope_maps;

// `with layout_map.scope():` — the map is the thread's current one inside the block, and the
// previous one again after it, whatever the block raises.
struct PyScope {
  py::object owner;
  std::optional<LayoutMapScope> scope;
};

size_t rule_index(const LayoutMap& map, std::string_view key) {
  const auto& rules = map.rules();
  for (size_t i = 0; i < rules.size(); ++i) {
    if (rules[i].pattern == key) return i;
  }
  throw NotFoundError(fmt::format("LayoutMap has no key '{}'", key));
}

void set_item(PyLayoutMap& self, const std::string& key, py::object layout) {
  if (self.map.contains(key)) {
    throw ValueError(fmt::format(
        "{} already exist in the LayoutMap with value {}. Please make sure to not use "
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
      .def("__enter__", [](PyScope& s) {
        if (s.scope) throw ValueError("this LayoutMap scope is already entered");
        s.scope.emplace(s.owner.cast<const PyLayoutMap&>().map);
        t_scope_maps.push_back(s.owner);
        return s.owner;
      })
      .def("__exit__", [](PyScope& s, const py::args&) {
        if (!s.scope) return false;
        s.scope.reset();
        if (!t_scope_maps.empty()) t_scope_maps.pop_back();
        return false;  // exceptions from the block propagate
      });

  py::class_<PyLayoutMap>(m, "_LayoutMap", py::dynamic_attr())
      .def(py::init<std::optional<DeviceMesh>, const std::string&>(),
           py::arg("device_mesh") = py::none(), py::arg("mode") = "search")
      .def("__getitem__", [](const PyLayoutMap& self, std::string_view key) -> py::object {
        std::optional<size_t> i = self.map.match_index(key);
        return i ? self.layouts[*i] : py::none();
      })
      .def("__setitem__", &set_item)
      .def("__delitem__", [](PyLayoutMap& self, std::string_view key) { del_item(self, key); })
      .def("__len__", [](const PyLayoutMap& self) { return self.map.size(); })
      .def("__iter__", [](const PyLayoutMap& self) { return py::iter(py::cast(self.map.keys())); })
      .def_property_readonly("device_mesh", [](const PyLayoutMap& s) { return s.map.device_mesh(); })
      .def_property_readonly("mode", [](const PyLayoutMap& s) { return match_mode_name(s.map.mode()); })
      .def("explain", &explain, py::arg("path"),
           "Every rule that matches `path` and the verdict, without raising on ambiguity.")
      .def("unused_rules", [](const PyLayoutMap& self, const std::vector<std::string>& paths) {
        std::vector<std::string> keys;
        for (size_t i : self.map.unused_rules(paths)) keys.push_back(self.map.rule(i).pattern);
        return keys;
      }, py::arg("paths"), "Keys that decide none of `paths` (typos, stale rules).")
      .def("scope", [](py::object self) { return PyScope{std::move(self), std::nullopt}; },
           "Context manager: the map is the thread's current LayoutMap inside the block.");

  m.def("current_layout_map", []() -> py::object {
    if (t_scope_maps.empty() || current_layout_map() == nullptr) return py::none();
    return t_scope_maps.back();
  }, "The LayoutMap of the innermost `with layout_map.scope():` on this thread, or None.");
}

}  // namespace meshlayout::python
