"""Native: the library's own collectives (HcclAllReduce, ...) enqueued on the communicator's stream.

The path for what the data-plane reduce cannot do (prod, 64-bit and unsigned types) and a
baseline to compare the channel algorithms against.  It acquires no threads or channels.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Tuple

from .._ffi import ffi
from .interface import COLLECTIVES, CollectiveCall, define, IssueContext
from .formulas import no_resources

__all__ = ["native"]

#: collective -> (Binding method, its arguments before (comm, stream))
_LIBRARY: Dict[str, Callable[[CollectiveCall], Tuple[str, Tuple[Any, ...]]]] = {
    "allreduce": lambda a: ("all_reduce", (a.send, a.recv, a.count, int(a.dtype), int(a.op))),
    "broadcast": lambda a: ("broadcast", (a.recv, a.count, int(a.dtype), a.root)),
    "allgather": lambda a: ("all_gather", (a.send, a.recv, a.count, int(a.dtype))),
    "reduce_scatter": lambda a: ("reduce_scatter", (a.send, a.recv, a.count, int(a.dtype), int(a.op))),
    "reduce": lambda a: ("reduce", (a.send, a.recv if a.recv is not None else ffi.NULL, a.count, int(a.dtype),
                                    int(a.op), a.root)),
    "alltoall": lambda a: ("all_to_all", (a.send, a.count, int(a.dtype), a.recv, a.count, int(a.dtype))),
    "barrier": lambda a: ("barrier", ()),
}
assert set(_LIBRARY) == set(COLLECTIVES)


@define("native", reduces_on_data_plane=False, resources=no_resources)
def native(ctx: IssueContext, call: CollectiveCall) -> None:
    """One library collective on the communicator's stream (synchronising the stream finishes it)."""
    name, args = _LIBRARY[call.coll](call)
    ctx.library_call(name, *args)
