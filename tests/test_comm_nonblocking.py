"""Nonblocking collectives (i* / async_op=True) and stream-ordered collectives (stream=) of the Comm API."""
from __future__ import annotations

import os
import signal
import time
from typing import Any, List

import numpy as np
import pytest

from multiproc import run_ranks


def _ops_body(rank: int, n: int, root: bytes) -> List[Any]:
    """Every nonblocking collective started back to back, then waited in reverse order, against references."""
    import hcomm_cffi as hcomm
    w = hcomm.init(rank=rank, world_size=n, root_info=root)
    try:
        base = np.arange(n * 4, dtype=np.float32) + 100 * rank
        ar = base.copy()
        bc = base.copy()
        rs_out = np.empty(4, np.float32)
        a2a_out = np.empty_like(base)
        reqs = [w.iallreduce(ar), w.ibroadcast(bc, root=1), w.iallgather(base[:3]),
                w.ireduce_scatter(base, out=rs_out), w.ireduce(base, root=2, out=np.empty_like(base)),
                w.ialltoall(base, out=a2a_out), w.ibarrier(), w.iallreduce(np.array([rank + 1]), "max")]
        assert not any(r.done for r in reqs)
        results = [r.wait(30) for r in reversed(reqs)][::-1]
        every = [np.arange(n * 4, dtype=np.float32) + 100 * r for r in range(n)]
        total = sum(every)
        assert results[0] is ar and np.array_equal(ar, total)
        assert np.array_equal(bc, every[1])
        assert np.array_equal(results[2], np.stack([e[:3] for e in every]))
        assert results[3] is rs_out and np.array_equal(rs_out, total[rank * 4:(rank + 1) * 4])
        assert (results[4] is None) == (rank != 2)
        if rank == 2:
            assert np.array_equal(results[4], total)
        assert np.array_equal(a2a_out, np.concatenate([e[rank * 4:(rank + 1) * 4] for e in every]))
        assert results[6] is None and int(results[7][0]) == n
        assert all(r.done and r.test() for r in reqs)
        return "ok"
    finally:
        hcomm.finalize()


def test_every_nonblocking_collective_matches_a_local_reference() -> None:
    assert run_ranks(3, _ops_body, timeout=60) == ["ok"] * 3


def _no_deadlock_body(rank: int, n: int, root: bytes) -> str:
    """A pending collective, then point-to-point, a sub-communicator and a blocking collective, then wait."""
    import hcomm_cffi as hcomm
    w = hcomm.init(rank=rank, world_size=n, root_info=root)
    try:
        big = np.full(1 << 18, rank + 1, np.float32)      # 1 MiB: several pieces through the HCCL buffer
        req = w.iallreduce(big)
        right, left = (rank + 1) % n, (rank - 1) % n
        got = np.empty(1 << 16, np.int32)                  # rendezvous size: needs the peer's receive
        sreq = w.isend(np.full(1 << 16, rank, np.int32), right)
        w.recv(got, left, timeout=30)
        sreq.wait(30)
        assert int(got[0]) == left
        pair = hcomm.Comm("pair", ranks=[0, 1])
        if pair:
            assert int(pair.allreduce(np.array([1]))[0]) == 2
        assert int(w.allreduce(np.array([rank]))[0]) == sum(range(n))
        req.wait(30)
        assert np.all(big == sum(range(1, n + 1)))
        return "ok"
    finally:
        hcomm.finalize()


def test_pending_collective_then_other_calls_cannot_deadlock() -> None:
    assert run_ranks(3, _no_deadlock_body, timeout=60) == ["ok"] * 3


def _overlap_body(rank: int, n: int, root: bytes) -> List[float]:
    """Rank 0 starts the collective while rank 1 is still asleep: the call returns at once, wait() later."""
    import hcomm_cffi as hcomm
    w = hcomm.init(rank=rank, world_size=n, root_info=root)
    try:
        w.barrier()
        if rank == 1:
            time.sleep(1.5)
        t0 = time.monotonic()
        x = np.full(1 << 16, rank + 1.0, np.float32)
        req = w.iallreduce(x)
        started = time.monotonic() - t0
        pending_after_start = not req.test()
        with pytest.raises(hcomm.CommTimeoutError, match=r"rank 0 of communicator 'world': allreduce .* did not "
                                                         r"complete within 0.2 s") if rank == 0 else _null():
            req.wait(0.2)
        req.wait(30)
        assert np.all(x == 3.0)
        return [started, float(pending_after_start)]
    finally:
        hcomm.finalize()


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def test_nonblocking_call_returns_before_the_peer_joined_and_wait_times_out() -> None:
    res = run_ranks(2, _overlap_body, timeout=60)
    started, pending = res[0]
    assert started < 0.5 and pending == 1.0, res


def _dead_peer_body(rank: int, n: int, root: bytes) -> str:
    import hcomm_cffi as hcomm
    w = hcomm.init(rank=rank, world_size=n, root_info=root)
    try:
        w.barrier()
        if rank == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        req = w.iallreduce(np.ones(1 << 16, np.float32))
        with pytest.raises(hcomm.CommError) as info:
            req.wait(60)
        return str(info.value)
    finally:
        hcomm.finalize()


