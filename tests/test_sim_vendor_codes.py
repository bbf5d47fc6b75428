"""The emulator returns what CANN returns: each case written as a C port of a vendor sample would be.

Vendor facts (hcomm @ 8958adb, runtime @ 681ef76), copied here so the tests stand alone:
HcclGetRootInfo / HcclCommInitRootInfo without a device -> HCCL_E_RUNTIME (15); HcclGetHcclBufferCleared on
A2/A3 -> HCCL_E_NOT_SUPPORT (5); HcommAcquireComm -> 0, or HCCL_E_PTR (2) for an unknown name; HcommReleaseComm
-> 0; HcclChannelAcquire accepts engines CPU, CPU_TS, AICPU, AICPU_TS, AIV with protocols HCCS, ROCE, HCCS_ONLY,
SIO (AIV: HCCS, HCCS_ONLY, SIO), everything else HCCL_E_PARA (1); HcclThreadAcquire accepts all six engines;
HcclThreadAcquireWithStream rejects AICPU, AICPU_TS and AIV with 1 and turns CPU_TS into CPU;
HcommSetNotifyWaitTimeOut truncates to whole seconds; aclrtSynchronizeDevice reports a failed task.
"""
from __future__ import annotations

import math
import time

import pytest

from hcomm_cffi._ffi import ffi
from hcomm_cffi.enums import Engine, Protocol
from hcomm_cffi.errors import MissingSymbolError
from hcomm_cffi.initializers import make_channel_descs
from hcomm_cffi.lib import load
from multiproc import run_ranks
from simhelp import open_rank

HCCL_SUCCESS, HCCL_E_PARA, HCCL_E_PTR, HCCL_E_NOT_SUPPORT, HCCL_E_RUNTIME = 0, 1, 2, 5, 15
ACL_ERROR_RT_INVALID_HANDLE, ACL_ERROR_RT_FFTS_PLUS_TIMEOUT = 107017, 507048

CHANNEL_ACCEPTS = {
    Engine.CPU: {Protocol.HCCS, Protocol.ROCE, Protocol.HCCS_ONLY, Protocol.SIO},
    Engine.CPU_TS: {Protocol.HCCS, Protocol.ROCE, Protocol.HCCS_ONLY, Protocol.SIO},
    Engine.AICPU: {Protocol.HCCS, Protocol.ROCE, Protocol.HCCS_ONLY, Protocol.SIO},
    Engine.AICPU_TS: {Protocol.HCCS, Protocol.ROCE, Protocol.HCCS_ONLY, Protocol.SIO},
    Engine.AIV: {Protocol.HCCS, Protocol.HCCS_ONLY, Protocol.SIO},
    Engine.CCU: set(),
}
PROTOCOLS = [Protocol.HCCS, Protocol.ROCE, Protocol.PCIE, Protocol.SIO, Protocol.UB_CTP, Protocol.UB_MEM,
             Protocol.UBOE, Protocol.HCCS_ONLY]


def _init_without_device(rank: int, n: int, root: bytes) -> tuple:
    lib = load("sim")
    info = ffi.new("HcclRootInfo *")
    comm = ffi.new("HcclComm *")
    rc_root = lib.HcclGetRootInfo(info)
    shared = ffi.new("HcclRootInfo *")
    ffi.memmove(shared, root, len(root))
    rc_init = lib.HcclCommInitRootInfo(n, shared, rank, comm)
    text = ffi.string(lib.aclGetRecentErrMsg()).decode()
    assert lib.aclrtSetDevice(rank) == 0                  # the vendor's order: device first, then root info
    rc_after = lib.HcclGetRootInfo(info)
    return rc_root, rc_init, rc_after, text


def test_root_info_and_init_need_a_device_first() -> None:
    rc_root, rc_init, rc_after, text = run_ranks(1, _init_without_device, timeout=60)[0]
    assert (rc_root, rc_init, rc_after) == (HCCL_E_RUNTIME, HCCL_E_RUNTIME, HCCL_SUCCESS)
    assert "aclrtSetDevice" in text


