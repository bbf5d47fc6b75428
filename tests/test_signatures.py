"""Mismatched collectives fail on every rank, naming the ranks and both values, under every setting (issue 21, 25.4).

The package's algorithms carry each call's signature in a handshake ahead of their data
(api/signatures.py); the emulator's library collectives compare theirs in their first handshake.
Neither depends on HCOMM_CHECK_COLLECTIVES or HCOMM_SIM_CHECK, so no setting lets a count, dtype,
op, root, collective, algorithm or alltoall-block mismatch give wrong data.  Each case runs on its
own sub-communicator (created while everything agrees), so one job covers every case of a setting.
"""
from __future__ import annotations

import re

import time
from typing import Any, Callable, Dict, List, Tuple

import numpy as np
import pytest

from multiproc import run_ranks

pytestmark = pytest.mark.slow

N = 3
Case = Callable[[Any, int, str], Any]

#: case -> (what rank r calls on communicator c with algorithm a, the words the last rank's error must hold)
CASES: Dict[str, Tuple[Case, List[str]]] = {
    "count": (lambda c, r, a: c.allreduce(np.ones(4 if r < N - 1 else 8, np.float32), algorithm=a), ["4", "8"]),
    "dtype": (lambda c, r, a: c.allreduce(np.ones(4, np.float32 if r < N - 1 else np.int32), algorithm=a),
              ["fp32", "int32"]),
    "op": (lambda c, r, a: c.allreduce(np.ones(4, np.float32), "max" if r == N - 1 else "sum", algorithm=a),
           ["sum", "max"]),
    "root": (lambda c, r, a: c.broadcast(np.ones(4, np.float32), 0 if r < N - 1 else 1, algorithm=a),
             ["root 0", "root 1"]),
    "collective": (lambda c, r, a: c.allreduce(np.ones(4, np.float32), algorithm=a) if r < N - 1
                   else c.broadcast(np.ones(4, np.float32), 0, algorithm=a), ["allreduce", "broadcast"]),
    "alltoall_blocks": (lambda c, r, a: c.alltoall(np.ones(N * (2 if r < N - 1 else 3), np.float32), algorithm=a),
                        ["count 2", "count 3"]),
    "algorithm": (lambda c, r, a: c.allreduce(np.ones(4, np.float32), algorithm=a if r < N - 1 else "mesh"),
                  ["algorithm ring", "algorithm mesh"]),
}

#: algorithm -> the cases it runs (tree has no alltoall; the algorithm case pairs ring with mesh)
PLAN: Dict[str, List[str]] = {
    "ring": ["count", "dtype", "op", "root", "collective", "alltoall_blocks", "algorithm"],
    "mesh": ["count", "dtype", "op", "root", "collective", "alltoall_blocks"],
    "tree": ["count", "dtype", "op", "root", "collective"],
    "native": ["count", "dtype", "op", "root", "collective"],
}


def body(rank: int, n: int, root_info: bytes) -> List[Tuple[str, str, str, str, float]]:
    """(algorithm, case, error class, message, seconds) of every case, each on its own sub-communicator."""
    import hcomm_cffi as hcomm
    w = hcomm.init(rank=rank, world_size=n, root_info=root_info)
    out = []
    try:
        jobs = [(a, case) for a, cases in PLAN.items() for case in cases]
        comms = [hcomm.Comm(f"{a}-{case}") for a, case in jobs]      # made while every rank agrees
        for (a, case), comm in zip(jobs, comms):
            t0 = time.monotonic()
            try:
                CASES[case][0](comm, rank, a)
                kind, msg = "no error", ""
            except Exception as exc:               # noqa: BLE001 - the class is what the test checks
                kind, msg = type(exc).__name__, str(exc)
            out.append((a, case, kind, msg, time.monotonic() - t0))
        w.allreduce(np.ones(1, np.float32))         # the world still works: each failure stayed on its communicator
        return out
    finally:
        try:
            hcomm.finalize()
        except Exception:                           # noqa: BLE001 - strict mode re-reports the failed streams
            pass