def test_error_from_wait_names_rank_and_operation() -> None:
    outcomes = run_ranks(2, _dead_peer_body, timeout=60, expect_failure=True)
    ok, message = outcomes[0]
    assert ok, message
    assert message.startswith("rank 0 of communicator 'world': allreduce (algorithm="), message
    assert "rank 1" in message and "gone" in message, message


def _stream_body(rank: int, n: int, root: bytes) -> List[Any]:
    """Stream-ordered: after a copy queued on the same user stream, no host synchronisation, total order kept."""
    import hcomm_cffi as hcomm
    from hcomm_cffi.binding import get_binding
    from hcomm_cffi.enums import MemcpyKind
    from hcomm_cffi._ffi import ffi
    w = hcomm.init(rank=rank, world_size=n, root_info=root)
    b = get_binding()
    s1, s2 = b.create_stream(), b.create_stream()
    try:
        w.barrier()
        if rank == 1:
            time.sleep(1.0)
        x = np.zeros(1024, np.float32)
        src = np.full(1024, rank + 1.0, np.float32)
        t0 = time.monotonic()
        # the copy is queued on s1; the allreduce must read x after it
        b.memcpy_async(ffi.from_buffer(x), x.nbytes, ffi.from_buffer(src), src.nbytes, MemcpyKind.HOST_TO_HOST, s1)
        r1 = w.allreduce(x, stream=s1)
        returned = time.monotonic() - t0
        y = np.full(8, float(rank), np.float32)
        r2 = w.iallreduce(y)                  # own stream, ordered after the s1 collective
        z = np.full(8, 1.0, np.float32)
        r3 = w.allreduce(z, stream=s2)        # a second user stream
        b.synchronize_stream(s2)              # drains s2, which waited for everything before it
        assert r3.test() and np.all(z == n)
        assert r1.wait(30) is x and np.all(x == sum(range(1, n + 1)))
        r2.wait(30)
        assert np.all(y == sum(range(n)))
        # the bound on user streams
        s3 = b.create_stream()
        try:
            with pytest.raises(hcomm.CommError, match=r"already ran collectives on 2 user streams \(HCOMM_MAX_STREAMS=2\)"):
                w.allreduce(z, stream=s3)
        finally:
            b.destroy_stream(s3)
        with pytest.raises(TypeError, match=r"stream='x'; expected an aclrtStream handle"):
            w.allreduce(z, stream="x")
        return [returned]
    finally:
        hcomm.finalize()
        b.destroy_stream(s1)
        b.destroy_stream(s2)


def test_stream_ordered_collectives() -> None:
    res = run_ranks(2, _stream_body, timeout=60, env={"HCOMM_MAX_STREAMS": "2"})
    assert res[0][0] < 0.5, res


def _mismatch_body(rank: int, n: int, root: bytes, algo: str) -> List[str]:
    """iallreduce of different counts: the signature travelling ahead of the data fails the stream, raised at wait()
    (a package algorithm's first call: at its start, by the agreement before its channels)."""
    import hcomm_cffi as hcomm
    w = hcomm.init(rank=rank, world_size=n, root_info=root)
    try:
        if algo == "ring":
            # a package algorithm's first call agrees with every rank before its channels are set up (channel
            # setup needs both ends): the mismatch is raised by the start itself, and the communicator is failed
            with pytest.raises(hcomm.CollectiveMismatchError) as info:
                w.iallreduce(np.ones(4 + 2 * rank, np.float32), algorithm=algo)
            with pytest.raises(hcomm.CommError, match="unusable after an earlier failure"):
                w.iallreduce(np.ones(3, np.float32))
            return str(info.value)
        first = w.iallreduce(np.ones(4 + 2 * rank, np.float32), algorithm=algo)
        second = w.iallreduce(np.ones(3, np.float32))      # queued behind it: not valid either
        with pytest.raises(hcomm.CollectiveMismatchError) as info:
            first.wait(30)
        with pytest.raises(hcomm.CollectiveMismatchError):
            first.wait(30)                                 # raised again, never a success on a second wait
        with pytest.raises(hcomm.CommError, match="in flight when the communicator failed"):
            second.wait(30)
        return str(info.value)
    finally:
        hcomm.finalize()


@pytest.mark.parametrize("algo", ["ring", "native"])
def test_nonblocking_mismatch_is_raised_from_wait(algo: str) -> None:
    for rank, msg in enumerate(run_ranks(2, _mismatch_body, algo, timeout=60)):
        assert msg.startswith(f"rank {rank} of communicator 'world': "), msg
        if algo == "ring":    # the package's handshake
            assert "ranks disagree on the count of allreduce" in msg, msg
        else:                 # the emulator's in-band check of its library collective
            assert "collective mismatch" in msg and "allreduce of 4 x fp32" in msg and "6 x fp32" in msg, msg
