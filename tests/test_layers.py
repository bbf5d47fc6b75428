"""The layers of docs/ARCHITECTURE.md hold: no module imports from a layer above its own, and no import cycles.

Every ``import``/``from ... import`` of a ``hcomm_cffi`` module is read from the source (including
imports inside functions: a lazy upward import is still an upward import).  The package's
``__init__.py`` is the lazy facade over the layers and is exempt.
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Set, Tuple

import pytest

PKG = Path(__file__).resolve().parents[1] / "hcomm_cffi"

#: top (0) to bottom; a module is in the layer of the longest matching prefix
LAYERS: Tuple[Tuple[str, ...], ...] = (
    ("cli", "launch", "bench", "examples", "torch", "cannlib", "run", "__main__"),
    ("api",),
    ("algorithms",),
    ("plan", "resources", "bootstrap"),
    ("binding", "initializers", "calltable"),
    ("lib", "sim"),
    ("_ffi", "_hcomm_ffi", "_cdef", "enums", "errors", "settings", "constants", "cpus", "log", "flight", "trace",
     "desync", "timeline", "flocks"),
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
    """(imported hcomm_cffi module, line, runs at import time) for every import in ``path``."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    top = {id(n) for n in tree.body}
    for node in tree.body:   # imports under a module-level `try` / `if` run at import, except `if TYPE_CHECKING:`
        type_only = isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        if isinstance(node, (ast.If, ast.Try)) and not type_only:
            top.update(id(n) for n in ast.walk(node))
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
                out.append((name, node.lineno, id(node) in top))
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


def test_no_import_cycles_at_module_level() -> None:
    mods = _modules()
    graph: Dict[str, Set[str]] = {m: set() for m in mods}
    for module, path in mods.items():
        for name, _, top in _imports(path, module):
            target = _resolve(name, set(mods))
            if top and target != module and target in graph and target != "hcomm_cffi" \
                    and not module.startswith(target + "."):   # a submodule importing its package's __init__
                graph[module].add(target)
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
    assert not cycles, f"import cycles: {cycles}"


@pytest.mark.parametrize("module", ["hcomm_cffi.algorithms.interface", "hcomm_cffi.api.comm"])
def test_the_checker_sees_imports(module: str) -> None:
    """The test reads real imports (a guard against a parser that finds nothing)."""
    mods = _modules()
    assert len(_imports(mods[module], module)) > 3
