"""Resource planner (pure arithmetic): topology, ranktables, cost model, per-algorithm formulas.

Imports only :mod:`hcomm_cffi.enums` and the standard library (docs/ARCHITECTURE.md).
Entry points: :func:`make_plan`, :func:`compare_algorithms`, :class:`Topology`, :func:`load_ranktable`.
"""
from __future__ import annotations

from .algos import ALGORITHMS, AUTO_ALGORITHMS, INTER_ALGORITHMS, Collective, InvalidAlgorithm, parse_collective
from .cost import DEFAULT_COST_MODEL, CostModel, LinkCost, Phase
from .planner import (ALGORITHM_NOTIFIES, MIB, Candidate, ChannelSpec, Plan, RankResources, RoleSummary,
                      compare_algorithms, make_plan, parse_engine, parse_size, rank_resources)
from .ranktable import RanktableError, load_ranktable, parse_ranktable
from .topology import LINK_CLASSES, Topology, parse_link_class
from .vendor import (DEFAULT_PLATFORM, PLATFORM_NAMES, PLATFORMS, expansion_of, layer_of, native_algorithm,
                     parse_platform)

__all__ = [
    "ALGORITHMS", "AUTO_ALGORITHMS", "INTER_ALGORITHMS", "PLATFORMS", "DEFAULT_PLATFORM", "PLATFORM_NAMES",
    "parse_platform", "expansion_of", "layer_of", "native_algorithm", "Collective", "InvalidAlgorithm", "parse_collective",
    "DEFAULT_COST_MODEL", "CostModel", "LinkCost", "Phase",
    "ALGORITHM_NOTIFIES", "MIB", "Candidate", "ChannelSpec", "Plan", "RankResources", "RoleSummary",
    "compare_algorithms", "make_plan", "parse_engine", "parse_size", "rank_resources",
    "RanktableError", "load_ranktable", "parse_ranktable",
    "LINK_CLASSES", "Topology", "parse_link_class",
]
