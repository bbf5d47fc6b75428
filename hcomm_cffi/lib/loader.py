"""Find the CANN shared libraries (libhcomm.so, libhccl.so, libacl_rt.so/libascendcl.so) without loading them.

Search order, first hit wins: ``$HCOMM_CANN_LIB_DIR``, ``$HCCL_SO_PATH`` (the file itself for libhccl.so,
its directory for the others), ``$ASCEND_HOME_PATH/lib64``,
``$ASCEND_TOOLKIT_HOME/lib64``, ``dirname($ASCEND_OPP_PATH)/lib64``, the standard install prefixes
under ``/usr/local/Ascend`` and ``$HOME/Ascend``, the ``LD_LIBRARY_PATH`` entries, and finally the
dynamic loader's cache.  ``libhccl_compat.so`` is never a candidate.

``open_library`` dlopens one of them after pre-loading the dependencies in its own directory that
the loader would not find (the vendor libraries carry no RPATH; see ``deps.py``), and turns a
failure into :class:`LibraryLoadError` naming the missing library and the exact fix.
"""
from __future__ import annotations

import functools
import os
import subprocess
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from ..errors import LibraryNotFoundError
from .deps import on_default_path, walk

__all__ = [
    "LIBRARY_SONAMES", "LibrarySearch", "search_places", "find_library", "find_libraries",
    "require_libraries", "not_found_message", "ENV_LIB_DIR", "ENV_HCCL_SO_PATH", "LibraryLoadError",
    "open_library", "load_error_message", "is_system_library",
]

ENV_LIB_DIR = "HCOMM_CANN_LIB_DIR"
# The path of libhccl.so that vllm-ascend users set for its pyhccl backend (vllm-ascend @ 182b75e,
# vllm_ascend/envs.py:61 and vllm_ascend/utils.py:459-474 find_hccl_library); honoured the same way.
ENV_HCCL_SO_PATH = "HCCL_SO_PATH"
_HCCL_SO_LABEL = f"${ENV_HCCL_SO_PATH}"


class LibraryLoadError(ImportError):
    """A CANN library was found but could not be loaded (a missing dependency, wrong architecture, ...)."""

# library key -> sonames tried in order in each directory
LIBRARY_SONAMES: Dict[str, Tuple[str, ...]] = {
    "hcomm": ("libhcomm.so",),
    "hccl": ("libhccl.so",),
    "acl": ("libacl_rt.so", "libascendcl.so"),
}
_NEVER_OPEN = "libhccl_compat.so"

_SYSTEM_PREFIXES = (
    "/usr/local/Ascend/cann",
    "/usr/local/Ascend/ascend-toolkit/latest",
    "/usr/local/Ascend/latest",
)
_HOME_PREFIXES = ("Ascend/cann", "Ascend/ascend-toolkit/latest", "Ascend/latest")

DYNAMIC_LOADER = "the dynamic loader's cache (/etc/ld.so.cache and default directories)"


@dataclass
class LibrarySearch:
    """Where one library was found (``path``) or, if it was not, every place that was looked at."""

    key: str
    sonames: Tuple[str, ...]
    path: Optional[str] = None
    found_in: Optional[str] = None          # the label of the place that matched
    searched: List[str] = field(default_factory=list)

    @property
    def found(self) -> bool:
        """True when a file was found."""
        return self.path is not None

    def as_dict(self) -> Dict[str, object]:
        """JSON-friendly view: name, path (or None), where it was found, places searched."""
        return {"name": self.sonames[0], "sonames": list(self.sonames), "path": self.path,
                "found_in": self.found_in, "searched": list(self.searched)}


