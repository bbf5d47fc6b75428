"""Find the CANN shared libraries (libhcomm.so, libhccl.so, libacl_rt.so/libascendcl.so) without loading them.

Search order, first hit wins: ``$HCOMM_CANN_LIB_DIR``, ``$ASCEND_HOME_PATH/lib64``,
``$ASCEND_TOOLKIT_HOME/lib64``, ``dirname($ASCEND_OPP_PATH)/lib64``, the standard install prefixes
under ``/usr/local/Ascend`` and ``$HOME/Ascend``, the ``LD_LIBRARY_PATH`` entries, and finally the
dynamic loader's cache.  ``libhccl_compat.so`` is never a candidate.
"""
from __future__ import annotations

import functools
import os
import subprocess
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Mapping, Optional, Tuple

from ..errors import LibraryNotFoundError

__all__ = [
    "LIBRARY_SONAMES", "LibrarySearch", "search_places", "find_library", "find_libraries",
    "require_libraries", "not_found_message", "ENV_LIB_DIR",
]

ENV_LIB_DIR = "HCOMM_CANN_LIB_DIR"

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
    result = LibrarySearch(key, sonames)
    for label, directory in search_places(environ):
        result.searched.append(_describe(label, directory))
        if directory is None:
            continue
        for soname in sonames:
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
