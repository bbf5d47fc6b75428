"""The layers of docs/ARCHITECTURE.md hold: no module imports from a layer above its own, and no import cycles.

Every ``import``/``from ... import`` of a ``hcomm_cffi`` module is read from the source (including
imports inside functions: a lazy upward import is still an upward import, and a lazy import that
closes a cycle is still a cycle -- it only moves the partly-initialised module to a later moment).
Imports under ``if TYPE_CHECKING:`` never run: they count for the layers, not for cycles.  The
package's ``__init__.py`` is the lazy facade over the layers and is exempt.
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Set, Tuple

import pytest

PKG = Path(__file__).resolve().parents[1] / "hcomm_cffi"

#: top (0) to bottom; a module is in the layer of the longest matching prefix
LAYERS: Tuple[Tuple[str, ...], ...] = (
    ("cli", "launch", "bench", "examples", "torch", "npu", "cannlib", "run", "__main__"),
    ("api",),
    ("algorithms",),
    ("plan", "resources", "bootstrap"),
    ("binding", "_binding_methods", "initializers", "calltable"),
    ("lib", "sim"),
    ("_ffi", "_hcomm_ffi", "_cdef", "acl_codes", "enums", "errors", "settings", "files", "constants", "cpus", "log", "flight", "trace",
     "desync", "stallwatch", "timeline", "types", "flocks", "sigterm", "callsite", "stacks", "excepthook"),
)


def _module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _layer(module: str) -> int:
    first = module.split(".")[1] if "." in module else ""
    for i, names in enumerate(LAYERS):
        if first in names:
            return i
    raise AssertionError(f"{module} is in no layer of docs/ARCHITECTURE.md; add it to tests/test_layers.py LAYERS")


def _imports(path: Path, module: str) -> List[Tuple[str, int, bool]]:
    """(imported hcomm_cffi module, line, runs at all) for every import in ``path``.

    Module-level, nested and function-level imports run (the last when the function is first called);
    those under an ``if TYPE_CHECKING:`` at any depth never do.
    """
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    type_only: Set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            type_only.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    out = []
    for node in ast.walk(tree):
        names: List[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = [target] + [f"{target}.{a.name}" for a in node.names]
        for name in names:
            if name == "hcomm_cffi" or name.startswith("hcomm_cffi."):
                out.append((name, node.lineno, id(node) not in type_only))
    return out


def _modules() -> Dict[str, Path]:
    return {_module_name(p): p for p in PKG.rglob("*.py") if p.name != "_hcomm_ffi.py"}


def _resolve(name: str, known: Set[str]) -> str:
    """The module an import names (``from pkg import sub`` names pkg.sub; ``from mod import func`` names mod)."""
    while name not in known and "." in name:
        name = name.rsplit(".", 1)[0]
    return name


def test_no_upward_imports() -> None:
    mods = _modules()
    bad = []
    for module, path in sorted(mods.items()):
        if module == "hcomm_cffi":
            continue
        mine = _layer(module)
        for name, line, _ in _imports(path, module):
            target = _resolve(name, set(mods))
            if target == "hcomm_cffi":
                continue
            if _layer(target) < mine:
                bad.append(f"{path.relative_to(PKG.parent)}:{line} imports {target} (layer {_layer(target)}) "
                           f"from layer {mine}")
    assert not bad, "upward imports:\n" + "\n".join(bad)


def _import_graph(mods: Dict[str, Path], type_only: bool = False) -> Dict[str, Set[str]]:
    """module -> the modules it imports when it runs (module level or lazily); ``type_only``: and those it imports
    under ``if TYPE_CHECKING:`` (a cycle tied by them still leaves nobody able to say where a thing lives)."""
    graph: Dict[str, Set[str]] = {m: set() for m in mods}
    for module, path in mods.items():
        for name, _, runs in _imports(path, module):
            target = _resolve(name, set(mods))
            if (runs or type_only) and target != module and target in graph and target != "hcomm_cffi" \
                    and not module.startswith(target + "."):   # a submodule importing its package's __init__
                graph[module].add(target)
    return graph


def _cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """The strongly connected components of more than one module (each an import cycle)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on: Set[str] = set()
    cycles: List[List[str]] = []
    counter = [0]

    def visit(v: str) -> None:   # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def test_no_import_cycles_lazy_imports_included() -> None:
    cycles = _cycles(_import_graph(_modules()))
    assert not cycles, f"import cycles (lazy imports included): {cycles}"


