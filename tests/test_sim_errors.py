"""Broken schedules and bad arguments are caught: checker reports, timeouts, vendor error codes."""
from __future__ import annotations

import time
import warnings

import numpy as np
import pytest

from hcomm_cffi._ffi import ffi
from hcomm_cffi.enums import DataType, Engine, HcclResult, Protocol, ReduceOp
from hcomm_cffi.errors import HcclError
from hcomm_cffi.initializers import make_channel_descs
from hcomm_cffi.sim import CheckerWarning
from multiproc import run_ranks
from simhelp import error_text, open_rank


def _double_record(rank: int, n: int, root: bytes) -> str:
    """Rank 0 records DATA twice before rank 1 waits once: the second record is a lost signal."""
    env = open_rank(rank, n, root)
    b = env.b
    ch = env.channels([1 - rank])[1 - rank]
    th = b.thread_acquire_with_stream(env.comm, Engine.CPU_TS, env.stream, 0)
    b.batch_mode_start(b"t")
    if rank == 0:
        b.channel_notify_record(th, ch, 1)
        b.channel_notify_record(th, ch, 1)       # missing wait in between
    b.batch_mode_end(b"t")
    message = error_text(b.synchronize_stream, env.stream)
    # rank 1 still holds the absorbed record: strict destroy reports it
    return message + " | " + error_text(env.close)


def test_missing_wait_is_reported_by_the_checker() -> None:
    results = run_ranks(2, _double_record, timeout=60)
    assert "record of channel notify 1 to rank 1 was absorbed" in results[0]
    assert "checker: rank 0" in results[0] and "step 1" in results[0]


def _unconsumed_at_destroy(rank: int, n: int, root: bytes, mode: str) -> list:
    import os
    os.environ["HCOMM_SIM_CHECK"] = mode
    env = open_rank(rank, n, root)
    b = env.b
    ch = env.channels([1 - rank])[1 - rank]
    th = b.thread_acquire_with_stream(env.comm, Engine.CPU_TS, env.stream, 0)
    b.batch_mode_start(b"t")
    b.channel_notify_record(th, ch, 0)          # nobody ever waits on it
    b.batch_mode_end(b"t")
    b.synchronize_stream(env.stream)
    b.barrier(env.comm, env.stream)             # both records have landed
    b.synchronize_stream(env.stream)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            env.close()
        except HcclError as exc:   # strict: destroy releases everything, then reports
            return [str(exc)]
    return [str(w.message) for w in caught if issubclass(w.category, CheckerWarning)]


@pytest.mark.parametrize("mode", ["warn", "strict"])
def test_record_never_consumed_is_reported(mode: str) -> None:
    for rank, messages in enumerate(run_ranks(2, _unconsumed_at_destroy, mode, timeout=60)):
        assert any(f"channel notify 0 from rank {1 - rank}" in m and "never waited on" in m for m in messages), messages
        assert ("HCCL_E_INTERNAL" in messages[0]) == (mode == "strict")


def _bad_fork_join(rank: int, n: int, root: bytes) -> str:
    env = open_rank(rank, n, root)
    b = env.b
    main = b.thread_acquire_with_stream(env.comm, Engine.CPU_TS, env.stream, 1)
    (worker,) = b.thread_acquire(env.comm, Engine.CPU_TS, 1, 1)
    src = np.ones(16, np.float32)
    dst = np.zeros(16, np.float32)
    b.batch_mode_start(b"t")
    b.local_copy(main, env.ptr(dst), env.ptr(src), 64)
    b.local_copy(worker, env.ptr(dst), env.ptr(src), 64)   # no fork wait, no join record
    message = error_text(b.batch_mode_end, b"t")
    env.close()
    return message


def test_secondary_thread_without_fork_join_is_reported() -> None:
    (message,) = run_ranks(1, _bad_fork_join, timeout=60)
    assert "does not begin by waiting on a thread notify from the main thread" in message
    assert "does not end by recording a notify of the main thread" in message


