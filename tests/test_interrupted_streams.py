"""An exception that interrupts a stream wait or a graph replay breaks the communicator, never corrupts (issue 46.9).

The rule of tests/test_interrupted_calls.py, for the waits that are not a blocking call's own: rank 1
replays an ACL graph holding a ring allreduce and waits with ``Stream.synchronize()``, or issues the
allreduce with ``stream=`` and waits on the stream, or starts it with ``async_op`` and waits on its
Request, or waits on the Request of an ``irecv`` from rank 0.  A one-shot timer fires at a random
moment and its handler raises (KeyboardInterrupt, or an ordinary exception as an alarm handler does).

When the communicator says it is broken, rank 1 does what a user retrying the step does -- it
overwrites its input with POISON and replays (or calls) again -- and that must be refused with the
broken-communicator error naming the interruption.  When it is usable, rank 1 first waits for what it
launched, as a user must, wherever the alarm landed: the package breaks the communicator when an
interrupt leaves its wait or replay with the step's work queued, but a handler can also run at the
first instruction of ``synchronize``, ``wait`` or ``replay`` -- before any of the package's code, where
nothing can catch it, exactly as in the caller's code just before the call -- and there the step stays
queued (it pairs with rank 0's next step if made again without waiting: rank 0 then gets another
step's value).  So a usable communicator promises that what was launched is still pending and
completes with exactly its values, not that nothing is queued.  A nonblocking start (``async_op``,
``irecv``) is interrupted like the rest: cut short after its launch, on its way back, the package
breaks the communicator (tests/test_interrupted_starts.py); Python runs no handler between a call's
return and the assignment of its value, so the Request is never lost in this test's code.  (Blocking
SIGALRM around the start would hold nothing: the mask is the thread's, the kernel hands the alarm to
another thread of the process -- the package's stall watcher -- and Python runs the handler in the main
thread at its next check anyway.)  Rank 0 checks every result: exactly both ranks' values of that
step (irecv: rank 0's), never POISON, never a later step's; a failure names rank 1 and comes within
seconds.  Before, the interrupted replay stayed queued and ran on the retry's inputs: rank 0 received
1001 instead of 3.
Each episode runs on a fresh sub-communicator, with its own stream and graph, all released at its end
(the emulator's streams are counted).
"""
from __future__ import annotations

import multiprocessing
import random
import time
import traceback
import warnings
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import pytest

from multiproc import run_ranks
from test_interrupted_calls import DETECT_S, POISON, Alarm, _arm, _broken, _disarm, _value

pytestmark = pytest.mark.slow

COUNT = 2048
KINDS = ["replay", "stream", "request", "irecv"]


class Step:
    """One rank's step of ``kind`` on ``comm``: the same input and output buffers every step (a graph's are fixed)."""

    def __init__(self, hcomm: Any, kind: str, comm: Any) -> None:
        self.kind = kind
        self.comm = comm
        self.x = np.zeros(COUNT, np.float32)
        self.y = np.zeros(COUNT, np.float32)
        self.stream = hcomm.Stream() if kind in ("replay", "stream") else None
        self.graph: Optional[Any] = None
        self.req: Optional[Any] = None         # a started call not yet waited for (request)
        if kind == "replay":
            self.graph = hcomm.Graph("step")
            with hcomm.graph(self.graph, stream=self.stream):
                comm.allreduce(self.x, out=self.y, algorithm="ring", stream=self.stream)

    def expected(self, rank: int, k: int) -> Optional[float]:
        """What step ``k`` leaves in ``y`` on ``rank`` (irecv: rank 1 receives rank 0's input; rank 0 sends)."""
        if self.kind == "irecv":
            return _value(0, k) if rank == 1 else None
        return _value(0, k) + _value(1, k)

    def run(self, value: float) -> None:
        """Write this step's input, launch the step and wait for it."""
        self.y[:] = np.nan
        self.x[:] = value
        if self.kind == "irecv":
            if self.comm.rank == 0:
                self.comm.send(self.x, 1)
            else:
                self.req = self.comm.irecv(self.y, 0)
                self.req.wait()
                self.req = None
        elif self.kind == "replay":
            assert self.graph is not None and self.stream is not None
            self.graph.replay()
            self.stream.synchronize()
        elif self.kind == "stream":
            assert self.stream is not None
            self.comm.allreduce(self.x, out=self.y, algorithm="ring", stream=self.stream)
            self.stream.synchronize()
        else:
            self.req = self.comm.allreduce(self.x, out=self.y, algorithm="ring", async_op=True)
            self.req.wait()
            self.req = None

    def drain(self) -> None:
        """What a careful user does after an exception that left the communicator usable: wait for what was
        launched (nothing when the step never began)."""
        if self.stream is not None:
            self.stream.synchronize()
        if self.req is not None:
            self.req.wait()
            self.req = None

    def close(self) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if self.graph is not None:
                self.graph.reset()
            if self.stream is not None:
                try:
                    self.stream.close()
                except Exception:          # noqa: BLE001 -- the abandoned work's failure, reported once
                    pass


