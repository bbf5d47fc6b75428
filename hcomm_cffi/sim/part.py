"""``Part``: the C functions of one vendor header (or one section of acl/acl_rt.h) on the emulator.

A SimLibrary holds one part per header, all over one shared SimState; the C functions of a part are
its methods wrapped by ``errors.entry`` (:func:`c_functions`).
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Tuple

from .._ffi import ffi
from .errors import HcclResult, SimError
from .state import SimState

__all__ = ["Part", "c_functions", "check_out"]


class Part:
    """The emulated functions of ``HEADERS`` (the header comments of hcomm_cffi/_cdef.py declaring them)."""

    HEADERS: Tuple[str, ...] = ()

    def __init__(self, state: SimState) -> None:
        self.state = state


def c_functions(part: object) -> Dict[str, Callable[..., Any]]:
    """The emulated C functions of ``part`` by name: its methods that ``errors.entry`` wraps, bound."""
    out: Dict[str, Callable[..., Any]] = {}
    for attr in dir(type(part)):
        if getattr(getattr(type(part), attr), "c_function", None) == attr:
            out[attr] = getattr(part, attr)
    return out


def check_out(ptr: Any, what: str) -> None:
    """An out (or required) pointer argument ``what`` of an HCCL function: NULL is HCCL_E_PTR."""
    if ptr is None or ptr == ffi.NULL:
        raise SimError(HcclResult.E_PTR, f"{what} is NULL")
