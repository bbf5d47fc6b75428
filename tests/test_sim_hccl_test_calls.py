"""The emulator's ACL and HCCL calls that the vendor's hccl_test makes beyond the collectives: virtual memory,
events with flags and timing, device modes, the profiler, zero copy and symmetric windows; and the one rule
that decides which acl_rt.h functions the emulated libacl_rt.so implements and which it exports as stubs."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest

from hcomm_cffi._ffi import ffi
from hcomm_cffi.lib import load

ACL_ERROR_INVALID_PARAM = 100000
ACL_ERROR_RT_PARAM_INVALID = 107000
ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID = 107006
ACL_ERROR_RT_INVALID_HANDLE = 107017
ACL_ERROR_RT_STREAM_SYNC_TIMEOUT = 507046
ACL_ERROR_API_NOT_SUPPORT = 200001
ACL_ERROR_UNINITIALIZE = 100001
ACL_ERROR_PROF_NOT_RUN = 100043
ACL_ERROR_INVALID_PROFILING_CONFIG = 100010
HCCL_E_PARA, HCCL_E_PTR, HCCL_E_MEMORY, HCCL_E_NOT_SUPPORT = 1, 2, 3, 5
MIB2 = 2 << 20


@pytest.fixture
def lib() -> Any:
    lib = load("sim")
    assert lib.aclrtSetDevice(0) == 0
    return lib


def _message(lib: Any) -> str:
    return ffi.string(lib.aclGetRecentErrMsg()).decode()


def _prop(attr: int = 4) -> Any:
    prop = ffi.new("aclrtPhysicalMemProp *")
    prop.memAttr = attr                       # ACL_HBM_MEM_HUGE
    prop.location.type = 1                    # ACL_MEM_LOCATION_TYPE_DEVICE
    return prop


@pytest.fixture
def reserved(lib: Any) -> Iterator[Any]:
    ptr = ffi.new("void **")
    assert lib.aclrtReserveMemAddress(ptr, 2 * MIB2, 0, ffi.NULL, 1) == 0
    yield ptr[0]
    lib.aclrtReleaseMemAddress(ptr[0])


# ---------------------------------------------------------------------------------------------- virtual memory
def test_two_mappings_of_one_handle_share_bytes_and_unmap_reuse_works(lib: Any, reserved: Any) -> None:
    granularity = ffi.new("size_t *")
    assert lib.aclrtMemGetAllocationGranularity(_prop(), 0, granularity) == 0 and granularity[0] == MIB2
    handle = ffi.new("aclrtDrvMemHandle *")
    assert lib.aclrtMallocPhysical(handle, MIB2, _prop(), 0) == 0
    second = ffi.cast("char *", reserved) + MIB2
    assert lib.aclrtMapMem(reserved, MIB2, 0, handle[0], 0) == 0
    assert lib.aclrtMapMem(second, MIB2, 0, handle[0], 0) == 0
    a = np.frombuffer(ffi.buffer(ffi.cast("char *", reserved), 64), np.uint8)
    b = np.frombuffer(ffi.buffer(second, 64), np.uint8)
    a[:] = 7
    assert (b == 7).all()                                     # the same physical memory
    assert lib.aclrtUnmapMem(second) == 0
    assert lib.aclrtMapMem(second, MIB2, 0, handle[0], 0) == 0    # reused after the unmap
    assert lib.aclrtUnmapMem(second) == 0 and lib.aclrtUnmapMem(reserved) == 0
    assert lib.aclrtFreePhysical(handle[0]) == 0


def test_vmm_errors_name_the_argument(lib: Any, reserved: Any) -> None:
    handle = ffi.new("aclrtDrvMemHandle *")
    assert lib.aclrtMallocPhysical(handle, MIB2 + 4096, _prop(), 0) == ACL_ERROR_RT_PARAM_INVALID
    assert "not a multiple of the granularity" in _message(lib)
    assert lib.aclrtMallocPhysical(handle, MIB2, _prop(attr=2), 0) == ACL_ERROR_INVALID_PARAM    # DDR on a device
    assert lib.aclrtMallocPhysical(handle, MIB2, _prop(), 1) == ACL_ERROR_INVALID_PARAM           # flags reserved
    assert lib.aclrtMallocPhysical(handle, MIB2, _prop(), 0) == 0
    assert lib.aclrtMapMem(reserved, MIB2, 0, handle[0], 0) == 0
    assert lib.aclrtMapMem(reserved, MIB2, 0, handle[0], 0) == ACL_ERROR_RT_PARAM_INVALID
    assert "overlaps the mapping" in _message(lib)
    assert lib.aclrtFreePhysical(handle[0]) == ACL_ERROR_RT_PARAM_INVALID and "still mapped" in _message(lib)
    assert lib.aclrtReleaseMemAddress(reserved) == ACL_ERROR_RT_PARAM_INVALID and "aclrtUnmapMem" in _message(lib)
    outside = ffi.cast("void *", 0x1000)
    assert lib.aclrtMapMem(outside, MIB2, 0, handle[0], 0) == ACL_ERROR_RT_PARAM_INVALID
    assert lib.aclrtUnmapMem(reserved) == 0 and lib.aclrtFreePhysical(handle[0]) == 0
    assert lib.aclrtFreePhysical(handle[0]) == ACL_ERROR_RT_PARAM_INVALID                      # freed: a bad handle
    assert "was freed" in _message(lib)
    assert lib.aclrtMapMem(reserved, MIB2, 0, handle[0], 0) == ACL_ERROR_RT_PARAM_INVALID
    size = ffi.new("size_t[2]")
    assert lib.aclrtGetMemInfo(4, size, size + 1) == 0 and 0 < size[0] <= size[1]


# ---------------------------------------------------------------------------------------------- events
def test_sync_event_holds_a_stream_until_recorded_and_times_the_interval(lib: Any) -> None:
    s = ffi.new("aclrtStream[2]")
    ev = ffi.new("aclrtEvent[3]")
    assert lib.aclrtCreateStream(s) == 0 and lib.aclrtCreateStream(s + 1) == 0
    assert lib.aclrtCreateEventWithFlag(ev, 0x1) == 0                     # ACL_EVENT_SYNC
    assert lib.aclrtCreateEvent(ev + 1) == 0 and lib.aclrtCreateEvent(ev + 2) == 0
    assert lib.aclrtEventElapsedTime(ffi.new("float *"), ev[1], ev[2]) == ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID
    assert lib.aclrtStreamWaitEvent(s[0], ev[0]) == 0                     # not recorded yet: the stream waits
    assert lib.aclrtResetEvent(ev[0], s[0]) == 0
    assert lib.aclrtRecordEvent(ev[1], s[0]) == 0
    assert lib.aclrtSynchronizeStreamWithTimeout(s[0], 100) == ACL_ERROR_RT_STREAM_SYNC_TIMEOUT
    assert lib.aclrtRecordEvent(ev[0], s[1]) == 0                         # releases it
    assert lib.aclrtRecordEvent(ev[2], s[0]) == 0
    assert lib.aclrtSynchronizeStream(s[0]) == 0
    ms = ffi.new("float *")
    assert lib.aclrtEventElapsedTime(ms, ev[1], ev[2]) == 0 and ms[0] >= 0.0
    fresh = ffi.new("aclrtEvent *")
    assert lib.aclrtCreateEvent(fresh) == 0
    assert lib.aclrtStreamWaitEvent(s[0], fresh[0]) == ACL_ERROR_RT_PARAM_INVALID          # plain, never recorded
    assert "has not been recorded" in _message(lib)
    assert lib.aclrtCreateEventWithFlag(fresh, 0x4) == ACL_ERROR_INVALID_PARAM             # no such flag
    for e in (ev[0], ev[1], ev[2]):
        assert lib.aclrtDestroyEvent(e) == 0
    assert lib.aclrtSetStreamFailureMode(s[0], 1) == 0
    assert lib.aclrtSetStreamFailureMode(s[0], 2) == ACL_ERROR_RT_PARAM_INVALID
    assert lib.aclrtDestroyStream(s[0]) == 0 and lib.aclrtDestroyStream(s[1]) == 0


# ---------------------------------------------------------------------------------------------- device modes
@pytest.mark.parametrize("platform,name", [("a2", "Ascend910B1"), ("a3", "Ascend910_9391"), ("910a", "Ascend910A"), ("950", "Ascend950PR_9599")])
def test_soc_name_is_the_platforms(lib: Any, monkeypatch: Any, platform: str, name: str) -> None:
    monkeypatch.setenv("HCOMM_SIM_PLATFORM", platform)
    assert ffi.string(lib.aclrtGetSocName()).decode() == name
    assert lib.aclrtSetDeviceSatMode(1) == 0                              # INFNAN: what the kernels compute
    assert lib.aclrtSetDeviceSatMode(0) == ACL_ERROR_API_NOT_SUPPORT and "INFNAN" in _message(lib)
    assert lib.aclrtSetDeviceSatMode(7) == ACL_ERROR_RT_PARAM_INVALID


# ---------------------------------------------------------------------------------------------- profiler
def test_profiler_writes_the_interval_as_a_trace(lib: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "prof").encode()
    assert lib.aclprofStart(ffi.cast("aclprofConfig *", 0x10)) == ACL_ERROR_UNINITIALIZE
    assert lib.aclprofInit(path, len(path)) == 0
    devices = ffi.new("uint32_t[1]", [0])
    config = lib.aclprofCreateConfig(devices, 1, 1, ffi.NULL, 0x23)
    assert config != ffi.NULL
    assert lib.aclprofCreateConfig(devices, 0, 1, ffi.NULL, 0x23) == ffi.NULL
    assert lib.aclprofStop(config) == ACL_ERROR_PROF_NOT_RUN
    assert lib.aclprofStart(config) == 0
    stream, ev = ffi.new("aclrtStream *"), ffi.new("aclrtEvent *")
    assert lib.aclrtCreateStream(stream) == 0 and lib.aclrtCreateEvent(ev) == 0
    src, dst = np.arange(16, dtype=np.float32), np.zeros(16, np.float32)
    assert lib.aclrtMemcpyAsync(ffi.from_buffer(dst), 64, ffi.from_buffer(src), 64, 1, stream[0]) == 0
    assert lib.aclrtRecordEvent(ev[0], stream[0]) == 0 and lib.aclrtSynchronizeStream(stream[0]) == 0
    other = lib.aclprofCreateConfig(devices, 1, 1, ffi.NULL, 0x23)
    assert lib.aclprofStop(other) == ACL_ERROR_INVALID_PROFILING_CONFIG
    assert lib.aclprofStop(config) == 0
    assert lib.aclprofDestroyConfig(config) == 0 and lib.aclprofDestroyConfig(other) == 0
    assert lib.aclprofFinalize() == 0
    files = list((tmp_path / "prof").glob("*.rank0.trace.json"))
    assert len(files) == 1
    names = [e["name"] for e in json.loads(files[0].read_text())["traceEvents"] if e["ph"] == "X"]
    assert names == ["hosttask", "eventrecord"]                          # the copy, then the record: in order
    assert lib.aclrtDestroyEvent(ev[0]) == 0 and lib.aclrtDestroyStream(stream[0]) == 0


# ---------------------------------------------------------------------------------------------- zero copy, windows
def test_zero_copy_is_a3_only_and_checks_ranges(lib: Any, reserved: Any, monkeypatch: Any) -> None:
    from hcomm_cffi.binding import Binding
    from simhelp import open_rank

    env = open_rank(0, 1, Binding(lib).get_root_info())
    comm = env.comm
    handle = ffi.new("aclrtDrvMemHandle *")
    try:
        monkeypatch.setenv("HCOMM_SIM_PLATFORM", "a2")
        assert lib.HcclCommSetMemoryRange(comm, reserved, 2 * MIB2, 0, 0) == HCCL_E_NOT_SUPPORT
        monkeypatch.setenv("HCOMM_SIM_PLATFORM", "a3")
        assert lib.HcclCommActivateCommMemory(comm, reserved, MIB2, 0, ffi.cast("void *", 8), 0) == HCCL_E_PARA
        assert lib.HcclCommSetMemoryRange(comm, reserved, 2 * MIB2, 0, 0) == 0
        assert lib.aclrtMallocPhysical(handle, MIB2, _prop(), 0) == 0
        assert lib.HcclCommActivateCommMemory(comm, reserved, MIB2, 0, handle[0], 0) == HCCL_E_PARA   # not mapped
        assert lib.aclrtMapMem(reserved, MIB2, 0, handle[0], 0) == 0
        assert lib.HcclCommActivateCommMemory(comm, reserved, MIB2, 0, handle[0], 0) == 0
        assert lib.HcclCommActivateCommMemory(comm, reserved, MIB2, 0, handle[0], 0) == HCCL_E_PARA   # overlap
        assert lib.HcclCommUnsetMemoryRange(comm, reserved) == HCCL_E_PARA and "Deactivate" in _message(lib)
        assert lib.HcclCommDeactivateCommMemory(comm, reserved) == 0
        assert lib.HcclCommDeactivateCommMemory(comm, reserved) == HCCL_E_PARA
        assert lib.HcclCommUnsetMemoryRange(comm, reserved) == 0
        win = ffi.new("HcclCommSymWindow *")
        offset = ffi.new("size_t *")
        assert lib.HcclCommSymWinRegister(comm, reserved, MIB2, win, 0) == HCCL_E_PARA
        outside = ffi.cast("void *", 0x1000)
        assert lib.HcclCommSymWinRegister(comm, outside, MIB2, win, 1) == HCCL_E_PARA           # not mapped memory
        assert lib.HcclCommSymWinRegister(comm, reserved, 17 << 30, win, 1) == HCCL_E_MEMORY    # past the 16 GiB stride
        monkeypatch.setenv("HCOMM_SIM_PLATFORM", "a2")
        assert lib.HcclCommSymWinRegister(comm, reserved, MIB2, win, 1) == HCCL_E_NOT_SUPPORT   # A3 only, as CANN
        monkeypatch.setenv("HCOMM_SIM_PLATFORM", "a3")
        assert lib.HcclCommSymWinRegister(comm, reserved, MIB2, win, 1) == 0
        inner = ffi.cast("char *", reserved) + 64
        found = ffi.new("HcclCommSymWindow *")
        assert lib.HcclCommSymWinGet(comm, inner, 8, found, offset) == 0 and found[0] == win[0] and offset[0] == 64
        assert lib.HcclCommSymWinDeregister(win[0]) == 0
        assert lib.HcclCommSymWinDeregister(win[0]) == HCCL_E_PARA
        assert lib.HcclCommSymWinDeregister(ffi.NULL) == HCCL_E_PTR
        assert lib.aclrtUnmapMem(reserved) == 0 and lib.aclrtFreePhysical(handle[0]) == 0
    finally:
        env.b.destroy_stream(env.stream)
        env.b.comm_destroy(comm)


# ---------------------------------------------------------------------------------------------- the export rule
def test_every_acl_rt_function_is_exported_by_one_rule(lib: Any) -> None:
    from hcomm_cffi.cannlib.acl_rt_exports import ACL_RT_FUNCTIONS, stub_return
    from hcomm_cffi.cannlib.coverage import IMPLEMENTED, function_table
    from hcomm_cffi.cannlib.declarations import prototypes

    assert len(ACL_RT_FUNCTIONS) == 373 and len(set(ACL_RT_FUNCTIONS)) == 373
    declared = {p.name for p in prototypes()}
    rows = {r.name: r.status for r in function_table()}
    for name in ("aclrtReserveMemAddress", "aclrtEventElapsedTime", "aclrtSetDeviceSatMode", "aclprofStart"):
        assert rows[name] == IMPLEMENTED
    undeclared = [n for n in ACL_RT_FUNCTIONS if n not in declared]
    assert "aclrtMemcpy2d" in undeclared and all(rows[n] != IMPLEMENTED for n in undeclared)
    assert stub_return("aclrtMemcpy2d") == ("int32_t", str(ACL_ERROR_API_NOT_SUPPORT))
    assert stub_return("aclrtCreateGroupInfo") == ("void*", "NULL")
    # a declared acl function the emulator does not implement answers ACL's code, naming itself
    assert lib.aclrtGetDeviceSatMode(ffi.new("aclrtFloatOverflowMode *")) == 0
    assert os.environ.get("HCOMM_BACKEND", "sim") == "sim"
