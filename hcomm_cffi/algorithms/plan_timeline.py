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
from .dryrun import DryRun, Task, notify_key, walk

__all__ = ["plan_events", "DURATIONS"]

DURATIONS = {"write": 1.0, "read": 1.0, "copy": 0.5, "reduce": 0.5, "record": 0.1, "trecord": 0.1}
_EPS = 0.1


def plan_events(run: DryRun) -> List[Dict[str, Any]]:
    """Trace events (``ts``/``dur`` in steps) of every task of ``run``, per rank and thread, with notify flows."""
    queues = [[t for t in tasks if t.thread == th]
              for tasks in run.tasks for th in sorted({t.thread for t in tasks})]
    clock = [0.0] * len(queues)
    counts: Dict[Tuple[Any, ...], int] = {}
    events: List[Dict[str, Any]] = []
    for rank in range(len(run.tasks)):
        events.append({"ph": "M", "name": "process_name", "pid": rank, "tid": 0, "args": {"name": f"rank {rank}"}})
    for q in queues:
        th = q[0].thread
        label = "main thread (stream)" if th == 0 else f"thread {th}"
        events.append({"ph": "M", "name": "thread_name", "pid": q[0].rank, "tid": th + 1, "args": {"name": label}})

    def step(qi: int, t: Task, released: Any) -> Any:
        ev: Dict[str, Any] = {"ph": "X", "name": t.kind, "cat": "task", "pid": t.rank, "tid": t.thread + 1,
                              "ts": clock[qi], "args": {"bytes": t.nbytes, "task": t.step}}
        payload = None
        if released is not None:                  # a wait: ends just after the record that released it
            when, fid = released
            end = max(clock[qi], when) + _EPS
            ev["args"]["flow_in"] = fid
        else:
            end = clock[qi] + DURATIONS.get(t.kind, 0.5)
            if t.kind in ("record", "trecord"):
                key = notify_key(t)
                nth = counts[key] = counts.get(key, -1) + 1
                payload = (end, flow_id("plan", *key, nth))
                ev["args"]["flow_out"] = payload[1]
        if t.peer >= 0 and t.kind in ("write", "read", "record", "wait"):
            ev["args"]["peer"] = t.peer
        ev["dur"] = end - clock[qi]
        clock[qi] = end
        events.append(ev)
        return payload

    walk(queues, step)
    return events
