"""Alpha-beta-gamma cost model per link class (docs/design/plan-model.md#the-cost-model, link figures in #link-figures).

Defaults (all indicative, derived rather than measured; calibrate alpha with hccl_test at 8 KiB):

* HCCS: alpha 20 us per step (task issue + notify on host/AICPU paths: "tens of us"),
  50 GB/s per link, 7 links per NPU (A2 full mesh: one link to each of the 7 peers).
* RoCE: alpha 30 us per step, 24 GB/s per NPU (one 200GE port, ~24 GB/s achievable), 1 link.
* PCIe: alpha 25 us per step, 20 GB/s (PCIe 4.0 x16 is 31.5 GB/s line rate; assume ~2/3), 1 link
  shared by all peers (the host bridge is the bottleneck).
* gamma: local reduce at 100 GB/s (one read-modify-write pass over device memory).

GB = 10^9 bytes, as in hccl_test.  AIV and CCU engines run the schedule on the device without task
issue, so their alpha is scaled by ``engine_alpha_scale`` (0.25, an assumption).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from typing import Any, Dict, Mapping, Optional, Tuple

from ..enums import Engine, Protocol
from .topology import parse_link_class

__all__ = ["LinkCost", "CostModel", "Phase", "DEFAULT_COST_MODEL"]


@dataclass(frozen=True)
class LinkCost:
    """One link class: per-step latency, bandwidth of one link, parallel links per rank."""

    alpha_us: float
    bw_gbps: float
    links: int = 1

    def __post_init__(self) -> None:
        if not self.alpha_us >= 0:
            raise ValueError(f"alpha_us={self.alpha_us}: expected a number >= 0")
        if not self.bw_gbps > 0:
            raise ValueError(f"bw_gbps={self.bw_gbps}: expected a number > 0")
        if self.links < 1:
            raise ValueError(f"links={self.links}: expected an integer >= 1")

    def transfer_us(self, nbytes: float, fanout: int) -> float:
        """Time to move ``nbytes`` spread evenly over ``fanout`` peers sharing this rank's links."""
        if nbytes <= 0:
            return 0.0
        return nbytes / (self.bw_gbps * 1e3 * min(self.links, max(1, fanout)))


def _default_links() -> Dict[Protocol, LinkCost]:
    return {
        Protocol.HCCS: LinkCost(alpha_us=20.0, bw_gbps=50.0, links=7),
        Protocol.ROCE: LinkCost(alpha_us=30.0, bw_gbps=24.0, links=1),
        Protocol.PCIE: LinkCost(alpha_us=25.0, bw_gbps=20.0, links=1),
    }


def _default_engine_scale() -> Dict[Engine, float]:
    return {Engine.AIV: 0.25, Engine.CCU: 0.25}


@dataclass(frozen=True)
class Phase:
    """One phase of a schedule as seen by the busiest rank (what the time model needs).

    ``path_bytes`` crosses the critical path (sequential steps add up); ``fanout`` peers are served
    at once in every step (1 = one peer per step); ``sent_bytes`` is what the busiest rank sends;
    ``reduce_bytes`` is locally reduced on the critical path.  ``link`` is the bottleneck class, or
    None when the phase fans out over the classes in ``fanout_by_link``.
    """

    name: str
    steps: int
    path_bytes: float
    sent_bytes: float
    fanout: int = 1
    reduce_bytes: float = 0.0
    link: Optional[Protocol] = None
    fanout_by_link: Tuple[Tuple[Protocol, int], ...] = ()

    def shares(self) -> Tuple[Tuple[Protocol, int, float], ...]:
        """(link class, peers at once, fraction of the bytes) for every class this phase uses."""
        if self.fanout_by_link:
            total = sum(k for _, k in self.fanout_by_link)
            return tuple((c, k, k / total) for c, k in self.fanout_by_link if k)
        assert self.link is not None, f"phase {self.name} has no link class"
        return ((self.link, self.fanout, 1.0),)


