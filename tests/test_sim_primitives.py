"""Every data-plane primitive of the emulator moves real bytes between real processes."""
from __future__ import annotations

import numpy as np
import pytest

from hcomm_cffi.enums import DataType, Engine, ReduceOp
from multiproc import run_ranks
from simhelp import open_rank

ACK, DATA = 0, 1        # phases 1 and 3
READY2, DONE2 = 2, 3    # phase 2 (reusing 0/1 right away would lose a signal: the checker catches it)


def _ring_exchange(rank: int, n: int, root: bytes) -> dict:
    """Write to the right neighbour's buffer, read from the left one's, write-reduce, read-reduce."""
    env = open_rank(rank, n, root)
    b = env.b
    right, left = (rank + 1) % n, (rank - 1) % n
    peers = sorted({right, left})
    ch = env.channels(peers, notify_num=4)
    th = b.thread_acquire_with_stream(env.comm, Engine.CPU_TS, env.stream, 1)
    peer_buf = {p: b.channel_get_hccl_buffer(env.comm, ch[p])[0] for p in peers}
    mine = np.arange(64, dtype=np.int32) + 1000 * rank
    got_write = np.zeros(64, np.int32)
    got_read = np.zeros(64, np.int32)
    # 1) push my data into the right neighbour's buffer at offset 0, it copies it out
    b.batch_mode_start(b"w")
    b.channel_notify_record(th, ch[left], ACK)          # my landing zone is free
    b.channel_notify_wait(th, ch[right], ACK, 10)
    b.write(th, ch[right], peer_buf[right], env.ptr(mine), mine.nbytes)
    b.channel_notify_record(th, ch[right], DATA)
    b.channel_notify_wait(th, ch[left], DATA, 10)
    b.local_copy(th, env.ptr(got_write), env.buf, mine.nbytes)
    b.batch_mode_end(b"w")
    b.synchronize_stream(env.stream)
    # 2) stage my data in my own buffer at offset 4096; the right neighbour reads it from me
    b.batch_mode_start(b"r")
    b.local_copy(th, env.buf + 4096, env.ptr(mine), mine.nbytes)
    b.channel_notify_record(th, ch[right], READY2)       # ready to be read
    b.channel_notify_wait(th, ch[left], READY2, 10)
    b.read(th, ch[left], env.ptr(got_read), peer_buf[left] + 4096, mine.nbytes)
    b.channel_notify_record(th, ch[left], DONE2)         # done reading your buffer
    b.channel_notify_wait(th, ch[right], DONE2, 10)
    b.batch_mode_end(b"r")
    b.synchronize_stream(env.stream)
    # 3) write-reduce into the right neighbour's accumulator, read-reduce the left neighbour's
    acc = np.ones(64, np.float32) * (rank + 1)
    b.batch_mode_start(b"wr")
    b.local_copy(th, env.buf + 8192, env.ptr(acc), acc.nbytes)     # accumulator = rank+1
    b.channel_notify_record(th, ch[left], ACK)
    b.channel_notify_wait(th, ch[right], ACK, 10)
    b.write_reduce(th, ch[right], peer_buf[right] + 8192, env.ptr(acc), 64, DataType.FP32, ReduceOp.SUM)
    b.channel_notify_record(th, ch[right], DATA)
    b.channel_notify_wait(th, ch[left], DATA, 10)
    out_wr = np.zeros(64, np.float32)
    b.local_copy(th, env.ptr(out_wr), env.buf + 8192, acc.nbytes)
    rr = np.full(64, 100.0, np.float32)
    # the left neighbour's accumulator is final only once ITS left neighbour's write-reduce landed: it says so
    b.channel_notify_record(th, ch[right], READY2)
    b.channel_notify_wait(th, ch[left], READY2, 10)
    b.read_reduce(th, ch[left], env.ptr(rr), peer_buf[left] + 8192, 64, DataType.FP32, ReduceOp.MAX)
    b.channel_notify_record(th, ch[left], ACK)
    b.channel_notify_wait(th, ch[right], ACK, 10)
    b.batch_mode_end(b"wr")
    b.synchronize_stream(env.stream)
    env.close()
    return {"write": got_write, "read": got_read, "write_reduce": out_wr, "read_reduce": rr}


