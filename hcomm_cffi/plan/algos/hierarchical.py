"""Hierarchical: intra-server mesh (HCCS) + inter-server algorithm between same-index devices (RoCE).

Serial phases (docs/design/plan-model.md#hierarchical): threads T = max over levels, per-thread notifies the
element-wise max, channels concatenated per level.  Level 0 follows the hardware and is a full
mesh (not configurable, as in HCCL's selection); the inter-server level is ring, nhr (default), tree or mesh.
Phases: AllReduce = intra RS -> inter AR (n/P) -> intra AG; AllGather = inter AG (n/P) -> intra AG;
ReduceScatter = intra RS -> inter RS (n/P); Broadcast = inter (root's local index) -> intra;
Reduce = intra -> inter; AlltoAll = intra + inter; Barrier = intra, inter, intra.
"""
from __future__ import annotations

from dataclasses import replace
from typing import List, Tuple

from ..cost import Phase
from ..topology import Topology
from .common import ROOTED, Collective, FlatAlgorithm, RoleShape
from .mesh import Mesh
from .schedule import InvalidAlgorithm, Peer, Schedule

__all__ = ["HierarchicalSchedule"]

_SOLO = RoleShape("solo", 1, 0)
_NONE = "-"


class HierarchicalSchedule(Schedule):
    """Two levels over a uniform servers x devices topology."""

    def __init__(self, inter: FlatAlgorithm, topo: Topology, coll: Collective, root: int,
                 size: float) -> None:
        if topo.n_servers < 2:
            raise InvalidAlgorithm("hierarchical needs more than one server (topology has 1)")
        if topo.devices_per_server is None:
            raise InvalidAlgorithm("hierarchical needs the same number of devices on every server")
        reason = inter.invalid_reason(topo.n_servers, coll)
        if reason:
            raise InvalidAlgorithm(f"inter-server {inter.name}: {reason}")
        self.intra, self.inter = Mesh(), inter
        self.topo, self.coll, self.size = topo, coll, size
        self.P, self.S = topo.devices_per_server, topo.n_servers
        self.lroot, self.sroot = topo.local_rank(root), topo.server_of(root)

    def _joins_inter(self, local: int) -> bool:
        return self.coll not in ROOTED or local == self.lroot

    def _intra_roles(self) -> Tuple[RoleShape, ...]:
        return self.intra.roles(self.P, self.coll, self.lroot) if self.P > 1 else (_SOLO,)

    def roles(self) -> Tuple[RoleShape, ...]:
        out: List[RoleShape] = []
        servers = self.topo.servers
        inter_roles = self.inter.roles(self.S, self.coll, self.sroot)
        for ir in self._intra_roles():
            if self._joins_inter(ir.example):
                out += [RoleShape(f"{ir.name}/{er.name}", ir.count * er.count, servers[er.example][ir.example])
                        for er in inter_roles]
            else:
                out.append(RoleShape(f"{ir.name}/{_NONE}", ir.count * self.S, servers[self.sroot][ir.example]))
        return tuple(out)

    def role_of(self, rank: int) -> str:
        s, l = self.topo.server_of(rank), self.topo.local_rank(rank)
        a = self.intra.role_of(l, self.P, self.coll, self.lroot) if self.P > 1 else _SOLO.name
        b = self.inter.role_of(s, self.S, self.coll, self.sroot) if self._joins_inter(l) else _NONE
        return f"{a}/{b}"

    def channels(self, rank: int) -> Tuple[Peer, ...]:
        topo, servers = self.topo, self.topo.servers
        s, l = topo.server_of(rank), topo.local_rank(rank)
        out: List[Peer] = []
        if self.P > 1:
            out += [(servers[s][j], topo.intra_link, "intra")
                    for j in self.intra.peers(l, self.P, self.coll, self.lroot)]
        if self._joins_inter(l):
            out += [(servers[j][l], topo.inter_link, "inter")
                    for j in self.inter.peers(s, self.S, self.coll, self.sroot)]
        return tuple(out)

    def thread_notifies(self, role: str) -> Tuple[int, ...]:
        a, b = role.split("/", 1)
        first = () if a == _SOLO.name else self.intra.thread_notifies(a, self.P, self.coll)
        second = () if b == _NONE else self.inter.thread_notifies(b, self.S, self.coll)
        width = max(len(first), len(second))
        pad = lambda t: tuple(t) + (0,) * (width - len(t))  # noqa: E731
        return tuple(max(x, y) for x, y in zip(pad(first), pad(second)))

    def phases(self) -> Tuple[Phase, ...]:
        C, n, P = Collective, self.size, self.P
        plan = {
            C.ALLREDUCE: (("intra", C.REDUCE_SCATTER, n), ("inter", C.ALLREDUCE, n / P),
                          ("intra", C.ALLGATHER, n)),
            C.ALLGATHER: (("inter", C.ALLGATHER, n / P), ("intra", C.ALLGATHER, n)),
            C.REDUCE_SCATTER: (("intra", C.REDUCE_SCATTER, n), ("inter", C.REDUCE_SCATTER, n / P)),
            C.BROADCAST: (("inter", C.BROADCAST, n), ("intra", C.BROADCAST, n)),
            C.REDUCE: (("intra", C.REDUCE, n), ("inter", C.REDUCE, n)),
            C.ALLTOALL: (("intra", C.ALLTOALL, n), ("inter", C.ALLTOALL, n)),
            C.BARRIER: (("intra", C.BARRIER, 0), ("inter", C.BARRIER, 0), ("intra", C.BARRIER, 0)),
        }[self.coll]
        out: List[Phase] = []
        for level, sub, size in plan:
            algo, members, link = ((self.intra, P, self.topo.intra_link) if level == "intra"
                                   else (self.inter, self.S, self.topo.inter_link))
            if members < 2:
                continue
            out += [replace(ph, name=f"{level} {algo.name} {ph.name}", link=link)
                    for ph in algo.phases(members, sub, size)]
        return tuple(out)