def test_the_cycle_check_counts_lazy_imports_and_not_type_only_ones(tmp_path: Path) -> None:
    """A cycle closed by a function-level import is found; one closed under ``if TYPE_CHECKING:`` is not."""
    (tmp_path / "a.py").write_text("from . import b\n")
    (tmp_path / "b.py").write_text("def f():\n    from .a import x\n    return x\n")
    (tmp_path / "c.py").write_text("from typing import TYPE_CHECKING\nfrom . import a\n"
                                   "if TYPE_CHECKING:\n    from .d import y\n")
    (tmp_path / "d.py").write_text("def g():\n    if True:\n        from .c import z\n")
    mods = {f"hcomm_cffi.{m}": tmp_path / f"{m}.py" for m in "abcd"}
    found = {m: [(n, runs) for n, _, runs in _imports(path, m)] for m, path in mods.items()}
    assert found["hcomm_cffi.b"] == [("hcomm_cffi.a", True), ("hcomm_cffi.a.x", True)]
    assert ("hcomm_cffi.d", False) in found["hcomm_cffi.c"] and ("hcomm_cffi.c", True) in found["hcomm_cffi.d"]
    graph = _import_graph(mods)
    assert graph["hcomm_cffi.c"] == {"hcomm_cffi.a"} and graph["hcomm_cffi.d"] == {"hcomm_cffi.c"}
    assert _cycles(graph) == [["hcomm_cffi.a", "hcomm_cffi.b"]]


#: the folders whose modules may not import each other in a circle, type-only imports included (issue 42)
STRICT_FOLDERS = ("api", "algorithms", "sim")

def _folder_cycles(mods: Dict[str, Path]) -> List[List[str]]:
    """The import cycles, type-only imports included, within each folder of STRICT_FOLDERS."""
    graph = _import_graph(mods, type_only=True)
    found = []
    for folder in STRICT_FOLDERS:
        prefix = f"hcomm_cffi.{folder}."
        sub = {m: {t for t in targets if t.startswith(prefix)} for m, targets in graph.items() if m.startswith(prefix)}
        found += _cycles(sub)
    return found


