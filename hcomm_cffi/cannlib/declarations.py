"""The package's one cdef (``build_ffi.CDEF``) split into what the emulated CANN install is built from.

``types_cdef()`` is everything before the function section (typedefs, enums, structs);
``prototypes()`` parses every function declaration into a :class:`Prototype`; ``exported()`` is
the subset the emulated libraries export, each with the library that exports it on CANN
(:func:`hcomm_cffi.lib.cann.library_for`).
"""
from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass
from typing import List, Tuple

from .._cdef import DECLARATION, FUNCTIONS_MARKER
from ..lib.cann import library_for
from ..sim.library import DEVICE_ONLY_FUNCTIONS

__all__ = ["Prototype", "cdef_text", "types_cdef", "prototypes", "exported", "cdef_digest", "CORE_PREFIX",
           "FUNCTIONS_MARKER", "PROFILER_KEY"]

#: The library key of acl/acl_prof.h's functions: CANN's profiler library libmsprofiler.so exports them.
PROFILER_KEY = "msprofiler"
#: The core library exports every function as CORE_PREFIX + name; the vendor-named libraries forward to it.
CORE_PREFIX = "hcommsim_"

_HEADER_COMMENT = re.compile(r"^/\* ((?:hccl|hcomm|acl)/\w+\.h) \*/$", re.M)


@dataclass(frozen=True)
class Prototype:
    """One C function of the cdef: return type, name, parameters as declared, and the vendor header."""

    ret: str
    name: str
    params: str
    header: str

    @property
    def param_list(self) -> List[Tuple[str, str]]:
        """``[(type, name), ...]`` of the parameters (empty for ``void``)."""
        if self.params.strip() in ("", "void"):
            return []
        out = []
        for i, raw in enumerate(p.strip() for p in self.params.split(",")):
            m = re.match(r"^(.*?[\s\*])([A-Za-z_]\w*)$", raw)
            out.append((m.group(1).strip(), m.group(2)) if m else (raw, f"arg{i}"))
        return out

    @property
    def library(self) -> str:
        """The library key that exports it on CANN: 'hcomm', 'hccl', 'acl' or 'msprofiler' (aclprof*)."""
        return PROFILER_KEY if self.name.startswith("aclprof") else library_for(self.name)

    def declaration(self, name: str = "") -> str:
        """``ret name(params);`` (``name`` defaults to the C name)."""
        return f"{self.ret} {name or self.name}({self.params or 'void'});"


@functools.lru_cache(maxsize=1)
def cdef_text() -> str:
    """The package's C declarations (``hcomm_cffi/_cdef.py``, which ``build_ffi.py`` compiles too)."""
    from .._cdef import CDEF
    return str(CDEF)


def types_cdef() -> str:
    """The typedefs, enums and structs of the cdef (everything before the functions)."""
    text = cdef_text()
    return text[: text.index(FUNCTIONS_MARKER)]


@functools.lru_cache(maxsize=1)
def prototypes() -> Tuple[Prototype, ...]:
    """Every function declaration of the cdef, in order, with the vendor header it belongs to."""
    text = cdef_text()
    out: List[Prototype] = []
    header = ""
    for line in text[text.index(FUNCTIONS_MARKER):].splitlines():
        comment = _HEADER_COMMENT.match(line.strip())
        if comment:
            header = comment.group(1)
            continue
        m = DECLARATION.match(line)
        if m:
            out.append(Prototype(m.group(1).strip(), m.group(2), m.group(3).strip(), header))
    return tuple(out)


def exported() -> Tuple[Prototype, ...]:
    """The functions the host libraries export (device-only ones, such as HcclSymWinGetPeerPointer, are not)."""
    return tuple(p for p in prototypes() if p.name not in DEVICE_ONLY_FUNCTIONS)


def cdef_digest() -> str:
    """A short hash of the cdef: the install is rebuilt when it changes."""
    return hashlib.sha256(cdef_text().encode()).hexdigest()[:16]
