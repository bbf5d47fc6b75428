"""A rank killed with SIGKILL mid-operation: the others fail with a clear error, /dev/shm stays clean."""
from __future__ import annotations

import os
import signal
import time

import numpy as np

from hcomm_cffi.enums import DataType, ReduceOp
from hcomm_cffi.errors import HcclError
from multiproc import run_ranks
from simhelp import open_rank

VICTIM = 2


def _allreduce_until_failure(rank: int, n: int, root: bytes) -> str:
    env = open_rank(rank, n, root)
    b = env.b
    x = np.ones(1 << 16, np.float32)
    y = np.zeros_like(x)
    px, py = env.ptr(x), env.ptr(y)
    start = time.monotonic()
    try:
        for i in range(100_000):
            b.all_reduce(px, py, x.size, DataType.FP32, ReduceOp.SUM, env.comm, env.stream)
            if rank == VICTIM and i == 20:
                os.kill(os.getpid(), signal.SIGKILL)   # dies with the operation in flight
            b.synchronize_stream(env.stream)
        return "finished without noticing"
    except HcclError as exc:
        return f"{time.monotonic() - start:.1f}s {exc}"
    finally:
        env.close()


def test_killed_rank_is_detected_and_nothing_is_left_behind() -> None:
    outcomes = run_ranks(4, _allreduce_until_failure, timeout=60, expect_failure=True)
    ok, victim = outcomes[VICTIM]
    assert not ok and "exited with code -9" in victim
    for rank, (ok, message) in enumerate(outcomes):
        if rank == VICTIM:
            continue
        assert ok, message
        assert "ACL_ERROR_RT_SUSPECT_REMOTE_ERROR" in message, message
        assert f"peer rank {VICTIM}" in message and "is gone" in message, message
    # the autouse fixture asserts that no hcomm_* segment is left in /dev/shm
