"""``op="avg"``: the mean over the ranks, defined as the torch backend defines ``ReduceOp.AVG``.

HCCL's reduce ops are sum, prod, max and min; an average is the sum divided by the number of ranks
of the communicator, done on this rank once the sum arrived (``torch/process_group.py`` divides
``t.div_(size)`` the same way; nccl-tests' ``-o avg`` is NCCL's ``ncclAvg``).  It needs a
floating-point dtype (fp16, bf16, fp32, fp64): an average of integers is not an integer, so
those are refused before anything moves, as torch refuses ``ReduceOp.AVG`` on integer tensors.
``stream=`` is refused too: the division is a host step, and a stream-ordered call returns before
its sum exists.  A nonblocking call divides when it is waited for.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..enums import DataType
from .op import as_buffer, is_torch
from .requests import Request
from .state import CommState

__all__ = ["wanted", "run", "AVERAGING_DTYPES"]

AVG = "avg"
AVERAGING_DTYPES = (DataType.FP16, DataType.BFP16, DataType.FP32, DataType.FP64)


def wanted(op: Any) -> bool:
    """True when ``op`` spells the average ('avg', any case)."""
    return isinstance(op, str) and op.strip().lower() == AVG


def _check(coll: str, x: Any, stream: Any) -> None:
    """ValueError before anything moves when ``x`` cannot carry an average or ``stream=`` is given."""
    dtype = as_buffer(x, "x").dtype
    if dtype not in AVERAGING_DTYPES:
        raise ValueError(f"{coll}: op='avg' on {dtype.name.lower()} data: the average of {dtype.name.lower()} values "
                         f"is not a {dtype.name.lower()} (the sum divided by the number of ranks has a fraction); "
                         f"expected a floating-point dtype ({', '.join(d.name.lower() for d in AVERAGING_DTYPES)}), "
                         "or op='sum' and a division of your own (torch's ReduceOp.AVG refuses integers alike)")
    if stream is not None:
        raise ValueError(f"{coll}: op='avg' with stream={stream!r}: the average is the sum divided on the host once "
                         "it arrived, and a stream-ordered call returns before it exists; expected stream=None, or "
                         "op='sum' and the division enqueued by you")


def run(state: CommState, coll: str, x: Any, call: Callable[[], Any], async_op: bool, stream: Any,
        divides: bool = True) -> Any:
    """``call()`` (the collective with op 'sum') then the division of what it returns by the size of ``state``'s
    communicator.  ``divides``: False on a rank whose result is not one (a reduce's non-root ranks get None)."""
    _check(coll, x, stream)
    out = call()
    if not divides:
        return out
    if async_op:
        request: Request[Any] = out
        try:
            return request.then(lambda result: _average(result, state.size))
        except BaseException as exc:     # (an alarm's handler) the request is lost with the sum queued: it breaks
            state.interrupted(f"{coll} (op='avg')", exc)
            raise
    return _average(out, state.size)


def _average(result: Any, size: int) -> Any:
    """``result /= size`` in place (a NumPy array or a torch tensor; None: nothing), returned."""
    if is_torch(result):
        result.div_(size)
    elif result is not None:
        arr = np.asarray(result)
        np.divide(arr, arr.dtype.type(size), out=arr)
    return result
