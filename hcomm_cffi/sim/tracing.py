"""The emulator's side of ``HCOMM_TRACE``: one executed task -> one trace slice (see :mod:`hcomm_cffi.trace`).

The executor calls :func:`record` after a task completed (only when tracing is on) with the time
the task became runnable at the head of its queue (for a wait: when it started waiting).  Notify
records and waits get flow ids from (communicator, recording rank, waiting rank or thread,
notify index, nth record): notifies are binary and FIFO per notify, so the nth wait is released
by the nth record, and each side counts its own.
"""
from __future__ import annotations

from typing import Any, Dict, Tuple

from .. import trace
from .queues import Queue
from .tasks import (C_RECORD, C_WAIT, COPY, READ, READ_REDUCE, REDUCE, T_RECORD, T_WAIT, WRITE, WRITE_REDUCE, Task,
                    task_bytes)

__all__ = ["record", "KINDS"]

#: trace slice names of the emulator's task kinds (the dry run's vocabulary where it has one)
KINDS = {COPY: "copy", REDUCE: "reduce", WRITE: "write", WRITE_REDUCE: "write_reduce", READ: "read",
         READ_REDUCE: "read_reduce", C_RECORD: "record", C_WAIT: "wait", T_RECORD: "trecord", T_WAIT: "twait"}
_counts: Dict[Tuple[Any, ...], int] = {}
_lanes: Dict[str, str] = {}


def _nth(side: str, key: Tuple[Any, ...]) -> int:
    """How many times ``side`` ('r' records, 'w' waits) has seen ``key`` before (each side counts its own)."""
    k = (side,) + key
    n = _counts.get(k, 0)
    _counts[k] = n + 1
    return n


def record(q: Queue, t: Task, t0: float, t1: float) -> None:
    """Trace task ``t`` of queue ``q`` that ran (or waited) from ``t0`` to ``t1``."""
    kind = t[0]
    name = KINDS.get(kind) or t.name.lower()
    out = into = None
    peer = -1
    if kind == C_RECORD or kind == C_WAIT:
        ch = t.channel
        comm, me, peer = ch.comm.name, ch.comm.rank, ch.peer
        if kind == C_RECORD:
            key: Tuple[Any, ...] = ("c", comm, me, peer, t.index)
            out = trace.flow_id(*key, _nth("r", key))
        else:
            key = ("c", comm, peer, me, t.index)
            into = trace.flow_id(*key, _nth("w", key))
    elif kind == T_RECORD or kind == T_WAIT:
        th = t.thread
        target = t.target if kind == T_RECORD else th
        key = ("t", th.comm.name, th.comm.rank, target.handle, t.index)
        if kind == T_RECORD:
            out = trace.flow_id(*key, _nth("r", key))
        else:
            into = trace.flow_id(*key, _nth("w", key))
    elif kind in (WRITE, READ, WRITE_REDUCE, READ_REDUCE):
        peer = t.channel.peer
    trace.task(_lane(q, t[1]), name, t0, t1, task_bytes(t), peer, q.executed, out, into)


def _lane(q: Queue, th: Any) -> str:
    """The lane of a queue, named by its role: an algorithm's thread, or the stream (the rank is the process)."""
    name = _lanes.get(q.name)
    if name is None:
        if th is not None and not th.main:
            role = trace.thread_name(th.handle)
            name = f"{role} (thread 0x{th.handle:x})" if role else f"thread 0x{th.handle:x}"
        else:
            name = f"{q.name}: main threads, library collectives, signature check"
        _lanes[q.name] = name
    return name
