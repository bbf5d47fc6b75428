"""ABI-checked emulator: every call goes through a real C function pointer of the declared type.

Each emulator function is wrapped in an ``ffi.callback`` built from its declaration in
``hcomm_cffi/_cdef.py`` (shipped inside the package), so the caller's arguments are converted (and type-checked) by cffi exactly as
for the real ``libhcomm.so``: an int passed where a pointer is declared, a str for a ``char *``,
a wrong struct pointer, all fail here as they would on an Ascend server.  It costs a C round trip
per call, so it is for tests (``HCOMM_SIM_ABI_CHECK=1``), not benchmarks.
"""
from __future__ import annotations

import functools
import threading
from typing import Any, Callable, Dict, Optional

from .._cdef import CDEF, DECLARATION, FUNCTIONS_MARKER
from .._ffi import ffi
from ..enums import HcclResult
from ..lib.contract import Backend, Capabilities

__all__ = ["AbiCheckedLibrary", "function_types", "declared_functions"]

_types: Optional[Dict[str, str]] = None
_lock = threading.Lock()


def function_types(cdef: Optional[str] = None) -> Dict[str, str]:
    """``{function name: "ret(*)(params)"}`` for every function declared in ``cdef`` (default: the package's CDEF)."""
    global _types
    if cdef is None and _types is not None:
        return _types
    if cdef is None:
        cdef = CDEF
    start = cdef.find(FUNCTIONS_MARKER)
    found = {}
    for ret, name, params in DECLARATION.findall(cdef[start:]):
        found[name] = f"{ret.strip()}(*)({params.strip() or 'void'})"
    with _lock:
        _types = found
    return found


@functools.lru_cache(maxsize=1)
def declared_functions() -> "frozenset[str]":
    """Names of every C function of the cdef (the CANN host API the bindings know).

    Read from the compiled ffi itself (``dir()`` of a library handle lists the declarations without
    resolving any symbol), so it works from an installed package without build_ffi.py.
    """
    return frozenset(name for name in dir(ffi.dlopen(None)) if name.startswith(("Hccl", "Hcomm", "acl")))


_carried = threading.local()     # an exception a callback could not raise, raised once it returned


def _carry(exc_type: Any, value: BaseException, tb: Any) -> None:
    """cffi's onerror: keep the exception a callback raised, for the caller to raise once the callback returned.

    The emulator's entry points turn their own exceptions into return codes, so what reaches here came
    from outside them: Ctrl-C, an alarm handler or pytest-timeout's signal arriving while the emulator
    waits.  A callback cannot raise into C; without this the exception would be printed and become an
    error code, and the caller's wait-site handling (the communicator is abandoned, the exception goes
    on) would see an ordinary library failure instead.
    """
    _carried.exc = value


def _raising_carried(cb: Any) -> Callable[..., Any]:
    """``cb`` that raises, once it returned, the exception :func:`_carry` kept during it."""
    def call(*args: Any) -> Any:
        result = cb(*args)
        exc = getattr(_carried, "exc", None)
        if exc is not None:
            _carried.exc = None
            raise exc
        return result
    return call


class AbiCheckedLibrary(Backend):
    """Wraps a SimLibrary: attribute ``F`` is a C function pointer of F's declared type.

    The backend contract (lib/contract.py) is the wrapped library's: its capabilities and methods
    (each method of ``Backend`` is forwarded, below the class).
    """

    backend_name = "sim"

    def __init__(self, lib: Any) -> None:
        self._lib = lib
        self._types = function_types()
        self._callbacks: Dict[str, Any] = {}
        self.capabilities: Capabilities = lib.capabilities

    def __getattr__(self, name: str) -> Any:
        ctype = self._types.get(name)
        if ctype is None:
            return getattr(self._lib, name)
        impl = getattr(self._lib, name)
        returns_pointer = ctype.split("(*)")[0].strip().endswith("*")
        error = None if returns_pointer else int(HcclResult.E_INTERNAL)
        cb = (ffi.callback(ctype, impl, error=error, onerror=_carry) if error is not None
              else ffi.callback(ctype, impl, onerror=_carry))
        self._callbacks[name] = cb
        call = _raising_carried(cb)
        setattr(self, name, call)
        return call

    @property
    def raw(self) -> Any:
        """The wrapped SimLibrary (for emulator-specific helpers such as checker_reports)."""
        return self._lib


def _forwarded(name: str) -> Callable[..., Any]:
    def call(self: AbiCheckedLibrary, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.raw, name)(*args, **kwargs)
    call.__name__ = name
    call.__doc__ = "The wrapped library's."
    return call


for _name, _method in vars(Backend).items():
    if callable(_method) and not _name.startswith("_"):
        setattr(AbiCheckedLibrary, _name, _forwarded(_name))
