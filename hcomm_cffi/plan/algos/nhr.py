"""NHR (non-uniform hierarchical ring): channels to (r +- 2^k) mod N for every 2^k < N.

Channel count per rank: N=4 -> 3, 8 -> 5, 16 -> 7, 2 log2 N - 1 for powers of two
(docs/design/plan-model.md).  Threads: 1 (RS/AllReduce/Reduce/AlltoAll/Barrier); 2 for AllGather
and Broadcast (the extra thread overlaps the final local copy; its slave needs 2 notifies).
Steps (the cost model): RS/AG ceil(log2 p), AllReduce 2 ceil(log2 p); Broadcast = scatter + allgather and
Reduce = reduce-scatter + gather (2 ceil(log2 p)); AlltoAll = Bruck (ceil(log2 p) steps of ~n/2);
Barrier = dissemination (ceil(log2 p) steps).
"""
from __future__ import annotations

from typing import Tuple

from ..cost import Phase
from .common import Collective, FlatAlgorithm, RoleShape, ceil_log2, fork_join_notifies

__all__ = ["Nhr", "nhr_peers"]


def nhr_peers(i: int, n: int) -> Tuple[int, ...]:
    """Sorted {(i +- 2^k) mod n : 2^k < n} without i itself."""
    out = set()
    d = 1
    while d < n:
        out.add((i + d) % n)
        out.add((i - d) % n)
        d <<= 1
    out.discard(i)
    return tuple(sorted(out))


class Nhr(FlatAlgorithm):
    """NHR: symmetric, one role."""

    name = "nhr"

    def roles(self, n: int, coll: Collective, root: int) -> Tuple[RoleShape, ...]:
        return (RoleShape("nhr", n, 0),)

    def role_of(self, i: int, n: int, coll: Collective, root: int) -> str:
        return "nhr"

    def peers(self, i: int, n: int, coll: Collective, root: int) -> Tuple[int, ...]:
        return nhr_peers(i, n)

    def thread_notifies(self, role: str, n: int, coll: Collective) -> Tuple[int, ...]:
        if coll in (Collective.ALLGATHER, Collective.BROADCAST):
            return fork_join_notifies(2, per_slave=2)
        return fork_join_notifies(1)

    def phases(self, n: int, coll: Collective, size: float) -> Tuple[Phase, ...]:
        d = ceil_log2(n)
        share = (n - 1) * size / n
        rs = Phase("reduce-scatter", d, share, share, reduce_bytes=share)
        ag = Phase("allgather", d, share, share)
        if coll is Collective.ALLREDUCE:
            return (rs, ag)
        if coll is Collective.ALLGATHER:
            return (ag,)
        if coll is Collective.REDUCE_SCATTER:
            return (rs,)
        if coll is Collective.BROADCAST:
            return (Phase("scatter", d, share, share), ag)
        if coll is Collective.REDUCE:
            return (rs, Phase("gather", d, share, share))
        if coll is Collective.ALLTOALL:
            return (Phase("bruck", d, d * size / 2, d * size / 2),)
        if coll is Collective.BARRIER:
            return (Phase("dissemination", d, 0.0, 0.0),)
        raise ValueError(f"nhr has no schedule for {coll.value}")
