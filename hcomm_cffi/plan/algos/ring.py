"""Ring: each rank talks to its left and right neighbour (docs/design/plan-model.md).

Resources are what the ring schedule of ``algorithms/ring.py`` uses (a dry run of it derives the
same figures; tests/test_algorithm_interface.py): AllReduce / ReduceScatter / AllGather on N >= 3
run two directions on T = 2 threads over 2 channels (the model's 2/4/2 on four ranks); at N = 2
both neighbours are the same rank, so 1 thread and 1 channel.  Broadcast and Reduce are a chain
from/to the root on one thread: its head and tail have one channel, the middle two.  AlltoAll and
Barrier go around the ring on one thread.
Steps (the cost model): RS/AG p-1, AllReduce 2(p-1), Broadcast/Reduce p-1 steps of the full message.
"""
from __future__ import annotations

from typing import Tuple

from ..cost import Phase
from .common import ROOTED, Collective, FlatAlgorithm, RoleShape, fork_join_notifies

__all__ = ["Ring"]


class Ring(FlatAlgorithm):
    """Unidirectional ring over members 0..n-1 in rank order."""

    name = "ring"

    @staticmethod
    def _chain_pos(i: int, n: int, coll: Collective, root: int) -> int:
        """Position in the chain of a rooted op: broadcast starts at the root, reduce ends there."""
        return (i - root) % n if coll is Collective.BROADCAST else (i - root - 1) % n

    def roles(self, n: int, coll: Collective, root: int) -> Tuple[RoleShape, ...]:
        if coll not in ROOTED or n == 2:
            return (RoleShape("ring", n, 0),)
        at = lambda pos: (pos + root) % n if coll is Collective.BROADCAST else (pos + root + 1) % n  # noqa: E731
        return (RoleShape("chain-head", 1, at(0)), RoleShape("chain-middle", n - 2, at(1)),
                RoleShape("chain-tail", 1, at(n - 1)))

    def role_of(self, i: int, n: int, coll: Collective, root: int) -> str:
        if coll not in ROOTED or n == 2:
            return "ring"
        pos = self._chain_pos(i, n, coll, root)
        return "chain-head" if pos == 0 else ("chain-tail" if pos == n - 1 else "chain-middle")

    def peers(self, i: int, n: int, coll: Collective, root: int) -> Tuple[int, ...]:
        if n == 2:
            return (1 - i,)
        if coll in ROOTED:
            pos = self._chain_pos(i, n, coll, root)
            return tuple(p for p, keep in (((i - 1) % n, pos > 0), ((i + 1) % n, pos < n - 1)) if keep)
        return ((i - 1) % n, (i + 1) % n)

    def thread_notifies(self, role: str, n: int, coll: Collective) -> Tuple[int, ...]:
        two_way = n >= 3 and coll in (Collective.ALLREDUCE, Collective.REDUCE_SCATTER, Collective.ALLGATHER)
        return fork_join_notifies(2 if two_way else 1)

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
