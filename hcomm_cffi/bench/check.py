"""Correctness check with hccl_test's value patterns (docs/design/plan-model.md#correctness-check).

Inputs and expected outputs per operation (n ranks, this rank r):

============== ============================================== =============================================
operation      input of rank r                                expected output of rank r
============== ============================================== =============================================
allreduce      every element 2                                sum 2n, prod 2^n, max/min 2
reduce         every element 2                                as allreduce, on the root only
broadcast      root: 2, others: 0                             2 everywhere
allgather      its block: r + 1                               block i = i + 1
reduce_scatter block i = i + 1 (int8 and prod: 2 everywhere)  sum (r+1)n, max/min r+1 (int8/prod: 2n, 2^n, 2)
alltoall       r + 1 to everyone                              block i = i + 1
sendrecv       r + 1 (sent to r + 1 mod n)                    left neighbour's value: ((r-1) mod n) + 1
barrier        (no data)                                      (not checked)
============== ============================================== =============================================

Integers must match exactly; floating types within a relative tolerance (fp16 1e-3, bf16 1e-2,
fp32 1e-5, fp64 1e-12); NaN is always wrong.  :func:`count_wrong` counts wrong elements.

:func:`disabled_reason` switches the check off, as hccl_test does, when the expected value would
overflow or lose precision: for the cases hccl_test's documentation lists (sum and prod of allreduce /
reduce / reduce_scatter) the largest checked rank count is taken from that table
(:data:`DOCUMENTED_MAX_RANKS`); for the others the same rule is applied generically (an integer
value above the type's maximum; a float sum at or above 2^mantissa-bits; a float product beyond the
largest finite value; gather-type int8/uint8 with n >= 128).  Unlike hccl_test, which reports allreduce
on uint8/16/32/64 and fp64 as failed, those types are checked here like the others.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Sequence, Tuple

import numpy as np

from ..enums import DataType, ReduceOp, numpy_dtype
from .sizes import Layout

__all__ = ["Block", "Pattern", "pattern", "disabled_reason", "fill", "count_wrong", "perturb", "decode",
           "encode", "DOCUMENTED_MAX_RANKS", "RTOL"]

#: (start, stop, value): elements [start, stop) hold ``value``.
Block = Tuple[int, int, float]

FLOAT_TYPES = frozenset({DataType.FP16, DataType.BFP16, DataType.FP32, DataType.FP64})
RTOL: Dict[DataType, float] = {DataType.FP16: 1e-3, DataType.BFP16: 1e-2, DataType.FP32: 1e-5,
                               DataType.FP64: 1e-12}
_MANTISSA_BITS = {DataType.FP16: 10, DataType.BFP16: 7, DataType.FP32: 23, DataType.FP64: 52}
_MAX_EXPONENT = {DataType.FP16: 15, DataType.BFP16: 127, DataType.FP32: 127, DataType.FP64: 1023}

# hccl_test's documented limits: (class, op, dtype) -> largest rank count that is still checked
# (docs/design/plan-model.md#correctness-check; the "~1e6"-style approximate entries are left to the generic rule).
DOCUMENTED_MAX_RANKS: Dict[Tuple[str, ReduceOp, DataType], int] = {
    **{("allreduce", ReduceOp.PROD, dt): m for dt, m in (
        (DataType.INT8, 6), (DataType.INT16, 14), (DataType.INT32, 30), (DataType.INT64, 62),
        (DataType.FP32, 127), (DataType.FP16, 15), (DataType.BFP16, 127))},
    **{("allreduce", ReduceOp.SUM, dt): m for dt, m in (
        (DataType.INT8, 63), (DataType.INT16, 16383), (DataType.FP16, 511), (DataType.BFP16, 63))},
    **{("reduce_scatter", ReduceOp.PROD, dt): m for dt, m in (
        (DataType.INT8, 6), (DataType.INT16, 14), (DataType.INT32, 30), (DataType.INT64, 62),
        (DataType.FP32, 127), (DataType.FP16, 15), (DataType.BFP16, 127))},
    **{("reduce_scatter", ReduceOp.SUM, dt): m for dt, m in (
        (DataType.INT8, 11), (DataType.INT16, 181), (DataType.INT32, 46340), (DataType.FP32, 2896),
        (DataType.FP16, 31), (DataType.BFP16, 11))},
}


@dataclass(frozen=True)
class Pattern:
    """What one rank writes into its send buffer, and what its output must hold (None: not checked here)."""

    input: Tuple[Block, ...]
    expected: Optional[Tuple[Block, ...]]


def _reduced(op: ReduceOp, n: int) -> int:
    """Every rank contributes 2: the reduction's result."""
    return 2 * n if op == ReduceOp.SUM else 2 ** n if op == ReduceOp.PROD else 2


def _rs_uses_two(dtype: DataType, op: ReduceOp) -> bool:
    return dtype == DataType.INT8 or op == ReduceOp.PROD


def _blocks(block: int, n: int) -> Tuple[Block, ...]:
    return tuple((i * block, (i + 1) * block, float(i + 1)) for i in range(n))


