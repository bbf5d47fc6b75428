"""Calls that never meet a collective are named within seconds, never left to HCCL_EXEC_TIMEOUT (issue 46.8, 46.10).

Rank 0 and rank 1 make calls that can never complete together: a graph replay of a captured ring
allreduce against the same allreduce made eagerly (the replay's handshake has the captured form), a
receive against an allreduce, the creation of a sub-communicator against an allreduce.  Before, both
ranks waited for HCCL_EXEC_TIMEOUT (20 s here: a regression fails as a slow case, not a hang) with
"notify wait timed out"; now every rank raises CollectiveMismatchError within DETECT_S, naming both
calls.  Programs that only look alike must still complete: a collective on a user stream against the
same collective on the communicator's own stream, replays on both ranks, and a rank that posts its
send after starting a collective its peer reaches only after receiving.  Each case runs on its own
sub-communicator made while every rank agrees.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Tuple

import numpy as np
import pytest

from multiproc import run_ranks

pytestmark = pytest.mark.slow

DETECT_S = 5.0
ENV = {"HCCL_EXEC_TIMEOUT": "20"}
Step = Callable[[Any, int], Any]          # (communicator, rank) -> this rank's call; returns its result


def _value(rank: int) -> np.ndarray:
    return np.full(8, rank + 1, np.float32)


def _eager(comm: Any, rank: int) -> float:
    return float(comm.allreduce(_value(rank), algorithm="ring")[0])


def _replayed(comm: Any, rank: int) -> float:
    import hcomm_cffi as hcomm

    with hcomm.Stream() as s:
        x, y = _value(rank), np.zeros(8, np.float32)
        g = hcomm.Graph(f"g{rank}")          # graph names are each rank's own: they need not agree
        with hcomm.graph(g, stream=s):
            comm.allreduce(x, out=y, algorithm="ring", stream=s)
        try:
            g.replay()
            s.synchronize()
        finally:
            g.reset()
    return float(y[0])


def _eager_twice(comm: Any, rank: int) -> float:
    return _eager(comm, rank) + _eager(comm, rank)


def _then_on_user_stream(comm: Any, rank: int) -> float:
    """The allreduce on the communicator's own stream, then on a user stream (where it is new: its peer's is not)."""
    import hcomm_cffi as hcomm

    first = _eager(comm, rank)
    with hcomm.Stream() as s:
        return first + float(comm.allreduce(_value(rank), algorithm="ring", stream=s).wait()[0])


def _recv(comm: Any, rank: int) -> float:
    return float(comm.recv(np.zeros(8, np.float32), 1 - rank)[0])


def _sub_comm(comm: Any, rank: int) -> str:
    import hcomm_cffi as hcomm

    return repr(hcomm.Comm("late", parent=comm))


def _send_after_async_allreduce(comm: Any, rank: int) -> float:
    """Rank 1: start the allreduce, then (later than a peer's blocked wait looks) send what rank 0 waits for.

    A first call of its signature blocks in its start until every rank agrees on it (api/signatures.py):
    both ranks make one before.
    """
    _eager(comm, rank)
    req = comm.allreduce(_value(rank), algorithm="ring", async_op=True)
    time.sleep(1.0)
    comm.send(np.full(8, 7, np.float32), 1 - rank)
    return float(req.wait()[0])


def _recv_then_allreduce(comm: Any, rank: int) -> float:
    _eager(comm, rank)
    got = float(comm.recv(np.zeros(8, np.float32), 1 - rank)[0])
    return got + float(comm.allreduce(_value(rank), algorithm="ring")[0])


#: case -> (rank 0's call, rank 1's call, words every rank's message must hold)
MISMATCHES: Dict[str, Tuple[Step, Step, Tuple[str, ...]]] = {
    "replay vs eager": (_replayed, _eager, ("replayed from an ACL graph", "allreduce of 8 x fp32, op sum "
                                            "(algorithm ring)")),
    "recv vs allreduce": (_recv, _eager, ("irecv of 32 bytes from rank 1", "allreduce of 8 x fp32")),
    "sub-communicator vs allreduce": (_sub_comm, _eager, ("creation of sub-communicator 'late'",
                                                          "allreduce of 8 x fp32")),
}
#: case -> (rank 0's call, rank 1's call, what each rank must return)
AGREEING: Dict[str, Tuple[Step, Step, Tuple[Any, Any]]] = {
    "user stream vs own stream": (_then_on_user_stream, _eager_twice, (6.0, 6.0)),
    "replay vs replay": (_replayed, _replayed, (3.0, 3.0)),
    "send after a started allreduce": (_recv_then_allreduce, _send_after_async_allreduce, (10.0, 3.0)),
}


def _body(rank: int, n: int, root: bytes, cases: List[str]) -> List[Tuple[str, str, str, float]]:
    """(case, error class or 'ok', message or result, seconds) of every case, each on its own sub-communicator."""
    import hcomm_cffi as hcomm

    hcomm.init(rank=rank, world_size=n, root_info=root)
    out = []
    try:
        comms = [hcomm.Comm(f"w{i}") for i in range(len(cases))]     # made while every rank agrees
        for case, comm in zip(cases, comms):
            step = (MISMATCHES[case] if case in MISMATCHES else AGREEING[case])[rank]
            t0 = time.monotonic()
            try:
                got = ("ok", repr(step(comm, rank)))
            except Exception as exc:       # noqa: BLE001 -- checked by the test
                got = (type(exc).__name__, str(exc))
            out.append((case, got[0], got[1], time.monotonic() - t0))
        for comm in comms:
            try:
                comm.destroy()
            except Exception:              # noqa: BLE001 -- a failed communicator's leftovers
                pass
    finally:
        hcomm.finalize()
    return out


def test_calls_that_never_meet_are_named_on_every_rank_within_seconds() -> None:
    cases = sorted(MISMATCHES)
    results = run_ranks(2, _body, cases, timeout=60 + 25 * len(cases), env=ENV)
    problems = []
    for rank, rows in enumerate(results):
        for case, cls, msg, took in rows:
            words = MISMATCHES[case][2]
            if cls != "CollectiveMismatchError" or took > DETECT_S or not all(w in msg for w in words):
                problems.append(f"rank {rank}, {case}: {cls} after {took:.1f} s: {msg[:500]}")
    assert not problems, "\n".join(problems)


def test_calls_that_meet_still_complete() -> None:
    cases = sorted(AGREEING)
    results = run_ranks(2, _body, cases, timeout=60 + 25 * len(cases), env=ENV)
    problems = []
    for rank, rows in enumerate(results):
        for case, cls, got, took in rows:
            want = AGREEING[case][2][rank]
            if cls != "ok" or got != repr(want):
                problems.append(f"rank {rank}, {case}: {cls} after {took:.1f} s: {got[:500]} (expected {want!r})")
    assert not problems, "\n".join(problems)
