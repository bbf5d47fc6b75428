"""Run a function on N real processes (one per rank) and collect what each returns.

Used by the multi-rank tests: the parent makes the root info with the emulator's
HcclGetRootInfo (which creates no state), forks N children, gives each (rank, n, root_info),
and gathers results or tracebacks.  Every run has a timeout; on expiry all children are killed
and the test fails naming the ranks that did not finish.  Nothing may be left in /dev/shm.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import queue
import signal
import time
import traceback
from typing import Any, Callable, Dict, List, Optional

from hcomm_cffi._ffi import ffi

_CTX = mp.get_context("fork")


class RankFailure(AssertionError):
    """One or more ranks raised or did not finish."""


def make_root_info() -> bytes:
    """A fresh root info blob from the emulator (HcclGetRootInfo keeps no state).

    As on CANN, HcclGetRootInfo needs a device: set one, then reset it, so the forked ranks start
    without a device, as fresh processes do.
    """
    from hcomm_cffi.sim import SimLibrary

    lib = SimLibrary()
    root = ffi.new("HcclRootInfo *")
    assert lib.aclrtSetDevice(0) == 0
    try:
        rc = lib.HcclGetRootInfo(root)
    finally:
        lib.aclrtResetDevice(0)
    assert rc == 0, rc
    return bytes(ffi.buffer(root))


def _child(fn: Callable[..., Any], rank: int, n: int, root: bytes, args: tuple, env: Dict[str, str],
           out: Any) -> None:
    os.environ.update(env)
    try:
        result = fn(rank, n, root, *args)
        out.put((rank, True, result))
    except BaseException:  # report everything, including SystemExit from a test helper
        out.put((rank, False, traceback.format_exc()))
    finally:
        from hcomm_cffi.sim import shutdown

        shutdown()  # what a normal interpreter exit does (forked children skip atexit)
        out.close()
        out.join_thread()


def run_ranks(n: int, fn: Callable[..., Any], *args: Any, timeout: float = 60.0,
              env: Optional[Dict[str, str]] = None, expect_failure: bool = False,
              kill: Optional[Callable[[List[Any]], None]] = None) -> List[Any]:
    """Run ``fn(rank, n, root_info, *args)`` on ``n`` processes; returns results by rank.

    With ``expect_failure`` the per-rank outcomes are returned as (ok, value_or_traceback)
    instead of raising.  ``kill`` is called with the process list right after start (to inject
    failures such as SIGKILL of one rank).
    """
    root = make_root_info()
    out = _CTX.Queue()
    procs = [_CTX.Process(target=_child, args=(fn, r, n, root, args, dict(env or {}), out), daemon=True)
             for r in range(n)]
    for p in procs:
        p.start()
    if kill is not None:
        kill(procs)
    results: Dict[int, Any] = {}
    deadline = time.monotonic() + timeout
    alive = lambda: [r for r, p in enumerate(procs) if p.is_alive() and r not in results]  # noqa: E731
    try:
        while len(results) < n:
            try:
                rank, ok, value = out.get(timeout=0.2)
                results[rank] = (ok, value)
                continue
            except queue.Empty:
                pass
            if not alive():
                missing = [r for r in range(n) if r not in results]
                # give queued messages a moment to arrive
                end = time.monotonic() + 2.0
                while missing and time.monotonic() < end:
                    try:
                        rank, ok, value = out.get(timeout=0.1)
                        results[rank] = (ok, value)
                    except queue.Empty:
                        pass
                    missing = [r for r in range(n) if r not in results]
                for r in missing:
                    results[r] = (False, f"rank {r} exited with code {procs[r].exitcode} without a result")
                break
            if time.monotonic() > deadline:
                stuck = alive()
                for p in procs:
                    if p.is_alive():
                        os.kill(p.pid, signal.SIGKILL)
                raise RankFailure(f"ranks {stuck} of {n} did not finish within {timeout} s")
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                os.kill(p.pid, signal.SIGKILL)
                p.join()
    ordered = [results[r] for r in range(n)]
    if expect_failure:
        return ordered
    failures = [f"--- rank {r} ---\n{v}" for r, (ok, v) in enumerate(ordered) if not ok]
    if failures:
        raise RankFailure("\n".join(failures))
    return [v for ok, v in ordered]
