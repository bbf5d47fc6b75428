"""The user's line of code: the first frame outside the library, cheap enough to take on every flight record.

:func:`here` walks up from its caller to the first frame whose code is not the library's (this
package, except its ``examples/``, and ``torch``'s own frames when torch is loaded: a
``dist.all_reduce`` or a DDP hook is the user's call of torch) and returns ``b"path:line"``.
Whether a code object is the library's, and the text of each (code, instruction) pair, are
cached, so a repeated call costs a few dictionary lookups (``benchmarks/bench_flight_recorder.py``
measures it).  Paths are shortened the same way everywhere (:func:`short_path`): relative to the
working directory or the ``sys.path`` entry that holds them, so ``failures.py:50`` or
``hcomm_cffi/examples/failures.py:50`` rather than an absolute path.

:func:`trim_traceback` is the same rule applied to an exception's traceback: the frames from the
user's last one down, so an error raised inside the package points at the user's line.
"""
from __future__ import annotations

import os
import sys
from types import CodeType, FrameType, TracebackType
from typing import Dict, List, Optional, Tuple

__all__ = ["here", "short_path", "is_library", "trim_traceback", "SITE_BYTES", "UNKNOWN"]

SITE_BYTES = 80                      # what a flight record keeps of a call site ("path:line", the path's tail)
UNKNOWN = b""
_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep
_EXAMPLES = _PACKAGE + "examples" + os.sep
_CACHE_LIMIT = 4096                  # code objects / sites remembered (bounded: exec'd code makes new ones)
# Keyed by id(code), not the code object: hashing a code object hashes its name, bytecode, constants
# and names every time (about 0.15 us; a walk through ten frames paid it ten times).  Every code object
# a key names is kept in _kept until the map starts over, so its id cannot be reused meanwhile.
# The value: _LIBRARY for the library's code, else the sites of that code by instruction (f_lasti -> text).
_LIBRARY: Dict[int, bytes] = {}
_codes: Dict[int, Dict[int, bytes]] = {}
_kept: List[CodeType] = []
_paths: Dict[str, str] = {}
_torch_dir: List[str] = []


def _torch_prefix() -> Optional[str]:
    """torch's package directory once torch is imported (never imports it)."""
    if not _torch_dir:
        mod = sys.modules.get("torch")
        path: Optional[str] = getattr(mod, "__file__", None) if mod is not None else None
        if not path:
            return None
        _torch_dir.append(os.path.dirname(os.path.abspath(path)) + os.sep)
    return _torch_dir[0]


def is_library(filename: str) -> bool:
    """True for a file of this package (not its examples) or of torch: frames a user never wrote."""
    if filename.startswith(_PACKAGE):
        return not filename.startswith(_EXAMPLES)
    if filename.startswith("<hcomm_cffi."):       # the binding's generated methods
        return True
    torch = _torch_prefix()
    return torch is not None and filename.startswith(torch)


def _sites_of(code: CodeType) -> Dict[int, bytes]:
    """The entry of ``code`` in the map (added: _LIBRARY, or its own map of sites)."""
    if len(_codes) >= _CACHE_LIMIT:
        _codes.clear()            # start over (the keys are the ids of the code objects _kept holds)
        _kept.clear()
    found = _codes[id(code)] = _LIBRARY if is_library(code.co_filename) else {}
    _kept.append(code)
    return found


def short_path(path: str) -> str:
    """``path`` relative to the working directory or to the ``sys.path`` entry holding it (the longest), else as is."""
    got = _paths.get(path)
    if got is None:
        best = ""
        for base in (os.getcwd(), *sys.path):
            if base and len(base) > len(best) and path.startswith(base.rstrip(os.sep) + os.sep):
                best = base.rstrip(os.sep)
        got = path[len(best) + 1:] if best else path
        if len(_paths) >= _CACHE_LIMIT:
            _paths.clear()
        _paths[path] = got
    return got


def _site_text(frame: FrameType) -> bytes:
    text = f"{short_path(frame.f_code.co_filename)}:{frame.f_lineno}".encode("utf-8", "replace")
    return text if len(text) <= SITE_BYTES else b"..." + text[-(SITE_BYTES - 3):]


def here(skip: int = 2, _codes: Dict[int, Dict[int, bytes]] = _codes) -> bytes:
    """``b"path:line"`` of the first frame outside the library above the caller's ``skip - 1`` frames (b"" if none).

    The hot path of every flight record: a frame costs one lookup (the map is bound as a default: a local).
    """
    try:
        frame: Optional[FrameType] = sys._getframe(skip)
    except ValueError:
        return UNKNOWN
    while frame is not None:
        code = frame.f_code
        sites = _codes.get(id(code))
        if sites is None:
            sites = _sites_of(code)
        if sites is not _LIBRARY:
            site = sites.get(frame.f_lasti)
            if site is None:
                site = sites[frame.f_lasti] = _site_text(frame)
            return site
        frame = frame.f_back
    return UNKNOWN


def trim_traceback(tb: Optional[TracebackType]) -> Tuple[Optional[TracebackType], int]:
    """``tb`` cut after the last frame outside the library that calls into it, and how many frames were cut.

    Unchanged (0 cut) when the innermost frame is not the library's or no user frame calls it.
    """
    entries: List[TracebackType] = []
    while tb is not None:
        entries.append(tb)
        tb = tb.tb_next
    if not entries or not is_library(entries[-1].tb_frame.f_code.co_filename):
        return (entries[0] if entries else None), 0
    last_user = max((i for i, e in enumerate(entries) if not is_library(e.tb_frame.f_code.co_filename)), default=-1)
    if last_user < 0:
        return entries[0], 0
    kept = [TracebackType(None, e.tb_frame, e.tb_lasti, e.tb_lineno) for e in entries[:last_user + 1]]
    for outer, inner in zip(kept, kept[1:]):
        outer.tb_next = inner
    return kept[0], len(entries) - last_user - 1
