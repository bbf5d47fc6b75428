"""A ring allreduce written by hand with only the raw binding calls, checked against NumPy.

Per rank: a main thread (the stream), thread A sending to the right neighbour and thread B
receiving from the left one; two channels; the HCCL buffers.  Each of the 2(N-1) steps uses the
two-flag handshake: B records ACK ("my landing slot is free"), A waits ACK, writes into the right
neighbour's buffer and records DATA; B waits DATA, reduces (or copies) out of its buffer and tells
A the block is ready to forward.  A acknowledges each "ready" it takes, and B waits for that
acknowledgement before its next "ready": otherwise B, running ahead, could record into a notify A
has not consumed yet (a lost signal, which the strict checker reports).
"""
from __future__ import annotations

import numpy as np
import pytest

from hcomm_cffi.enums import DataType, Engine, ReduceOp
from multiproc import run_ranks
from simhelp import open_rank

ACK, DATA = 0, 1
FROM_B, FORK_A = 0, 1      # notifies of thread A
FORK_B, FROM_A = 0, 1      # notifies of thread B
JOIN_A, JOIN_B = 0, 1      # notifies of the main thread


def _ring_allreduce(rank: int, n: int, root: bytes, count: int, repeats: int) -> np.ndarray:
    env = open_rank(rank, n, root)
    b = env.b
    right, left = (rank + 1) % n, (rank - 1) % n
    peers = sorted({left, right})
    ch = env.channels(peers, notify_num=2)
    main = b.thread_acquire_with_stream(env.comm, Engine.CPU_TS, env.stream, 2)
    thread_a, thread_b = b.thread_acquire(env.comm, Engine.CPU_TS, 2, 2)
    right_buf, _ = b.channel_get_hccl_buffer(env.comm, ch[right])
    slot = env.buf                       # my landing slot (offset 0 of my HCCL buffer)
    blk = count // n
    x = (np.arange(count, dtype=np.float32) % 97) * (rank + 1)
    y = np.zeros(count, np.float32)
    px, py = env.ptr(x), env.ptr(y)
    nbytes = blk * 4
    for _ in range(repeats):
        b.batch_mode_start(b"ring")
        b.local_copy(main, py, px, x.nbytes)
        b.thread_notify_record(main, thread_a, FORK_A)
        b.thread_notify_record(main, thread_b, FORK_B)
        b.thread_notify_wait(thread_a, FORK_A, 30)
        b.thread_notify_wait(thread_b, FORK_B, 30)
        for step in range(2 * (n - 1)):
            if step < n - 1:
                send_blk, recv_blk = (rank - step) % n, (rank - step - 1) % n
            else:
                s = step - (n - 1)
                send_blk, recv_blk = (rank + 1 - s) % n, (rank - s) % n
            # thread B: free my slot, take the block from the left neighbour
            b.channel_notify_record(thread_b, ch[left], ACK)
            b.channel_notify_wait(thread_b, ch[left], DATA, 30)
            if step < n - 1:
                b.local_reduce(thread_b, py + recv_blk * nbytes, slot, blk, DataType.FP32, ReduceOp.SUM)
            else:
                b.local_copy(thread_b, py + recv_blk * nbytes, slot, nbytes)
            if step < 2 * (n - 1) - 1:
                if step > 0:
                    b.thread_notify_wait(thread_b, FROM_A, 30)   # A took my previous "ready"
                b.thread_notify_record(thread_b, thread_a, FROM_B)
            # thread A: wait for the right neighbour's free slot, forward the block
            b.channel_notify_wait(thread_a, ch[right], ACK, 30)
            if step > 0:
                b.thread_notify_wait(thread_a, FROM_B, 30)
                if step < 2 * (n - 1) - 1:
                    b.thread_notify_record(thread_a, thread_b, FROM_A)
            b.write(thread_a, ch[right], right_buf, py + send_blk * nbytes, nbytes)
            b.channel_notify_record(thread_a, ch[right], DATA)
        b.thread_notify_record(thread_a, main, JOIN_A)
        b.thread_notify_record(thread_b, main, JOIN_B)
        b.thread_notify_wait(main, JOIN_A, 30)
        b.thread_notify_wait(main, JOIN_B, 30)
        b.batch_mode_end(b"ring")
        b.synchronize_stream(env.stream)
    env.close()
    return y


@pytest.mark.parametrize("n", [4, 3])
def test_hand_written_ring_allreduce_matches_numpy(n: int) -> None:
    count = n * 25_000
    results = run_ranks(n, _ring_allreduce, count, 3, timeout=120)
    expected = sum((np.arange(count, dtype=np.float32) % 97) * (r + 1) for r in range(n))
    for rank, y in enumerate(results):
        np.testing.assert_array_equal(y, expected, err_msg=f"rank {rank}")
