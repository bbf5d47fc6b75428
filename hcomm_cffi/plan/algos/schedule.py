"""Schedules: an algorithm bound to a topology, collective and root, answering per-rank questions.

A schedule is role-based: ``roles()`` lists the distinct resource shapes (O(roles), never O(N)),
``channels(rank)`` computes one rank's peers on demand.
"""
from __future__ import annotations

import abc
from dataclasses import replace
from typing import Dict, Tuple

from ...enums import Protocol
from ..cost import Phase
from ..topology import Topology
from .common import Collective, FlatAlgorithm, RoleShape

__all__ = ["Schedule", "FlatSchedule", "SingleRankSchedule", "P2PSchedule", "Peer",
           "InvalidAlgorithm"]

#: (peer rank, link class, level name)
Peer = Tuple[int, Protocol, str]


class InvalidAlgorithm(ValueError):
    """The algorithm cannot run this collective on this topology; the message says why."""


class Schedule(abc.ABC):
    """Resource shape and cost phases of one collective on one topology.

    ``source`` says where the resource figures come from; ``notes`` what a reader should know
    (a vendor that lacks this algorithm, a profile that differs).
    """

    source: str = ""
    notes: Tuple[str, ...] = ()

    @abc.abstractmethod
    def roles(self) -> Tuple[RoleShape, ...]:
        """Distinct roles, busiest (or root) first; counts sum to the rank count."""

    @abc.abstractmethod
    def role_of(self, rank: int) -> str:
        """Role name of ``rank``."""

    @abc.abstractmethod
    def channels(self, rank: int) -> Tuple[Peer, ...]:
        """Channels ``rank`` holds: (peer, link class, level)."""

    @abc.abstractmethod
    def thread_notifies(self, role: str) -> Tuple[int, ...]:
        """Fork/join thread notifies per thread of ``role`` (length = threads)."""

    @abc.abstractmethod
    def phases(self) -> Tuple[Phase, ...]:
        """Cost phases with link classes bound."""


class FlatSchedule(Schedule):
    """A single-level algorithm over every rank of the topology (rank order = ring order)."""

    def __init__(self, algo: FlatAlgorithm, topo: Topology, coll: Collective, root: int,
                 size: float) -> None:
        reason = algo.invalid_reason(topo.n_ranks, coll)
        if reason:
            raise InvalidAlgorithm(reason)
        self.algo, self.topo, self.coll, self.root, self.size = algo, topo, coll, root, size
        self.level = "flat"

    def roles(self) -> Tuple[RoleShape, ...]:
        return self.algo.roles(self.topo.n_ranks, self.coll, self.root)

    def role_of(self, rank: int) -> str:
        return self.algo.role_of(rank, self.topo.n_ranks, self.coll, self.root)

    def channels(self, rank: int) -> Tuple[Peer, ...]:
        link = self.topo.link
        return tuple((p, link(rank, p), self.level)
                     for p in self.algo.peers(rank, self.topo.n_ranks, self.coll, self.root))

    def thread_notifies(self, role: str) -> Tuple[int, ...]:
        return self.algo.thread_notifies(role, self.topo.n_ranks, self.coll)

    def phases(self) -> Tuple[Phase, ...]:
        topo = self.topo
        bottleneck = topo.inter_link if topo.n_servers > 1 else topo.intra_link
        split: Tuple[Tuple[Protocol, int], ...] = ()
        out = []
        for ph in self.algo.phases(topo.n_ranks, self.coll, self.size):
            if ph.fanout > 1 and topo.n_servers > 1:
                if not split:
                    counts: Dict[Protocol, int] = {}
                    for _, proto, _ in self.channels(self.roles()[0].example):
                        counts[proto] = counts.get(proto, 0) + 1
                    split = tuple(sorted(counts.items()))
                out.append(replace(ph, fanout_by_link=split))
            else:
                out.append(replace(ph, link=bottleneck))
        return tuple(out)


class SingleRankSchedule(Schedule):
    """N = 1: no channels; a collective that moves data is a local copy on one thread (broadcast, barrier: nothing)."""

    def __init__(self, coll: Collective) -> None:
        self.coll = coll

    def roles(self) -> Tuple[RoleShape, ...]:
        return (RoleShape("single", 1, 0),)

    def role_of(self, rank: int) -> str:
        return "single"

    def channels(self, rank: int) -> Tuple[Peer, ...]:
        return ()

    def thread_notifies(self, role: str) -> Tuple[int, ...]:
        return () if self.coll in (Collective.BROADCAST, Collective.BARRIER) else (0,)

    def phases(self) -> Tuple[Phase, ...]:
        return ()


class P2PSchedule(Schedule):
    """Send/recv between ``src`` and ``dst``: one channel and one thread each, others idle."""

    def __init__(self, topo: Topology, src: int, dst: int, size: float) -> None:
        if src == dst:
            raise InvalidAlgorithm(f"sendrecv needs two distinct ranks, got root={src} and peer={dst}")
        self.topo, self.src, self.dst, self.size = topo, src, dst, size

    def roles(self) -> Tuple[RoleShape, ...]:
        out = [RoleShape("sender", 1, self.src), RoleShape("receiver", 1, self.dst)]
        n = self.topo.n_ranks
        if n > 2:
            idle = next(r for r in range(3) if r not in (self.src, self.dst))
            out.append(RoleShape("idle", n - 2, idle))
        return tuple(out)

    def role_of(self, rank: int) -> str:
        return {self.src: "sender", self.dst: "receiver"}.get(rank, "idle")

    def channels(self, rank: int) -> Tuple[Peer, ...]:
        other = {self.src: self.dst, self.dst: self.src}.get(rank)
        return () if other is None else ((other, self.topo.link(rank, other), "p2p"),)

    def thread_notifies(self, role: str) -> Tuple[int, ...]:
        return () if role == "idle" else (0,)

    def phases(self) -> Tuple[Phase, ...]:
        return (Phase("send", 1, self.size, self.size, link=self.topo.link(self.src, self.dst)),)
