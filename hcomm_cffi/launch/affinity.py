"""CPU binding of local ranks: ``hcomm run --bind-to core|numa|none`` (mpirun's ``--bind-to``).

``auto`` (the default) follows the rule mpirun applies on a node that is not oversubscribed: bind
each rank to one core while there are at least as many usable cores as ranks, and not at all
beyond that (Open MPI, mpirun(1) "Mapping, Ranking, and Binding": ranks are bound to cores by
default for small jobs and left unbound when oversubscribed).  ``numa`` gives each rank every core
of one NUMA node, ranks spread round-robin over the nodes.  Usable cores are the launcher's own
affinity (a cgroup or ``taskset`` limit is respected); NUMA nodes come from
``/sys/devices/system/node``.  The binding is applied in the rank's process before it runs the
command and is reported to it in ``HCOMM_RUN_BIND`` (``hcomm info`` shows it).
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence

from ..cpus import format_cpus, numa_nodes, parse_cpulist, usable_cpus

__all__ = ["MODES", "usable_cpus", "numa_nodes", "plan", "describe", "parse_cpulist", "current"]

MODES = ("auto", "core", "numa", "none")


def plan(mode: str, nprocs: int, cpus: Optional[Sequence[int]] = None,
         nodes: Optional[List[List[int]]] = None) -> List[Optional[List[int]]]:
    """Per rank, the cores to bind it to (None: leave it unbound)."""
    if mode not in MODES:
        raise ValueError(f"--bind-to={mode!r}; expected one of {', '.join(MODES)}")
    cpus = list(usable_cpus() if cpus is None else cpus)
    if mode == "auto":
        mode = "core" if nprocs <= len(cpus) else "none"
    if mode == "none" or not cpus:
        return [None] * nprocs
    if mode == "core":
        return [[cpus[r % len(cpus)]] for r in range(nprocs)]
    groups = numa_nodes(cpus) if nodes is None else nodes
    return [list(groups[r % len(groups)]) for r in range(nprocs)]


def describe(mode: str, cores: Optional[Sequence[int]]) -> str:
    """What ``HCOMM_RUN_BIND`` says: 'core:3', 'numa:0-15' or 'none'."""
    if cores is None:
        return "none"
    kind = "core" if mode in ("core", "auto") and len(cores) == 1 else "numa"
    return f"{kind}:{format_cpus(cores)}"


def current() -> Dict[str, str]:
    """This process's binding for ``hcomm info``: what the launcher set, and the affinity in force."""
    from .. import settings
    return {"launcher": settings.value("HCOMM_RUN_BIND") or "not launched by hcomm run",
            "affinity": format_cpus(usable_cpus())}
