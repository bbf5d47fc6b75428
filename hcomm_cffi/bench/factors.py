"""Operation names, algbw and the nccl-tests bus-bandwidth factors.

``algbw = S / time`` with S the bytes of :func:`hcomm_cffi.bench.sizes.layout` (docs/design/plan-model.md,
"Message sizes and bandwidth")
and GB = 10^9; ``busbw = algbw x factor`` where the factor (nccl-tests convention) makes the number
comparable with the link bandwidth:

=================================== ===============
allreduce                           2(n-1)/n
allgather, reduce_scatter, alltoall (n-1)/n
broadcast, reduce, sendrecv         1
barrier                             none (no data)
=================================== ===============
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple

__all__ = ["OPS", "parse_op", "busbw_factor", "algbw_gbps", "busbw_gbps", "ROOTED_OPS", "REDUCING_OPS"]

OPS: Tuple[str, ...] = ("allreduce", "allgather", "reduce_scatter", "broadcast", "reduce", "alltoall",
                        "sendrecv", "barrier")
#: Operations with a root (``-r``).
ROOTED_OPS = frozenset({"broadcast", "reduce"})
#: Operations with a reduce op (``-o``).
REDUCING_OPS = frozenset({"allreduce", "reduce_scatter", "reduce"})

_ALIASES: Dict[str, str] = {name.replace("_", ""): name for name in OPS}


def parse_op(text: str) -> str:
    """Canonical name of an operation: ``all_reduce``, ``AllReduce``, ``all-reduce`` -> ``allreduce``."""
    key = str(text).strip().lower().replace("_", "").replace("-", "")
    name = _ALIASES.get(key)
    if name is None:
        raise ValueError(f"--op={text!r} is not a benchmarked operation; expected one of {', '.join(OPS)}")
    return name


def busbw_factor(op: str, nranks: int) -> Optional[float]:
    """busbw / algbw for ``op`` on ``nranks`` ranks; None for barrier (it moves no data)."""
    if nranks < 1:
        raise ValueError(f"nranks={nranks}; expected >= 1")
    n = nranks
    if op == "allreduce":
        return 2.0 * (n - 1) / n
    if op in ("allgather", "reduce_scatter", "alltoall"):
        return (n - 1) / n
    if op in ("broadcast", "reduce", "sendrecv"):
        return 1.0
    if op == "barrier":
        return None
    raise ValueError(f"op={op!r} is not a benchmarked operation; expected one of {', '.join(OPS)}")


def algbw_gbps(nbytes: int, time_us: float) -> float:
    """S / time in GB/s (10^9 bytes per second); 0 when the time is not positive."""
    return nbytes / time_us / 1e3 if time_us > 0 else 0.0


def busbw_gbps(op: str, nranks: int, nbytes: int, time_us: float) -> Optional[float]:
    """algbw x the busbw factor; None for barrier."""
    factor = busbw_factor(op, nranks)
    return None if factor is None else algbw_gbps(nbytes, time_us) * factor
