"""A run of channel records rings every peer first and wakes the sleeping ones after (sim/runtime.py _wake_peers).

Woken at once, a peer that shares this rank's core takes the core before this rank's next record (the scheduler
favours a waking sleeper), so each record of a handshake cost a context switch.  The records' words and doorbell
rings are written at once; only the futex wakes wait for the end of the run of records.
"""
from __future__ import annotations

from typing import Any, List

from multiproc import run_ranks


def body(rank: int, n: int, root_info: bytes) -> List[str]:
    import time

    import numpy as np

    from hcomm_cffi._ffi import ffi
    from hcomm_cffi.enums import DataType, MemcpyKind, ReduceOp
    from hcomm_cffi.sim import comm as sim_comm
    from simhelp import open_rank

    env = open_rank(rank, n, root_info)
    b = env.b
    x = np.full(2, rank + 1.0, np.float32)
    send, recv = b.malloc(8), b.malloc(8)
    b.memcpy(send, 8, ffi.from_buffer(x), 8, MemcpyKind.HOST_TO_DEVICE)
    events: List[str] = []
    real_ring, real_wake = sim_comm.SimChannel.ring_peer, sim_comm.futex_wake

    def ring(self: Any) -> None:
        events.append("ring")
        real_ring(self)

    def wake(addr: int) -> None:
        events.append("wake")
        real_wake(addr)

    try:
        fp32, add = int(DataType.FP32), int(ReduceOp.SUM)
        b.all_reduce(send, recv, 2, fp32, add, env.comm, env.stream)     # connects the channels
        b.synchronize_stream(env.stream)
        b.barrier(env.comm, env.stream)
        b.synchronize_stream(env.stream)
        if rank == 0:
            sim_comm.SimChannel.ring_peer = ring          # type: ignore[method-assign]
            sim_comm.futex_wake = wake
            time.sleep(0.5)         # the peers reach their waits and sleep on their doorbells meanwhile
        b.all_reduce(send, recv, 2, fp32, add, env.comm, env.stream)
        b.synchronize_stream(env.stream)
        out = np.empty(2, np.float32)
        b.memcpy(ffi.from_buffer(out), 8, recv, 8, MemcpyKind.DEVICE_TO_HOST)
        assert out.tolist() == [6.0, 6.0], out
        return events
    finally:
        sim_comm.SimChannel.ring_peer = real_ring         # type: ignore[method-assign]
        sim_comm.futex_wake = real_wake
        b.free(send)
        b.free(recv)
        env.close()


def test_a_run_of_records_wakes_sleeping_peers_after_its_last_ring() -> None:
    events = run_ranks(3, body, timeout=90)[0]
    # rank 0's handshake: a record to each of the two sleeping peers, then their wakes
    assert events[:2] == ["ring", "ring"] and "wake" in events, events


def stale_wake_body(rank: int, n: int, root_info: bytes) -> bool:
    import numpy as np

    from hcomm_cffi._ffi import ffi
    from hcomm_cffi.enums import DataType, MemcpyKind, ReduceOp
    from hcomm_cffi.sim import comm as sim_comm
    from hcomm_cffi.sim.runtime import EXECUTOR
    from simhelp import open_rank

    env = open_rank(rank, n, root_info)
    b = env.b
    send, recv = b.malloc(8), b.malloc(8)
    b.memcpy(send, 8, ffi.from_buffer(np.ones(2, np.float32)), 8, MemcpyKind.HOST_TO_DEVICE)
    rung: List[Any] = []
    real_ring = sim_comm.SimChannel.ring_peer

    def ring(self: Any) -> None:
        rung.append(self)
        real_ring(self)

    sim_comm.SimChannel.ring_peer = ring                  # type: ignore[method-assign]
    try:
        b.all_reduce(send, recv, 2, int(DataType.FP32), int(ReduceOp.SUM), env.comm, env.stream)
        b.synchronize_stream(env.stream)
    finally:
        sim_comm.SimChannel.ring_peer = real_ring         # type: ignore[method-assign]
    b.free(send)
    b.free(recv)
    assert rung, "the allreduce recorded to no peer"
    # what an interrupt landing inside _wake_peers leaves behind: a pending wake on this communicator's channel
    EXECUTOR.unwoken.append(rung[0])
    env.close()                                           # unmaps the peer's doorbell
    forgotten = rung[0] not in EXECUTOR.unwoken
    EXECUTOR._wake_peers()                                # a later run of any queue: must not touch that memory
    return forgotten


def test_destroying_a_communicator_forgets_the_wakes_an_interrupted_run_left_pending() -> None:
    """A wake left pending (an interrupt between the swap and the wakes) is dropped when its communicator is
    destroyed: woken later, it read the peer's doorbell in unmapped memory (a SIGSEGV in tests/test_interrupted_calls)."""
    assert run_ranks(2, stale_wake_body, timeout=90) == [True, True]
