"""A blocked wait polls briefly, then sleeps; when the ranks share cores it polls much less (sim/runtime.py).

Polling is ``sched_yield`` between looks at the awaited notify word.  On a rank with a core of its own the
yield returns at once and the poll is a cheap spin; when a communicator has more ranks than the host has cores,
every yield hands the core to another rank, often one that is itself only polling, and the rank that has work
waits for it (4 ranks on 2 cores: an 8-byte allreduce took 3x longer with the long poll).
"""
from __future__ import annotations

from typing import Any, Dict

from multiproc import run_ranks


def body(rank: int, n: int, root_info: bytes, cores: int) -> Dict[str, Any]:
    import time

    import numpy as np

    from hcomm_cffi.enums import DataType, MemcpyKind, ReduceOp
    from hcomm_cffi._ffi import ffi
    from hcomm_cffi.sim import runtime
    from simhelp import open_rank

    runtime.CORES = cores                   # the host this communicator pretends to run on
    env = open_rank(rank, n, root_info)
    b = env.b
    x = np.full(4, rank + 1.0, np.float32)
    send, recv = b.malloc(16), b.malloc(16)
    b.memcpy(send, 16, ffi.from_buffer(x), 16, MemcpyKind.HOST_TO_DEVICE)
    counts = {"yields": 0, "polls": 0}
    real_yield, real_poll = runtime.sched_yield, runtime.EXECUTOR._poll_heads

    def counted_yield() -> int:
        counts["yields"] += 1
        return real_yield()

    def counted_poll(deadline: Any = None) -> bool:
        counts["polls"] += 1
        return real_poll(deadline)

    try:
        b.all_reduce(send, recv, 4, int(DataType.FP32), int(ReduceOp.SUM), env.comm, env.stream)   # connects
        b.synchronize_stream(env.stream)
        runtime.sched_yield = counted_yield
        runtime.EXECUTOR._poll_heads = counted_poll      # type: ignore[method-assign]
        if rank == 1:
            time.sleep(0.3)                              # rank 0 waits for this rank's record all along
        b.all_reduce(send, recv, 4, int(DataType.FP32), int(ReduceOp.SUM), env.comm, env.stream)
        b.synchronize_stream(env.stream)
        out = np.empty(4, np.float32)
        b.memcpy(ffi.from_buffer(out), 16, recv, 16, MemcpyKind.DEVICE_TO_HOST)
        return {"sum": out.tolist(), **counts}
    finally:
        runtime.sched_yield = real_yield
        del runtime.EXECUTOR._poll_heads
        b.free(send)
        b.free(recv)
        env.close()


def test_ranks_sharing_cores_poll_briefly_before_sleeping() -> None:
    shared = run_ranks(2, body, 1, timeout=60)[0]        # 2 ranks on 1 core
    own = run_ranks(2, body, 64, timeout=60)[0]          # a core each
    assert shared["sum"] == own["sum"] == [3.0] * 4
    assert shared["polls"] >= 3 and own["polls"] >= 3, (shared, own)   # 0.3 s blocked: polls between sleeps
    # sharing: at most 20 yields before each sleep; a core of its own: the full 200 (the word is not set meanwhile)
    assert shared["yields"] <= 20 * shared["polls"], shared
    assert own["yields"] >= 200 * (own["polls"] - 1), own
