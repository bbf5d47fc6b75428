"""Every mismatch kind of the hostile pass fails on every rank within seconds, naming both calls (issue 36.4).

Two ranks make different calls at the same point: different collectives, counts, dtypes, ops, roots,
algorithms, alltoall blocks -- on the package's algorithms, on the library's own collectives (through
the Comm API's ``native`` algorithm and raw HcclReduce/HcclScatter calls on the communicator), and a
library collective against a package algorithm.  Some of these pairs never meet in a handshake (a
reduce whose ranks name different roots, a reduce against an allreduce, a non-root reduce against a
root scatter, native against ring); those used to wait for HCCL_EXEC_TIMEOUT.  Each case runs on its
own sub-communicator made while everything agrees; HCCL_EXEC_TIMEOUT is 20 s here, so a regression
fails as a timeout (not a hang), and every rank must raise CollectiveMismatchError in under DETECT_S (a raw
library call: the binding's typed error, with the same collective-mismatch text).
"""
from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Tuple

import numpy as np
import pytest

from hcomm_cffi.errors import COLLECTIVE_MISMATCH
from multiproc import run_ranks

DETECT_S = 5.0
F32 = np.float32
Call = Callable[[Any, int], Any]      # (communicator, rank) -> makes this rank's call


def _api(method: str, *args: Any, **kw: Any) -> Call:
    """A Comm API call; array arguments are (count, dtype) specs made fresh per call."""
    def run(comm: Any, rank: int) -> Any:
        real = [np.ones(a[0], a[1]) if isinstance(a, tuple) else a for a in args]
        opts = {k: (np.ones(v[0], v[1]) if isinstance(v, tuple) else v) for k, v in kw.items()}
        return getattr(comm, method)(*real, **opts)
    return run


def _lib(kind: str, count: int, root: int = 0) -> Call:
    """A library collective called on the communicator's handle directly (device memory, its own stream)."""
    def run(comm: Any, rank: int) -> None:
        from hcomm_cffi.enums import DataType, ReduceOp
        b, h = comm.binding, comm.handle
        nbytes = 4 * count * comm.size
        send, recv, stream = b.malloc(nbytes), b.malloc(nbytes), b.create_stream()
        fp32, total = int(DataType.FP32), int(ReduceOp.SUM)
        try:
            if kind == "reduce":
                b.reduce(send, recv, count, fp32, total, root, h, stream)
            elif kind == "scatter":
                b.scatter(send, recv, count, fp32, root, h, stream)
            elif kind == "allreduce":
                b.all_reduce(send, recv, count, fp32, total, h, stream)
            b.synchronize_stream(stream)
        finally:
            for p in (send, recv):
                b.free(p)
            b.destroy_stream(stream)
    return run


def _pair(rank0: Call, rank1: Call, *words: str) -> Tuple[Call, Call, Tuple[str, ...]]:
    return rank0, rank1, words


