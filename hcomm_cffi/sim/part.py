"""``Part``: the C functions of one vendor header (or one section of acl/acl_rt.h) on the emulator.

A SimLibrary holds one part per header, all over one shared SimState.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Tuple

from .._ffi import ffi
from .abi_check import function_types, returns_pointer
from .errors import HcclResult, SimError, entry
from .state import SimState

__all__ = ["Part", "c_functions", "check_out", "C_PREFIXES"]

C_PREFIXES = ("Hccl", "Hcomm", "acl")


class Part:
    """The emulated functions of ``HEADERS`` (the header comments of hcomm_cffi/_cdef.py declaring them).

    A method named as a C function (``Hccl*``, ``Hcomm*``, ``acl*``) is that function: the class wraps it by
    ``errors.entry`` (a function the cdef declares to return a pointer returns NULL on failure, any other
    its error code), unless the method is an entry already (a library collective: ``group.collective``).
    """

    HEADERS: Tuple[str, ...] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        types = function_types()
        for name, method in list(vars(cls).items()):
            if name.startswith(C_PREFIXES) and callable(method) and not hasattr(method, "c_function"):
                pointer = name in types and returns_pointer(types[name])
                setattr(cls, name, entry(method, failure=ffi.NULL if pointer else None))

    def __init__(self, state: SimState) -> None:
        self.state = state


def c_functions(part: object) -> Dict[str, Callable[..., Any]]:
    """The emulated C functions of ``part`` by name: its methods that ``errors.entry`` wraps, bound."""
    out: Dict[str, Callable[..., Any]] = {}
    for attr in dir(type(part)):
        if getattr(getattr(type(part), attr), "c_function", None) == attr:
            out[attr] = getattr(part, attr)
    return out


def check_out(ptr: Any, what: str, code: int = HcclResult.E_PTR) -> None:
    """An out (or required) pointer argument ``what``: NULL (or None, which cffi passes as NULL) is error
    ``code``: HCCL_E_PTR for an HCCL function, ACL_ERROR_INVALID_PARAM for an ACL one."""
    if ptr is None or ptr == ffi.NULL:
        raise SimError(code, f"{what} is NULL")
