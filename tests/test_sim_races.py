"""Read-side races are found on every run: a landing slot acknowledged before it is read, read before DATA.

Each program is written with the C-named calls of a vendor sample port and run under the strict
checker 20 times; both schedules produce the right sums most of the time on the emulator, but the
hardware would corrupt them some of the time, so the checker must reject every run.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

from hcomm_cffi.enums import DataType, Engine, ReduceOp
from multiproc import run_ranks
from simhelp import error_text, open_rank

ACK, DATA = 0, 1
RUNS = 20
SLOT = 4096            # landing slot: bytes [4096, 4160) of each rank's HCCL buffer


def _exchange(rank: int, n: int, root: bytes, schedule: str, rounds: int) -> list:
    """``rounds`` rounds of: rank 0 writes 16 floats into rank 1's slot; rank 1 reduces them into its output.

    ``ack_early``: rank 1's copy out of the slot runs on a second thread with no ordering to the
    main thread's ACK record, so rank 0's next write can land while the copy still reads.
    ``reduce_early``: rank 1 reduces out of the slot before waiting for the DATA notify.
    ``good``: the correct schedule (ACK after the read, read after DATA) must stay clean.
    Returns, per round, the error text of rank 1's (and 0's) stream synchronisation.
    """
    os.environ["HCOMM_SIM_CHECK"] = "strict"
    env = open_rank(rank, n, root)
    b = env.b
    peer = 1 - rank
    ch = env.channels([peer])[peer]
    main = b.thread_acquire_with_stream(env.comm, Engine.CPU_TS, env.stream, 1)
    (worker,) = b.thread_acquire(env.comm, Engine.CPU_TS, 1, 1)
    peer_buf = b.channel_get_hccl_buffer(env.comm, ch)[0]
    src = np.arange(16, dtype=np.float32) + 1
    out = np.zeros(16, np.float32)
    results = []
    for _ in range(rounds):
        b.batch_mode_start(b"race")
        if rank == 0:
            b.channel_notify_wait(main, ch, ACK, 10)
            b.write(main, ch, peer_buf + SLOT, env.ptr(src), src.nbytes)
            b.channel_notify_record(main, ch, DATA)
        elif schedule == "ack_early":
            b.thread_notify_record(main, worker, 0)            # fork
            b.thread_notify_wait(worker, 0, 10)
            b.channel_notify_record(main, ch, ACK)              # "slot free" ...
            b.channel_notify_wait(main, ch, DATA, 10)
            b.local_reduce(worker, env.ptr(out), env.buf + SLOT, 16, DataType.FP32, ReduceOp.SUM)   # ... read on another thread
            b.thread_notify_record(worker, main, 0)             # join
            b.thread_notify_wait(main, 0, 10)
        elif schedule == "reduce_early":
            b.channel_notify_record(main, ch, ACK)
            b.local_reduce(main, env.ptr(out), env.buf + SLOT, 16, DataType.FP32, ReduceOp.SUM)     # before DATA
            b.channel_notify_wait(main, ch, DATA, 10)
        else:
            b.channel_notify_record(main, ch, ACK)
            b.channel_notify_wait(main, ch, DATA, 10)
            b.local_reduce(main, env.ptr(out), env.buf + SLOT, 16, DataType.FP32, ReduceOp.SUM)
        b.batch_mode_end(b"race")
        results.append(error_text(b.synchronize_stream, env.stream))
        if results[-1] != "no error":
            break          # the communicator is unusable after a failed operation: one finding per process
    env.close()
    return results


@pytest.mark.parametrize("schedule", ["ack_early", "reduce_early"])
def test_read_side_race_fails_every_run(schedule: str) -> None:
    # a whole 2-rank job per run (two rounds each, so the second write also meets the first round's read):
    # the finding must not depend on which rank happens to run first
    for run in range(RUNS):
        results = run_ranks(2, _exchange, schedule, 2, timeout=60)
        messages = [m for per_rank in results for m in per_rank if m != "no error"]
        assert messages, f"{schedule}, run {run}: passed silently: {results}"
        text = " | ".join(messages)
        assert "can race a" in text and "HCCL buffer bytes [4096, 4160)" in text, text
        assert "checker: rank " in text and "step " in text and "thread 0x" in text, text


def test_ordered_schedule_is_clean() -> None:
    for results in [run_ranks(2, _exchange, "good", RUNS, timeout=120) for _ in range(3)]:
        assert results == [["no error"] * RUNS] * 2, results


def _race_state(rank: int, n: int, root: bytes, mode: str) -> bool:
    """Whether a communicator made under HCOMM_SIM_CHECK=``mode`` has the race analysis (its clocks and access logs)."""
    os.environ["HCOMM_SIM_CHECK"] = mode
    env = open_rank(rank, n, root)
    sim = env.lib._sim if hasattr(env.lib, "_sim") else env.lib
    comm = next(iter(sim.state.comms.values()))
    analysed = comm.race is not None
    env.close()
    return analysed


@pytest.mark.parametrize("mode, analysed", [("off", False), ("warn", False), ("strict", True)])
def test_the_race_analysis_is_strict_modes(mode: str, analysed: bool) -> None:
    # off costs nothing; warn (the default) keeps the cheap checks and leaves the vector clocks to strict (issue 21)
    assert run_ranks(2, _race_state, mode, timeout=60) == [analysed, analysed]


def _two_streams(rank: int, n: int, root: bytes, ordered: bool) -> str:
    """Each rank: two threads on two streams write the same HCCL-buffer bytes, the second after an event recorded
    on the first stream (``ordered``: its stream waits for that event; else nothing orders the two)."""
    os.environ["HCOMM_SIM_CHECK"] = "strict"
    env = open_rank(rank, n, root)
    b = env.b
    other = b.create_stream()
    first = b.thread_acquire_with_stream(env.comm, Engine.CPU_TS, env.stream, 1)
    second = b.thread_acquire_with_stream(env.comm, Engine.CPU_TS, other, 1)
    event = b.create_event()
    try:
        b.batch_mode_start(b"first")
        b.local_copy(first, env.buf + SLOT, env.buf + 2 * SLOT, 64)
        b.batch_mode_end(b"first")
        b.record_event(event, env.stream)
        if ordered:
            b.stream_wait_event(other, event)
        b.batch_mode_start(b"second")
        b.local_copy(second, env.buf + SLOT, env.buf + 3 * SLOT, 64)
        b.batch_mode_end(b"second")
        return " | ".join(error_text(b.synchronize_stream, s) for s in (env.stream, other))
    finally:
        b.destroy_event(event)
        b.destroy_stream(other)
        env.close()


def test_an_event_orders_two_streams_for_the_race_checker() -> None:
    # a communicator orders its collectives across streams with an event (api/streams.py): the checker must
    # count record -> stream wait as happens-before, and still flag the same writes without the wait
    assert run_ranks(2, _two_streams, True, timeout=60) == ["no error | no error"] * 2
    for raced in run_ranks(2, _two_streams, False, timeout=60):
        assert "can race a" in raced and f"HCCL buffer bytes [{SLOT}, {SLOT + 64})" in raced, raced