N = "native"
#: case -> (rank 0's call, rank 1's call, words every rank's message must hold)
CASES: Dict[str, Tuple[Call, Call, Tuple[str, ...]]] = {
    # the library's own collectives, through the Comm API (algorithm native)
    "native reduce roots": _pair(_api("reduce", (4, F32), 0, algorithm=N), _api("reduce", (4, F32), 1, algorithm=N),
                                 "root 0", "root 1"),
    "native reduce vs allreduce": _pair(_api("reduce", (4, F32), 0, algorithm=N), _api("allreduce", (4, F32), algorithm=N),
                                        "reduce", "allreduce"),
    "native reduce vs broadcast": _pair(_api("reduce", (4, F32), 0, algorithm=N),
                                        _api("broadcast", (4, F32), 0, algorithm=N), "reduce", "broadcast"),
    "native allgather vs alltoall": _pair(_api("allgather", (4, F32), algorithm=N),
                                          _api("alltoall", (4, F32), algorithm=N), "allgather", "alltoall"),
    "native allreduce vs broadcast": _pair(_api("allreduce", (4, F32), algorithm=N),
                                           _api("broadcast", (4, F32), 0, algorithm=N), "allreduce", "broadcast"),
    "native op": _pair(_api("allreduce", (4, F32), algorithm=N), _api("allreduce", (4, F32), "max", algorithm=N),
                       "sum", "max"),
    "native count": _pair(_api("allreduce", (4, F32), algorithm=N), _api("allreduce", (8, F32), algorithm=N), "4", "8"),
    "native dtype": _pair(_api("allreduce", (4, F32), algorithm=N), _api("allreduce", (4, np.int32), algorithm=N),
                          "fp32", "int32"),
    "native broadcast roots": _pair(_api("broadcast", (4, F32), 0, algorithm=N), _api("broadcast", (4, F32), 1, algorithm=N),
                                    "root 0", "root 1"),
    "native allgather vs reduce_scatter": _pair(_api("allgather", (4, F32), algorithm=N),
                                                _api("reduce_scatter", (8, F32), algorithm=N), "allgather", "reduce_scatter"),
    "native alltoall blocks": _pair(_api("alltoall", (4, F32), algorithm=N), _api("alltoall", (6, F32), algorithm=N),
                                    "2 x", "3 x"),
    "native barrier vs allreduce": _pair(_api("barrier", algorithm=N), _api("allreduce", (4, F32), algorithm=N),
                                         "barrier", "allreduce"),
    "native reduce ops": _pair(_api("reduce", (4, F32), 0, algorithm=N), _api("reduce", (4, F32), 0, "max", algorithm=N),
                               "sum", "max"),
    "native reduce_scatter vs allreduce": _pair(_api("reduce_scatter", (8, F32), algorithm=N),
                                                _api("allreduce", (8, F32), algorithm=N), "reduce_scatter", "allreduce"),
    # raw library calls on the communicator (the C API a program would make)
    "library reduce roots": _pair(_lib("reduce", 4, 0), _lib("reduce", 4, 1), "root 0", "root 1"),
    "library non-root reduce vs root scatter": _pair(_lib("scatter", 4, 0), _lib("reduce", 4, 0), "scatter", "reduce"),
    "library reduce vs allreduce": _pair(_lib("reduce", 4, 0), _lib("allreduce", 4), "reduce", "allreduce"),
    "library scatter roots": _pair(_lib("scatter", 4, 0), _lib("scatter", 4, 1), "root 0", "root 1"),
    # the package's algorithms
    "ring count": _pair(_api("allreduce", (4, F32), algorithm="ring"), _api("allreduce", (8, F32), algorithm="ring"),
                        "4", "8"),
    "ring dtype": _pair(_api("allreduce", (4, F32), algorithm="ring"), _api("allreduce", (4, np.int32), algorithm="ring"),
                        "fp32", "int32"),
    "ring op": _pair(_api("allreduce", (4, F32), algorithm="ring"), _api("allreduce", (4, F32), "max", algorithm="ring"),
                     "sum", "max"),
    "ring broadcast roots": _pair(_api("broadcast", (4, F32), 0, algorithm="ring"),
                                  _api("broadcast", (4, F32), 1, algorithm="ring"), "root 0", "root 1"),
    "ring allreduce vs broadcast": _pair(_api("allreduce", (4, F32), algorithm="ring"),
                                         _api("broadcast", (4, F32), 0, algorithm="ring"), "allreduce", "broadcast"),
    "ring alltoall blocks": _pair(_api("alltoall", (4, F32), algorithm="ring"), _api("alltoall", (6, F32), algorithm="ring"),
                                  "count 2", "count 3"),
    "ring vs mesh": _pair(_api("allreduce", (4, F32), algorithm="ring"), _api("allreduce", (4, F32), algorithm="mesh"),
                          "ring", "mesh"),
    "tree reduce roots": _pair(_api("reduce", (4, F32), 0, algorithm="tree"), _api("reduce", (4, F32), 1, algorithm="tree"),
                               "root 0", "root 1"),
    # a library collective against a package algorithm
    "native vs ring allreduce": _pair(_api("allreduce", (4, F32), algorithm=N),
                                      _api("allreduce", (4, F32), algorithm="ring"), "native", "ring"),
    "native vs tree broadcast": _pair(_api("broadcast", (4, F32), 0, algorithm=N),
                                      _api("broadcast", (4, F32), 0, algorithm="tree"), "native", "tree"),
    "native reduce vs mesh allreduce": _pair(_api("reduce", (4, F32), 0, algorithm=N),
                                             _api("allreduce", (4, F32), algorithm="mesh"), "reduce", "allreduce"),
}


def body(rank: int, n: int, root_info: bytes, cases: List[str]) -> List[Tuple[str, str, str, float]]:
    """(case, error class, message, seconds) of every case, each on its own sub-communicator."""
    import hcomm_cffi as hcomm
    w = hcomm.init(rank=rank, world_size=n, root_info=root_info)
    out = []
    try:
        comms = [hcomm.Comm(f"m{i}") for i in range(len(cases))]     # made while every rank agrees
        for case, comm in zip(cases, comms):
            mine = CASES[case][rank]
            t0 = time.monotonic()
            try:
                mine(comm, rank)
                got = ("no error", "")
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


@pytest.mark.parametrize("cases", [sorted(CASES)[i::3] for i in range(3)], ids=["part1", "part2", "part3"])
def test_every_mismatch_fails_on_every_rank_within_seconds_naming_both_calls(cases: List[str]) -> None:
    results = run_ranks(2, body, cases, timeout=60 + 25 * len(cases),
                        env={"HCCL_EXEC_TIMEOUT": "20", "HCOMM_SIM_CHECK": "warn"})
    problems = []
    for rank, rows in enumerate(results):
        for case, cls, msg, took in rows:
            words = CASES[case][2]
            # raw library calls raise the binding's typed error (the Comm API's class lives a layer above it)
            expected = "AclRtInternalError" if case.startswith("library") else "CollectiveMismatchError"
            if (cls != expected or took > DETECT_S or not all(w in msg for w in words)
                    or (expected != "CollectiveMismatchError" and COLLECTIVE_MISMATCH not in msg)):
                problems.append(f"rank {rank}, {case}: {cls} after {took:.1f} s: {msg[:400]}")
    assert not problems, "\n".join(problems)


def test_the_matrix_has_the_passs_29_kinds() -> None:
    assert len(CASES) == 29