@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_write_read_and_remote_reduce_between_processes(n: int) -> None:
    results = run_ranks(n, _ring_exchange, timeout=90)
    for rank, res in enumerate(results):
        left = (rank - 1) % n
        right = (rank + 1) % n
        assert np.array_equal(res["write"], np.arange(64, dtype=np.int32) + 1000 * left)
        assert np.array_equal(res["read"], np.arange(64, dtype=np.int32) + 1000 * left)
        # my accumulator held rank+1 and the left neighbour added its left+1
        np.testing.assert_array_equal(res["write_reduce"], np.full(64, rank + 1 + left + 1, np.float32))
        # read-reduce: max(100, left's accumulator) — left's accumulator is left+1 plus ITS left
        left_acc = left + 1 + ((left - 1) % n) + 1
        np.testing.assert_array_equal(res["read_reduce"], np.full(64, max(100.0, left_acc), np.float32))
        assert right != rank


def _local_ops(rank: int, n: int, root: bytes) -> dict:
    env = open_rank(rank, n, root)
    b = env.b
    main = b.thread_acquire_with_stream(env.comm, Engine.CPU_TS, env.stream, 2)
    workers = b.thread_acquire(env.comm, Engine.CPU_TS, 2, 1)
    rng = np.random.default_rng(rank)
    out = {}
    cases = {
        "int8": (np.int8, DataType.INT8), "int16": (np.int16, DataType.INT16),
        "int32": (np.int32, DataType.INT32), "fp16": (np.float16, DataType.FP16),
        "fp32": (np.float32, DataType.FP32),
    }
    for name, (np_t, dt) in cases.items():
        for op in (ReduceOp.SUM, ReduceOp.MAX, ReduceOp.MIN):
            a = (rng.integers(-50, 50, 1000)).astype(np_t)
            c = (rng.integers(-50, 50, 1000)).astype(np_t)
            dst = a.copy()
            copied = np.zeros_like(a)
            b.batch_mode_start(b"local")
            b.thread_notify_record(main, workers[0], 0)       # fork
            b.thread_notify_record(main, workers[1], 0)
            b.thread_notify_wait(workers[0], 0, 10)
            b.local_reduce(workers[0], env.ptr(dst), env.ptr(c), a.size, dt, op)
            b.thread_notify_record(workers[0], main, 0)        # join
            b.thread_notify_wait(workers[1], 0, 10)
            b.local_copy(workers[1], env.ptr(copied), env.ptr(a), a.nbytes)
            b.thread_notify_record(workers[1], main, 1)
            b.thread_notify_wait(main, 0, 10)
            b.thread_notify_wait(main, 1, 10)
            b.batch_mode_end(b"local")
            b.synchronize_stream(env.stream)
            ref = {ReduceOp.SUM: np.add, ReduceOp.MAX: np.maximum, ReduceOp.MIN: np.minimum}[op](a, c)
            out[(name, op.name)] = bool(np.array_equal(dst, ref.astype(np_t))) and bool(np.array_equal(copied, a))
    # bf16: values exactly representable, so the sum is exact
    x = np.array([1.5, -2.0, 3.25, 1024.0], np.float32)
    y = np.array([0.5, 2.0, -0.25, 6.0], np.float32)  # 1030 is not a bf16: rounds to 1032
    xb = (x.view(np.uint32) >> 16).astype(np.uint16)
    yb = (y.view(np.uint32) >> 16).astype(np.uint16)
    b.batch_mode_start(b"bf16")
    b.local_reduce(main, env.ptr(xb), env.ptr(yb), 4, DataType.BFP16, ReduceOp.SUM)
    b.batch_mode_end(b"bf16")
    b.synchronize_stream(env.stream)
    out["bf16"] = (xb.astype(np.uint32) << 16).view(np.float32).tolist()
    env.close()
    return out


def test_local_copy_reduce_and_thread_fork_join() -> None:
    (res,) = run_ranks(1, _local_ops, timeout=60)
    bf16 = res.pop("bf16")
    assert bf16 == [2.0, 0.0, 3.0, 1032.0]
    assert res and all(res.values()), [k for k, v in res.items() if not v]
