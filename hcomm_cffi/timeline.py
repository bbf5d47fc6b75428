"""Merge the ranks' trace files into one and draw a swimlane PNG that reads without Perfetto.

Input: Chrome trace events (what :mod:`hcomm_cffi.trace` writes per rank, or a planned schedule
from ``hcomm plan --timeline``).  The picture has one lane per (rank, thread or stream), time to
the right, one box per task coloured by kind (writes, reads, copies, reductions; notify waits
as grey boxes as long as they waited), the operations as labelled bars above each rank, and an
arrow from every notify record to the wait it released.  Drawing needs matplotlib (an optional
dependency): without it :func:`render` raises a :class:`RuntimeError` saying how to install it.
"""
from __future__ import annotations

import glob
import json
import os
from typing import Any, Dict, List, Optional, Tuple

from . import files
from .trace import TRACE_SUFFIX

__all__ = ["load", "merge", "render", "COLOURS", "MERGED_NAME"]

MERGED_NAME = "merged.trace.json"
COLOURS = {"write": "#1f77b4", "write_reduce": "#17becf", "read": "#9467bd", "read_reduce": "#c5b0d5",
           "copy": "#2ca02c", "reduce": "#ff7f0e", "record": "#d62728", "trecord": "#e377c2",
           "wait": "#c7c7c7", "twait": "#dbdbdb"}
_LEGEND = (("write", "write to peer"), ("read", "read from peer"), ("copy", "local copy"), ("reduce", "local reduce"),
           ("record", "channel notify record"), ("trecord", "thread notify record"),
           ("wait", "notify wait (length = time waited)"))


def load(directory: str) -> List[Dict[str, Any]]:
    """Every event of every ``*.trace.json`` in ``directory`` (the merged file itself excluded)."""
    if not os.path.isdir(directory):
        raise ValueError(f"{directory!r} is not a directory; expected the HCOMM_TRACE directory of a run")
    paths = sorted(p for p in glob.glob(os.path.join(directory, "*" + TRACE_SUFFIX))
                   if os.path.basename(p) != MERGED_NAME)
    if not paths:
        raise ValueError(f"{directory!r} holds no trace files (*{TRACE_SUFFIX}); expected a directory written by "
                         "a run with HCOMM_TRACE set to it")
    events: List[Dict[str, Any]] = []
    for p in paths:
        with open(p, encoding="utf-8") as f:
            events.extend(json.load(f)["traceEvents"])
    return events


def merge(directory: str, out: Optional[str] = None) -> Tuple[str, List[Dict[str, Any]]]:
    """Write all ranks' events as one trace (default ``<directory>/merged.trace.json``); (path, events)."""
    events = load(directory)
    path = files.write_atomically(out or os.path.join(directory, MERGED_NAME),
                                  json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}))
    return path, events


def _lanes(events: List[Dict[str, Any]]) -> Tuple[List[Tuple[int, int]], Dict[Tuple[int, int], str]]:
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    used = sorted({(e["pid"], e["tid"]) for e in events if e["ph"] == "X"},
                  key=lambda k: (k[0], not names.get(k, "").startswith("ops"), k[1]))
    return used, names


def render(events: List[Dict[str, Any]], path: str, title: str = "", unit: str = "ms") -> str:
    """Draw ``events`` as a swimlane PNG at ``path``; ``unit``: 'ms' (a run) or 'steps' (a plan)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch
    except ImportError:
        raise RuntimeError("drawing a timeline needs matplotlib; install it with `pip install matplotlib` "
                           "(the merged trace JSON needs nothing: open it in https://ui.perfetto.dev)") from None
    lanes, names = _lanes(events)
    if not lanes:
        raise ValueError("the trace holds no task slices; expected events written with HCOMM_TRACE")
    xs = [e for e in events if e["ph"] == "X"]
    t0 = min(e["ts"] for e in xs)
    scale = 1e-3 if unit == "ms" else 1.0
    row = {k: i for i, k in enumerate(lanes)}
    fig, ax = plt.subplots(figsize=(14, 1.2 + 0.42 * len(lanes)))
    ends: Dict[int, Tuple[float, int]] = {}
    for e in xs:
        y = row[(e["pid"], e["tid"])]
        x, w = (e["ts"] - t0) * scale, e["dur"] * scale
        if e.get("cat") == "op":
            ax.barh(y, w, left=x, height=0.6, color="#fff2b3", edgecolor="#b59b00", linewidth=0.8)
            ax.text(x + w / 2, y, e["name"], ha="center", va="center", fontsize=8)
            continue
        ax.barh(y, w, left=x, height=0.7, color=COLOURS.get(e["name"], "#8c564b"), edgecolor="black",
                linewidth=0.3, hatch="//" if e["name"].endswith("wait") else None)
        args = e.get("args", {})
        if "flow_out" in args:
            ends[args["flow_out"]] = (x + w / 2, y)
    for e in xs:
        flow = e.get("args", {}).get("flow_in")
        if flow is not None and flow in ends:
            sx, sy = ends[flow]
            ex, ey = (e["ts"] + e["dur"] - t0) * scale, row[(e["pid"], e["tid"])]
            ax.annotate("", xy=(ex, ey), xytext=(sx, sy),
                        arrowprops={"arrowstyle": "->", "color": "#d62728", "lw": 0.6, "alpha": 0.6})
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels([f"rank {p} · {names.get((p, t), f'track {t}')}" for p, t in lanes], fontsize=8)
    ax.invert_yaxis()
    for i in range(1, len(lanes)):
        if lanes[i][0] != lanes[i - 1][0]:
            ax.axhline(i - 0.5, color="black", linewidth=0.8)
    ax.set_xlabel("time (ms)" if unit == "ms" else "planned time (steps: a transfer = 1)")
    handles = [Patch(facecolor=COLOURS[k], edgecolor="black", label=label, hatch="//" if k == "wait" else None)
               for k, label in _LEGEND]
    handles.append(Patch(facecolor="#fff2b3", edgecolor="#b59b00", label="operation (collective)"))
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.12 - 0.4 / len(lanes)), ncol=4, fontsize=8,
              title="red arrows: a notify record releases the wait it points to", title_fontsize=8, frameon=False)
    ax.set_title(title or "hcomm timeline", fontsize=10)
    ax.grid(axis="x", linestyle=":", linewidth=0.5)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
