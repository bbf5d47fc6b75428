"""Pairwise all-to-all: N-1 steps on one thread; in step s rank r sends its block for r+s and takes r-s's.

The vendor's pairwise executor (hcomm ``coll_all_to_all_v_fullmesh_executor.cc:20-36``, template
``TEMPLATE_ALL_2_ALL_V_PAIRWISE``) holds a channel to every other rank and, outside an A3 super
pod, no slave stream: the planner's ``alltoall_pairwise`` under the A2 profile, which this built-in
acquires exactly.  Each step moves one block in pieces of one landing slot (the collective region);
every piece is the shift handshake (``IssueContext.shift``), whose ACK frees the slot for the next.
"""
from __future__ import annotations

from .interface import CollectiveCall, define, IssueContext, UnsupportedError
from .formulas import formula_resources

__all__ = ["alltoall_pairwise"]


@define("alltoall_pairwise", collectives=("alltoall",), resources=formula_resources("alltoall_pairwise", "a2"))
def alltoall_pairwise(ctx: IssueContext, call: CollectiveCall) -> None:
    """Pairwise exchange over every rank of the communicator (the A2 profile's resources)."""
    if call.coll != "alltoall":
        raise UnsupportedError(f"alltoall_pairwise has no {call.coll}; it implements alltoall")
    group, esz, th = ctx.group, ctx.esz, ctx.threads[0]
    n, me = len(group), group.index(ctx.rank)
    blk = call.count * esz
    ctx.copy(th, call.recv + me * blk, call.send + me * blk, blk)
    piece = ctx.slot_elems(1) * esz
    for s in range(1, n):
        to, frm = (me + s) % n, (me - s) % n
        for off in range(0, blk, piece):
            nb = min(piece, blk - off)
            ctx.shift(th, group[to], group[frm], [(0, call.send + to * blk + off, nb)])
            ctx.copy(th, call.recv + frm * blk + off, ctx.mine(0), nb)
