"""Waits that nothing can satisfy any more are named, not waited out.

A thread-notify wait that no queued task records, while no kernel runs and every queue is blocked, fails the
synchronisation within about a second naming the notify (instead of at its timeout); a communicator destroyed
while one of its threads still waits names that thread and the wait (the checker; strict mode fails the call).
"""
from __future__ import annotations

import time
from typing import Iterator

import pytest

from hcomm_cffi.enums import Engine
from hcomm_cffi.errors import HcclError
from simhelp import RankEnv, open_single_rank


@pytest.fixture
def rank() -> Iterator[RankEnv]:
    env = open_single_rank()
    yield env
    try:
        env.close()
    except HcclError:       # a test that destroyed it already
        pass


def test_a_wait_nothing_records_fails_the_sync_naming_it(rank: RankEnv) -> None:
    b = rank.b
    host = b.thread_acquire_with_stream(rank.comm, Engine.CPU_TS, rank.stream, 1)
    b.batch_mode_start("t")
    b.thread_notify_wait(host, 0, 30)          # its timeout: 30 s
    b.batch_mode_end("t")
    started = time.monotonic()
    with pytest.raises(HcclError) as failed:
        b.synchronize_stream(rank.stream)
    assert time.monotonic() - started < 10
    message = str(failed.value)
    assert "waits on thread notify 0, which nothing can record any more" in message, message
    assert f"a missing HcommThreadNotifyRecordOnThread(..., dstThread=0x{host:x}, dstNotifyIdx=0)" in message


def test_a_recorded_wait_is_not_reported(rank: RankEnv) -> None:
    b = rank.b
    host = b.thread_acquire_with_stream(rank.comm, Engine.CPU_TS, rank.stream, 1)
    (worker,) = b.thread_acquire(rank.comm, Engine.AICPU_TS, 1, 1)
    b.batch_mode_start("t")
    b.thread_notify_record(host, worker, 0)
    b.thread_notify_wait(worker, 0, 30)
    b.thread_notify_record(worker, host, 0)
    b.thread_notify_wait(host, 0, 30)
    b.batch_mode_end("t")
    b.synchronize_stream(rank.stream)                     # strict mode: any finding would have failed it


def test_destroy_names_a_thread_still_waiting(rank: RankEnv) -> None:
    b = rank.b
    b.thread_acquire_with_stream(rank.comm, Engine.CPU_TS, rank.stream, 1)
    (worker,) = b.thread_acquire(rank.comm, Engine.AICPU_TS, 1, 2)
    b.batch_mode_start("t")
    b.thread_notify_wait(worker, 1, 30)        # left out of any join: the host never waits for it
    b.batch_mode_end("t")
    b.synchronize_stream(rank.stream)                     # the stream has nothing: it returns at once
    with pytest.raises(HcclError) as failed:              # HCOMM_SIM_CHECK=strict (the tests' default)
        b.comm_destroy(rank.comm)
    message = str(failed.value)
    assert f"destroyed while thread 0x{worker:x} still had 1 task(s) (step 0 waits on thread notify 1, which " \
           "nothing recorded)" in message, message