def _interrupted_side(step: Step, calls: int, delay: float, episode: int) -> Dict[str, Any]:
    """Rank 1: steps until the alarm breaks the communicator (then the poisoned retry must be refused)."""
    state = {"k": 0}
    report: Dict[str, Any] = {"calls": 0, "broken": False, "problem": None}

    def steps() -> None:
        while state["k"] < calls and report["problem"] is None:
            k = state["k"]
            step.run(_value(1, k))
            want = step.expected(1, k)
            if not np.all(step.y == want):
                report["problem"] = f"step {k}: rank 1 received {step.y[:4]} instead of {want}"
            state["k"] = k + 1
            report["calls"] += 1

    _arm(delay, episode)
    try:
        steps()
    except (KeyboardInterrupt, Alarm, Exception) as exc:   # noqa: B014 -- the alarm's, or what it became
        _disarm()
        k = state["k"]
        if _broken(step.comm):
            report["broken"] = True
            step.x[:] = POISON            # the caller reuses its input, then retries
            try:
                step.run(POISON)
                report["problem"] = f"step {k}: the retry on the broken communicator was accepted"
            except Exception as retry:     # noqa: BLE001 -- checked by the test
                report["retry_error"] = f"{type(retry).__name__}: {retry}"
            return report
        if not isinstance(exc, (KeyboardInterrupt, Alarm)):
            report["problem"] = f"step {k}: {type(exc).__name__}: {exc} left the communicator usable"
            return report
        step.drain()                      # usable: what was launched is pending, or done (module docstring)
        if np.all(step.y == step.expected(1, k)):
            state["k"] = k + 1
            report["calls"] += 1
        elif not (np.all(np.isnan(step.y)) or np.all(step.y == step.expected(1, k - 1))):   # (not begun)
            report["problem"] = f"step {k}: rank 1 received {step.y[:4]} after the interrupt"
            return report
        report["absorbed_in_wait"] = _in_wait(exc)
        steps()
    finally:
        _disarm()
    return report


def _in_wait(exc: BaseException) -> bool:
    """Whether the alarm's handler ran inside the package's ``synchronize``, ``wait`` or ``replay``."""
    return any("/hcomm_cffi/" in frame.filename and frame.name in ("synchronize", "wait", "replay")
               for frame in traceback.extract_tb(exc.__traceback__))


def _checking_side(step: Step, calls: int) -> Dict[str, Any]:
    """Rank 0: every completed step holds exactly step k's values; a failure names rank 1 and comes soon."""
    report: Dict[str, Any] = {"calls": 0, "error": None, "problem": None}
    for k in range(calls):
        t0 = time.monotonic()
        try:
            step.run(_value(0, k))
        except Exception as exc:                 # noqa: BLE001 -- checked by the caller
            report["error"] = f"{type(exc).__name__}: {exc}"
            report["took"] = time.monotonic() - t0
            break
        want = step.expected(0, k)
        if want is not None and not np.all(step.y == want):
            report["problem"] = (f"step {k}: rank 0 got {sorted(set(step.y.tolist()))[:4]} instead of {want} "
                                 "(silent wrong data)")
            break
        report["calls"] += 1
    return report