@pytest.mark.parametrize("sim_check", ["off", "warn", "strict"])
@pytest.mark.parametrize("check", ["0", "1"])
def test_every_mismatch_fails_every_rank_under_every_setting(check: str, sim_check: str) -> None:
    env = {"HCOMM_CHECK_COLLECTIVES": check, "HCOMM_SIM_CHECK": sim_check, "HCCL_EXEC_TIMEOUT": "60"}
    results = run_ranks(N, body, env=env, timeout=600)
    for rank, rows in enumerate(results):
        for algo, case, kind, msg, took in rows:
            where = (rank, algo, case, msg)
            assert kind == "CollectiveMismatchError", where
            assert took < 30, where                   # at the first handshake, not by a timeout
            assert f"rank {rank} of communicator '{algo}-{case}'" in msg, where
    for algo, case, kind, msg, took in results[N - 1]:     # the odd rank names both values
        for word in CASES[case][1]:
            assert word in msg, (algo, case, word, msg)


def agree_body(rank: int, n: int, root_info: bytes) -> List[float]:
    """Agreeing calls of every algorithm pass the handshake and give the right sums (repeats: replayed batches)."""
    import hcomm_cffi as hcomm
    w = hcomm.init(rank=rank, world_size=n, root_info=root_info)
    try:
        sums = []
        for algo in PLAN:
            x = np.full(16, rank + 1, np.float32)
            for _ in range(3):
                x[:] = rank + 1
                w.allreduce(x, algorithm=algo)
            sums.append(float(x[0]))
            req = w.iallreduce(np.full(16, rank + 1, np.float32), algorithm=algo)
            sums.append(float(req.wait()[0]))
        reports = w.binding.lib.checker_reports() if hasattr(w.binding.lib, "checker_reports") else []
        assert not reports, reports       # the handshake's writes and waits are clean for the race checker
        return sums
    finally:
        hcomm.finalize()


@pytest.mark.parametrize("sim_check", ["warn", "strict"])
def test_agreeing_calls_pass_the_handshake(sim_check: str) -> None:
    for sums in run_ranks(N, agree_body, timeout=240, env={"HCOMM_SIM_CHECK": sim_check}):
        assert sums == [N * (N + 1) / 2] * len(sums)


def cann_like_body(rank: int, n: int, root_info: bytes) -> List[Tuple[str, str, str, str, float]]:
    """The emulator answering the contract as CANN does (no host tasks, no in-band check): the handshake is
    compared after the stream completes (or fails), and library collectives carry it too."""
    import dataclasses

    from hcomm_cffi.sim import library
    library.SimLibrary.capabilities = dataclasses.replace(library.SIM_CAPABILITIES, host_tasks=False,
                                                          checks_signatures_in_band=False)
    return body(rank, n, root_info)


@pytest.mark.parametrize("check", ["0", "1"])
def test_backend_without_host_tasks_compares_after_completion(check: str) -> None:
    env = {"HCOMM_CHECK_COLLECTIVES": check, "HCCL_EXEC_TIMEOUT": "5"}
    results = run_ranks(N, cann_like_body, env=env, timeout=600)
    for rank, rows in enumerate(results):
        for algo, case, kind, msg, took in rows:
            if algo == "native" and check == "0":
                continue          # left to the library (CANN's own behaviour; the emulator still checks in-band)
            assert kind == "CollectiveMismatchError", (rank, algo, case, msg)
            # the package's handshake compared after completion, or (library collectives whose waits block first)
            # the emulator's launch-order check: both name the two calls
            assert "ranks disagree on" in msg or re.search(r"this rank is in .* but rank \d is in ", msg), \
                (rank, algo, case, msg)


def table_body(rank: int, n: int, root_info: bytes) -> int:
    """More distinct call signatures than the signature table holds: it starts over, no false mismatch, right sums."""
    import hcomm_cffi as hcomm
    from hcomm_cffi.api.signatures import TABLE_SLOTS
    w = hcomm.init(rank=rank, world_size=n, root_info=root_info)
    try:
        wrong = 0
        counts = list(range(1, TABLE_SLOTS + 40)) + [1, 2, 3, TABLE_SLOTS + 1]   # repeats after the start-over
        for count in counts:
            x = np.full(count, rank + 1, np.float32)
            for _ in range(2):                       # the second call replays a bound batch
                x[:] = rank + 1
                w.allreduce(x, algorithm="ring")
                wrong += int((x != n * (n + 1) / 2).sum())
        return wrong
    finally:
        hcomm.finalize()


def test_signature_table_starts_over_without_false_mismatches() -> None:
    assert run_ranks(2, table_body, timeout=300) == [0, 0]
