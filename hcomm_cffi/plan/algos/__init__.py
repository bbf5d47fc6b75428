"""One small module per algorithm; :func:`build_schedule` binds one to a topology and collective."""
from __future__ import annotations

from typing import Dict, Optional

from ..topology import Topology
from .common import ROOTED, Collective, FlatAlgorithm, RoleShape, parse_collective
from .hierarchical import HierarchicalSchedule
from .mesh import Mesh
from .nhr import Nhr, nhr_peers
from .ring import Ring
from .schedule import (FlatSchedule, InvalidAlgorithm, P2PSchedule, Schedule,
                       SingleRankSchedule)
from .tree import Tree

__all__ = ["ALGORITHMS", "FLAT_ALGORITHMS", "INTER_ALGORITHMS", "Collective", "ROOTED", "RoleShape",
           "Schedule", "InvalidAlgorithm", "build_schedule", "parse_collective", "nhr_peers"]

FLAT_ALGORITHMS: Dict[str, FlatAlgorithm] = {a.name: a for a in (Ring(), Mesh(), Tree(), Nhr())}
#: Every algorithm the planner knows, in the order ``auto`` breaks ties.
ALGORITHMS = ("ring", "mesh", "tree", "nhr", "hierarchical")
#: Algorithms allowed on the inter-server level of ``hierarchical``.
INTER_ALGORITHMS = ("ring", "nhr", "tree", "mesh")


def build_schedule(algorithm: str, topo: Topology, coll: Collective, root: int, size: float,
                   peer: Optional[int] = None, inter_algorithm: str = "nhr") -> Schedule:
    """The schedule of ``algorithm``; raises :class:`InvalidAlgorithm` with the reason."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm={algorithm!r} is not known; expected one of {', '.join(ALGORITHMS)}")
    if algorithm == "hierarchical":
        if inter_algorithm not in INTER_ALGORITHMS:
            raise ValueError(f"inter_algorithm={inter_algorithm!r} is not known; expected one of "
                             f"{', '.join(INTER_ALGORITHMS)}")
        if topo.n_servers < 2:
            raise InvalidAlgorithm("hierarchical needs more than one server (topology has 1)")
    if coll is Collective.SENDRECV:
        if topo.n_ranks < 2:
            raise InvalidAlgorithm("sendrecv needs at least 2 ranks")
        dst = (root + 1) % topo.n_ranks if peer is None else peer
        return P2PSchedule(topo, root, dst, size)
    if topo.n_ranks == 1:
        return SingleRankSchedule(coll)
    if algorithm == "hierarchical":
        return HierarchicalSchedule(FLAT_ALGORITHMS[inter_algorithm], topo, coll, root, size)
    return FlatSchedule(FLAT_ALGORITHMS[algorithm], topo, coll, root, size)
