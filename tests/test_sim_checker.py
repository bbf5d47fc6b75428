"""The strict checker on fork/join and thread notifies, written as a C port of a vendor sample would be."""
from __future__ import annotations

import numpy as np

from hcomm_cffi._ffi import ffi
from hcomm_cffi.enums import Engine
from multiproc import run_ranks
from simhelp import open_rank

THREAD_RES_TYPE_STREAM = 0
ACL_ERROR_RT_INTERNAL_ERROR = 507000
HCCL_E_INTERNAL = 4


def _notify_left_on_a_worker(rank: int, n: int, root: bytes) -> dict:
    env = open_rank(rank, n, root)
    lib, comm = env.lib, env.comm
    threads = ffi.new("ThreadHandle[1]")
    assert lib.HcclThreadAcquire(comm, Engine.CPU_TS, 1, 2, threads) == 0
    stream = ffi.new("aclrtStream *")
    assert lib.HcclThreadResGetInfo(comm, threads[0], THREAD_RES_TYPE_STREAM, ffi.sizeof("aclrtStream"), stream) == 0
    assert lib.HcommBatchModeStart(b"left") == 0
    assert lib.HcommThreadNotifyRecordOnThread(threads[0], threads[0], 1) == 0     # nobody waits on it
    assert lib.HcommBatchModeEnd(b"left") == 0
    out = {"aclrtSynchronizeStream": lib.aclrtSynchronizeStream(stream[0]),
           "message": ffi.string(lib.aclGetRecentErrMsg()).decode(),
           "HcclCommDestroy": lib.HcclCommDestroy(comm)}
    out["destroy message"] = ffi.string(lib.aclGetRecentErrMsg()).decode()
    return out


def test_thread_notify_left_set_fails_the_thread_stream_and_destroy() -> None:
    out = run_ranks(1, _notify_left_on_a_worker, timeout=60)[0]
    assert out["aclrtSynchronizeStream"] == ACL_ERROR_RT_INTERNAL_ERROR
    assert "thread notify 1 was recorded but never waited on" in out["message"]
    assert out["HcclCommDestroy"] == HCCL_E_INTERNAL
    assert "thread notify 1 was recorded but never waited on" in out["destroy message"]


def _worker_issued_first(rank: int, n: int, root: bytes) -> list:
    """Two acquired threads; the secondary's fork-wait is issued before the main thread's first task."""
    env = open_rank(rank, n, root)
    lib, comm = env.lib, env.comm
    threads = ffi.new("ThreadHandle[2]")
    assert lib.HcclThreadAcquire(comm, Engine.CPU_TS, 2, 1, threads) == 0
    main, worker = threads[0], threads[1]                 # main: acquired first
    src = np.arange(64, dtype=np.float32)
    dst = np.zeros(64, np.float32)
    assert lib.HcommBatchModeStart(b"fj") == 0
    assert lib.HcommThreadNotifyWaitOnThread(worker, 0, 0) == 0           # fork wait, issued first
    assert lib.HcommLocalCopyOnThread(worker, env.ptr(dst), env.ptr(src), src.nbytes) == 0
    assert lib.HcommThreadNotifyRecordOnThread(worker, main, 0) == 0      # join
    assert lib.HcommThreadNotifyRecordOnThread(main, worker, 0) == 0      # fork
    assert lib.HcommThreadNotifyWaitOnThread(main, 0, 0) == 0
    rc = lib.HcommBatchModeEnd(b"fj")
    sync = lib.aclrtSynchronizeDevice()
    env.close()
    return [rc, sync, dst.tolist() == src.tolist()]


def test_main_thread_is_the_first_acquired_not_the_first_issued() -> None:
    assert run_ranks(1, _worker_issued_first, timeout=60)[0] == [0, 0, True]


def _warning_location(rank: int, n: int, root: bytes) -> list:
    import warnings

    from hcomm_cffi.sim import CheckerWarning

    env = open_rank(rank, n, root)
    lib = env.lib
    thread = ffi.new("ThreadHandle *")
    assert lib.HcclThreadAcquireWithStream(env.comm, Engine.CPU_TS, env.stream, 1, thread) == 0
    src = np.ones(4, np.float32)
    dst = np.zeros(4, np.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = _line() + 1
        lib.HcommLocalCopyOnThread(thread[0], env.ptr(dst), env.ptr(src), 16)   # outside batch mode: warned
    env.close()
    return [(w.filename, w.lineno, line) for w in caught if issubclass(w.category, CheckerWarning)]


def _line() -> int:
    import inspect
    frame = inspect.currentframe()
    assert frame is not None and frame.f_back is not None
    return frame.f_back.f_lineno


def test_checker_warnings_point_at_the_callers_line() -> None:
    (found,) = run_ranks(1, _warning_location, timeout=60, env={"HCOMM_SIM_CHECK": "warn"})[0]
    filename, lineno, line = found
    assert filename == __file__ and lineno == line, found


def _record_now_wait_later(rank: int, n: int, root: bytes) -> dict:
    """A custom op's launch: the host records a worker's notify, the rank goes idle, a later batch waits on it."""
    import warnings

    env = open_rank(rank, n, root)
    lib, comm = env.lib, env.comm
    threads = ffi.new("ThreadHandle[2]")
    assert lib.HcclThreadAcquire(comm, Engine.CPU_TS, 2, 2, threads) == 0
    host, worker = threads[0], threads[1]
    src = np.arange(32, dtype=np.float32)
    dst = np.zeros(32, np.float32)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert lib.HcommBatchModeStart(b"record") == 0
        assert lib.HcommThreadNotifyRecordOnThread(host, worker, 1) == 0          # the worker waits on it later
        assert lib.HcommBatchModeEnd(b"record") == 0
        assert lib.aclrtSynchronizeDevice() == 0                                   # every thread idle: reported
        assert lib.HcommBatchModeStart(b"kernel") == 0
        assert lib.HcommThreadNotifyWaitOnThread(worker, 1, 5000) == 0
        assert lib.HcommLocalCopyOnThread(worker, env.ptr(dst), env.ptr(src), src.nbytes) == 0
        assert lib.HcommBatchModeEnd(b"kernel") == 0
        sync = lib.aclrtSynchronizeDevice()
    reports = [str(w.message) for w in seen if "never waited on" in str(w.message)]
    env.close()
    return {"sync": sync, "copied": dst.tolist() == src.tolist(), "reports": reports}


def test_warn_mode_reports_a_notify_left_set_but_leaves_it_for_its_later_wait() -> None:
    """HCOMM_SIM_CHECK=warn must not change what the program sees: the recorded notify is still there to wait on."""
    out = run_ranks(1, _record_now_wait_later, timeout=60, env={"HCOMM_SIM_CHECK": "warn"})[0]
    assert out["sync"] == 0 and out["copied"]
    assert len(out["reports"]) == 1 and "thread notify 1 was recorded but never waited on" in out["reports"][0]
