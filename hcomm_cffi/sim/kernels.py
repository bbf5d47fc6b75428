"""The byte-moving work of the emulator: copies and element-wise reductions between raw addresses.

Copies go in pieces of ``COPY_PIECE`` bytes once a copy is large (glibc switches to non-temporal
stores around 16 MiB and slows down); reductions run over cache-sized pieces so both operands
stay in L2.  bf16 is reduced through float32 with round-to-nearest-even, as the hardware does.
"""
from __future__ import annotations

import warnings
from typing import Any, Callable, Dict, Sequence

import numpy as np

from .._ffi import ffi
from ..enums import DataType, ReduceOp, numpy_dtype

COPY_PIECE = 1 << 20          # bytes per memmove for large copies
COPY_SPLIT_ABOVE = 4 << 20    # copies up to this size go in one memmove
REDUCE_PIECE = 1 << 20        # bytes of one operand per reduction step
SPREAD_PIECE = 256 << 10      # bytes of the result per step of reduce_spread (it stays in L2 for its copies)

_memmove = ffi.memmove
_buffer = ffi.buffer
_cast = ffi.cast

_UFUNC: Dict[int, Any] = {ReduceOp.SUM: np.add, ReduceOp.MAX: np.maximum, ReduceOp.MIN: np.minimum,
                          ReduceOp.PROD: np.multiply}

__all__ = ["copy", "reduce", "reduce3", "reduce_spread", "view", "array", "ufunc_of", "COPY_PIECE", "REDUCE_PIECE"]

# Float overflow to inf (and inf - inf = nan) is what the hardware produces too: no warning for it.
warnings.filterwarnings("ignore", category=RuntimeWarning, module=__name__)


def ufunc_of(op: ReduceOp) -> Any:
    """The NumPy ufunc of a reduce op."""
    return _UFUNC[op]


def copy(dst: Any, src: Any, nbytes: int) -> None:
    """memmove ``nbytes`` from ``src`` to ``dst`` (cdata pointers), in pieces when large."""
    if nbytes <= COPY_SPLIT_ABOVE:
        _memmove(dst, src, nbytes)
        return
    d = _cast("char *", dst)
    s = _cast("char *", src)
    off = 0
    while off < nbytes:
        n = min(COPY_PIECE, nbytes - off)
        _memmove(d + off, s + off, n)
        off += n


_VIEWS: Dict[tuple, np.ndarray] = {}
_VIEW_CACHE_MAX = 1024


def view(ptr: Any, count: int, dtype: DataType) -> np.ndarray:
    """A NumPy array over ``count`` elements at ``ptr`` (no copy).

    Views are cached by (address, count, dtype): collectives reuse the same buffers, and building a
    view costs about a microsecond.  A view owns nothing, so a cached one is exactly as valid as the
    raw pointer the caller passes again.
    """
    arr = _VIEWS.get((ptr, count, dtype))     # cdata pointers hash and compare by address: no int() per look
    if arr is None:
        if len(_VIEWS) >= _VIEW_CACHE_MAX:
            _VIEWS.clear()
        np_dtype = numpy_dtype(dtype)
        plain = _cast("char *", ptr)           # the key keeps no buffer alive (ptr may own one)
        arr = np.frombuffer(_buffer(plain, count * np_dtype.itemsize), dtype=np_dtype)
        _VIEWS[(plain, count, dtype)] = arr
    return arr


def _bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def _f32_to_bf16(values: np.ndarray, out: np.ndarray) -> None:
    bits = values.view(np.uint32)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(values)
    if nan.any():
        rounded[nan] = 0x7FC0
    out[...] = rounded


def reduce(dst: Any, src: Any, count: int, dtype: DataType, op: ReduceOp) -> None:
    """``dst[i] = op(dst[i], src[i])`` for ``count`` elements of ``dtype`` (ints wrap around)."""
    reduce3(dst, dst, src, count, dtype, op)


def reduce3(dst: Any, a: Any, b: Any, count: int, dtype: DataType, op: ReduceOp) -> None:
    """``dst[i] = op(a[i], b[i])``: one pass instead of a copy then a reduce (emulator-internal)."""
    if count <= 0:
        return
    ufunc: Callable[..., Any] = _UFUNC[op]
    d, x, y = view(dst, count, dtype), view(a, count, dtype), view(b, count, dtype)
    piece = max(1, REDUCE_PIECE // d.itemsize)
    if dtype == DataType.BFP16:
        for lo in range(0, count, piece):
            hi = lo + piece
            _f32_to_bf16(ufunc(_bf16_to_f32(x[lo:hi]), _bf16_to_f32(y[lo:hi])), d[lo:hi])
        return
    if count <= piece:
        ufunc(x, y, out=d)
        return
    for lo in range(0, count, piece):
        hi = lo + piece
        ufunc(x[lo:hi], y[lo:hi], out=d[lo:hi])


def array(addr: int, count: int, dtype: DataType) -> np.ndarray:
    """A NumPy array over ``count`` elements at integer address ``addr`` (no copy, not cached)."""
    np_dtype = numpy_dtype(dtype)
    return np.frombuffer(_buffer(_cast("char *", addr), count * np_dtype.itemsize), dtype=np_dtype)


def _overlap(a: np.ndarray, b: np.ndarray) -> bool:
    lo_a, lo_b = a.ctypes.data, b.ctypes.data
    return lo_a < lo_b + b.nbytes and lo_b < lo_a + a.nbytes


def reduce_spread(out: np.ndarray, srcs: Sequence[np.ndarray], dtype: DataType, op: ReduceOp,
                  copies: Sequence[np.ndarray]) -> None:
    """``out`` = the ``op``-reduction of ``srcs`` in their order, then copied to each of ``copies``.

    The order and rounding per element are those of ``reduce3(srcs[0], srcs[1])`` then ``reduce`` with each next
    source (bf16 through float32, rounded after every step), so the bytes equal the staged schedules'.  It runs
    over ``SPREAD_PIECE``-sized pieces: each reduced piece is still in the cache when it is copied.  ``out`` may be
    ``srcs[0]`` or ``srcs[1]`` themselves (read before written); any other overlap goes through a temporary piece.
    """
    count = out.shape[0]
    if count == 0:
        return
    if len(srcs) == 1:
        if out.ctypes.data != srcs[0].ctypes.data:
            out[...] = srcs[0]
        for dst in copies:
            dst[...] = out
        return
    ufunc: Callable[..., Any] = _UFUNC[op]
    piece = max(1, SPREAD_PIECE // out.itemsize)
    first = out.ctypes.data
    aliased = any(_overlap(out, s) and not (i < 2 and s.ctypes.data == first) for i, s in enumerate(srcs))
    temp = np.empty(min(piece, count), out.dtype) if aliased else None
    bf16 = dtype == DataType.BFP16
    for lo in range(0, count, piece):
        hi = min(count, lo + piece)
        o = temp[:hi - lo] if temp is not None else out[lo:hi]
        if bf16:
            _f32_to_bf16(ufunc(_bf16_to_f32(srcs[0][lo:hi]), _bf16_to_f32(srcs[1][lo:hi])), o)
            for s in srcs[2:]:
                _f32_to_bf16(ufunc(_bf16_to_f32(o), _bf16_to_f32(s[lo:hi])), o)
        else:
            ufunc(srcs[0][lo:hi], srcs[1][lo:hi], out=o)
            for s in srcs[2:]:
                ufunc(o, s[lo:hi], out=o)
        if temp is not None:
            out[lo:hi] = o
        for dst in copies:
            dst[lo:hi] = o
