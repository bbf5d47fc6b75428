"""Timeline of every task: ``HCOMM_TRACE=DIR`` makes each rank write a Chrome trace-event JSON (Perfetto, chrome://tracing).

One process per rank (``pid`` = world rank), one track (``tid``) per HCOMM thread or stream, one
complete slice (``ph: X``) per task with its bytes and, for notify waits, the time it waited;
operations (collectives, sends, receives) are slices on a track of their own.  A notify record
and the wait it releases share a flow id (``ph: s`` / ``ph: f``) that both sides compute without
talking: :func:`flow_id` of (communicator, recording rank, waiting rank, notify index, nth
record), so arrows cross ranks once the files are merged (``hcomm trace DIR``).

Producers: the emulator's executor (``sim/tracing.py``: real task timings) and, on CANN,
``TaskBatch.launch`` (what the host issued, with host-side timings).  When tracing is off
:data:`ACTIVE` is False and the producers skip everything but that one test.
"""
from __future__ import annotations

import atexit
import hashlib
import json
import os
import time
from typing import Any, Dict, List, Optional

from . import files, settings

__all__ = ["ACTIVE", "HOST", "start", "start_in", "stop", "now", "task", "op_begin", "op_end", "flow_id", "flush", "events", "TRACE_SUFFIX",
           "current_op", "open_ops", "ops_failed", "name_thread", "thread_name"]

TRACE_SUFFIX = ".trace.json"
ACTIVE = False
#: True when the backend does not trace its own tasks (CANN): TaskBatch.launch then traces what the host issued
HOST = False
_state: Dict[str, Any] = {"rank": 0, "dir": None, "tids": {}, "open": {}, "current": None, "flushed": 0}
_events: List[Dict[str, Any]] = []
_thread_names: Dict[int, str] = {}     # thread handle -> its role ("ring thread 1"), named by whoever acquired it


def now() -> float:
    """The trace clock (monotonic seconds: the same clock in every process of a machine)."""
    return time.monotonic()


def _us(t: float) -> float:
    return round(t * 1e6, 3)


def start(world_rank: int, host_side: bool = False) -> bool:
    """Turn tracing on for this process when HCOMM_TRACE is set (once); True if it is on.

    ``host_side``: the backend runs tasks out of sight (CANN): trace the host's issue calls instead.
    """
    if ACTIVE:
        return True
    where = settings.value("HCOMM_TRACE")
    if where is None:
        return False
    _begin(where, world_rank, host_side)
    return True


def start_in(directory: str, world_rank: int) -> bool:
    """Turn tracing on into ``directory`` (the ACL profiler's aclprofStart, sim/profiler.py); False when it was
    already on (HCOMM_TRACE): the events then go on to HCOMM_TRACE's file."""
    if ACTIVE:
        return False
    _begin(directory, world_rank, False, "profilerResultPath")
    return True


def stop() -> Optional[str]:
    """Write the trace (:func:`flush`) and turn tracing off, forgetting its events (the profiler's aclprofStop)."""
    global ACTIVE
    path = flush()
    ACTIVE = False
    _events.clear()
    _state.update(dir=None, tids={}, open={}, current=None, flushed=0)
    return path


def _after_fork_in_child() -> None:
    """A forked child records nothing of its parent's trace, and never writes the parent's file at its exit."""
    global ACTIVE
    ACTIVE = False
    _events.clear()
    _state.update(dir=None, tids={}, open={}, current=None, flushed=0)


os.register_at_fork(after_in_child=_after_fork_in_child)


def _begin(where: str, world_rank: int, host_side: bool, what: str = "HCOMM_TRACE") -> None:
    global ACTIVE, HOST
    _state.update(rank=world_rank, dir=files.checked_dir(where, what))
    _events.append({"ph": "M", "name": "process_name", "pid": world_rank, "tid": 0,
                    "args": {"name": f"rank {world_rank}"}})
    _events.append({"ph": "M", "name": "process_sort_index", "pid": world_rank, "tid": 0,
                    "args": {"sort_index": world_rank}})
    ACTIVE = True
    HOST = host_side
    atexit.register(flush)


def name_thread(handle: int, role: str) -> None:
    """Say what a thread is for ("ring thread 1", "mesh main thread"): its trace lane is named so."""
    _thread_names[int(handle)] = role


def thread_name(handle: int) -> Optional[str]:
    """The role :func:`name_thread` gave thread ``handle`` (None if none)."""
    return _thread_names.get(int(handle))


