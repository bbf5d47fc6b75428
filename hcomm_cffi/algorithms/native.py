"""Native: the vendor collectives (HcclAllReduce, ...) enqueued on the communicator's stream.

The path for what the data-plane reduce cannot do (prod, 64-bit and unsigned types) and a
baseline to compare the channel algorithms against.
"""
from __future__ import annotations

from typing import Any

from .._ffi import ffi
from ..binding import Binding
from .base import OpArgs, UnsupportedError

__all__ = ["run"]


def run(b: Binding, comm: Any, stream: Any, a: OpArgs) -> None:
    """Enqueue ``a`` as one vendor collective on ``stream`` (synchronise the stream to finish it)."""
    dt, c = int(a.dtype), a.coll
    if c == "allreduce":
        b.all_reduce(a.send, a.recv, a.count, dt, int(a.op), comm, stream)
    elif c == "broadcast":
        b.broadcast(a.recv, a.count, dt, a.root, comm, stream)
    elif c == "allgather":
        b.all_gather(a.send, a.recv, a.count, dt, comm, stream)
    elif c == "reduce_scatter":
        b.reduce_scatter(a.send, a.recv, a.count, dt, int(a.op), comm, stream)
    elif c == "reduce":
        b.reduce(a.send, a.recv if a.recv is not None else ffi.NULL, a.count, dt, int(a.op), a.root, comm, stream)
    elif c == "alltoall":
        b.all_to_all(a.send, a.count, dt, a.recv, a.count, dt, comm, stream)
    elif c == "barrier":
        b.barrier(comm, stream)
    else:
        raise UnsupportedError(f"algorithm='native' has no {c}")
