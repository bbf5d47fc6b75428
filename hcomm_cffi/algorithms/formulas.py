"""The planner's closed-form resource plans, as the ``resources`` of the built-in algorithms.

A built-in declares its resources with the planner's formula (cheap, size-independent, and what
``hcomm plan`` documents); the tests prove each formula equals what a dry run of the algorithm's
own schedule derives, so declaring it changes nothing but the cost of finding it.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any, Callable, Optional, Tuple

from ..enums import Engine
from ..plan import InvalidAlgorithm, Plan, RankResources, Topology, make_plan, rank_resources
from ..resources import ENGINE
from .interface import (ALGORITHM_NOTIFIES, COMM_ENGINE, COMM_NOTIFIES, ROOTED, Algorithm, CollectiveCall,
                        UnsupportedError)

__all__ = ["plan_for", "p2p_plan", "formula_resources", "no_resources", "package_plan", "comm_overhead"]

ResourcesFn = Callable[[Topology, CollectiveCall, int], Optional[RankResources]]


@lru_cache(maxsize=512)
def plan_for(algorithm: str, coll: str, topo: Topology, root: int = 0, platform: str = "doc",
             notifies: int = ALGORITHM_NOTIFIES) -> Plan:
    """The planner's plan of ``algorithm`` for ``coll`` under the ``platform`` profile (size-independent), with
    ``notifies`` per channel (what the algorithm's schedule uses: ACK and DATA for the built-ins).

    A vendor profile is planned for the AI CPU engine, whose host-sync notify the emulator's
    threads carry too (the document model always adds it).
    """
    engine = Engine.CPU_TS if platform == "doc" else Engine.AICPU_TS
    try:
        return make_plan(coll, topo, 0, algorithm, engine=engine, root=root,
                         notifies_per_channel=notifies, inter_algorithm="ring", platform=platform)
    except InvalidAlgorithm as exc:
        raise UnsupportedError(f"algorithm={algorithm!r} cannot run {coll} on {topo.n_ranks} ranks: {exc}") from None


@lru_cache(maxsize=256)
def p2p_plan(topo: Topology, src: int, dst: int) -> Plan:
    """Plan of a point-to-point lane from ``src`` to ``dst`` (one thread, one channel each)."""
    return make_plan("sendrecv", topo, 0, "ring", engine=Engine.CPU_TS, root=src, peer=dst,
                     notifies_per_channel=COMM_NOTIFIES)


def formula_resources(planner_name: str, platform: str = "doc", notifies: int = ALGORITHM_NOTIFIES) -> ResourcesFn:
    """``resources`` of an algorithm whose plan is the planner's formula ``planner_name`` under ``platform``
    (the profile the algorithm implements: ``doc`` for ring/mesh/tree/hierarchical, a vendor one for
    the algorithms the document lacks), with ``notifies`` per channel (the indices its schedule uses)."""
    def resources(topology: Topology, call: CollectiveCall, rank: int) -> Optional[RankResources]:
        root = call.root if call.coll in ROOTED else 0
        return plan_for(planner_name, call.coll, topology, root, platform, notifies).resources_for(rank)
    resources.__doc__ = f"The planner's {planner_name} formula ({platform} profile) for this rank."
    resources.profile = platform  # type: ignore[attr-defined]
    resources.notifies = notifies  # type: ignore[attr-defined]
    return resources


def no_resources(topology: Topology, call: CollectiveCall, rank: int) -> Optional[RankResources]:
    """Nothing to acquire (the library's own collectives)."""
    return rank_resources(rank, "library", (), ())


def package_plan(alg: Algorithm, coll: str, topo: Topology, size: int, *, root: int = 0, dtype: Any = None,
                 buffer_mb: int = 200, cost: Any = None) -> Optional[Plan]:
    """The plan of built-in ``alg`` as it runs here: exactly the formula its ``resources`` declare (the same
    profile, engine, notifies per channel and level-1 ring as :func:`plan_for`), for ``size`` bytes (pieces, time).
    None when the algorithm declares no formula."""
    algorithm = alg.name
    declared = getattr(alg, "_resources", None)
    profile = getattr(declared, "profile", None)
    if profile is None:
        return None
    engine = Engine.CPU_TS if profile == "doc" else Engine.AICPU_TS
    extra = {} if dtype is None else {"dtype": dtype}
    try:
        return make_plan(coll, topo, size, algorithm, engine=engine, root=root, cost=cost, buffer_mb=buffer_mb,
                         notifies_per_channel=getattr(declared, "notifies", ALGORITHM_NOTIFIES), inter_algorithm="ring",
                         platform=profile, **extra)
    except InvalidAlgorithm as exc:
        raise UnsupportedError(f"algorithm={algorithm!r} cannot run {coll} on {topo.n_ranks} ranks: {exc}") from None


def comm_overhead(topology: Topology, rank: int) -> Tuple[Tuple[str, str, str, int, int], ...]:
    """What a communicator acquires for itself, whatever algorithms run on it: (purpose, kind, engine, count, notifies
    each) -- its own channel to every peer, opened at init (signature handshake and point-to-point), and the
    stream's thread, made by its first signature handshake with the host-sync notify (an algorithm's main thread
    is that thread: the algorithm's plan counts it, with the notifies it adds), and per peer and direction a
    send/recv uses, a thread wrapping that lane's own stream (on the communicator's channel)."""
    peers = topology.n_ranks - 1
    if not peers:
        return ()
    lane = p2p_plan(topology, rank, (rank + 1) % topology.n_ranks).resources_for(rank)
    return (("comm:channels", "channel", COMM_ENGINE.name, peers, COMM_NOTIFIES),
            ("comm:signature", "thread", ENGINE.name, 1, 1),
            ("comm:p2p", "thread", ENGINE.name, lane.threads, lane.thread_notify_counts[0]))