def test_no_import_cycles_in_api_algorithms_sim_type_only_included() -> None:
    """api/, algorithms/ and sim/ have no import cycle, ``if TYPE_CHECKING:`` imports included: in sim/ the object
    model (queues.py) and the task kinds (tasks.py) sit below the communicator and the executor."""
    cycles = _folder_cycles(_modules())
    assert not cycles, "import cycles (type-only imports included):\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_the_folder_cycle_check_counts_type_only_imports(tmp_path: Path) -> None:
    """A cycle tied only by a TYPE_CHECKING import inside api/ is found (a guard against a check that cannot fail)."""
    (tmp_path / "a.py").write_text("from . import b\n")
    (tmp_path / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import A\n")
    mods = {f"hcomm_cffi.api.{m}": tmp_path / f"{m}.py" for m in "ab"}
    assert _cycles(_import_graph(mods)) == []
    assert _folder_cycles(mods) == [["hcomm_cffi.api.a", "hcomm_cffi.api.b"]]


def _class_privates(tree: ast.AST) -> Dict[str, Set[str]]:
    """class name -> the private names it defines (methods, class-level names, ``__slots__``, ``self._x`` stores)."""
    out: Dict[str, Set[str]] = {}
    for cls in ast.walk(tree):
        if isinstance(cls, ast.ClassDef):
            names = _private_definitions(ast.Module(body=cls.body, type_ignores=[]))
            out[cls.name] = names
    return out


def _foreign_private_reads(path: Path) -> List[str]:
    """``obj._name`` in ``path`` where ``obj`` is not ``self``/``cls`` and the enclosing class (if any) does not
    define ``_name``: a private attribute read from outside the class that owns it."""
    tree = ast.parse(path.read_text(), str(path))
    privates = _class_privates(tree)
    found: List[str] = []

    def visit(node: ast.AST, owner: Set[str]) -> None:
        for child in ast.iter_child_nodes(node):
            mine = privates.get(child.name, set()) if isinstance(child, ast.ClassDef) else owner
            if isinstance(child, ast.Attribute) and child.attr.startswith("_") and not child.attr.startswith("__") \
                    and not (isinstance(child.value, ast.Name) and child.value.id in ("self", "cls")) \
                    and child.attr not in owner:
                found.append(f"{path.name}:{child.lineno} {ast.unparse(child)}")
            visit(child, mine)
    visit(tree, set())
    return found


def test_nothing_outside_a_class_reads_its_private_attributes_in_api() -> None:
    """Within api/, ``x._name`` appears only inside the class that defines ``_name`` (issue 42: one owner per state)."""
    bad = [hit for path in sorted((PKG / "api").glob("*.py")) for hit in _foreign_private_reads(path)]
    assert not bad, "private attributes read outside their class:\n" + "\n".join(bad)


def test_the_foreign_private_check_sees_reads(tmp_path: Path) -> None:
    """A read of another class's private attribute is found; the owner's own read of another instance is not."""
    sample = tmp_path / "sample.py"
    sample.write_text("class A:\n    def __init__(self):\n        self._x = 1\n    def same(self, other):\n"
                      "        return other._x\n\n"
                      "class B:\n    def peek(self, a):\n        return a._x\n\ndef f(a):\n    return a._x\n")
    assert [hit.split(" ", 1)[1] for hit in _foreign_private_reads(sample)] == ["a._x", "a._x"]


@pytest.mark.parametrize("module", ["hcomm_cffi.algorithms.interface", "hcomm_cffi.api.comm"])
def test_the_checker_sees_imports(module: str) -> None:
    """The test reads real imports (a guard against a parser that finds nothing)."""
    mods = _modules()
    assert len(_imports(mods[module], module)) > 3


#: the layers above the backends, which reach a backend only through the lib contract (lib/contract.py)
CONTRACT_USERS = ("api", "algorithms", "plan", "resources", "bootstrap", "binding", "initializers", "calltable")
#: what the contract replaces: a backend's name, unwrapping the ABI-check wrapper, the emulator's own helpers
BACKEND_SPECIFIC = frozenset({"backend_name", "raw", "preferred_step_bytes", "checker_reports"})


def _backend_specific(path: Path) -> List[Tuple[int, str]]:
    """(line, name) of every attribute use or getattr() string in ``path`` that names a backend-specific member."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Attribute):
            name = node.attr
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr") \
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
            name = node.args[1].value
        else:
            continue
        if name in BACKEND_SPECIFIC or name.startswith("sim_"):
            found.append((node.lineno, name))
    return found


def test_layers_above_the_backends_use_only_the_lib_contract() -> None:
    """No backend-name tests, no unwrapping, no emulator-only methods above lib/ and sim/ (they use lib.capabilities)."""
    bad = []
    for module, path in sorted(_modules().items()):
        first = module.split(".")[1] if "." in module else ""
        if first in CONTRACT_USERS:
            bad += [f"{path.relative_to(PKG.parent)}:{line} uses {name}" for line, name in _backend_specific(path)]
    assert not bad, "backend-specific members used outside lib/ and sim/:\n" + "\n".join(bad)


def test_the_contract_check_sees_backend_specific_uses(tmp_path: Path) -> None:
    """The scan finds each kind of use (a guard against a check that can never fail)."""
    sample = tmp_path / "sample.py"
    sample.write_text("a = lib.raw\nb = getattr(lib, 'backend_name', 'cann')\nlib.sim_prepare_batch(1)\nc = lib.capabilities\n")
    assert [name for _, name in _backend_specific(sample)] == ["raw", "backend_name", "sim_prepare_batch"]


def _private_definitions(tree: ast.AST) -> Set[str]:
    """The private names a module defines: its functions, classes and module/class-level names, the attributes
    its methods set on ``self`` / ``cls``, and the names in ``__slots__``."""
    names: Set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) \
                and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            names.add(node.attr)
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets):
            names.update(c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant) and isinstance(c.value, str))
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def _private_reaches(modules: Dict[str, Path]) -> List[str]:
    """``obj._name`` (read or written) where ``obj`` is not ``self``/``cls`` and ``_name`` belongs to another module of
    the package: one module reaching into another's private state (third-party private names are not checked)."""
    trees = {m: ast.parse(p.read_text(), str(p)) for m, p in modules.items()}
    defined = {m: _private_definitions(t) for m, t in trees.items()}
    everywhere = set().union(*defined.values())
    found = []
    for module, tree in sorted(trees.items()):
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute) or not node.attr.startswith("_") or node.attr.startswith("__"):
                continue
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            if node.attr in everywhere and node.attr not in defined[module]:
                found.append(f"{module}:{node.lineno} {ast.unparse(node)}")
    return found


def test_no_module_reaches_into_another_modules_private_state() -> None:
    """A Comm's state is reached through its CommState, a Work's through its properties, a TaskBatch's through its
    attributes: no module reads or writes ``other._private`` of another module of the package (issue 33)."""
    bad = _private_reaches(_modules())
    assert not bad, "private attributes reached across modules:\n" + "\n".join(bad)


def test_the_private_reach_check_sees_reads_and_writes(tmp_path: Path) -> None:
    """The check finds a read of another module's private attribute and a write to another object's (a guard)."""
    (tmp_path / "owner.py").write_text("class A:\n    __slots__ = ('_x',)\n    def __init__(self):\n        self._y = 1\n")
    (tmp_path / "user.py").write_text("def f(a):\n    a._broken = 'why'\n    return a._y, a._x, a._own\n"
                                      "class B:\n    def g(self):\n        self._own = 2\n        return self._y\n")
    mods = {"hcomm_cffi.owner": tmp_path / "owner.py", "hcomm_cffi.user": tmp_path / "user.py"}
    bad = [line.split(" ", 1)[1] for line in _private_reaches(mods)]
    assert sorted(bad) == ["a._x", "a._y"]
    (tmp_path / "owner.py").write_text("class A:\n    def __init__(self):\n        self._broken = None\n")
    assert [line.split(" ", 1)[1] for line in _private_reaches(mods)] == ["a._broken"]