def _live_streams() -> int:
    """The emulator's streams of this process (every episode must release what it made)."""
    from hcomm_cffi.binding import get_binding

    return len(get_binding().lib.state.streams)


def body(rank: int, n: int, root: bytes, kind: str, episodes: int, calls: int, seed: int,
         gate: Any) -> List[Dict[str, Any]]:
    import hcomm_cffi as hcomm

    rng = random.Random(seed)
    hcomm.init(rank=rank, world_size=n, root_info=root)
    reports = []
    try:
        made = [hcomm.Comm(f"episode-{e}") for e in range(episodes)]     # made before any alarm is armed
        for e, comm in enumerate(made):
            delay = rng.uniform(0.0002, 0.01)          # the same on both ranks (same seed); only rank 1 arms it
            streams = _live_streams()
            step = Step(hcomm, kind, comm)
            step.run(_value(rank, -1))                 # a first step (its schedule is derived once)
            report = _interrupted_side(step, calls, delay, e) if rank == 1 else _checking_side(step, calls)
            step.close()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    comm.destroy()
                except Exception:        # noqa: BLE001 -- a broken communicator's leftovers, already reported
                    pass
            report["leaked streams"] = _live_streams() - (streams - 1)    # the communicator's own went with it
            reports.append(report)
            gate.wait(60)       # the episodes' boundary
    finally:
        hcomm.finalize()
    return reports


def _check(results: List[List[Dict[str, Any]]], kind: str) -> Tuple[int, int]:
    """Assert the episodes' outcomes; (calls made, episodes the alarm broke)."""
    calls = broken = 0
    for e, (r0, r1) in enumerate(zip(results[0], results[1])):
        where = f"{kind}, episode {e}"
        assert r0["problem"] is None, f"{where}: {r0['problem']} (rank 1: {r1})"
        assert r1["problem"] is None, f"{where}: {r1['problem']} (rank 0: {r0})"
        assert r0["leaked streams"] == r1["leaked streams"] == 0, f"{where}: streams left: {r0}, {r1}"
        calls += r0["calls"] + r1["calls"]
        if not r1["broken"]:
            assert r0["error"] is None, f"{where}: rank 0 failed though rank 1 was never broken: {r0['error']}"
            continue
        broken += 1
        retry = r1["retry_error"]
        # an Alarm raised inside the emulator's executor is its internal error: the communicator failed with it
        assert retry.startswith("CommError") and ("interrupted" in retry or "failed" in retry), \
            f"{where}: rank 1's retry: {retry}"
        if r0["error"] is not None:     # rank 0 may have completed every step rank 1 had fed before it broke
            assert "rank 1" in r0["error"], f"{where}: rank 0's error does not name rank 1: {r0['error']}"
            assert r0["took"] < DETECT_S, f"{where}: rank 0 failed only after {r0['took']:.1f} s: {r0['error']}"
    return calls, broken


@pytest.mark.parametrize("kind", KINDS)
def test_an_interrupted_stream_wait_breaks_the_communicator_and_never_corrupts(kind: str) -> None:
    calls = broken = 0
    for seed in (46, 47, 48):          # the alarm lands at a random point: seeds until one broke the communicator
        gate = multiprocessing.get_context("fork").Barrier(2)
        got = run_ranks(2, body, kind, 4, 300, seed, gate, timeout=120,
                        env={"HCCL_EXEC_TIMEOUT": "20", "HCOMM_SIM_CHECK": "warn"})
        made, hit = _check(got, kind)
        calls += made
        broken += hit
        if broken:
            break
    assert broken >= 1, f"{kind}: no alarm landed while work was queued ({calls} calls)"
