"""A process forked from a rank after hcomm.init() cannot use the rank's communicators; the rank's job is unaffected.

Before: the child's allreduce took part in the job as rank 0 and returned, and the parent's later calls
paired with the wrong peer calls; a bare fork() child's exit also ran the emulator's shutdown, which
marked the parent's communicators destroyed in shared memory and unlinked their segments.
Now every call of an inherited communicator (and a wait of an inherited request) raises
ForeignProcessError in the child before anything reaches the library, the child may not destroy it,
and its exit leaves the parent's state alone.  A forkserver (or spawn) child inherits no communicator:
it cannot be handed one either (pickling is refused, naming it).
"""
from __future__ import annotations

import atexit
import multiprocessing as mp
import os
import pickle
from typing import Any, List

import numpy as np
import pytest

from multiproc import run_ranks

pytestmark = pytest.mark.slow


def _in_child(w: Any, sub: Any, req: Any, out: Any) -> None:
    """What a forked child sees of its parent's communicators: one line per attempt."""
    import hcomm_cffi as hcomm
    lines: List[str] = []
    x = np.full(8, 100.0, np.float32)
    attempts = [("allreduce", lambda: w.allreduce(x, algorithm="ring")),
                ("native", lambda: w.allreduce(x, algorithm="native")),
                ("iallreduce", lambda: w.iallreduce(x)),
                ("sub", lambda: sub.allreduce(x)),
                ("send", lambda: w.send(x, 1)),
                ("irecv", lambda: w.irecv(x, 1)),
                ("barrier", lambda: w.barrier()),
                ("wait", lambda: req.wait(5)),
                ("destroy", lambda: w.destroy()),
                ("get_world", lambda: hcomm.get_world()),
                ("init", lambda: hcomm.init())]      # the launcher's variables it inherited are the parent's
    for name, attempt in attempts:
        try:
            attempt()
            lines.append(f"{name}: ran")
        except hcomm.CommError as exc:
            lines.append(f"{name}: {type(exc).__name__}: {exc}")
    lines.append(f"is_initialized: {hcomm.is_initialized()}")
    assert np.all(x == 100.0)
    out.put(lines)


