"""Runs inside ``libhcomm_sim_core.so``: binds every exported C function to the emulator.

The core library's ``embedding_init_code`` (written by :mod:`.build`) imports this module and calls
:func:`bind` with the library's own ``ffi`` and the list of functions it exports.  A C program that
loads the library starts an interpreter for it; a Python process that dlopens it (the ``cann``
backend over the emulated install) runs this in its own interpreter, and every SimLibrary shares
the process-wide emulator state.

Re-entrancy: the functions are implemented by a :class:`~hcomm_cffi.sim.SimLibrary` constructed
here, never by ``hcomm_cffi.lib.load()``, so ``HCOMM_BACKEND=cann`` cannot route them back into
this library.
"""
from __future__ import annotations

import sys
from typing import Any, Callable, List, Sequence, Tuple

from .._ffi import ffi
from ..enums import HCCL_ROOT_INFO_BYTES
from ..sim import SimLibrary
from ..sim.errors import HcclResult, set_last_error

__all__ = ["bind", "bootstrap_root_info", "unsupported", "BOOTSTRAP_FUNCTION", "UNSUPPORTED_FUNCTION"]

BOOTSTRAP_FUNCTION = "HcommSimBootstrapRootInfo"
#: the core's ``hcommsim_Unsupported(const char *function)``: what every vendor_stubs.py stub calls
UNSUPPORTED_FUNCTION = "Unsupported"
_E_INTERNAL = int(HcclResult.E_INTERNAL)


def unsupported(function: Any) -> int:
    """A declared vendor function the emulator only exports: name it in aclGetRecentErrMsg, HCCL_E_NOT_SUPPORT."""
    name = ffi.string(ffi.cast("char *", function)).decode("utf-8", "replace")
    set_last_error(f"{name} is not implemented by the hcomm_cffi emulator (it is exported so that programs link)")
    return int(HcclResult.E_NOT_SUPPORT)


def bootstrap_root_info(sim: Any, rank: int, n_ranks: int, root_info: Any) -> int:
    """HcommSimBootstrapRootInfo: the job's root info in ``*root_info`` via hcomm_cffi.bootstrap (rank 0 makes it)."""
    from ..binding import Binding
    from ..bootstrap import discover

    if root_info == ffi.NULL:
        set_last_error(f"{BOOTSTRAP_FUNCTION}: rootInfo is NULL")
        return int(HcclResult.E_PTR)
    try:
        spec = discover(Binding(sim), rank, n_ranks)
    except Exception as exc:  # a C function never raises: report, return a code
        message = f"{BOOTSTRAP_FUNCTION}(rank={rank}, nRanks={n_ranks}): {exc}"
        set_last_error(message)
        print(f"hcomm_cffi emulator: {message}", file=sys.stderr, flush=True)
        return _E_INTERNAL
    assert spec.root_info is not None
    ffi.memmove(root_info, spec.root_info, HCCL_ROOT_INFO_BYTES)
    return 0


def _adapter(core_ffi: Any, impl: Callable[..., Any], ctype: str) -> Callable[..., Any]:
    """``impl`` called with the core's cdata re-typed as the package's (SimLibrary checks types by identity)."""
    ftype = ffi.typeof(ctype)
    casts: List[Tuple[int, Any]] = [(i, t) for i, t in enumerate(ftype.args) if t.kind in ("pointer", "function")]
    result = ftype.result
    returns_pointer = result.kind == "pointer"
    result_cname = result.cname

    def call(*args: Any) -> Any:
        if casts:
            args_l = list(args)
            for i, t in casts:
                args_l[i] = ffi.cast(t, args_l[i])
            args = tuple(args_l)
        out = impl(*args)
        if returns_pointer:
            return core_ffi.cast(result_cname, out)
        return out
    return call


def bind(core_ffi: Any, functions: Sequence[Tuple[str, str]], prefix: str, c_program: bool = False) -> None:
    """Define ``prefix + name`` of the core library for every ``(name, "ret(*)(params)")`` of ``functions``.

    ``c_program``: the library started this interpreter (a C program, which has no Comm API to start
    HCOMM_TRACE and never runs the exit-time flush): the emulator traces from each communicator's creation.
    """
    sim = SimLibrary(traces_c_program=c_program)   # directly: never through the cann backend
    for name, ctype in functions:
        if name == BOOTSTRAP_FUNCTION:
            impl: Callable[..., Any] = lambda rank, n, root, _sim=sim: bootstrap_root_info(_sim, rank, n, root)
        elif name == UNSUPPORTED_FUNCTION:
            impl = unsupported
        else:
            impl = getattr(sim, name)
        returns_pointer = ffi.typeof(ctype).result.kind == "pointer"
        kwargs = {} if returns_pointer else {"error": _E_INTERNAL}
        core_ffi.def_extern(name=prefix + name, **kwargs)(_adapter(core_ffi, impl, ctype))
