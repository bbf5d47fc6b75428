"""Every notify-wait timeout names the peers waited for, also when the wait that expires is a local thread notify."""
from __future__ import annotations

import time

from hcomm_cffi.enums import Engine
from hcomm_cffi.errors import HcclError
from multiproc import run_ranks
from simhelp import open_rank


def _join_behind_a_peer_wait(rank: int, n: int, root: bytes) -> str:
    """Rank 0: the stream thread joins a secondary thread (1 s) that waits on rank 1 (10 s); rank 1 never records."""
    env = open_rank(rank, n, root)
    b = env.b
    chans = env.channels([1 - rank])
    try:
        if rank == 1:
            time.sleep(2.5)   # alive, but never at this operation
            return ""
        main = b.thread_acquire_with_stream(env.comm, Engine.CPU_TS, env.stream, 1)
        (side,) = b.thread_acquire(env.comm, Engine.CPU_TS, 1, 1)
        b.batch_mode_start(b"j")
        b.thread_notify_record(main, side, 0)            # fork
        b.thread_notify_wait(side, 0, 0)
        b.channel_notify_wait(side, chans[1], 0, 10)     # the peer never records it
        b.thread_notify_record(side, main, 0)            # the join the stream thread waits for
        b.thread_notify_wait(main, 0, 1)                 # expires first
        b.batch_mode_end(b"j")
        try:
            b.synchronize_stream(env.stream)
        except HcclError as exc:
            return str(exc)
        return "no error"
    finally:
        env.close()


def test_a_thread_notify_timeout_names_the_peer_its_threads_wait_on() -> None:
    message = run_ranks(2, _join_behind_a_peer_wait, timeout=60)[0]
    assert "notify wait timed out after 1 s: rank 0, thread 0x" in message, message
    assert "thread notify 0, step 1 (no local thread recorded it; this rank's threads wait on peers: thread 0x" in message
    assert "channel notify 0 from peer rank 1, step 1 (for 1." in message, message


def test_a_channel_timeout_says_the_peer_may_itself_be_waiting() -> None:
    from hcomm_cffi.sim.runtime import _channel_wait  # the text every channel-wait timeout starts with

    class Ch:
        comm = type("C", (), {"rank": 2})
        peer = 0

    class Q:
        executed, blocked_since = 8, 10.0

    th = type("T", (), {"label": "thread 0x1 (stream)"})
    assert _channel_wait(Q, (0, th, Ch, 5), 12.0) == "rank 2, thread 0x1 (stream), channel notify 5 from peer rank 0, step 8"
    assert _channel_wait(Q, (0, th, Ch, 5), 12.0, with_rank=False).endswith("step 8 (for 2.0 s)")
