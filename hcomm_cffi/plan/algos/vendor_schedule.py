"""A schedule whose resources are a vendor profile's (:mod:`..vendor`) and whose cost phases are the model's.

Every rank of a vendor profile holds the same threads and the same kind of channels (one role):
flat algorithms over all ranks, hierarchical as the vendor's two levels (intra-server mesh, then
the inter-server algorithm between same-index ranks, every rank a member of both; threads the
larger of the two levels').
"""
from __future__ import annotations

from typing import Tuple

from ..cost import Phase
from ..topology import Topology
from ..vendor import VendorRule
from .common import Collective, RoleShape
from .nhr import nhr_peers
from .tree import Tree
from .schedule import Peer, Schedule
from .vendor_only import ahc_peers

__all__ = ["VendorSchedule", "flat_peers"]


def flat_peers(algorithm: str, i: int, n: int) -> Tuple[int, ...]:
    """Channels of member ``i`` of ``n`` in the vendor's transport calculators (root-independent)."""
    if algorithm in ("ring", "double_ring"):          # calc_ring_transport_req.cc:53-69 (both neighbours)
        return tuple(sorted({(i - 1) % n, (i + 1) % n} - {i}))
    if algorithm in ("nhr", "nb"):                    # calc_nhr/nb_transport_req.cc:49-73 (+-2^k)
        return nhr_peers(i, n)
    if algorithm == "tree":                           # HD: alg_template_base.cc:969-996, the RHD geometry
        return Tree().peers(i, n, Collective.ALLREDUCE, 0)
    return tuple(j for j in range(n) if j != i)       # mesh, pairwise: calc_mesh_transport_req.cc:53-68


class VendorSchedule(Schedule):
    """``inner`` gives the phases; ``rule`` the threads; the channels follow the vendor's calculators."""

    def __init__(self, inner: Schedule, topo: Topology, algorithm: str, rule: VendorRule,
                 inter_algorithm: str = "") -> None:
        self.inner, self.topo, self.algorithm, self.rule = inner, topo, algorithm, rule
        self.inter_algorithm = inter_algorithm

    def _inter_tree(self) -> bool:
        """HD between servers: the RHD geometry gives servers different channel counts (tree's roles)."""
        return self.algorithm == "hierarchical" and self.inter_algorithm == "tree"

    def roles(self) -> Tuple[RoleShape, ...]:
        if self._inter_tree():
            servers = self.topo.servers
            return tuple(RoleShape(f"servers {r.name}", r.count * len(servers[r.example]), servers[r.example][0])
                         for r in Tree().roles(len(servers), Collective.ALLREDUCE, 0))
        return (RoleShape("every rank", self.topo.n_ranks, 0),)

    def role_of(self, rank: int) -> str:
        if self._inter_tree():
            s = self.topo.server_of(rank)
            return "servers " + Tree().role_of(s, self.topo.n_servers, Collective.ALLREDUCE, 0)
        return "every rank"

    def channels(self, rank: int) -> Tuple[Peer, ...]:
        topo = self.topo
        if self.algorithm == "ahc":
            s, l = topo.server_of(rank), topo.local_rank(rank)
            return tuple((p, topo.link(rank, p), "flat") for p in ahc_peers(s, l, topo.servers))
        if self.algorithm == "hierarchical":
            s, l = topo.server_of(rank), topo.local_rank(rank)
            intra = topo.servers[s]
            out = [(intra[j], topo.intra_link, "intra") for j in flat_peers("mesh", l, len(intra))]
            same = [srv[l] for srv in topo.servers]
            out += [(same[j], topo.inter_link, "inter") for j in flat_peers(self.inter_algorithm, s, len(same))]
            return tuple(out)
        return tuple((p, topo.link(rank, p), "flat") for p in flat_peers(self.algorithm, rank, topo.n_ranks))

    def thread_notifies(self, role: str) -> Tuple[int, ...]:
        return self.rule.fork_join

    def phases(self) -> Tuple[Phase, ...]:
        return self.inner.phases()
