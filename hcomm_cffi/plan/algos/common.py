"""Shared vocabulary of the per-algorithm modules: collectives, roles, the algorithm interface.

Message size ``size`` (bytes) means, per collective (hccl_test's convention, docs/design/plan-model.md):
allreduce / broadcast / reduce: the buffer on each rank; allgather: the gathered output (each rank
contributes size/N); reduce_scatter: the input (size/N lands on each rank); alltoall: the send
buffer of one rank; sendrecv: the bytes sent; barrier: ignored.
"""
from __future__ import annotations

import abc
import enum
from dataclasses import dataclass
from typing import ClassVar, Optional, Tuple

from ..cost import Phase

__all__ = ["Collective", "ROOTED", "RoleShape", "FlatAlgorithm", "parse_collective",
           "ceil_log2", "floor_log2", "fork_join_notifies"]


class Collective(str, enum.Enum):
    """The collectives the planner sizes."""

    ALLREDUCE = "allreduce"
    ALLGATHER = "allgather"
    REDUCE_SCATTER = "reduce_scatter"
    BROADCAST = "broadcast"
    REDUCE = "reduce"
    ALLTOALL = "alltoall"
    BARRIER = "barrier"
    SENDRECV = "sendrecv"


#: Collectives with a root rank (root and non-root may need different resources).
ROOTED = frozenset({Collective.BROADCAST, Collective.REDUCE})


def parse_collective(value: object) -> Collective:
    """Accept a Collective or its name ('allreduce', 'reduce-scatter', 'all_gather', ...)."""
    if isinstance(value, Collective):
        return value
    if isinstance(value, str):
        key = value.strip().lower().replace("-", "").replace("_", "")
        for coll in Collective:
            if coll.value.replace("_", "") == key:
                return coll
    raise ValueError(f"collective {value!r} is not known; expected one of "
                     f"{', '.join(c.value for c in Collective)}")


@dataclass(frozen=True)
class RoleShape:
    """A set of ranks with identical resource counts: its name, size and one example member."""

    name: str
    count: int
    example: int


def ceil_log2(n: int) -> int:
    """Smallest k with 2**k >= n (n >= 1)."""
    return (n - 1).bit_length()


def floor_log2(n: int) -> int:
    """Largest k with 2**k <= n (n >= 1)."""
    return n.bit_length() - 1


def fork_join_notifies(threads: int, per_slave: int = 1) -> Tuple[int, ...]:
    """Thread notifies per thread for fork/join: main joins T-1 slaves, each slave waits ``per_slave``."""
    if threads <= 0:
        return ()
    return (threads - 1,) + (per_slave,) * (threads - 1)


class FlatAlgorithm(abc.ABC):
    """One single-level algorithm over a group of ``n >= 2`` members indexed 0..n-1.

    Everything is a function of (n, collective, root) so a plan can stay role-based: the
    planner never enumerates all ranks.
    """

    name: ClassVar[str]

    def invalid_reason(self, n: int, coll: Collective) -> Optional[str]:
        """Why this algorithm cannot run ``coll`` on ``n`` members, or None."""
        return None

    @abc.abstractmethod
    def roles(self, n: int, coll: Collective, root: int) -> Tuple[RoleShape, ...]:
        """The distinct roles, the busiest (or the root) first."""

    @abc.abstractmethod
    def role_of(self, i: int, n: int, coll: Collective, root: int) -> str:
        """Name of the role of member ``i``."""

    @abc.abstractmethod
    def peers(self, i: int, n: int, coll: Collective, root: int) -> Tuple[int, ...]:
        """Members that member ``i`` holds a channel to (each once, symmetric relation)."""

    @abc.abstractmethod
    def thread_notifies(self, role: str, n: int, coll: Collective) -> Tuple[int, ...]:
        """Fork/join thread notifies per thread (main first); its length is the thread count."""

    @abc.abstractmethod
    def phases(self, n: int, coll: Collective, size: float) -> Tuple[Phase, ...]:
        """Schedule of the busiest member; ``link`` left None (the planner binds link classes)."""
