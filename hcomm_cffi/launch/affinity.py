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

import glob
import os
import re
from typing import Dict, List, Optional, Sequence, Set

__all__ = ["MODES", "usable_cpus", "numa_nodes", "plan", "describe", "parse_cpulist"]

MODES = ("auto", "core", "numa", "none")


def usable_cpus() -> List[int]:
    """The cores this process may run on (its affinity), sorted."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):   # pragma: no cover - not Linux
        return list(range(os.cpu_count() or 1))


def parse_cpulist(text: str) -> Set[int]:
    """'0-3,8,10-11' -> {0, 1, 2, 3, 8, 10, 11} (the kernel's cpulist format)."""
    out: Set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part.strip())
        if m is None:
            raise ValueError(f"cpulist {text!r}: {part!r} is not N or N-M")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        out.update(range(lo, hi + 1))
    return out


def numa_nodes(cpus: Sequence[int], root: str = "/sys/devices/system/node") -> List[List[int]]:
    """The usable cores of each NUMA node that has some (one node of every core when sysfs says nothing)."""
    allowed = set(cpus)
    nodes = []
    for path in sorted(glob.glob(os.path.join(root, "node[0-9]*", "cpulist")),
                       key=lambda p: int(re.sub(r"\D", "", os.path.basename(os.path.dirname(p))) or 0)):
        try:
            with open(path) as fh:
                members = sorted(parse_cpulist(fh.read()) & allowed)
        except (OSError, ValueError):
            continue
        if members:
            nodes.append(members)
    return nodes or [sorted(allowed)]


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
    return f"{kind}:{_ranges(cores)}"


def _ranges(cores: Sequence[int]) -> str:
    parts, run = [], [cores[0]]
    for c in cores[1:]:
        if c == run[-1] + 1:
            run.append(c)
        else:
            parts.append(run)
            run = [c]
    parts.append(run)
    return ",".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in parts)


def current() -> Dict[str, str]:
    """This process's binding for ``hcomm info``: what the launcher set, and the affinity in force."""
    from .. import settings
    return {"launcher": settings.value("HCOMM_RUN_BIND") or "not launched by hcomm run",
            "affinity": _ranges(usable_cpus())}