def pattern(lay: Layout, dtype: DataType, op: ReduceOp, rank: int, nranks: int, root: int = 0) -> Pattern:
    """Input and expected output of ``rank`` for the operation and buffers of ``lay``."""
    n, r, name = nranks, rank, lay.op
    send, recv, block = lay.send_count, lay.recv_count, lay.block
    if name in ("allreduce", "reduce"):
        expected = ((0, recv, float(_reduced(op, n))),) if name == "allreduce" or r == root else None
        return Pattern(((0, send, 2.0),), expected)
    if name == "broadcast":
        return Pattern(((0, send, 2.0 if r == root else 0.0),), ((0, send, 2.0),))
    if name == "allgather":
        return Pattern(((0, send, float(r + 1)),), _blocks(block, n))
    if name == "reduce_scatter":
        if _rs_uses_two(dtype, op):
            return Pattern(((0, send, 2.0),), ((0, recv, float(_reduced(op, n))),))
        value = (r + 1) * n if op == ReduceOp.SUM else r + 1
        return Pattern(_blocks(block, n), ((0, recv, float(value)),))
    if name == "alltoall":
        return Pattern(((0, send, float(r + 1)),), _blocks(block, n))
    if name == "sendrecv":
        return Pattern(((0, send, float(r + 1)),), ((0, recv, float((r - 1) % n + 1)),))
    if name == "barrier":
        return Pattern((), None)
    raise ValueError(f"op={name!r} has no value pattern")


def _largest_value(name: str, dtype: DataType, op: ReduceOp, n: int) -> int:
    if name in ("allreduce", "reduce") or (name == "reduce_scatter" and _rs_uses_two(dtype, op)):
        return _reduced(op, n) if n < 4096 or op != ReduceOp.PROD else 2 ** 4096
    if name == "reduce_scatter":
        return n * n if op == ReduceOp.SUM else n
    if name in ("allgather", "alltoall", "sendrecv"):
        return n
    return 2  # broadcast


def disabled_reason(name: str, dtype: DataType, op: ReduceOp, nranks: int) -> Optional[str]:
    """Why the check is off for this case (None: it is on); see the module doc."""
    if name == "barrier":
        return "barrier moves no data"
    n = nranks
    cls = "allreduce" if name in ("allreduce", "reduce") else name
    limit = DOCUMENTED_MAX_RANKS.get((cls, op, dtype)) if name in ("allreduce", "reduce", "reduce_scatter") else None
    why = f"the expected value of {name} {op.name.lower()} on {n} ranks"
    if limit is not None:
        return None if n <= limit else f"{why} overflows or loses precision in {dtype.name} (checked up to {limit} ranks)"
    if name in ("allgather", "alltoall", "sendrecv") and dtype in (DataType.INT8, DataType.UINT8) and n >= 128:
        return f"the fill value r + 1 overflows {dtype.name} with {n} >= 128 ranks"
    value = _largest_value(name, dtype, op, n)
    if dtype in FLOAT_TYPES:
        if op == ReduceOp.PROD and name in ("allreduce", "reduce", "reduce_scatter"):
            ok = n <= _MAX_EXPONENT[dtype]  # 2^n: exact while finite
            return None if ok else f"{why} (2^{n}) overflows {dtype.name}"
        exact = 2 ** _MANTISSA_BITS[dtype]
        if name in ("allreduce", "reduce", "reduce_scatter") and op == ReduceOp.SUM:
            return None if value < exact else f"{why} ({value}) loses precision in {dtype.name}"
        return None if value <= 2 * exact else f"{why} ({value}) is not exact in {dtype.name}"
    info = np.iinfo(numpy_dtype(dtype))
    return None if value <= int(info.max) else f"{why} ({value}) overflows {dtype.name}"


def encode(value: float, dtype: DataType) -> np.ndarray:
    """``value`` as a 0-d array of ``dtype``'s storage type (bf16: uint16 bits, round to nearest even)."""
    if dtype == DataType.BFP16:
        bits = int(np.array(value, np.float32).view(np.uint32))
        return np.array((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16, np.uint16)
    return np.array(value).astype(numpy_dtype(dtype))


def decode(values: np.ndarray, dtype: DataType) -> np.ndarray:
    """Storage -> numbers: floats as float64 (bf16 bits expanded), integers unchanged."""
    if dtype == DataType.BFP16:
        return (values.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    if dtype in FLOAT_TYPES:
        return values.astype(np.float64)
    return values


def fill(blocks: Sequence[Block], count: int, dtype: DataType) -> np.ndarray:
    """A host array of ``count`` elements of ``dtype`` holding ``blocks`` (zeros elsewhere)."""
    out = np.zeros(count, numpy_dtype(dtype))
    for start, stop, value in blocks:
        out[start:stop] = encode(value, dtype)
    return out


def count_wrong(actual: np.ndarray, blocks: Sequence[Block], dtype: DataType) -> int:
    """How many elements of ``actual`` differ from ``blocks`` (floats: beyond the tolerance; NaN: wrong)."""
    wrong = 0
    for start, stop, value in blocks:
        part = actual[start:stop]
        if dtype in FLOAT_TYPES:
            # fast path: bit-exact elements are right; only the others are compared with the tolerance
            differ = part != encode(value, dtype)
            if differ.any():
                suspects = part[differ]
                got = decode(suspects, dtype)
                with np.errstate(invalid="ignore"):
                    ok = np.abs(got - value) <= RTOL[dtype] * abs(value)
                wrong += int(suspects.size - np.count_nonzero(ok))
        else:
            wrong += int(np.count_nonzero(part != encode(value, dtype)))
    missing = max(0, max((stop for _, stop, _ in blocks), default=0) - actual.size)
    return wrong + missing


def perturb(values: np.ndarray, k: int, dtype: DataType, op: ReduceOp) -> int:
    """Test hook: change the first ``k`` elements so that any reduction or copy of them is wrong.

    Each changes by +1 (by -1 for min, so that a minimum sees it).  Returns how many changed.
    """
    k = max(0, min(k, values.size))
    if k:
        delta = -1.0 if op == ReduceOp.MIN else 1.0
        numbers = decode(values[:k], dtype).astype(np.float64) + delta
        values[:k] = [encode(float(v), dtype) for v in numbers]
    return k
