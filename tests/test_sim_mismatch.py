"""Ranks that call different native collectives fail at the first handshake instead of mixing their data.

The symmetric native collectives share one handshake (a notify per piece on the parity indices),
so an allreduce on some ranks and a broadcast, an allgather, another op, count or root on another
would pair up and complete with wrong data.  With the checker on (strict or warn) every rank writes
its call's signature next to the data it hands over and compares its peers' after the wait: every
rank's stream then fails, naming both calls, well before any timeout.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Dict

import numpy as np
import pytest

from hcomm_cffi.enums import DataType, ReduceOp
from hcomm_cffi.errors import HcclError
from multiproc import run_ranks
from simhelp import RankEnv, open_rank

FP32 = int(DataType.FP32)
Call = Callable[[RankEnv, Any, Any], None]


def _allreduce(count: int, op: ReduceOp = ReduceOp.SUM) -> Call:
    return lambda env, x, y: env.b.all_reduce(x, y, count, FP32, int(op), env.comm, env.stream)


def _broadcast(count: int, root: int) -> Call:
    return lambda env, x, y: env.b.broadcast(x, count, FP32, root, env.comm, env.stream)


def _allgather(count: int) -> Call:
    return lambda env, x, y: env.b.all_gather(x, y, count, FP32, env.comm, env.stream)


def _reduce_scatter(count: int) -> Call:
    return lambda env, x, y: env.b.reduce_scatter(x, y, count, FP32, int(ReduceOp.SUM), env.comm, env.stream)


# (what ranks 0..n-2 call, what the last rank calls, what the last rank's call is described as)
PAIRS: Dict[str, tuple] = {
    "allreduce vs broadcast": (_allreduce(8), _broadcast(8, 0), "broadcast of 8 x fp32, root 0"),
    "sum vs max": (_allreduce(8), _allreduce(8, ReduceOp.MAX), "allreduce of 8 x fp32, op max"),
    "count": (_allreduce(8), _allreduce(16), "allreduce of 16 x fp32, op sum"),
    "allgather vs reduce_scatter": (_allgather(8), _reduce_scatter(8), "reduce_scatter of 8 x fp32, op sum"),
    "broadcast roots": (_broadcast(8, 0), _broadcast(8, 1), "broadcast of 8 x fp32, root 1"),
}


def body(rank: int, n: int, root_info: bytes, pair: str) -> Dict[str, Any]:
    mine, last, _ = PAIRS[pair]
    env = open_rank(rank, n, root_info)
    x = np.arange(64, dtype=np.float32) + rank
    y = np.zeros(64 * n, np.float32)
    xp, yp = env.ptr(x), env.ptr(y)
    for _ in range(2):                        # agreeing calls first: nothing to report
        _allreduce(8)(env, xp, yp)
        env.b.synchronize_stream(env.stream)
    t0 = time.monotonic()
    (last if rank == n - 1 else mine)(env, xp, yp)
    try:
        env.b.synchronize_stream(env.stream)
        error = "no error"
    except HcclError as exc:
        error = str(exc)
    took = time.monotonic() - t0
    try:
        env.close()
    except HcclError:                         # strict mode reports the failure again at destroy
        pass
    return {"error": error, "took": took}


@pytest.mark.parametrize("check", ["strict", "warn"])
@pytest.mark.parametrize("pair", sorted(PAIRS))
def test_mismatched_collectives_fail_on_every_rank_naming_both_calls(pair: str, check: str) -> None:
    n = 3
    results = run_ranks(n, body, pair, timeout=120, env={"HCOMM_SIM_CHECK": check, "HCCL_EXEC_TIMEOUT": "30"})
    described = PAIRS[pair][2]
    for rank, got in enumerate(results):
        assert "collective mismatch" in got["error"], (rank, got)
        assert got["took"] < 10, got             # at the first handshake, not by a timeout
    assert f"but rank {n - 1} is in {described}" in results[0]["error"], results[0]
    assert f"rank {n - 1} of communicator" in results[n - 1]["error"]
    assert f"is in {described} but rank 0 is in" in results[n - 1]["error"], results[n - 1]
