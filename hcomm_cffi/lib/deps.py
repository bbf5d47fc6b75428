"""What a shared library needs (ELF ``DT_NEEDED``), and the order to pre-load those of its own directory.

The vendor's ``libhcomm.so`` carries no RPATH/RUNPATH to its dependencies (``libhccl_alg.so``,
``libhccl_plf.so``, ``libhccl_v2.so``, ``libacl_rt.so``, ``libc_sec.so``, ``libunified_dlog.so``;
hcomm src/legacy/ascend910/framework/hcomm.cmake @ 8958adb links them plainly), so ``dlopen`` of it
by absolute path fails unless ``set_env.sh`` put its directory on ``LD_LIBRARY_PATH``.  Loading each
dependency found in the same directory first, by path and dependencies first, fixes that: glibc
matches a later ``DT_NEEDED`` name against the ``DT_SONAME`` of an object already loaded.
Reads files only; never loads anything.
"""
from __future__ import annotations

import os
import struct
from typing import Callable, List, Mapping, NamedTuple, Optional, Tuple

__all__ = ["elf_needed", "on_default_path", "on_library_path", "walk", "DependencyWalk"]

_PT_LOAD, _PT_DYNAMIC = 1, 2
_DT_NULL, _DT_NEEDED, _DT_STRTAB = 0, 1, 5
_ELF_MAGIC = b"\x7fELF"
# directories the dynamic loader searches without being told (glibc's trusted defaults, multiarch)
_DEFAULT_DIRS = ("/lib", "/usr/lib", "/lib64", "/usr/lib64", "/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu",
                 "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu")


def _read_dynamic(data: bytes) -> Tuple[List[int], Optional[int], List[Tuple[int, int, int]]]:
    """(DT_NEEDED string offsets, DT_STRTAB address, PT_LOAD (vaddr, offset, filesz)) of an ELF image."""
    is64 = data[4] == 2
    end = "<" if data[5] == 1 else ">"
    if is64:
        phoff, = struct.unpack_from(end + "Q", data, 0x20)
        phentsize, phnum = struct.unpack_from(end + "HH", data, 0x36)
    else:
        phoff, = struct.unpack_from(end + "I", data, 0x1C)
        phentsize, phnum = struct.unpack_from(end + "HH", data, 0x2A)
    loads: List[Tuple[int, int, int]] = []
    dynamic: Optional[Tuple[int, int]] = None
    for i in range(phnum):
        at = phoff + i * phentsize
        if is64:
            p_type, _flags, p_offset, p_vaddr, _paddr, p_filesz = struct.unpack_from(end + "IIQQQQ", data, at)
        else:
            p_type, p_offset, p_vaddr, _paddr, p_filesz = struct.unpack_from(end + "IIIII", data, at)
        if p_type == _PT_LOAD:
            loads.append((p_vaddr, p_offset, p_filesz))
        elif p_type == _PT_DYNAMIC:
            dynamic = (p_offset, p_filesz)
    needed: List[int] = []
    strtab: Optional[int] = None
    if dynamic is not None:
        entry = struct.Struct(end + ("qQ" if is64 else "iI"))
        offset, size = dynamic
        for at in range(offset, offset + size - entry.size + 1, entry.size):
            tag, value = entry.unpack_from(data, at)
            if tag == _DT_NULL:
                break
            if tag == _DT_NEEDED:
                needed.append(value)
            elif tag == _DT_STRTAB:
                strtab = value
    return needed, strtab, loads


def elf_needed(path: str) -> Tuple[str, ...]:
    """The ``DT_NEEDED`` sonames of the ELF file ``path``, in order; () when it is missing or not ELF."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError:
        return ()
    if len(data) < 0x40 or data[:4] != _ELF_MAGIC:
        return ()
    try:
        needed, strtab, loads = _read_dynamic(data)
    except struct.error:            # truncated or corrupt headers: dlopen will say why
        return ()
    if strtab is None:
        return ()
    base = next((offset + strtab - vaddr for vaddr, offset, size in loads if vaddr <= strtab < vaddr + size), None)
    if base is None:
        return ()
    names = []
    for rel in needed:
        start = base + rel
        stop = data.find(b"\0", start)
        if start < len(data) and stop > start:
            names.append(data[start:stop].decode("utf-8", "replace"))
    return tuple(names)


def on_default_path(name: str) -> bool:
    """True when ``name`` sits in one of the dynamic loader's default directories (a system library)."""
    return any(os.path.isfile(os.path.join(d, name)) for d in _DEFAULT_DIRS)


def on_library_path(name: str, environ: Mapping[str, str]) -> Optional[str]:
    """Where an ``LD_LIBRARY_PATH`` entry supplies ``name``, else None."""
    for directory in environ.get("LD_LIBRARY_PATH", "").split(":"):
        if directory and os.path.isfile(os.path.join(directory, name)):
            return os.path.join(directory, name)
    return None


class DependencyWalk(NamedTuple):
    """``preload``: paths in the library's directory, dependencies first; ``missing``: sonames nothing supplies."""

    preload: List[str]
    missing: List[str]


def walk(library: str, is_system: Callable[[str], bool], environ: Mapping[str, str]) -> DependencyWalk:
    """What ``library`` needs, transitively: which of its directory's files to open first, and what no place supplies.

    A system library (``is_system``: the loader's cache or default directories) is left to the loader
    and not looked into, so libc and friends are never opened by path.  A dependency on
    ``LD_LIBRARY_PATH`` but not in the directory is looked into (its own dependencies may be in the
    directory) but not pre-loaded.  A bare soname (found through the loader) needs nothing.
    """
    result = DependencyWalk([], [])
    if not os.path.isabs(library):
        return result
    directory = os.path.dirname(library)
    seen = {os.path.basename(library)}

    def visit(path: str) -> None:
        for name in elf_needed(path):
            if name in seen or is_system(name):
                continue
            seen.add(name)
            candidate = os.path.join(directory, name)
            if os.path.isfile(candidate):
                visit(candidate)
                result.preload.append(candidate)
                continue
            elsewhere = on_library_path(name, environ)
            if elsewhere is None:
                result.missing.append(name)
            else:
                visit(elsewhere)

    visit(library)
    return result
