"""``CannLibrary``: the real CANN C functions, resolved by name from libhcomm.so, libhccl.so and libacl_rt.so.

Implements the lib contract of docs/design/architecture.md: one attribute per C function, called with cffi
arguments, returning the C return value.  Symbols are resolved on first access (a missing one
raises :class:`~hcomm_cffi.errors.MissingSymbolError`, an ``AttributeError``) and then cached on
the instance, so later calls cost one attribute lookup.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Dict, List, Mapping, Optional

from .._ffi import ffi
from ..errors import MissingSymbolError
from .contract import CANN, Backend, Capabilities
from .emulated import emulated_install, load_failure_message, start_embedded
from .loader import LibraryLoadError, open_library, require_libraries

__all__ = ["CannLibrary", "library_for", "HCCL_LIBRARY_FUNCTIONS"]

# Functions exported by libhccl.so (hccl.h collectives, hccl_mc2.h, and the HcclBarrier dispatcher).
HCCL_LIBRARY_FUNCTIONS = frozenset({
    "HcclAllReduce", "HcclBroadcast", "HcclReduceScatter", "HcclReduceScatterV", "HcclScatter",
    "HcclAllGather", "HcclAllGatherV", "HcclSend", "HcclRecv", "HcclAlltoAllVC", "HcclAlltoAllV",
    "HcclAlltoAll", "HcclReduce", "HcclBatchSendRecv", "HcclBarrier",
    "HcclKfcAllocOpArgs", "HcclKfcFreeOpArgs", "HcclKfcOpArgsSetSrcDataType",
    "HcclKfcOpArgsSetDstDataType", "HcclKfcOpArgsSetReduceType", "HcclKfcOpArgsSetCount",
    "HcclKfcOpArgsSetAlgConfig", "HcclKfcOpArgsSetCommEngine", "HcclCreateOpResCtx",
})

_NEVER_OPEN = "libhccl_compat.so"


def library_for(name: str) -> str:
    """Which library exports C function ``name``: 'hccl' (collectives, HcclBarrier), 'acl' (acl*) or 'hcomm' (the rest)."""
    if name in HCCL_LIBRARY_FUNCTIONS:
        return "hccl"
    if name.startswith("acl"):
        return "acl"
    return "hcomm"


class CannLibrary(Backend):
    """The C functions of an installed CANN, dlopen'ed with RTLD_NOW | RTLD_GLOBAL (libhcomm first).

    A library that fails to load raises :class:`~hcomm_cffi.lib.loader.LibraryLoadError` naming
    the missing dependency and the fix; there is no fallback to the emulator.  The backend
    contract's answers are CANN's (:data:`~hcomm_cffi.lib.contract.CANN`): nothing beyond the C functions.
    """

    capabilities: Capabilities = CANN

    def __init__(
        self,
        paths: Optional[Mapping[str, str]] = None,
        dlopen: Optional[Callable[[str], Any]] = None,
    ) -> None:
        resolved = dict(paths) if paths is not None else require_libraries()
        for key in ("hcomm", "hccl", "acl"):
            if key not in resolved:
                raise ValueError(f"paths={paths!r} lacks the {key!r} library; expected keys hcomm, hccl, acl")
            if os.path.basename(resolved[key]) == _NEVER_OPEN:
                raise ValueError(f"paths[{key!r}]={resolved[key]!r}: {_NEVER_OPEN} only holds stubs and is never opened")
        opener = dlopen or (lambda path: ffi.dlopen(path, ffi.RTLD_NOW | ffi.RTLD_GLOBAL))
        self._paths: Dict[str, str] = resolved
        self._handles: Dict[str, Any] = {}
        self._dependencies: List[Any] = []         # kept open: a collected cffi handle dlcloses
        for key in ("hcomm", "hccl", "acl"):       # libhcomm first: libhccl.so depends on it
            # each after its dependencies in its own directory (no RPATH on the vendor libraries)
            try:
                *dependencies, self._handles[key] = open_library(resolved[key], opener)
            except (OSError, ImportError) as exc:
                if emulated_install(resolved[key]) is None:
                    raise                          # real CANN: open_library's text names the fix
                raise LibraryLoadError(load_failure_message(resolved[key], exc)) from None
            self._dependencies.extend(dependencies)
        if dlopen is None and emulated_install(resolved["hcomm"]) is not None:
            start_embedded(lambda: self.aclrtGetSocName())   # `hcomm sim build-libs`: start its interpreter now

    @property
    def paths(self) -> Dict[str, str]:
        """The library files in use, by key ('hcomm', 'hccl', 'acl')."""
        return dict(self._paths)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        key = library_for(name)
        try:
            function = getattr(self._handles[key], name)
        except (AttributeError, ffi.error, NotImplementedError) as exc:
            # ffi.error: not exported; AttributeError: not in the cdef; NotImplementedError: a
            # signature cffi cannot call in ABI mode
            raise MissingSymbolError(name, self._paths[key], str(exc)) from None
        setattr(self, name, function)         # cache: next lookups skip __getattr__
        return function

    def __repr__(self) -> str:
        return f"CannLibrary({self._paths!r})"