def _comm_queries(rank: int, n: int, root: bytes) -> dict:
    env = open_rank(rank, n, root)
    lib, comm = env.lib, env.comm
    out = {}
    buf, size = ffi.new("void **"), ffi.new("uint64_t *")
    out["HcclGetHcclBufferCleared"] = lib.HcclGetHcclBufferCleared(comm, buf, size)
    name = ffi.new("char[128]")
    assert lib.HcclGetCommName(comm, name) == 0
    out["HcommAcquireComm"] = lib.HcommAcquireComm(name)
    out["HcommReleaseComm"] = lib.HcommReleaseComm(name)
    out["HcommAcquireComm unknown"] = lib.HcommAcquireComm(b"no-such-comm")
    out["HcommAcquireComm NULL"] = lib.HcommAcquireComm(ffi.NULL)
    env.close()
    return out


def test_buffer_cleared_and_acquire_comm_codes() -> None:
    assert run_ranks(1, _comm_queries, timeout=60)[0] == {
        "HcclGetHcclBufferCleared": HCCL_E_NOT_SUPPORT, "HcommAcquireComm": HCCL_SUCCESS,
        "HcommReleaseComm": HCCL_SUCCESS, "HcommAcquireComm unknown": HCCL_E_PTR, "HcommAcquireComm NULL": HCCL_E_PTR,
    }


def _channel_matrix(rank: int, n: int, root: bytes) -> dict:
    env = open_rank(rank, n, root)
    lib, comm = env.lib, env.comm
    channels = ffi.new("ChannelHandle[1]")
    out = {}
    for engine in CHANNEL_ACCEPTS:            # both ranks walk the same order: accepted pairs meet
        for proto in PROTOCOLS:
            descs = make_channel_descs([1 - rank], proto, 2)
            out[(int(engine), int(proto))] = lib.HcclChannelAcquire(comm, engine, descs, 1, channels)
    env.close()
    return out


def test_channel_acquire_accepts_the_vendor_engine_protocol_matrix() -> None:
    for out in run_ranks(2, _channel_matrix, timeout=90):
        for engine, accepted in CHANNEL_ACCEPTS.items():
            for proto in PROTOCOLS:
                want = HCCL_SUCCESS if proto in accepted else HCCL_E_PARA
                assert out[(int(engine), int(proto))] == want, (engine.name, proto.name)


def _thread_engines(rank: int, n: int, root: bytes) -> dict:
    env = open_rank(rank, n, root)
    lib, comm = env.lib, env.comm
    out = {}
    threads = ffi.new("ThreadHandle[1]")
    for engine in list(Engine)[1:] + [6]:
        out[("HcclThreadAcquire", int(engine))] = lib.HcclThreadAcquire(comm, engine, 1, 1, threads)
    thread = ffi.new("ThreadHandle *")
    for engine in (Engine.AICPU, Engine.AICPU_TS, Engine.AIV):
        out[("WithStream", int(engine))] = lib.HcclThreadAcquireWithStream(comm, engine, env.stream, 1, thread)
    out[("WithStream", int(Engine.CPU_TS))] = lib.HcclThreadAcquireWithStream(comm, Engine.CPU_TS, env.stream, 1,
                                                                               thread)
    first = thread[0]
    out["engine of the CPU_TS stream thread"] = int(getattr(lib, "raw", lib).state.threads[first].engine)
    # the stream has its thread now: any engine gets it back (thread_manager.cc:441)
    out["again as AICPU"] = lib.HcclThreadAcquireWithStream(comm, Engine.AICPU, env.stream, 1, thread)
    out["same thread"] = thread[0] == first
    out["NULL stream"] = lib.HcclThreadAcquireWithStream(comm, Engine.CPU, ffi.NULL, 1, thread)
    env.close()
    return out


