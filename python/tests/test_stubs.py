# The type stubs (every .pyi shipped in the package: __init__.pyi, distribution.pyi, …) cannot
# drift from their modules: every public name of each module (and every public attribute of its
# classes) is declared in its stub, every name a stub declares exists, and functions' parameter
# names agree.
# The stubs and py.typed are shipped beside the package (build tree and installed wheel alike).
import ast
import collections.abc
import importlib
import inspect
import os
import re
import types

import pytest

import meshlayout as ml
from meshlayout import distribution as dist


def package_modules():
    """Every stub shipped in the package, with the module it describes; the package's own two
    must be among them."""
    found = {}
    for name in sorted(os.listdir(os.path.dirname(ml.__file__))):
        if name.endswith(".pyi"):
            stem = name[:-len(".pyi")]
            found[name] = ml if stem == "__init__" else importlib.import_module(f"meshlayout.{stem}")
    assert found.get("__init__.pyi") is ml and found.get("distribution.pyi") is dist, found
    return found


MODULES = package_modules()


def stub_tree(file_name):
    path = os.path.join(os.path.dirname(ml.__file__), file_name)
    assert os.path.isfile(path), f"{path} is not shipped with the package"
    with open(path, encoding="utf-8") as f:
        return ast.parse(f.read(), path)


def declared_names(body):
    """Names a stub body declares: classes, functions, annotated or plain assignments, imports."""
    names = {}
    for node in body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            names[node.name] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = node
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    names[t.id] = node
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:  # a stub re-exports only `import X as X` (PEP 484)
                if alias.asname == alias.name:
                    names[alias.asname] = node
    return names


def public_module_names(module):
    """__all__ and every other public attribute that is not an imported module."""
    names = set(module.__all__)
    for name, value in vars(module).items():
        if not name.startswith("_") and not isinstance(value, types.ModuleType):
            names.add(name)
    return names


def class_names(cls_node, stub_classes):
    """What a stub class declares, with what it inherits (stub classes and the standard
    library's ABCs)."""
    names = set(declared_names(cls_node.body))
    for base in cls_node.bases:
        base = base.value if isinstance(base, ast.Subscript) else base
        text = ast.unparse(base)
        if text in stub_classes:
            names |= class_names(stub_classes[text], stub_classes)
        elif text == "collections.abc.MutableMapping":
            names |= set(dir(collections.abc.MutableMapping))
        else:
            raise AssertionError(f"test_stubs: base class {text} is not resolvable")
    return names


def public_attributes(cls):
    return {a for a in dir(cls) if not a.startswith("_") and not hasattr(object, a)}


def runtime_parameters(func):
    """Parameter names (without self) of a Python function or a pybind11 one (its docstring's
    first line, 'name(a: T, b: U = ...) -> R'; for overloads the first)."""
    try:
        params = inspect.signature(func).parameters
        return [p for p in params if p != "self"]
    except (TypeError, ValueError):
        pass
    first = (func.__doc__ or "").strip().splitlines()[0]
    match = re.match(r"^\w+\((.*)\)\s*->", first)
    assert match, f"no signature in the docstring of {func}: {first!r}"
    names, depth, current = [], 0, ""
    for ch in match.group(1) + ",":
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            if current.strip():
                names.append(current.split(":")[0].strip())
            current = ""
        else:
            current += ch
    return [n for n in names if n != "self"]


def stub_parameters(node):
    args = node.args
    names = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
    return [n for n in names if n != "self"]


@pytest.mark.parametrize("file_name", sorted(MODULES))
def test_every_public_name_is_in_the_stub(file_name):
    module = MODULES[file_name]
    declared = declared_names(stub_tree(file_name).body)
    missing = sorted(public_module_names(module) - set(declared))
    assert not missing, f"{file_name} lacks {missing}"
    stale = sorted(n for n in declared if not n.startswith("_") and not hasattr(module, n))
    assert not stale, f"{file_name} declares names the module does not have: {stale}"
    stub_all = [n for n in declared_names(stub_tree(file_name).body).items() if n[0] == "__all__"]
    assert stub_all, f"{file_name} has no __all__"
    assert ast.literal_eval(stub_all[0][1].value) == list(module.__all__), (
        f"{file_name}: __all__ differs from {module.__name__}.__all__")


@pytest.mark.parametrize("file_name", sorted(MODULES))
def test_every_public_class_attribute_is_in_the_stub(file_name):
    module = MODULES[file_name]
    body = stub_tree(file_name).body
    stub_classes = {n.name: n for n in body if isinstance(n, ast.ClassDef)}
    checked = 0
    for name in public_module_names(module):
        cls = getattr(module, name)
        if not inspect.isclass(cls) or name not in stub_classes:
            continue  # classes re-exported from meshlayout are checked in its stub
        declared = class_names(stub_classes[name], stub_classes)
        missing = sorted(public_attributes(cls) - declared)
        assert not missing, f"{file_name}: class {name} lacks {missing}"
        own = declared_names(stub_classes[name].body)
        stale = sorted(a for a in own if not hasattr(cls, a))
        assert not stale, f"{file_name}: class {name} declares what it lacks: {stale}"
        checked += 1
    assert checked >= {"__init__.pyi": 5, "distribution.pyi": 3}.get(file_name, 0)


@pytest.mark.parametrize("file_name", sorted(MODULES))
def test_parameter_names_agree(file_name):
    module = MODULES[file_name]
    body = stub_tree(file_name).body
    checked = 0
    for node in body:
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            assert stub_parameters(node) == runtime_parameters(getattr(module, node.name)), (
                f"{file_name}: {node.name}")
            checked += 1
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            init = declared_names(node.body).get("__init__")
            if init is not None:
                expected = runtime_parameters(getattr(module, node.name).__init__)
                if expected and expected[-1] == "kwargs":  # **kwargs: the stub names it too
                    assert init.args.kwarg is not None and init.args.kwarg.arg == "kwargs"
                    expected = expected[:-1]
                assert stub_parameters(init) == expected, f"{file_name}: {node.name}.__init__"
                checked += 1
    assert checked >= {"__init__.pyi": 10, "distribution.pyi": 5}.get(file_name, 1)


def test_py_typed_marker_is_shipped():
    assert os.path.isfile(os.path.join(os.path.dirname(ml.__file__), "py.typed"))


def test_stubs_catch_a_missing_name():
    # The checks above are not vacuous: a stub without list_devices, or with a name the module
    # lacks, is caught.
    body = [n for n in stub_tree("__init__.pyi").body
            if not (isinstance(n, ast.FunctionDef) and n.name == "list_devices")]
    assert "list_devices" in public_module_names(ml) - set(declared_names(body))
    fake = ast.parse("def not_in_meshlayout() -> None: ...").body
    assert not hasattr(ml, "not_in_meshlayout") and "not_in_meshlayout" in declared_names(fake)