def search_places(environ: Optional[Mapping[str, str]] = None) -> List[Tuple[str, Optional[str]]]:
    """The ordered (label, directory-or-None) places to look in; None means the variable is unset."""
    env = os.environ if environ is None else environ
    places: List[Tuple[str, Optional[str]]] = []

    override = env.get(ENV_LIB_DIR)
    places.append((f"${ENV_LIB_DIR}", override or None))
    hccl_so = env.get(ENV_HCCL_SO_PATH)
    places.append((_HCCL_SO_LABEL, os.path.dirname(os.path.abspath(hccl_so)) if hccl_so else None))
    for var in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"):
        root = env.get(var)
        places.append((f"${var}/lib64", os.path.join(root, "lib64") if root else None))
    opp = env.get("ASCEND_OPP_PATH")
    opp_dir = os.path.join(os.path.dirname(opp.rstrip("/")), "lib64") if opp else None
    places.append(("dirname($ASCEND_OPP_PATH)/lib64", opp_dir))
    for prefix in _SYSTEM_PREFIXES:
        path = os.path.join(prefix, "lib64")
        places.append((path, path))
    home = env.get("HOME")
    for rel in _HOME_PREFIXES:
        label = f"$HOME/{rel}/lib64"
        places.append((label, os.path.join(home, rel, "lib64") if home else None))
    for entry in env.get("LD_LIBRARY_PATH", "").split(":"):
        if entry:
            places.append(("$LD_LIBRARY_PATH entry", entry))
    return places


def _describe(label: str, directory: Optional[str]) -> str:
    if directory is None:
        return f"{label} (not set)"
    if label == directory:
        return directory
    return f"{directory} ({label})"


@functools.lru_cache(maxsize=1)
def _ldconfig_cache() -> Dict[str, str]:
    """soname -> path from ``ldconfig -p`` (empty if ldconfig is unavailable); read once per process."""
    for exe in ("/sbin/ldconfig", "/usr/sbin/ldconfig", "ldconfig"):
        try:
            out = subprocess.run([exe, "-p"], capture_output=True, text=True, timeout=10,
                                 env={"LC_ALL": "C", "LANG": "C"}).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        cache: Dict[str, str] = {}
        for line in out.splitlines():
            name, sep, path = line.strip().partition(" => ")
            if sep:
                cache.setdefault(name.split(" (", 1)[0], path.strip())
        return cache
    return {}


def _default_loader_lookup(soname: str) -> Optional[str]:
    return _ldconfig_cache().get(soname)


def find_library(
    key: str,
    environ: Optional[Mapping[str, str]] = None,
    loader_lookup: Optional[Callable[[str], Optional[str]]] = None,
) -> LibrarySearch:
    """Search for library ``key`` ('hcomm', 'hccl' or 'acl'); never raises, reports what it looked at."""
    sonames = LIBRARY_SONAMES[key]
    env = os.environ if environ is None else environ
    result = LibrarySearch(key, sonames)
    for label, directory in search_places(env):
        result.searched.append(_describe(label, directory))
        if directory is None:
            continue
        names = sonames
        if label == _HCCL_SO_LABEL and key == "hccl":    # the variable names the file, whatever its name
            names = (os.path.basename(env[ENV_HCCL_SO_PATH]),)
        for soname in names:
            candidate = os.path.join(directory, soname)
            if os.path.isfile(candidate):
                result.path = os.path.abspath(candidate)
                result.found_in = label
                return result
    result.searched.append(DYNAMIC_LOADER)
    lookup = loader_lookup or _default_loader_lookup
    for soname in sonames:
        hit = lookup(soname)
        if hit and os.path.basename(hit) != _NEVER_OPEN:
            # dlopen resolves a bare soname through the same cache
            result.path = hit
            result.found_in = "dynamic loader"
            return result
    return result


def find_libraries(
    environ: Optional[Mapping[str, str]] = None,
    loader_lookup: Optional[Callable[[str], Optional[str]]] = None,
) -> Dict[str, LibrarySearch]:
    """Search for every CANN library: {'hcomm': ..., 'hccl': ..., 'acl': ...}, each with its path or the places searched."""
    return {key: find_library(key, environ, loader_lookup) for key in LIBRARY_SONAMES}


def not_found_message(missing: List[LibrarySearch]) -> str:
    """The text of LibraryNotFoundError: what is missing, every place searched in order, and how to fix it."""
    names = ", ".join(" or ".join(m.sonames) for m in missing)
    lines = [f"CANN libraries not found: {names}."]
    for m in missing:
        lines.append(f"Searched for {' / '.join(m.sonames)} in:")
        lines.extend(f"  - {place}" for place in m.searched)
    lines.append(
        "To fix: source the CANN environment (source /usr/local/Ascend/cann/set_env.sh, or the "
        "set_env.sh of your install), or set HCOMM_CANN_LIB_DIR to the directory holding "
        "libhcomm.so, or run on the emulator with HCOMM_BACKEND=sim."
    )
    return "\n".join(lines)


