"""1D full mesh: a channel to every other rank, all peers served at once (docs/design/plan-model.md).

Resources: N-1 channels, T = N-1 threads (thread 0 also drives peer 0, as in the AllGather
example; HCCL's AllReduce executors use N, we use N-1 for every op so the model's 3/6/3 holds).
Rooted ops are a star: the root holds N-1 channels and N-1 threads, every other rank 1 and 1.
Steps (the cost model): RS/AG 1, AllReduce 2 (two-shot), Broadcast/Reduce/AlltoAll/Barrier 1.
"""
from __future__ import annotations

from typing import Tuple

from ..cost import Phase
from .common import ROOTED, Collective, FlatAlgorithm, RoleShape, fork_join_notifies

__all__ = ["Mesh"]


class Mesh(FlatAlgorithm):
    """Full mesh (symmetric ops) or star around the root (broadcast, reduce)."""

    name = "mesh"

    def roles(self, n: int, coll: Collective, root: int) -> Tuple[RoleShape, ...]:
        if coll in ROOTED:
            return (RoleShape("root", 1, root), RoleShape("leaf", n - 1, (root + 1) % n))
        return (RoleShape("mesh", n, 0),)

    def role_of(self, i: int, n: int, coll: Collective, root: int) -> str:
        if coll in ROOTED:
            return "root" if i == root else "leaf"
        return "mesh"

    def peers(self, i: int, n: int, coll: Collective, root: int) -> Tuple[int, ...]:
        if coll in ROOTED and i != root:
            return (root,)
        return tuple(j for j in range(n) if j != i)

    def thread_notifies(self, role: str, n: int, coll: Collective) -> Tuple[int, ...]:
        return fork_join_notifies(1 if role == "leaf" else n - 1)

    def phases(self, n: int, coll: Collective, size: float) -> Tuple[Phase, ...]:
        p = n
        share = (p - 1) * size / p
        if coll is Collective.ALLREDUCE:
            return (Phase("reduce-scatter", 1, share, share, p - 1, reduce_bytes=share),
                    Phase("allgather", 1, share, share, p - 1))
        if coll is Collective.ALLGATHER:
            return (Phase("allgather", 1, share, share, p - 1),)
        if coll is Collective.REDUCE_SCATTER:
            return (Phase("reduce-scatter", 1, share, share, p - 1, reduce_bytes=share),)
        if coll is Collective.BROADCAST:
            return (Phase("star-send", 1, (p - 1) * size, (p - 1) * size, p - 1),)
        if coll is Collective.REDUCE:
            return (Phase("star-reduce", 1, (p - 1) * size, size, p - 1, reduce_bytes=(p - 1) * size),)
        if coll is Collective.ALLTOALL:
            return (Phase("alltoall", 1, share, share, p - 1),)
        if coll is Collective.BARRIER:
            return (Phase("signal-all", 1, 0.0, 0.0, p - 1),)
        raise ValueError(f"mesh has no schedule for {coll.value}")
