"""The CPUs this process may use, NUMA nodes, and the cores an Ascend NPU is affine to (``npu-smi``).

Foundation helpers for ``hcomm run --bind-to`` (``launch/affinity.py``) and for pinning the host
thread that issues tasks to its device's cores on CANN (``api/world.py``).
"""
from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
from typing import Dict, List, Optional, Sequence, Set

__all__ = ["usable_cpus", "parse_cpulist", "format_cpus", "numa_nodes", "parse_npu_topo", "npu_cpu_affinity"]

NPU_SMI_TIMEOUT_S = 5.0


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


def format_cpus(cores: Sequence[int]) -> str:
    """[0, 1, 2, 5] -> '0-2,5'."""
    if not cores:
        return ""
    cores = sorted(cores)
    parts, run = [], [cores[0]]
    for c in cores[1:]:
        if c == run[-1] + 1:
            run.append(c)
        else:
            parts.append(run)
            run = [c]
    parts.append(run)
    return ",".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in parts)


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


def parse_npu_topo(text: str) -> Dict[int, Set[int]]:
    """Physical NPU id -> its 'CPU Affinity' cores, from the table ``npu-smi info -t topo`` prints."""
    out: Dict[int, Set[int]] = {}
    if "CPU Affinity" not in text:
        return out
    for line in text.splitlines():
        fields = line.split()
        m = re.fullmatch(r"NPU(\d+)", fields[0]) if fields else None
        if m is None or len(fields) < 2:
            continue
        try:
            out[int(m.group(1))] = parse_cpulist(fields[-1])
        except ValueError:
            continue
    return out


def npu_cpu_affinity(device: int, topo: Optional[str] = None) -> Optional[List[int]]:
    """The usable cores NPU ``device`` (a logical id, mapped through ASCEND_RT_VISIBLE_DEVICES) is affine to.

    None when that is not known here: no ``npu-smi``, no such NPU in its table, or none of its cores usable.
    """
    if topo is None:
        tool = shutil.which("npu-smi")
        if tool is None:
            return None
        try:
            topo = subprocess.run([tool, "info", "-t", "topo"], capture_output=True, text=True,
                                  timeout=NPU_SMI_TIMEOUT_S).stdout
        except (OSError, subprocess.SubprocessError):
            return None
    visible = os.environ.get("ASCEND_RT_VISIBLE_DEVICES", "").strip()
    ids = [int(v) for v in visible.split(",") if v.strip().isdigit()] if visible else []
    physical = ids[device] if device < len(ids) else device
    cores = parse_npu_topo(topo).get(physical)
    if not cores:
        return None
    usable = sorted(cores & set(usable_cpus()))
    return usable or None
