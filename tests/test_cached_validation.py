"""No argument combination is accepted on a cached call that a fresh call refuses (issue 36.2; the fix is issue 33's).

A blocking call repeated on the same NumPy buffers is served from the communicator's fast-call
cache (api/buffers.py), keyed by the buffers' addresses and the arguments as spelled.  The
hostile pass found it accepting what a fresh call refuses: ``out=o.view(np.int32)`` after two float32
calls (float bits written into the int32 array), ``root=True / 1.0 / 1+0j / Fraction(1)`` and
``op=False / 0.0`` -- spellings that hash equal to the valid ones.

Property, for every collective, dtype, ``out=`` (absent, itself, a view of another dtype, the wrong
size), root and op spelling and algorithm: prime the cache with a valid call made twice, then make
the variant on the same memory; if the same variant on fresh arrays of a fresh communicator is
refused, the cached one must be refused too (with the same kind of error).  One rank (the cache is
per communicator and rank), so hypothesis can try many combinations quickly.
"""
from __future__ import annotations

from fractions import Fraction
from typing import Any, Dict, Optional, Tuple

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings, strategies as st

import hcomm_cffi as hcomm
from hcomm_cffi.enums import ReduceOp

COLLECTIVES = ["allreduce", "broadcast", "reduce", "allgather", "reduce_scatter", "alltoall"]
REDUCING = {"allreduce", "reduce", "reduce_scatter"}
ROOTED = {"broadcast", "reduce"}
DTYPES = [np.float32, np.int32, np.float64, np.int64, np.float16, np.int16, np.int8, np.uint8]
#: a view of the same bytes under another dtype of the same element size
SAME_SIZE = {1: [np.int8, np.uint8, np.bool_], 2: [np.float16, np.int16, np.uint16],
             4: [np.float32, np.int32, np.uint32], 8: [np.float64, np.int64, np.complex64]}
ROOTS = [0, 1, -1, True, False, 0.0, 1.0, 0j, 1 + 0j, Fraction(0), Fraction(1), np.int64(0), np.float64(0.0),
         np.bool_(False), "0", None]
OPS = ["sum", "max", "SUM", 0, 2, False, True, 0.0, 2.0, 0j, Fraction(0), np.int64(0), ReduceOp.SUM, ReduceOp.MAX,
       99, -1, "avg", None]
ALGORITHMS = ["auto", "ring", "native"]
OUT_KINDS = ["none", "same", "view", "short", "readonly", "strided"]

Spec = Dict[str, Any]


@pytest.fixture(scope="module")
def world():
    from hcomm_cffi.binding import reset_binding

    w = hcomm.init(rank=0, world_size=1)
    try:
        yield w
    finally:
        hcomm.finalize()
        reset_binding(None)     # ranks forked by later tests load their own backend (HCOMM_BACKEND=cann there)


def _call(comm: Any, spec: Spec, x: np.ndarray, out: Optional[np.ndarray], root: Any, op: Any) -> None:
    coll, kw = spec["coll"], {"algorithm": spec["algorithm"]}
    if out is not None:
        kw["out"] = out
    if coll in ("allreduce", "reduce_scatter"):
        getattr(comm, coll)(x, op, **kw)
    elif coll == "reduce":
        comm.reduce(x, root, op, **kw)
    elif coll == "broadcast":
        kw.pop("out", None)
        comm.broadcast(x, root, **kw)
    else:
        getattr(comm, coll)(x, **kw)


def _out_for(coll: str, x: np.ndarray) -> np.ndarray:
    """A valid output of ``coll`` on one rank for ``x``."""
    return np.zeros(x.size, x.dtype)


def _variant(arr: np.ndarray, kind: str, other: Any) -> Optional[np.ndarray]:
    """``arr``'s memory as the variant ``kind`` (the cached call's argument: the same bytes)."""
    if kind == "none":
        return None
    if kind == "same":
        return arr
    if kind == "view":
        return arr.view(other)
    if kind == "short":
        return arr[:-1] if arr.size > 1 else arr[:0]
    if kind == "readonly":
        ro = arr.view()
        ro.flags.writeable = False
        return ro
    return arr[::2]                               # strided: not contiguous


def _copy(arr: Optional[np.ndarray]) -> Optional[np.ndarray]:
    """Fresh memory with the same dtype, shape, contiguity and writability (never a cached address)."""
    if arr is None:
        return None
    if not arr.flags.c_contiguous:
        fresh = np.zeros(arr.base.size if arr.base is not None else arr.size * 2, arr.dtype)[::2]
        return fresh
    fresh = np.array(arr, copy=True)
    fresh.flags.writeable = arr.flags.writeable
    return fresh


def _outcome(fn: Any) -> Tuple[bool, str]:
    try:
        fn()
        return True, ""
    except (ValueError, TypeError, OverflowError) as exc:
        return False, type(exc).__name__


@st.composite
def specs(draw: Any) -> Spec:
    coll = draw(st.sampled_from(COLLECTIVES))
    dtype = draw(st.sampled_from(DTYPES))
    return {
        "coll": coll,
        "dtype": dtype,
        "count": draw(st.sampled_from([2, 4, 6])),
        "algorithm": draw(st.sampled_from(ALGORITHMS)),
        "out": draw(st.sampled_from(OUT_KINDS)) if coll != "broadcast" else "none",
        "x": draw(st.sampled_from(["same", "same", "view"])),
        "view_dtype": draw(st.sampled_from(SAME_SIZE[np.dtype(dtype).itemsize])),
        "root": draw(st.sampled_from(ROOTS)) if coll in ROOTED else 0,
        "op": draw(st.sampled_from(OPS)) if coll in REDUCING else "sum",
    }


_serial = [0]


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec=specs())
def test_a_cached_call_never_accepts_what_a_fresh_call_refuses(world: Any, spec: Spec) -> None:
    _serial[0] += 1
    cached = hcomm.Comm(f"cached-{_serial[0]}")
    fresh = hcomm.Comm(f"fresh-{_serial[0]}")
    try:
        x = np.arange(spec["count"]).astype(spec["dtype"])
        out = _out_for(spec["coll"], x) if spec["out"] != "none" else None
        canonical_op = "sum" if spec["coll"] in REDUCING else None
        for _ in range(2):                                    # the valid call, twice: it is now cached
            ok, why = _outcome(lambda: _call(cached, spec, x, out, 0, canonical_op or "sum"))
            if not ok:
                return                                        # nothing valid to cache for this shape
        event(f"compared {spec['coll']}")                    # --hypothesis-show-statistics: what was exercised
        xv = x if spec["x"] == "same" else x.view(spec["view_dtype"])
        ov = _variant(out, spec["out"], spec["view_dtype"]) if out is not None else None
        variant = (spec["root"], spec["op"])
        fresh_ok, fresh_why = _outcome(lambda: _call(fresh, spec, _copy(xv), _copy(ov), *variant))
        cached_ok, cached_why = _outcome(lambda: _call(cached, spec, xv, ov, *variant))
        assert fresh_ok or not cached_ok, (
            f"{spec}: a fresh call refuses it ({fresh_why}) but the cached call accepted it")
        assert cached_ok or cached_why == fresh_why or fresh_ok, (spec, cached_why, fresh_why)
    finally:
        cached.destroy()
        fresh.destroy()