def _overwrite_before_release(rank: int, n: int, root: bytes) -> str:
    env = open_rank(rank, n, root)
    b = env.b
    ch = env.channels([1 - rank])[1 - rank]
    th = b.thread_acquire_with_stream(env.comm, Engine.CPU_TS, env.stream, 0)
    peer_buf, _ = b.channel_get_hccl_buffer(env.comm, ch)
    data = np.arange(256, dtype=np.uint8)
    message = "no error"
    b.batch_mode_start(b"t")
    if rank == 0:
        b.write(th, ch, peer_buf, env.ptr(data), 256)
        b.channel_notify_record(th, ch, 1)                  # handed over ...
        b.write(th, ch, peer_buf + 128, env.ptr(data), 64)  # ... and overwritten without an ACK
    else:
        b.channel_notify_wait(th, ch, 1, 10)
    b.batch_mode_end(b"t")
    try:
        b.synchronize_stream(env.stream)
    except HcclError as exc:
        message = str(exc)
    env.close()
    return message


def test_write_into_unreleased_peer_region_is_reported() -> None:
    results = run_ranks(2, _overwrite_before_release, timeout=60)
    assert "overlaps data already handed to it" in results[0]
    assert "offset 128" in results[0]


def _wait_forever(rank: int, n: int, root: bytes, timeout_s: int) -> tuple:
    env = open_rank(rank, n, root)
    b = env.b
    peers = [p for p in range(n) if p != rank]
    chans = env.channels(peers)
    th = b.thread_acquire_with_stream(env.comm, Engine.CPU_TS, env.stream, 0)
    b.batch_mode_start(b"t")
    b.channel_notify_wait(th, chans[peers[0]], 0, timeout_s)   # nobody records it
    b.batch_mode_end(b"t")
    start = time.monotonic()
    try:
        b.synchronize_stream(env.stream)
        outcome = ("no error", 0)
    except HcclError as exc:
        outcome = (str(exc), 0)
    elapsed = time.monotonic() - start
    async_error = b.get_comm_async_error(env.comm)
    env.close()
    return outcome[0], elapsed, async_error


def test_wait_that_nobody_records_times_out_on_every_rank() -> None:
    timeout_s = 2
    results = run_ranks(3, _wait_forever, timeout_s, timeout=60)
    for rank, (message, elapsed, async_error) in enumerate(results):
        assert async_error == HcclResult.E_TIMEOUT
        assert "notify wait timed out after 2 s" in message
        assert f"rank {rank}" in message and "channel notify 0 from peer rank" in message
        assert timeout_s - 0.5 <= elapsed <= timeout_s + 2


