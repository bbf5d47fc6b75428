"""docs/ARCHITECTURE.md lists every module of hcomm_cffi/ once, under the heading of its layer, and nothing else."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, List

from test_layers import LAYERS, PKG, _layer, _module_name

DOC = PKG.parent / "docs" / "ARCHITECTURE.md"
PACKAGE_HEADING = "The package"     # hcomm_cffi/__init__.py, the lazy facade over the layers


def _listed() -> Dict[str, str]:
    """module path (relative to hcomm_cffi/) -> the heading it is listed under."""
    heading, found = "", {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            heading = line[3:].strip()
        m = re.match(r"- `([\w/]+\.py)`: \S", line)
        if m:
            assert m.group(1) not in found, f"docs/ARCHITECTURE.md lists {m.group(1)} twice"
            found[m.group(1)] = heading
    return found


#: written by build_ffi.py at install (ignored by git): described on `_ffi.py`'s line
GENERATED = {"_hcomm_ffi.py"}


def _existing() -> List[str]:
    return sorted(rel for rel in (p.relative_to(PKG).as_posix() for p in PKG.rglob("*.py")) if rel not in GENERATED)


def test_every_module_has_one_line():
    listed, existing = set(_listed()), set(_existing())
    missing, extra = sorted(existing - listed), sorted(listed - existing)
    assert not missing and not extra, (
        "docs/ARCHITECTURE.md is out of date:"
        + (f"\n  missing (add a line `- `path`: what it does` under its layer): {', '.join(missing)}"
           if missing else "")
        + (f"\n  listed but not in hcomm_cffi/ (remove the line): {', '.join(extra)}" if extra else ""))


def test_each_module_is_under_its_layer():
    listed = _listed()
    headings = [h for h in dict.fromkeys(listed.values()) if h != PACKAGE_HEADING]
    assert len(headings) == len(LAYERS), f"one heading per layer of tests/test_layers.py: {headings}"
    wrong = []
    for rel, heading in listed.items():
        module = _module_name(PKG / rel)
        if module == "hcomm_cffi":
            ok = heading == PACKAGE_HEADING
        else:
            ok = heading != PACKAGE_HEADING and headings.index(heading) == _layer(module)
        if not ok:
            wrong.append(f"{rel} (under '{heading}')")
    assert not wrong, f"docs/ARCHITECTURE.md lists modules under another layer's heading: {', '.join(wrong)}"


def test_the_failure_names_the_modules(tmp_path, monkeypatch):
    """A module added without a line, and a line for a module that is gone, are named."""
    fake = tmp_path / "hcomm_cffi"
    for rel in _existing():
        (fake / rel).parent.mkdir(parents=True, exist_ok=True)
        (fake / rel).touch()
    (fake / "newmod.py").touch()
    (fake / "api" / "comm.py").unlink()
    monkeypatch.setattr(__import__(__name__), "PKG", fake)
    try:
        test_every_module_has_one_line()
    except AssertionError as exc:
        assert "missing (add a line `- `path`: what it does` under its layer): newmod.py" in str(exc)
        assert "listed but not in hcomm_cffi/ (remove the line): api/comm.py" in str(exc)
    else:
        raise AssertionError("a missing and an extra module went unnoticed")
