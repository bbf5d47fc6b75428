"""A rank's own stall reports when no launcher watches it (torchrun, mpirun, plain env://).

Under ``hcomm run`` the launcher reads every rank's ring and reports a stall once for the job.
Elsewhere each rank runs one daemon thread (:func:`start`, from the first communicator it creates)
that looks at its own flight recorders every second: when this rank has been inside an operation
with no progress for ``HCOMM_STUCK_REPORT_S`` seconds it writes one line to stderr (which operation,
for how long) and keeps waiting.  With ``HCOMM_FR_DIR`` set it also reads the other ranks' rings
there and only reports when no rank of the communicator made progress; the lowest such rank then
writes the whole desync report (who is in which operation at which line of the user's code, who
never arrived and its Python stack, taken then) with the ``hcomm doctor`` command and the next step.  A stall is reported once; a communicator that moves again re-arms it.
"""
from __future__ import annotations

import sys
import threading
import time
from typing import Dict, Optional, Set

from . import flight, settings
from .desync import capture, describe_op, load, report

__all__ = ["start", "check_once"]

POLL_S = 1.0
_state: Dict[str, Optional[threading.Thread]] = {"thread": None}


def _own_stalls(threshold: float, now: float) -> Dict[str, str]:
    """This rank's communicators stuck in one operation for ``threshold`` s without progress: name -> description."""
    found = {}
    for ring in flight.recorders():
        try:
            snap = ring.snapshot()
        except ValueError:               # closed meanwhile
            continue
        records = snap["records"]
        current = next((r for r in records if r["state"] in ("issued", "running")), None)
        if current is None:
            continue
        latest = max(max(r["t_issued"], r["t_running"] or 0.0, r["t_done"] or 0.0) for r in records)
        if now - latest >= threshold:
            site = f" at {current['site']}" if current.get("site") else ""
            found[ring.comm] = (f"{describe_op(current)}{site} {current['state']} for "
                                f"{now - current['t_issued']:.1f} s")
    return found


def check_once(threshold: float, reported: Set[str], now: Optional[float] = None) -> None:
    """One look: report the stalls not yet in ``reported`` (which is updated: stalls that ended are dropped)."""
    now = time.time() if now is None else now
    mine = _own_stalls(threshold, now)
    where = flight.directory()
    job = flight.job_id()
    rank = min((r.world_rank for r in flight.recorders()), default=-1)
    for comm in sorted(set(mine) - reported):
        lead = True
        if where is not None:
            try:
                _, views, _ = load(where, job=job)
            except (ValueError, OSError):
                views = {}
            ranks = views.get(comm, {})
            latest = max((max(rec["t_issued"], rec["t_running"] or 0.0, rec["t_done"] or 0.0)
                          for v in ranks.values() for rec in v.records), default=0.0)
            if ranks and now - latest < threshold:      # another rank still moves: not stuck as a whole
                continue
            waiting = [v.world_rank for v in ranks.values()
                       if v.alive and (v.current() or {}).get("state") in ("issued", "running")]
            lead = not waiting or rank == min(waiting)
        lines = [f"hcomm: rank {rank}: no progress on communicator {comm!r} for {threshold:g} s "
                 f"(HCOMM_STUCK_REPORT_S): in {mine[comm]}; still waiting"]
        if where is not None and lead:
            try:
                capture(where, job)             # the stacks of the ranks that never arrived, and the report's time
                lines += [f"hcomm: {line}" for line in report(where, job=job, command=f"hcomm doctor {where}")
                          .splitlines()]
            except (ValueError, OSError) as exc:
                lines.append(f"hcomm: could not read the flight recorders in {where}: {exc}")
        elif where is None:
            lines.append("hcomm: set HCOMM_FR_DIR to a directory every rank can write for the report of all ranks")
        sys.stderr.write("\n".join(lines) + "\n")
        sys.stderr.flush()
        reported.add(comm)
    reported.intersection_update(mine)


def _loop(threshold: float) -> None:
    reported: Set[str] = set()
    while True:
        time.sleep(min(POLL_S, threshold / 4))
        try:
            check_once(threshold, reported)
        except Exception as exc:          # a watcher must never take the rank down
            sys.stderr.write(f"hcomm: stall watcher stopped: {exc!r}\n")
            return


def start() -> None:
    """Start this process's watcher once, unless a launcher watches (hcomm run) or HCOMM_STUCK_REPORT_S is 0."""
    if _state["thread"] is not None or settings.value("HCOMM_RUN_JOB_DIR"):
        return
    threshold = settings.value("HCOMM_STUCK_REPORT_S")
    if not threshold:
        return
    thread = threading.Thread(target=_loop, args=(threshold,), name="hcomm-stall-watch", daemon=True)
    _state["thread"] = thread
    thread.start()