def _bare_fork_exit(w: Any) -> int:
    """A bare fork() child that tries a call, then exits as an interpreter does (every atexit handler runs)."""
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            w.allreduce(np.ones(8, np.float32))
            code = 3                               # it ran: the defect
        except Exception as exc:                   # noqa: BLE001 - the expected refusal
            code = 0 if type(exc).__name__ == "ForeignProcessError" else 4
        finally:
            atexit._run_exitfuncs()                # what a normal exit runs (the emulator's shutdown, the rings' end)
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def _checked_calls(w: Any, sub: Any, rounds: int) -> None:
    """Collectives and point-to-point whose every result is checked (the parent's job goes on unaffected)."""
    n, r = w.get_size(), w.get_rank()
    for k in range(rounds):
        for alg in ("ring", "mesh", "native"):
            x = np.full(64, k + r, np.float32)
            w.allreduce(x, algorithm=alg)
            assert np.all(x == n * k + n * (n - 1) // 2), (alg, k, x[:3])
        y = np.full(16, 10.0 * (r + 1), np.float32)
        sub.allreduce(y)
        assert np.all(y == 30.0), y
        got = np.empty(8, np.int32)
        reqs = [w.isend(np.full(8, 7 * k + r, np.int32), 1 - r), w.irecv(got, 1 - r)]
        for q in reqs:
            q.wait(30)
        assert np.all(got == 7 * k + 1 - r), got


def _may_start_workers() -> None:
    """The harness's ranks are daemonic processes (multiproc.py), which multiprocessing forbids to have children;
    a rank started by hcomm run or torchrun is not, and starts its data-loader workers so."""
    mp.current_process()._config["daemon"] = False     # type: ignore[attr-defined]


def _fork_body(rank: int, n: int, root: bytes) -> Any:
    import hcomm_cffi as hcomm
    _may_start_workers()
    from hcomm_cffi import flight
    w = hcomm.init(rank=rank, world_size=n, root_info=root)
    try:
        sub = hcomm.Comm("pair", ranks=[0, 1])
        _checked_calls(w, sub, 2)
        result: Any = None
        started = np.ones(8, np.float32)
        pending = w.iallreduce(started)           # in flight when the child is forked: its wait is refused there
        if rank == 0:
            ctx = mp.get_context("fork")
            out = ctx.Queue()
            child = ctx.Process(target=_in_child, args=(w, sub, pending, out))
            child.start()
            lines = out.get(timeout=60)
            child.join(60)
            result = {"lines": lines, "exitcode": child.exitcode, "bare": _bare_fork_exit(w)}
        pending.wait(30)                          # rank 1 waits here while rank 0's children run
        assert np.all(started == n), started
        w.barrier()
        _checked_calls(w, sub, 3)
        rings = [c._state.flight for c in (w, sub) if c._state.flight is not None]
        assert all(ring.ended() == flight.LIVE for ring in rings), "a child ended the parent's flight recorder"
        return result
    finally:
        hcomm.finalize()


def test_a_forked_child_is_refused_and_the_parents_job_is_unaffected() -> None:
    out = run_ranks(2, _fork_body, timeout=120, env={"HCCL_EXEC_TIMEOUT": "30"})
    child = out[0]
    assert child["exitcode"] == 0 and child["bare"] == 0, child
    lines = dict(line.split(": ", 1) for line in child["lines"])
    for name in ("allreduce", "native", "iallreduce", "sub", "send", "irecv", "barrier", "wait", "destroy"):
        text = lines[name]
        assert text.startswith("ForeignProcessError: "), (name, text)
        assert "created by process" in text and "forked from it" in text and "hcomm.init(rank=, world_size=, root_info=)" in text, text
        assert "'spawn'" in text, text
    parent_pid = int(lines["allreduce"].split("created by process ")[1].split(";")[0])
    assert f"this is process {parent_pid}" not in lines["allreduce"]
    assert lines["get_world"].startswith("NotInitializedError: ") and f"forked from pid {parent_pid}" in \
        lines["get_world"], lines["get_world"]
    assert lines["is_initialized"] == "False"
    assert lines["init"].startswith("CommError: init(): ") and f"forked from pid {parent_pid}" in lines["init"] \
        and "root_info=" in lines["init"], lines["init"]


def _forkserver_child(out: Any) -> None:
    """A forkserver child: a fresh interpreter's state, no communicator, nothing initialised."""
    import hcomm_cffi as hcomm
    try:
        hcomm.get_world()
        out.put("get_world ran")
    except hcomm.NotInitializedError as exc:
        out.put(f"NotInitializedError: {exc}")


def _forkserver_body(rank: int, n: int, root: bytes) -> Any:
    import hcomm_cffi as hcomm
    _may_start_workers()
    w = hcomm.init(rank=rank, world_size=n, root_info=root)
    try:
        sub = hcomm.Comm("pair", ranks=[0, 1])
        _checked_calls(w, sub, 1)
        result: Any = None
        if rank == 0:
            try:
                pickle.dumps(w)
                refused = "pickled"
            except TypeError as exc:
                refused = str(exc)
            ctx = mp.get_context("forkserver")
            out = ctx.Queue()
            child = ctx.Process(target=_forkserver_child, args=(out,))
            child.start()
            seen = out.get(timeout=60)
            child.join(60)
            result = {"pickle": refused, "child": seen, "exitcode": child.exitcode}
        w.barrier()
        _checked_calls(w, sub, 2)
        return result
    finally:
        hcomm.finalize()


def test_a_forkserver_child_inherits_no_communicator_and_cannot_be_handed_one() -> None:
    out = run_ranks(2, _forkserver_body, timeout=120, env={"HCCL_EXEC_TIMEOUT": "30"})
    res = out[0]
    assert "communicator 'world' cannot be pickled" in res["pickle"] and "hcomm.init(rank=" in res["pickle"], res
    assert res["child"].startswith("NotInitializedError: hcomm is not initialised"), res
    assert res["exitcode"] == 0