def test_thread_acquire_engines_as_the_vendor() -> None:
    out = run_ranks(1, _thread_engines, timeout=60)[0]
    for engine in list(Engine)[1:]:
        assert out[("HcclThreadAcquire", int(engine))] == HCCL_SUCCESS, engine.name
    assert out[("HcclThreadAcquire", 6)] == HCCL_E_PARA
    for engine in (Engine.AICPU, Engine.AICPU_TS, Engine.AIV):
        assert out[("WithStream", int(engine))] == HCCL_E_PARA, engine.name
    assert out[("WithStream", int(Engine.CPU_TS))] == HCCL_SUCCESS
    assert out["engine of the CPU_TS stream thread"] == Engine.CPU
    assert out["again as AICPU"] == HCCL_SUCCESS and out["same thread"]
    assert out["NULL stream"] == HCCL_E_PTR


def _default_timeout(rank: int, n: int, root: bytes) -> dict:
    env = open_rank(rank, n, root)
    lib, comm = env.lib, env.comm
    out = {"NaN": lib.HcommSetNotifyWaitTimeOut(math.nan), "-1": lib.HcommSetNotifyWaitTimeOut(-1.0),
           "1.5": lib.HcommSetNotifyWaitTimeOut(1.5)}
    thread = ffi.new("ThreadHandle *")
    assert lib.HcclThreadAcquireWithStream(comm, Engine.CPU_TS, env.stream, 1, thread) == 0
    assert lib.HcommBatchModeStart(b"t") == 0
    assert lib.HcommThreadNotifyWaitOnThreadWithDefaultTimeout(thread[0], 0) == 0   # nobody records it
    start = time.monotonic()
    assert lib.HcommBatchModeEnd(b"t") == 0
    out["aclrtSynchronizeDevice"] = lib.aclrtSynchronizeDevice()
    out["seconds"] = time.monotonic() - start
    assert lib.HcommSetNotifyWaitTimeOut(0.0) == 0
    # a thread's own stream dies with the communicator
    threads = ffi.new("ThreadHandle[1]")
    assert lib.HcclThreadAcquire(comm, Engine.CPU_TS, 1, 1, threads) == 0
    stream = ffi.new("aclrtStream *")
    assert lib.HcclThreadResGetInfo(comm, threads[0], 0, ffi.sizeof("aclrtStream"), stream) == 0
    assert lib.aclrtSynchronizeStream(stream[0]) == 0
    lib.HcclCommDestroy(comm)
    out["sync after destroy"] = lib.aclrtSynchronizeStream(stream[0])
    out["message"] = ffi.string(lib.aclGetRecentErrMsg()).decode()
    return out


def test_default_timeout_truncates_and_device_sync_reports_the_failure() -> None:
    out = run_ranks(1, _default_timeout, timeout=60, env={"HCOMM_SIM_CHECK": "warn"})[0]
    assert (out["NaN"], out["-1"], out["1.5"]) == (HCCL_E_PARA, HCCL_E_PARA, HCCL_SUCCESS)
    assert out["aclrtSynchronizeDevice"] == ACL_ERROR_RT_FFTS_PLUS_TIMEOUT
    assert 0.9 <= out["seconds"] < 1.45, out["seconds"]          # 1.5 s became 1 s
    assert out["sync after destroy"] == ACL_ERROR_RT_INVALID_HANDLE
    assert "released by HcclCommDestroy" in out["message"]


@pytest.mark.parametrize("name", ["HcclChanelAcquire", "HcclSymWinGetPeerPointer", "aclrtNoSuchCall"])
def test_a_name_that_is_no_host_function_is_a_missing_symbol(name: str) -> None:
    lib = load("sim")
    with pytest.raises(MissingSymbolError) as info:
        getattr(lib, name)
    assert name in str(info.value)
    assert not hasattr(lib, name)                  # an AttributeError, as on the cann backend
    assert callable(lib.HcclCommSuspend)           # declared but not emulated: a function answering 5
    assert lib.HcclCommSuspend(ffi.NULL) == HCCL_E_NOT_SUPPORT
