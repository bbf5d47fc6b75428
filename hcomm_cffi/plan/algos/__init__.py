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
from .vendor_only import Ahc, DoubleRing, Nb, Pairwise
from .vendor_schedule import VendorSchedule
from ..vendor import PLATFORM_NAMES, PLATFORMS, VendorRule, vendor_rule

__all__ = ["ALGORITHMS", "AUTO_ALGORITHMS", "FLAT_ALGORITHMS", "INTER_ALGORITHMS", "Collective", "ROOTED", "RoleShape",
           "Schedule", "InvalidAlgorithm", "build_schedule", "parse_collective", "nhr_peers"]

FLAT_ALGORITHMS: Dict[str, FlatAlgorithm] = {a.name: a for a in (Ring(), Mesh(), Tree(), Nhr(), Nb(), Pairwise(),
                                                                   DoubleRing(), Ahc())}
#: The algorithms ``auto`` chooses among, in the order it breaks ties (the document's five).
AUTO_ALGORITHMS = ("ring", "mesh", "tree", "nhr", "hierarchical")
#: Every algorithm the planner knows: the document's, then the vendor's that the document lacks.
ALGORITHMS = AUTO_ALGORITHMS + ("nb", "ahc", "alltoall_pairwise", "double_ring")
#: Vendor-only algorithms: their figures come from this platform's executor when planned as ``doc``.
_REFERENCE = {"nb": "a2", "ahc": "a2", "alltoall_pairwise": "a2", "double_ring": "a3"}
_VENDOR = tuple(p for p in PLATFORMS if p != "doc")
#: Algorithms allowed on the inter-server level of ``hierarchical``.
INTER_ALGORITHMS = ("ring", "nhr", "tree", "mesh", "nb")


def build_schedule(algorithm: str, topo: Topology, coll: Collective, root: int, size: float,
                   peer: Optional[int] = None, inter_algorithm: str = "nhr", platform: str = "doc",
                   expansion: str = "AI CPU") -> Schedule:
    """The schedule of ``algorithm`` under the ``platform`` profile; raises :class:`InvalidAlgorithm` with the reason.

    ``schedule.source`` says where its resource figures come from, ``schedule.notes`` what differs.
    """
    sched = _model_schedule(algorithm, topo, coll, root, size, peer, inter_algorithm)
    if coll is Collective.SENDRECV or topo.n_ranks == 1:
        return sched
    rules = {p: _rule(p, algorithm, topo, coll, inter_algorithm, expansion) for p in _VENDOR}
    what = f"{algorithm}{f' (inter {inter_algorithm})' if algorithm == 'hierarchical' else ''} {coll.value}"
    if all(r is None for r in rules.values()):
        sched.notes = (f"no vendor executor (A2, A3, 910A, 950) runs {what}: the figures are the package's model's "
                       "only",)
    ref = _REFERENCE.get(algorithm)
    want = ref if platform == "doc" and ref else platform
    if want == "doc":
        sched.source = DOC_MODEL
        return sched
    rule = rules[want]
    if rule is None:
        if ref:
            where = [p for p in _VENDOR if rules[p] is not None]
            raise InvalidAlgorithm(f"{algorithm}: no {PLATFORM_NAMES[want]} executor runs {coll.value}"
                                   + (f"; the vendor runs it on {', '.join(PLATFORM_NAMES[p] for p in where)} "
                                      f"(--platform {where[0]})" if where else ""))
        sched.notes += (f"no {PLATFORM_NAMES[want]} executor runs {what}: the figures are the package's model's",)
        sched.source = DOC_MODEL
        return sched
    vs = VendorSchedule(sched, topo, algorithm, rule, inter_algorithm)
    vs.notes, vs.source = sched.notes + ((rule.note,) if rule.note else ()), rule.source
    if platform == "doc":
        vs.notes += (f"the package's model has no {algorithm}: the figures are the {PLATFORM_NAMES[want]} executor's",)
    return vs


#: Where the ``doc`` figures come from.
DOC_MODEL = ("the manual's page docs/design/plan-model.md (notify accounting, per-algorithm formulas; its example is "
             "one server of 4 ranks on AI CPU)")


def _rule(platform: str, algorithm: str, topo: Topology, coll: Collective, inter: str,
          expansion: str = "AI CPU") -> Optional[VendorRule]:
    devices = topo.devices_per_server or 0
    if algorithm != "hierarchical":
        return vendor_rule(platform, algorithm, coll, topo.n_ranks, devices, expansion=expansion)
    p, s = devices, topo.n_servers
    a = vendor_rule(platform, "mesh", coll, p, devices, "intra", expansion) if p > 1 else VendorRule((), "")
    b = vendor_rule(platform, inter, coll, s, devices, level="inter")
    if a is None or b is None:
        return None
    width = max(len(a.fork_join), len(b.fork_join))
    pad = lambda t: tuple(t) + (0,) * (width - len(t))  # noqa: E731
    return VendorRule(tuple(max(x, y) for x, y in zip(pad(a.fork_join), pad(b.fork_join))),
                      f"intra-server mesh: {a.source or '-'}; inter-server {inter}: {b.source}")


def _model_schedule(algorithm: str, topo: Topology, coll: Collective, root: int, size: float,
                    peer: Optional[int], inter_algorithm: str) -> Schedule:
    """The document model's schedule (the cost phases of every profile)."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm={algorithm!r} is not known; expected one of {', '.join(ALGORITHMS)}")
    if algorithm == "ahc" and topo.n_servers < 2:
        raise InvalidAlgorithm("ahc concatenates server groups: it needs more than one server (topology has 1)")
    if algorithm == "ahc" and topo.devices_per_server is None:
        raise InvalidAlgorithm("ahc is planned for server groups of equal size (this topology's servers differ)")
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
