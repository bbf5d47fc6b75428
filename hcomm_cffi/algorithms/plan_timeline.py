"""A planned schedule as trace events: the dry run's tasks laid out in time, for ``hcomm plan --timeline``.

No library runs: every rank's recorded tasks (:attr:`DryRun.tasks`) are executed again with a
clock per thread — a transfer (write, read) lasts 1 step, a copy or reduction 0.5, a record 0.1;
a wait ends 0.1 after the record that releases it (or at once if that record came first) — and
come out as the same Chrome trace events a real run writes (:mod:`hcomm_cffi.trace`), flows
included, so :func:`hcomm_cffi.timeline.render` draws plan and run alike.
"""
from __future__ import annotations

from typing import Any, Dict, List, Tuple

from ..trace import flow_id
from .dryrun import DryRun, Task

__all__ = ["plan_events", "DURATIONS"]

DURATIONS = {"write": 1.0, "read": 1.0, "copy": 0.5, "reduce": 0.5, "record": 0.1, "trecord": 0.1}
_EPS = 0.1


def _key(t: Task) -> Tuple[Any, ...]:
    """The notify a record sets / a wait consumes, as (kind, recorder rank, waiter rank or thread, idx)."""
    if t.kind == "record":
        return ("c", t.rank, t.peer, t.idx)
    if t.kind == "wait":
        return ("c", t.peer, t.rank, t.idx)
    if t.kind == "trecord":
        return ("t", t.rank, t.peer, t.idx)
    return ("t", t.rank, t.thread, t.idx)


def plan_events(run: DryRun) -> List[Dict[str, Any]]:
    """Trace events (``ts``/``dur`` in steps) of every task of ``run``, per rank and thread, with notify flows."""
    queues = [(rank, th, [t for t in tasks if t.thread == th])
              for rank, tasks in enumerate(run.tasks) for th in sorted({t.thread for t in tasks})]
    clock = [0.0] * len(queues)
    pos = [0] * len(queues)
    flags: Dict[Tuple[Any, ...], List[Tuple[float, int]]] = {}
    counts: Dict[Tuple[Any, ...], int] = {}
    events: List[Dict[str, Any]] = []
    for rank in range(len(run.tasks)):
        events.append({"ph": "M", "name": "process_name", "pid": rank, "tid": 0, "args": {"name": f"rank {rank}"}})
    for rank, th, _ in queues:
        label = "main thread (stream)" if th == 0 else f"thread {th}"
        events.append({"ph": "M", "name": "thread_name", "pid": rank, "tid": th + 1, "args": {"name": label}})
    progress = True
    while progress:
        progress = False
        for qi, (rank, th, q) in enumerate(queues):
            while pos[qi] < len(q):
                t = q[pos[qi]]
                key = _key(t)
                ev: Dict[str, Any] = {"ph": "X", "name": t.kind, "cat": "task", "pid": rank, "tid": th + 1,
                                      "ts": clock[qi], "args": {"bytes": t.nbytes, "task": t.step}}
                if t.kind in ("wait", "twait"):
                    pending = flags.get(key)
                    if not pending:
                        break
                    when, fid = pending.pop(0)
                    end = max(clock[qi], when) + _EPS
                    ev["args"]["flow_in"] = fid
                else:
                    end = clock[qi] + DURATIONS.get(t.kind, 0.5)
                    if t.kind in ("record", "trecord"):
                        nth = counts[key] = counts.get(key, -1) + 1
                        fid = flow_id("plan", *key, nth)
                        flags.setdefault(key, []).append((end, fid))
                        ev["args"]["flow_out"] = fid
                if t.peer >= 0 and t.kind in ("write", "read", "record", "wait"):
                    ev["args"]["peer"] = t.peer
                ev["dur"] = end - clock[qi]
                clock[qi] = end
                events.append(ev)
                pos[qi] += 1
                progress = True
    return events
