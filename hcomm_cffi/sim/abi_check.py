"""ABI-checked emulator: every call goes through a real C function pointer of the declared type.

Each emulator function is wrapped in an ``ffi.callback`` built from its declaration in
``hcomm_cffi/_cdef.py`` (shipped inside the package), so the caller's arguments are converted (and type-checked) by cffi exactly as
for the real ``libhcomm.so``: an int passed where a pointer is declared, a str for a ``char *``,
a wrong struct pointer, all fail here as they would on an Ascend server.  It costs a C round trip
per call, so it is for tests (``HCOMM_SIM_ABI_CHECK=1``), not benchmarks.

:func:`function_types` (the cdef's C functions and their types) also tells the emulator which functions
are declared and which return a pointer (sim/part.py, sim/library.py).
"""
from __future__ import annotations

import functools
import threading
from typing import Any, Callable, Dict

from .._cdef import CDEF, DECLARATION, FUNCTIONS_MARKER
from .._ffi import ffi
from ..enums import HcclResult
from ..lib.contract import Backend, Capabilities

__all__ = ["AbiCheckedLibrary", "function_types", "returns_pointer"]


@functools.lru_cache(maxsize=1)
def function_types() -> Dict[str, str]:
    """``{function name: "ret(*)(params)"}`` for every C function of the package's cdef (the CANN host API the
    bindings know; hcomm_cffi/_cdef.py ships inside the package)."""
    declarations = DECLARATION.findall(CDEF[CDEF.find(FUNCTIONS_MARKER):])
    return {name: f"{ret.strip()}(*)({params.strip() or 'void'})" for ret, name, params in declarations}


def returns_pointer(ctype: str) -> bool:
    """Whether a function type of :func:`function_types` returns a pointer (its failure value is NULL)."""
    return ctype.split("(*)")[0].strip().endswith("*")


_carried = threading.local()     # an exception a callback could not raise, raised once it returned


def _carry(exc_type: Any, value: BaseException, tb: Any) -> None:
    """cffi's onerror: keep the exception a callback raised, for the caller to raise once the callback returned.

    What reaches here came from outside the entry points (Ctrl-C, an alarm handler, pytest-timeout's signal while
    the emulator waits); a callback cannot raise into C, and as an error code it would look to the caller's
    wait-site handling like an ordinary library failure.
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
        self.capabilities: Capabilities = lib.capabilities

    def __getattr__(self, name: str) -> Any:
        ctype = self._types.get(name)
        if ctype is None:
            return getattr(self._lib, name)
        impl = getattr(self._lib, name)
        # what C gets if the call raises anyway: E_INTERNAL, or NULL (error=None) from a pointer function
        error = None if returns_pointer(ctype) else int(HcclResult.E_INTERNAL)
        cb = ffi.callback(ctype, impl, error=error, onerror=_carry)
        call = _raising_carried(cb)         # holds the callback: it lives as long as the attribute
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