def _outside_batch(rank: int, n: int, root: bytes, mode: str) -> tuple:
    import os
    os.environ["HCOMM_SIM_CHECK"] = mode
    env = open_rank(rank, n, root)
    lib = env.lib
    th = env.b.thread_acquire_with_stream(env.comm, Engine.CPU_TS, env.stream, 0)
    src = np.arange(8, dtype=np.int32)
    dst = np.zeros(8, np.int32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rc = lib.HcommLocalCopyOnThread(th, env.ptr(dst), env.ptr(src), 32)
    message = ffi.string(lib.aclGetRecentErrMsg()).decode() if rc else ""
    env.b.synchronize_stream(env.stream)
    copied = bool(np.array_equal(dst, src))
    env.close()
    return rc, copied, message, [str(w.message) for w in caught]


def test_data_plane_call_outside_batch_mode_behaves_like_the_vendor() -> None:
    # The A2 host build accepts it (returns 0) and submits at once; the checker reports it.
    ((rc, copied, _, warned),) = run_ranks(1, _outside_batch, "warn", timeout=60)
    assert rc == 0 and copied
    assert any("outside HcommBatchModeStart/End" in w for w in warned)
    # Strict checking turns the documented rule into an error code.
    ((rc, copied, message, _),) = run_ranks(1, _outside_batch, "strict", timeout=60)
    assert rc == HcclResult.E_NOT_SUPPORT and not copied
    assert "outside HcommBatchModeStart/End" in message


def _argument_errors(rank: int, n: int, root: bytes) -> dict:
    env = open_rank(rank, n, root)
    lib, b, comm = env.lib, env.b, env.comm
    peer = 1 - rank
    out = {}
    threads = ffi.new("ThreadHandle[4]")
    out["threadNum 0"] = lib.HcclThreadAcquire(comm, Engine.CPU_TS, 0, 1, threads)
    out["notifyNumPerThread 65536"] = lib.HcclThreadAcquire(comm, Engine.CPU_TS, 1, 65536, threads)
    out["engine CCU"] = lib.HcclThreadAcquire(comm, Engine.CCU, 1, 1, threads)
    out["threads NULL"] = lib.HcclThreadAcquire(comm, Engine.CPU_TS, 1, 1, ffi.NULL)
    big = ffi.new("ThreadHandle[201]")
    out["quota"] = lib.HcclThreadAcquire(comm, Engine.CPU_TS, 201, 0, big)
    chans = ffi.new("ChannelHandle[2]")
    too_many = make_channel_descs([peer], Protocol.HCCS, 2)
    too_many[0].notifyNum = 65        # the Python builder refuses 65; the library must too
    out["notifyNum 65"] = lib.HcclChannelAcquire(comm, Engine.CPU_TS, too_many, 1, chans)
    out["remoteRank self"] = lib.HcclChannelAcquire(comm, Engine.CPU_TS, make_channel_descs([rank], Protocol.HCCS, 2), 1, chans)
    raw = ffi.new("HcclChannelDesc[1]")
    out["desc not initialised"] = lib.HcclChannelAcquire(comm, Engine.CPU_TS, raw, 1, chans)
    out["protocol UB_CTP"] = lib.HcclChannelAcquire(comm, Engine.CPU_TS, make_channel_descs([peer], Protocol.UB_CTP, 2), 1, chans)
    ch = env.channels([peer])[peer]
    (th,) = b.thread_acquire(comm, Engine.CPU_TS, 1, 2)
    buf = np.zeros(16, np.float32)
    p = env.ptr(buf)
    peer_buf, peer_size = b.channel_get_hccl_buffer(comm, ch)
    b.batch_mode_start(b"args")
    out["copy dst NULL"] = lib.HcommLocalCopyOnThread(th, ffi.NULL, p, 4)
    out["thread notify idx 2"] = lib.HcommThreadNotifyWaitOnThread(th, 2, 1)
    out["channel notify idx 2"] = lib.HcommChannelNotifyRecordOnThread(th, ch, 2)
    out["reduce int64"] = lib.HcommLocalReduceOnThread(th, p, p, 2, DataType.INT64, ReduceOp.SUM)
    out["reduce prod"] = lib.HcommLocalReduceOnThread(th, p, p, 2, DataType.FP32, ReduceOp.PROD)
    out["write past peer buffer"] = lib.HcommWriteOnThread(th, ch, peer_buf + peer_size - 8, p, 64)
    out["write with notify"] = lib.HcommWriteWithNotifyOnThread(th, ch, peer_buf, p, 4, 0)
    out["unknown thread"] = lib.HcommLocalCopyOnThread(12345, p, p, 4)
    out["zero length"] = lib.HcommLocalCopyOnThread(th, p, p, 0)
    b.batch_mode_end(b"args")
    out["recent message"] = ffi.string(lib.aclGetRecentErrMsg()).decode()
    out["channel destroy"] = lib.HcclChannelDestroy(comm, ffi.new("ChannelHandle[1]", [ch]), 1)
    env.close()
    out["destroyed comm"] = lib.HcclGetRankSize(comm, ffi.new("uint32_t *"))
    return out


def test_bad_arguments_get_the_vendor_codes() -> None:
    out = run_ranks(2, _argument_errors, timeout=60)[0]
    expected = {
        "threadNum 0": HcclResult.E_PARA, "notifyNumPerThread 65536": HcclResult.E_PARA,
        "engine CCU": HcclResult.SUCCESS, "threads NULL": HcclResult.E_PTR,  # CCU threads: thread.cc:45
        "quota": HcclResult.E_UNAVAIL, "notifyNum 65": HcclResult.E_PARA, "remoteRank self": HcclResult.E_PARA,
        "desc not initialised": HcclResult.E_PARA, "protocol UB_CTP": HcclResult.E_PARA,
        "copy dst NULL": HcclResult.E_PTR, "thread notify idx 2": HcclResult.E_PTR,
        "channel notify idx 2": HcclResult.E_INTERNAL, "reduce int64": HcclResult.E_PARA,
        "reduce prod": HcclResult.E_PARA, "write past peer buffer": HcclResult.E_PARA,
        "write with notify": HcclResult.E_NOT_SUPPORT, "unknown thread": HcclResult.E_PTR,
        "zero length": HcclResult.SUCCESS, "channel destroy": HcclResult.E_NOT_SUPPORT,
        "destroyed comm": HcclResult.E_PARA,
    }
    for key, code in expected.items():
        assert out[key] == code, (key, out[key], code)
    assert "zero length" not in out["recent message"]


def _late_rank(rank: int, n: int, root: bytes) -> str:
    import os
    os.environ["HCCL_CONNECT_TIMEOUT"] = "1"
    if rank == 2:
        return "skipped init"
    try:
        open_rank(rank, n, root)
        return "no error"
    except HcclError as exc:
        return str(exc)


def test_rendezvous_timeout_names_the_missing_ranks() -> None:
    results = run_ranks(3, _late_rank, timeout=60)
    for rank in (0, 1):
        assert "HCCL_E_TIMEOUT" in results[rank]
        assert "ranks [2] of 3 never arrived within 1 s (HCCL_CONNECT_TIMEOUT)" in results[rank]


def test_abi_checked_emulator_rejects_what_the_real_library_would() -> None:
    from hcomm_cffi.lib import load
    from hcomm_cffi.sim.abi_check import AbiCheckedLibrary

    lib = load("sim")
    assert isinstance(lib, AbiCheckedLibrary)
    with pytest.raises(TypeError):
        lib.HcclGetRankSize(12345, ffi.new("uint32_t *"))      # an int where HcclComm (void *) is declared
    with pytest.raises(TypeError):
        lib.HcommBatchModeStart("tag")                        # str where const char * wants bytes
    with pytest.raises(TypeError):
        lib.HcclGetHcclBuffer(ffi.NULL, ffi.new("uint32_t *"), ffi.new("uint64_t *"))  # wrong pointer type
    assert lib.HcclGetRankSize(ffi.NULL, ffi.new("uint32_t *")) == HcclResult.E_PTR


def _event_after_failure(rank: int, n: int, root: bytes) -> tuple:
    import os
    env = open_rank(rank, n, root)
    lib, b = env.lib, env.b
    ch = env.channels([1 - rank])[1 - rank]
    th = b.thread_acquire_with_stream(env.comm, Engine.CPU_TS, env.stream, 0)
    b.batch_mode_start(b"t")
    b.channel_notify_wait(th, ch, 1, 1)          # nobody records: fails after 1 s
    b.batch_mode_end(b"t")
    event = b.create_event()
    b.record_event(event, env.stream)           # queued behind the failing wait
    start = time.monotonic()
    rc = lib.aclrtSynchronizeEvent(event)
    elapsed = time.monotonic() - start
    message = ffi.string(lib.aclGetRecentErrMsg()).decode()
    # reusing the channel with another notify count is what the hardware does; the checker says so
    os.environ["HCOMM_SIM_CHECK"] = "strict"
    try:
        env.channels([1 - rank], notify_num=4)
        reuse = "no report"
    except HcclError as exc:
        reuse = str(exc)
    try:
        b.synchronize_stream(env.stream)
    except HcclError:
        pass
    b.destroy_event(event)
    env.close()
    return rc, elapsed, message, reuse


def test_event_of_a_failed_stream_reports_instead_of_hanging() -> None:
    for rc, elapsed, message, reuse in run_ranks(2, _event_after_failure, timeout=60):
        assert rc == 507048 and elapsed < 4
        assert "the stream of this event failed" in message and "timed out after 1 s" in message
        assert "is reused with its 2 notifies although 4 were requested" in reuse


def _thread_notify_left_set(rank: int, n: int, root: bytes) -> str:
    env = open_rank(rank, n, root)
    b = env.b
    main = b.thread_acquire_with_stream(env.comm, Engine.CPU_TS, env.stream, 2)
    b.batch_mode_start(b"t")
    b.thread_notify_record(main, main, 1)          # nobody waits on it
    b.batch_mode_end(b"t")
    message = error_text(b.synchronize_stream, env.stream)
    return message + " | " + error_text(env.close)    # strict: destroy reports it too, after releasing


def test_thread_notify_left_set_at_the_end_of_an_operation() -> None:
    (message,) = run_ranks(1, _thread_notify_left_set, timeout=60)
    sync, destroy = message.split(" | ")
    for text in (sync, destroy):
        assert "thread notify 1 was recorded but never waited on by the end of the operation" in text
