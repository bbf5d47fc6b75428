"""The planner's modelled time for a benchmarked operation (docs/design/plan-model.md#the-cost-model).

The model describes Ascend hardware (HCCS links inside one server), not the emulator; it is reported
beside the measurement so both can be read together.
"""
from __future__ import annotations

from typing import Optional, Tuple

from ..enums import DataType

__all__ = ["modelled_time_us"]


def modelled_time_us(op: str, nranks: int, nbytes: int, algorithm: str = "auto",
                     dtype: DataType = DataType.FP32, root: int = 0) -> Tuple[Optional[float], Optional[str]]:
    """(modelled µs, planned algorithm) for ``op`` of ``nbytes`` on one server of ``nranks``; (None, None)
    when the planner cannot plan it (one rank, an algorithm it does not know, ...)."""
    from ..plan import Topology, make_plan

    if nranks < 2:
        return None, None
    algo = "auto" if algorithm in ("native", "auto") else algorithm
    try:
        plan = make_plan(op, Topology.single_server(nranks), nbytes, algo, dtype=dtype, root=root)
    except (ValueError, KeyError):
        return None, None
    return float(plan.modelled_time_us), plan.algorithm