def require_libraries(
    environ: Optional[Mapping[str, str]] = None,
    loader_lookup: Optional[Callable[[str], Optional[str]]] = None,
) -> Dict[str, str]:
    """Paths of all three libraries, or LibraryNotFoundError listing every place searched for the missing ones."""
    found = find_libraries(environ, loader_lookup)
    missing = [s for s in found.values() if not s.found]
    if missing:
        raise LibraryNotFoundError(not_found_message(missing))
    return {key: s.path for key, s in found.items() if s.path is not None}


def is_system_library(name: str) -> bool:
    """True when the dynamic loader finds soname ``name`` in its cache or default directories (never opened by path)."""
    return name in _ldconfig_cache() or on_default_path(name)


def _set_env_scripts(lib_dir: str) -> List[str]:
    """The set_env.sh that would put ``lib_dir`` on LD_LIBRARY_PATH: <prefix>/set_env.sh (cann) or one level up (toolkit/latest)."""
    parent = os.path.dirname(lib_dir.rstrip("/"))
    return [os.path.join(parent, "set_env.sh"), os.path.join(os.path.dirname(parent), "set_env.sh")]


def _locate(names: List[str], root: str, max_depth: int = 4, max_entries: int = 20000) -> List[str]:
    """Directories under ``root`` (bounded walk) holding any of ``names``: where an LD_LIBRARY_PATH entry would find them."""
    found: List[str] = []
    seen = 0
    base_depth = root.rstrip("/").count("/")
    for directory, subdirs, files in os.walk(root):
        seen += len(files) + len(subdirs)
        if directory.count("/") - base_depth >= max_depth or seen > max_entries:
            subdirs[:] = []
        if any(n in files for n in names) and directory not in found:
            found.append(directory)
    return found


def load_error_message(path: str, reason: str, missing: List[str]) -> str:
    """The text of LibraryLoadError: which library, what it lacks (or what dlopen said), and the exact fix."""
    lib_dir = os.path.dirname(path)
    name = os.path.basename(path)
    if missing:
        lines = [f"{name} was found at {path} but cannot be loaded: it needs {', '.join(missing)}, which "
                 f"{'is' if len(missing) == 1 else 'are'} neither in {lib_dir} nor known to the dynamic loader "
                 f"(dlopen: {reason})."]
    else:
        lines = [f"{name} was found at {path} but cannot be loaded (dlopen: {reason})."]
    scripts = [s for s in _set_env_scripts(lib_dir) if os.path.isfile(s)]
    if missing:
        holders = _locate(missing, os.path.dirname(lib_dir.rstrip("/")))
        ld_path = ":".join(holders) if holders else f"<the directory holding {' and '.join(missing)}>"
    else:
        ld_path = lib_dir
    fixes = [f"source {scripts[0]}"] if scripts else []
    fixes.append(f"export LD_LIBRARY_PATH={ld_path}:$LD_LIBRARY_PATH")
    lines.append(f"To fix: {' or '.join(fixes)} before starting Python; to run on the emulator instead, "
                 f"set HCOMM_BACKEND=sim.")
    return "\n".join(lines)


def open_library(
    path: str,
    opener: Callable[[str], Any],
    is_system: Optional[Callable[[str], bool]] = None,
) -> List[Any]:
    """Handles of what ``path`` needs from its own directory (dependencies first), then of ``path``; LibraryLoadError if any fails.

    Keep every handle: a cffi library object closes its library when collected.
    """
    deps = walk(path, is_system or is_system_library, os.environ)
    handles: List[Any] = []
    for library in deps.preload + [path]:
        try:
            handles.append(opener(library))
        except OSError as exc:
            raise LibraryLoadError(load_error_message(path, str(exc), deps.missing)) from None
    return handles
