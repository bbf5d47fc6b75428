"""Double ring: the data in four quarters, two lanes per direction around the ring (A3's double ring).

The vendor's A3 double ring (hcomm ``coll_all_reduce_ring_for_910_93_executor.cc:36-42``, rings
from ``topo_info_extractor.cc:1537-1547``: the second ring is the first reversed) runs two rings,
each with two streams (``STREAM_NUM_FOR_DMAREDUCE_ONE_RING``): 4 threads and the two neighbours.
This built-in acquires exactly the planner's ``double_ring`` under the A3 profile: threads 0 and 2
drive the clockwise ring, 1 and 3 the counter-clockwise one, each lane a quarter of the data with
its own landing slots; the two lanes of a direction share its channel with their own notify pairs
(ACK/DATA 0/1 and 2/3), so their handshakes cannot take each other's signals: 4 indices, so its channels
are of the 8-notify class (resources.CHANNEL_CLASSES).
"""
from __future__ import annotations

from typing import Optional

from ..enums import DataType, ReduceOp
from ..plan import Topology
from .interface import ACK, DATA, CollectiveCall, define, IssueContext, UnsupportedError
from .formulas import formula_resources
from .ring import _chunked

__all__ = ["double_ring", "LANES", "COLLECTIVES"]

COLLECTIVES = ("allreduce", "reduce_scatter", "allgather")
#: (direction, ACK, DATA) of threads 0..3.
LANES = ((0, ACK, DATA), (1, ACK, DATA), (0, ACK + 2, DATA + 2), (1, ACK + 2, DATA + 2))


def _unsupported(coll: str, dtype: DataType, op: Optional[ReduceOp], topology: Topology) -> Optional[str]:
    if topology.n_ranks < 3:
        return (f"algorithm='double_ring' needs at least 3 ranks (its two directions share the one neighbour of "
                f"{topology.n_ranks}); use ring")
    return None


@define("double_ring", collectives=COLLECTIVES, resources=formula_resources("double_ring", "a3", notifies=8),
        unsupported=_unsupported)
def double_ring(ctx: IssueContext, call: CollectiveCall) -> None:
    """Four lanes, two per direction, over every rank of the communicator (the A3 profile's resources)."""
    if call.coll not in COLLECTIVES:
        raise UnsupportedError(f"double_ring has no {call.coll}; it implements {', '.join(COLLECTIVES)}")
    _chunked(ctx, ctx.group, call, rs=call.coll != "allgather", ag=call.coll != "reduce_scatter", lanes=LANES)
