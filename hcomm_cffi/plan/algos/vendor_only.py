"""Algorithms the package's model does not describe, planned as the vendor's executors build them.

* ``nb`` (non-uniform Bruck): channels to (r +- 2^k) mod N, one thread; reduce-scatter, allgather,
  allreduce (= RS + AG) in ceil(log2 N) steps each.
* ``alltoall_pairwise`` (HCCL_ALGO "pairwise"): a channel to every other rank, N-1 steps (step s:
  send to r+s, receive from r-s); one thread (A2), N threads inside an A3 super pod.
* ``double_ring``: two rings in opposite directions over the same two neighbours, each with a
  DMA-reduce stream: 4 threads (A3 only).
* ``ahc`` (asymmetric hierarchical concatenate): NHR inside each server group, a ring (up to 3
  groups, else NHR) between same-index ranks of the groups; one thread; needs several servers.

The thread figures here are the reference platform's (nb, pairwise, ahc: A2; double ring: A3);
:mod:`..vendor` has every platform's and the citations.
"""
from __future__ import annotations

from typing import Optional, Tuple

from ..cost import Phase
from .common import Collective, FlatAlgorithm, RoleShape, ceil_log2, fork_join_notifies
from .nhr import nhr_peers

__all__ = ["Nb", "Pairwise", "DoubleRing", "Ahc", "SYMMETRIC_RS_AG_AR"]

SYMMETRIC_RS_AG_AR = (Collective.ALLREDUCE, Collective.ALLGATHER, Collective.REDUCE_SCATTER)


class _Uniform(FlatAlgorithm):
    """Every member has the same resources (one role)."""

    collectives: Tuple[Collective, ...] = SYMMETRIC_RS_AG_AR
    threads = 1

    def invalid_reason(self, n: int, coll: Collective) -> Optional[str]:
        if coll not in self.collectives:
            return (f"the vendor has no {self.name} {coll.value} (it implements "
                    f"{', '.join(c.value for c in self.collectives)})")
        return None

    def roles(self, n: int, coll: Collective, root: int) -> Tuple[RoleShape, ...]:
        return (RoleShape(self.name, n, 0),)

    def role_of(self, i: int, n: int, coll: Collective, root: int) -> str:
        return self.name

    def thread_notifies(self, role: str, n: int, coll: Collective) -> Tuple[int, ...]:
        return fork_join_notifies(self.threads)


def _log_phases(n: int, coll: Collective, size: float) -> Tuple[Phase, ...]:
    d = ceil_log2(n)
    share = (n - 1) * size / n
    rs = Phase("reduce-scatter", d, share, share, reduce_bytes=share)
    ag = Phase("allgather", d, share, share)
    return {Collective.ALLREDUCE: (rs, ag), Collective.ALLGATHER: (ag,), Collective.REDUCE_SCATTER: (rs,)}[coll]


class Nb(_Uniform):
    """Non-uniform Bruck."""

    name = "nb"

    def peers(self, i: int, n: int, coll: Collective, root: int) -> Tuple[int, ...]:
        return nhr_peers(i, n)

    def phases(self, n: int, coll: Collective, size: float) -> Tuple[Phase, ...]:
        return _log_phases(n, coll, size)


class Pairwise(_Uniform):
    """Pairwise exchange all-to-all."""

    name = "alltoall_pairwise"
    collectives = (Collective.ALLTOALL,)

    def peers(self, i: int, n: int, coll: Collective, root: int) -> Tuple[int, ...]:
        return tuple(j for j in range(n) if j != i)

    def phases(self, n: int, coll: Collective, size: float) -> Tuple[Phase, ...]:
        share = (n - 1) * size / n
        return (Phase("pairwise", n - 1, share, share),)


class DoubleRing(_Uniform):
    """Two counter-rotating rings, each with a DMA-reduce stream."""

    name = "double_ring"
    threads = 4

    def invalid_reason(self, n: int, coll: Collective) -> Optional[str]:
        return super().invalid_reason(n, coll) or (None if n >= 3 else "a double ring needs at least 3 ranks")

    def peers(self, i: int, n: int, coll: Collective, root: int) -> Tuple[int, ...]:
        return tuple(sorted({(i - 1) % n, (i + 1) % n}))

    def phases(self, n: int, coll: Collective, size: float) -> Tuple[Phase, ...]:
        share = (n - 1) * size / n
        rs = Phase("reduce-scatter", n - 1, share, share, reduce_bytes=share)
        ag = Phase("allgather", n - 1, share, share)
        return {Collective.ALLREDUCE: (rs, ag), Collective.ALLGATHER: (ag,), Collective.REDUCE_SCATTER: (rs,)}[coll]


class Ahc(_Uniform):
    """AHC over server groups; ``peers`` needs the group shape, so the schedule passes it (see ahc_peers)."""

    name = "ahc"

    def peers(self, i: int, n: int, coll: Collective, root: int) -> Tuple[int, ...]:
        return nhr_peers(i, n)          # one group: NHR inside it (the schedule binds servers)

    def phases(self, n: int, coll: Collective, size: float) -> Tuple[Phase, ...]:
        return _log_phases(n, coll, size)


def ahc_peers(server: int, local: int, servers: Tuple[Tuple[int, ...], ...]) -> Tuple[int, ...]:
    """Channels of AHC: NHR peers inside my server, then ring (<= 3 groups) or NHR peers among same-index ranks."""
    mine = servers[server]
    out = {mine[j] for j in nhr_peers(local, len(mine))}
    g = len(servers)
    inter = ({(server - 1) % g, (server + 1) % g} - {server}) if g <= 3 else set(nhr_peers(server, g))
    out |= {servers[s][local] for s in inter if local < len(servers[s])}
    return tuple(sorted(out))