def _tid(track: str) -> int:
    """The track id of ``track`` (declared with a thread_name metadata event on first use)."""
    tids = _state["tids"]
    tid = tids.get(track)
    if tid is None:
        tid = tids[track] = len(tids) + 1
        _events.append({"ph": "M", "name": "thread_name", "pid": _state["rank"], "tid": tid, "args": {"name": track}})
        _events.append({"ph": "M", "name": "thread_sort_index", "pid": _state["rank"], "tid": tid,
                        "args": {"sort_index": tid}})
    return tid


def flow_id(*key: Any) -> int:
    """A 48-bit id both ends of a notify compute from the same key (JSON-safe integer)."""
    return int.from_bytes(hashlib.blake2b(repr(key).encode(), digest_size=6).digest(), "big")


def task(track: str, kind: str, t0: float, t1: float, nbytes: int = 0, peer: int = -1, index: int = -1,
         flow_out: Optional[int] = None, flow_in: Optional[int] = None) -> None:
    """One task slice on ``track``; ``flow_out`` starts an arrow (a record), ``flow_in`` ends one (its wait)."""
    pid, tid = _state["rank"], _tid(track)
    args: Dict[str, Any] = {"bytes": nbytes, "task": index}
    if peer >= 0:
        args["peer"] = peer
    if kind.endswith("wait"):
        args["waited_us"] = _us(t1 - t0)
    op = _state["current"]
    if op is not None:
        args["op"] = op
    _events.append({"ph": "X", "name": kind, "cat": "task", "pid": pid, "tid": tid, "ts": _us(t0),
                    "dur": max(_us(t1 - t0), 0.001), "args": args})
    if flow_out is not None:
        args["flow_out"] = flow_out
        _events.append({"ph": "s", "name": "notify", "cat": "notify", "id": flow_out, "pid": pid, "tid": tid,
                        "ts": _us(t0)})
    if flow_in is not None:
        args["flow_in"] = flow_in
        _events.append({"ph": "f", "bp": "e", "name": "notify", "cat": "notify", "id": flow_in, "pid": pid,
                        "tid": tid, "ts": _us(t1)})


def op_begin(comm: str, op: str, seq: int, args: Dict[str, Any]) -> None:
    """An operation (a collective, a send...) starts: its tasks are tagged with it until :func:`op_end`."""
    label = f"{op} #{seq}"
    _state["open"][(comm, label)] = (now(), args)
    _state["current"] = label


def op_end(comm: str, op: str, seq: int) -> None:
    """The operation completed: its enclosing slice on the track ``ops <comm>``."""
    label = f"{op} #{seq}"
    got = _state["open"].pop((comm, label), None)
    if _state["current"] == label:
        _state["current"] = None
    if got is not None:
        _op_slice(comm, label, got[0], dict(got[1], comm=comm))


def ops_failed(comm: str) -> None:
    """Communicator ``comm`` failed: every operation of it still open ends now, its slice marked ``failed``."""
    for key in [k for k in _state["open"] if k[0] == comm]:
        t0, args = _state["open"].pop(key)
        if _state["current"] == key[1]:
            _state["current"] = None
        _op_slice(comm, key[1], t0, dict(args, comm=comm, failed=True))


def _op_slice(comm: str, label: str, t0: float, args: Dict[str, Any]) -> None:
    _events.append({"ph": "X", "name": label, "cat": "op", "pid": _state["rank"], "tid": _tid(f"ops {comm}"),
                    "ts": _us(t0), "dur": max(_us(now() - t0), 0.001), "args": args})


def open_ops() -> List[str]:
    """The operations begun and not yet ended, as "<comm>: <op> #<seq>" (what a finished program should not have)."""
    return [f"{comm}: {label}" for comm, label in _state["open"]]


def current_op() -> Optional[str]:
    """The operation tasks are being attributed to (None outside one)."""
    return _state["current"]


def events() -> List[Dict[str, Any]]:
    """The events recorded so far (a copy)."""
    return list(_events)


def flush() -> Optional[str]:
    """Write ``<HCOMM_TRACE>/<job>.rank<R>.trace.json`` (all events so far); the path, or None when off."""
    if not ACTIVE or _state["dir"] is None:
        return None
    from .flight import job_id
    path = os.path.join(_state["dir"], f"{job_id()}.rank{_state['rank']}{TRACE_SUFFIX}")
    files.write_atomically(path, json.dumps({"traceEvents": _events, "displayTimeUnit": "ms",
                                             "otherData": {"rank": _state["rank"], "producer": "hcomm_cffi"}}))
    _state["flushed"] = len(_events)
    return path

