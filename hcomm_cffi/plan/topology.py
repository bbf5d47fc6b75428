"""Cluster topology for the planner: which ranks share a server and which link joins two ranks.

Link classes reuse :class:`hcomm_cffi.enums.Protocol`: HCCS (or PCIE) inside a server, ROCE
between servers (docs/design/plan-model.md#link-figures).  Pure data, no library calls.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple

from ..enums import Protocol

__all__ = ["Topology", "LINK_CLASSES", "parse_link_class"]

#: Link classes the cost model knows (docs/design/plan-model.md#link-figures).
LINK_CLASSES: Tuple[Protocol, ...] = (Protocol.HCCS, Protocol.ROCE, Protocol.PCIE)


def parse_link_class(value: object) -> Protocol:
    """Accept a Protocol or a name ('hccs', 'roce', 'pcie'); reject other link classes."""
    if isinstance(value, Protocol):
        proto = value
    elif isinstance(value, str) and value.strip().upper() in Protocol.__members__:
        proto = Protocol[value.strip().upper()]
    else:
        raise ValueError(f"link class {value!r} is not known; expected one of hccs, roce, pcie")
    if proto not in LINK_CLASSES:
        raise ValueError(f"link class {proto.name} is not modelled; expected one of hccs, roce, pcie")
    return proto


@dataclass(frozen=True)
class Topology:
    """Ranks grouped by server; ``link(a, b)`` is ``intra_link`` inside a server, else ``inter_link``.

    ``servers[s]`` lists the ranks of server ``s`` in local-rank order.  Every rank in
    ``range(n_ranks)`` appears exactly once.  ``server_ids`` / ``super_pods`` carry ranktable names.
    """

    n_ranks: int
    servers: Tuple[Tuple[int, ...], ...]
    intra_link: Protocol = Protocol.HCCS
    inter_link: Protocol = Protocol.ROCE
    source: str = "shape"
    server_ids: Tuple[str, ...] = ()
    super_pods: Tuple[str, ...] = ()
    _server_of: Tuple[int, ...] = field(default=(), init=False, repr=False, compare=False)
    _local_of: Tuple[int, ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.n_ranks < 1:
            raise ValueError(f"n_ranks={self.n_ranks}: a topology needs at least 1 rank")
        server_of = [-1] * self.n_ranks
        local_of = [-1] * self.n_ranks
        for s, ranks in enumerate(self.servers):
            if not ranks:
                raise ValueError(f"server {s} has no ranks")
            for local, rank in enumerate(ranks):
                if not 0 <= rank < self.n_ranks:
                    raise ValueError(f"rank {rank} on server {s} is outside [0, {self.n_ranks})")
                if server_of[rank] != -1:
                    raise ValueError(f"rank {rank} appears on servers {server_of[rank]} and {s}")
                server_of[rank] = s
                local_of[rank] = local
        missing = [r for r, s in enumerate(server_of) if s == -1]
        if missing:
            raise ValueError(f"ranks {missing[:8]} are on no server")
        if self.server_ids and len(self.server_ids) != len(self.servers):
            raise ValueError("server_ids must name every server exactly once")
        object.__setattr__(self, "_server_of", tuple(server_of))
        object.__setattr__(self, "_local_of", tuple(local_of))

    # -- constructors -------------------------------------------------------------------
    @classmethod
    def single_server(cls, n_ranks: int, link: Protocol = Protocol.HCCS) -> "Topology":
        """``n_ranks`` ranks in one server joined by ``link`` (HCCS by default)."""
        _check_positive("ranks", n_ranks)
        return cls(n_ranks, (tuple(range(n_ranks)),), intra_link=parse_link_class(link),
                   source=f"{n_ranks} ranks")

    @classmethod
    def from_shape(cls, servers: int, devices: int, intra_link: Protocol = Protocol.HCCS,
                   inter_link: Protocol = Protocol.ROCE) -> "Topology":
        """``servers`` x ``devices`` ranks; server s holds ranks s*devices .. s*devices+devices-1."""
        _check_positive("servers", servers)
        _check_positive("devices", devices)
        groups = tuple(tuple(range(s * devices, (s + 1) * devices)) for s in range(servers))
        return cls(servers * devices, groups, intra_link=parse_link_class(intra_link),
                   inter_link=parse_link_class(inter_link), source=f"{servers}x{devices}")

    # -- queries ------------------------------------------------------------------------
    @property
    def n_servers(self) -> int:
        """Number of servers."""
        return len(self.servers)

    @property
    def devices_per_server(self) -> Optional[int]:
        """Ranks per server when every server has the same count, else None."""
        sizes = {len(s) for s in self.servers}
        return sizes.pop() if len(sizes) == 1 else None

    def _check_rank(self, rank: int) -> None:
        if not 0 <= rank < self.n_ranks:
            raise ValueError(f"rank={rank} is outside [0, {self.n_ranks})")

    def server_of(self, rank: int) -> int:
        """Index of the server holding ``rank``."""
        self._check_rank(rank)
        return self._server_of[rank]

    def local_rank(self, rank: int) -> int:
        """Position of ``rank`` inside its server (0-based)."""
        self._check_rank(rank)
        return self._local_of[rank]

    def link(self, a: int, b: int) -> Protocol:
        """Link class between two distinct ranks."""
        self._check_rank(a)
        self._check_rank(b)
        if a == b:
            raise ValueError(f"rank {a} has no link to itself")
        return self.intra_link if self._server_of[a] == self._server_of[b] else self.inter_link

    def summary(self) -> Dict[str, object]:
        """JSON-friendly description (no per-rank lists, so it stays small at 65,536 ranks)."""
        return {
            "n_ranks": self.n_ranks, "n_servers": self.n_servers,
            "devices_per_server": self.devices_per_server,
            "intra_link": self.intra_link.name, "inter_link": self.inter_link.name,
            "source": self.source,
        }


def _check_positive(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}={value!r}: expected a positive integer")

