"""Algorithm names -> implementations, and ``auto``: the planner's choice among what can run.

``auto`` sends reductions the data plane cannot do (prod; 64-bit, unsigned types) to ``native``, and
so it does with messages up to ``NATIVE_BELOW`` bytes (and barriers): there the cost is dominated by
issuing tasks one by one from the host, which the library's own collective does not pay.  Above it,
``auto`` asks the planner for the algorithm with the lowest modelled time among those implemented
here for this collective and topology.  Plans are cached per communicator shape.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Dict, Optional, Tuple

from ..enums import HOST_REDUCE_DTYPES, HOST_REDUCE_OPS, DataType, Engine, ReduceOp
from ..plan import InvalidAlgorithm, Plan, Topology, compare_algorithms, make_plan
from . import hierarchical, mesh, ring, tree
from .base import NOTIFIES_PER_CHANNEL, UnsupportedError

__all__ = ["NAMES", "COLLECTIVES", "REDUCING", "MODULES", "plan_for", "p2p_plan", "choose", "check_algorithm"]

NAMES = ("auto", "ring", "mesh", "tree", "hierarchical", "native")
COLLECTIVES = ("allreduce", "broadcast", "allgather", "reduce_scatter", "reduce", "alltoall", "barrier")
REDUCING = frozenset({"allreduce", "reduce_scatter", "reduce"})
MODULES = {"ring": ring, "mesh": mesh, "tree": tree, "hierarchical": hierarchical}
_UNSUPPORTED: Dict[Tuple[str, str], str] = {
    ("tree", "alltoall"): "alltoall has no recursive-doubling schedule",
    ("hierarchical", "alltoall"): "hierarchical alltoall is not implemented",
}
#: Up to this many bytes auto uses the library's own collective (measured on the emulator: it beats
#: every host-driven schedule up to ~1 MiB on 2 and 4 ranks; benchmarks/compare_allreduce.py).
NATIVE_BELOW = 1 << 20


def check_algorithm(algorithm: object) -> str:
    """Validate an ``algorithm=`` argument."""
    if not isinstance(algorithm, str) or algorithm not in NAMES:
        raise ValueError(f"algorithm={algorithm!r} is not known; expected one of {', '.join(NAMES)}")
    return algorithm


@lru_cache(maxsize=512)
def plan_for(algorithm: str, coll: str, topo: Topology, root: int = 0) -> Plan:
    """The resource plan of ``algorithm`` (size-independent: resources do not depend on size)."""
    try:
        return make_plan(coll, topo, 0, algorithm, engine=Engine.CPU_TS, root=root,
                         notifies_per_channel=NOTIFIES_PER_CHANNEL, inter_algorithm="ring")
    except InvalidAlgorithm as exc:
        hint = ""
        if algorithm == "hierarchical" and topo.n_servers < 2:
            hint = " (pass topology=(servers, devices_per_server) to hcomm.init() or Comm())"
        raise UnsupportedError(f"algorithm={algorithm!r} cannot run {coll} on {topo.n_ranks} ranks: {exc}{hint}; "
                               f"use one of ring, mesh, tree, native") from None


@lru_cache(maxsize=256)
def p2p_plan(topo: Topology, src: int, dst: int) -> Plan:
    """Plan of a point-to-point lane from ``src`` to ``dst`` (one thread, one channel each)."""
    return make_plan("sendrecv", topo, 0, "ring", engine=Engine.CPU_TS, root=src, peer=dst,
                     notifies_per_channel=NOTIFIES_PER_CHANNEL)


def validate(algorithm: str, coll: str, dtype: DataType, op: Optional[ReduceOp]) -> None:
    """Raise UnsupportedError for combinations that cannot run, naming the alternatives."""
    reason = _UNSUPPORTED.get((algorithm, coll))
    if reason:
        others = [a for a in ("mesh", "ring", "native") if (a, coll) not in _UNSUPPORTED]
        raise UnsupportedError(f"algorithm={algorithm!r} cannot run {coll}: {reason}; use algorithm="
                               + " or ".join(repr(a) for a in others))
    if algorithm != "native" and coll in REDUCING and op is not None:
        if dtype not in HOST_REDUCE_DTYPES or op not in HOST_REDUCE_OPS:
            from .base import check_reducible
            check_reducible(algorithm, dtype, op)


@lru_cache(maxsize=1024)
def _auto(coll: str, topo: Topology, nbytes: int, root: int) -> str:
    cands = compare_algorithms(coll, topo, nbytes, engine=Engine.CPU_TS, dtype=DataType.INT8, root=root,
                               inter_algorithm="ring")
    ok = [c for c in cands if c.plan is not None and c.algorithm in MODULES
          and (c.algorithm, coll) not in _UNSUPPORTED]
    if not ok:
        return "native"
    best = min(ok, key=lambda c: (c.plan.modelled_time_us, c.plan.n_channels))  # type: ignore[union-attr]
    return best.algorithm


def choose(algorithm: str, coll: str, topo: Topology, nbytes: int, dtype: DataType,
           op: Optional[ReduceOp], root: int = 0) -> str:
    """Resolve ``algorithm`` (maybe "auto") to a runnable name, or raise UnsupportedError."""
    check_algorithm(algorithm)
    if algorithm == "auto":
        if coll in REDUCING and op is not None and (dtype not in HOST_REDUCE_DTYPES or op not in HOST_REDUCE_OPS):
            return "native"
        if topo.n_ranks == 1:
            return "ring"
        if nbytes <= NATIVE_BELOW or coll == "barrier":
            return "native"
        return _auto(coll, topo, nbytes, root)
    validate(algorithm, coll, dtype, op)
    return algorithm
