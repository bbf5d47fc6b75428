"""``--plot FILE.png``: busbw and latency against message size, one line per series.

A series is a label (an algorithm, or a library in the side-by-side benchmarks) with points
``(size_bytes, time_us, busbw_gbps)``.  matplotlib is imported only here, only when a plot is asked
for, with the non-interactive Agg backend; :class:`PlotUnavailable` says how to install it.
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

__all__ = ["PlotUnavailable", "require_matplotlib", "plot_series", "points_of", "Point"]

#: (size in bytes, time in µs, busbw in GB/s or None)
Point = Tuple[int, float, Optional[float]]


class PlotUnavailable(RuntimeError):
    """matplotlib is missing."""


def require_matplotlib() -> Any:
    """The ``matplotlib.pyplot`` module (Agg backend), or PlotUnavailable with the fix."""
    try:
        import matplotlib
    except ImportError:
        raise PlotUnavailable("--plot needs matplotlib, which is not installed; "
                              "pip install matplotlib (or pip install 'hcomm_cffi[plot]')") from None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _size_label(nbytes: float) -> str:
    for suffix, shift in (("G", 30), ("M", 20), ("K", 10)):
        if nbytes >= (1 << shift):
            return f"{nbytes / (1 << shift):g}{suffix}"
    return f"{nbytes:g}"


def plot_series(path: str, series: Dict[str, Sequence[Point]], title: str = "") -> None:
    """Two panels (busbw, latency) against size on a log2 axis; writes ``path`` (PNG by its extension)."""
    plt = require_matplotlib()
    from matplotlib.ticker import FuncFormatter

    fig, (ax_bw, ax_lat) = plt.subplots(1, 2, figsize=(12, 4.5))
    for label, points in series.items():
        pts = sorted(points)
        if not pts:
            continue
        sizes = [p[0] for p in pts]
        bw = [(p[0], p[2]) for p in pts if p[2] is not None]
        if bw:
            ax_bw.plot([s for s, _ in bw], [b for _, b in bw], marker="o", label=label)
        ax_lat.plot(sizes, [p[1] for p in pts], marker="o", label=label)
    fmt = FuncFormatter(lambda v, _pos: _size_label(v))
    for ax, ylabel in ((ax_bw, "busbw (GB/s)"), (ax_lat, "time (µs)")):
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(fmt)
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        if any(series.values()):
            ax.legend()
    ax_lat.set_yscale("log")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def points_of(results: Iterable[Any]) -> Sequence[Point]:
    """Points from SizeResult objects or their dicts (JSON ``results``)."""
    out: List[Point] = []
    for r in results:
        row: Dict[str, Any] = r if isinstance(r, dict) else r.to_dict()
        bus = row.get("busbw")
        out.append((int(row["size"]), float(row["time_us"]), None if bus is None else float(bus)))
    return out
