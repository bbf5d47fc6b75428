"""Ring: each rank talks to its left and right neighbour; constant resources (HCOMM_SEMANTICS.md §3.4).

Resources: 2 channels (1 when N = 2, both neighbours are the same rank), T = 2 threads (the two
streams of A3's op-base ring; the seed figure), so 2 fork/join thread notifies.  At N = 2 we keep
T = 2 as the doc's table does, so ring resources never grow or shrink with N >= 2.  Rooted ops use
the same ring (the unused tail -> root hop is still acquired: one resource set serves every op).
Steps (§3.5): RS/AG p-1, AllReduce 2(p-1), Broadcast/Reduce p-1 steps of the full message.
"""
from __future__ import annotations

from typing import Tuple

from ..cost import Phase
from .common import Collective, FlatAlgorithm, RoleShape, fork_join_notifies

__all__ = ["Ring"]


class Ring(FlatAlgorithm):
    """Unidirectional ring over members 0..n-1 in rank order."""

    name = "ring"

    def roles(self, n: int, coll: Collective, root: int) -> Tuple[RoleShape, ...]:
        return (RoleShape("ring", n, 0),)

    def role_of(self, i: int, n: int, coll: Collective, root: int) -> str:
        return "ring"

    def peers(self, i: int, n: int, coll: Collective, root: int) -> Tuple[int, ...]:
        if n == 2:
            return (1 - i,)
        return ((i - 1) % n, (i + 1) % n)

    def thread_notifies(self, role: str, n: int, coll: Collective) -> Tuple[int, ...]:
        return fork_join_notifies(2)

    def phases(self, n: int, coll: Collective, size: float) -> Tuple[Phase, ...]:
        p = n
        share = (p - 1) * size / p
        if coll is Collective.ALLREDUCE:
            return (Phase("reduce-scatter", p - 1, share, share, reduce_bytes=share),
                    Phase("allgather", p - 1, share, share))
        if coll is Collective.ALLGATHER:
            return (Phase("allgather", p - 1, share, share),)
        if coll is Collective.REDUCE_SCATTER:
            return (Phase("reduce-scatter", p - 1, share, share, reduce_bytes=share),)
        if coll is Collective.BROADCAST:
            return (Phase("forward", p - 1, (p - 1) * size, size),)
        if coll is Collective.REDUCE:
            return (Phase("reduce-forward", p - 1, (p - 1) * size, size, reduce_bytes=(p - 1) * size),)
        if coll is Collective.ALLTOALL:
            moved = (p - 1) * size / 2
            return (Phase("store-and-forward", p - 1, moved, moved),)
        if coll is Collective.BARRIER:
            return (Phase("token", p - 1, 0.0, 0.0),)
        raise ValueError(f"ring has no schedule for {coll.value}")