@dataclass(frozen=True)
class CostModel:
    """Per-class alpha/beta, reduce throughput (gamma = 1/reduce_gbps) and per-engine alpha scale."""

    links: Mapping[Protocol, LinkCost] = field(default_factory=_default_links)
    reduce_gbps: float = 100.0
    engine_alpha_scale: Mapping[Engine, float] = field(default_factory=_default_engine_scale)

    def link(self, proto: Protocol) -> LinkCost:
        """Cost parameters of one link class."""
        try:
            return self.links[proto]
        except KeyError:
            raise ValueError(f"cost model has no parameters for link class {proto.name}") from None

    def phase_us(self, phase: Phase, engine: Engine, pieces: int = 1) -> float:
        """Modelled time of one phase: steps x alpha per piece + bytes/bandwidth + reduce/gamma."""
        if phase.steps == 0:
            return 0.0
        scale = self.engine_alpha_scale.get(engine, 1.0)
        shares = phase.shares()
        alpha = max(self.link(c).alpha_us for c, _, _ in shares) * scale
        beta = max(self.link(c).transfer_us(phase.path_bytes * f, k) for c, k, f in shares)
        gamma = phase.reduce_bytes / (self.reduce_gbps * 1e3) if phase.reduce_bytes > 0 else 0.0
        return pieces * phase.steps * alpha + beta + gamma

    def with_overrides(self, alpha_us: Optional[Mapping[Protocol, float]] = None,
                       bw_gbps: Optional[Mapping[Protocol, float]] = None,
                       links: Optional[Mapping[Protocol, int]] = None,
                       reduce_gbps: Optional[float] = None) -> "CostModel":
        """A copy with some per-class parameters replaced."""
        table = dict(self.links)
        for proto in set(alpha_us or {}) | set(bw_gbps or {}) | set(links or {}):
            base = table.get(proto, LinkCost(0.0, 1.0))
            table[proto] = replace(
                base, alpha_us=float((alpha_us or {}).get(proto, base.alpha_us)),
                bw_gbps=float((bw_gbps or {}).get(proto, base.bw_gbps)),
                links=int((links or {}).get(proto, base.links)))
        return replace(self, links=table,
                       reduce_gbps=self.reduce_gbps if reduce_gbps is None else float(reduce_gbps))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "CostModel":
        """``{"hccs": {"alpha_us": 20, "bw_gbps": 50, "links": 7}, ..., "reduce_gbps": 100}``."""
        if not isinstance(data, Mapping):
            raise ValueError("cost model JSON must be an object")
        alpha: Dict[Protocol, float] = {}
        bw: Dict[Protocol, float] = {}
        links: Dict[Protocol, int] = {}
        for key, value in data.items():
            if key == "reduce_gbps":
                continue
            proto = parse_link_class(key)
            if not isinstance(value, Mapping):
                raise ValueError(f"cost model entry {key!r} must be an object with alpha_us/bw_gbps/links")
            unknown = set(value) - {"alpha_us", "bw_gbps", "links"}
            if unknown:
                raise ValueError(f"cost model entry {key!r}: unknown keys {sorted(unknown)}; "
                                 f"expected alpha_us, bw_gbps, links")
            if "alpha_us" in value:
                alpha[proto] = float(value["alpha_us"])
            if "bw_gbps" in value:
                bw[proto] = float(value["bw_gbps"])
            if "links" in value:
                links[proto] = int(value["links"])
        reduce = data.get("reduce_gbps")
        return cls().with_overrides(alpha, bw, links, None if reduce is None else float(reduce))

    @classmethod
    def from_json_file(cls, path: "os.PathLike[str] | str") -> "CostModel":
        """Load overrides from a JSON file (see :meth:`from_dict`)."""
        with open(path, encoding="utf-8") as fh:
            return cls.from_dict(json.load(fh))

    def to_dict(self) -> Dict[str, Any]:
        """JSON-friendly parameters."""
        out: Dict[str, Any] = {
            c.name.lower(): {"alpha_us": lc.alpha_us, "bw_gbps": lc.bw_gbps, "links": lc.links}
            for c, lc in self.links.items()}
        out["reduce_gbps"] = self.reduce_gbps
        out["engine_alpha_scale"] = {e.name: s for e, s in self.engine_alpha_scale.items()}
        return out


DEFAULT_COST_MODEL = CostModel()
