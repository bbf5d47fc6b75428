"""Host memory that was never device memory is rejected as a local copy/reduce operand (issue 11).

On A2 a host-path local copy is an SDMA device-to-device task (vendor facts in hcomm_cffi/sim/devmem.py):
pageable host memory is out of its reach.  Device-visible: aclrtMalloc / aclrtMallocHost blocks, the
HCCL buffer, and ranges the Comm API declares for the NumPy buffers it hands to the emulator.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import hcomm_cffi
from hcomm_cffi._ffi import ffi
from hcomm_cffi.enums import DataType, Engine, HcclResult, ReduceOp
from hcomm_cffi.sim.devmem import DeviceMemory
from multiproc import run_ranks
from simhelp import open_rank


def _addr(p: object) -> int:
    return int(ffi.cast("uintptr_t", p))


def _local_ops(rank: int, n: int, root: bytes) -> dict:
    """Local copies/reduces with each kind of operand, written with the C names; return codes and texts."""
    env = open_rank(rank, n, root)
    lib, b = env.lib, env.b
    th = b.thread_acquire_with_stream(env.comm, Engine.CPU_TS, env.stream, 0)
    buf = ffi.cast("char *", env.buf)
    dev, pinned = ffi.new("void **"), ffi.new("void **")
    assert lib.aclrtMalloc(dev, 256, 0) == 0 and lib.aclrtMallocHost(pinned, 256) == 0
    host = np.arange(64, dtype=np.float32)
    host_p = env.host_ptr(host)
    registered = np.zeros(64, np.float32)
    out = {}
    b.batch_mode_start(b"devmem")
    out["host_src"] = lib.HcommLocalCopyOnThread(th, buf, host_p, 64)
    out["host_src_text"] = ffi.string(lib.aclGetRecentErrMsg()).decode()
    out["host_dst"] = lib.HcommLocalReduceOnThread(th, host_p, buf, 16, DataType.FP32, ReduceOp.SUM)
    out["malloc"] = lib.HcommLocalCopyOnThread(th, ffi.cast("char *", dev[0]), buf, 256)
    out["malloc_host"] = lib.HcommLocalCopyOnThread(th, ffi.cast("char *", pinned[0]), buf, 256)
    out["registered"] = lib.HcommLocalCopyOnThread(th, env.ptr(registered), buf, 256)
    b.batch_mode_end(b"devmem")
    b.synchronize_stream(env.stream)
    out["host_addr"] = _addr(host_p)
    assert lib.aclrtFree(dev[0]) == 0
    # a freed block is no device memory any more
    b.batch_mode_start(b"devmem2")
    out["freed"] = lib.HcommLocalCopyOnThread(th, ffi.cast("char *", dev[0]), buf, 16)
    b.batch_mode_end(b"devmem2")
    b.synchronize_stream(env.stream)
    assert lib.aclrtFreeHost(pinned[0]) == 0
    env.close()
    return out


def test_host_memory_is_not_a_device_operand() -> None:
    out = run_ranks(2, _local_ops, timeout=60)[0]    # 2 ranks: a one-rank communicator has no HCCL buffer
    assert out["host_src"] == HcclResult.E_PARA and out["host_dst"] == HcclResult.E_PARA
    assert (f"src 0x{out['host_addr']:x} (+64 bytes) is not device memory: on A2 a local copy/reduce is an SDMA "
            "task that cannot reach pageable host memory") in out["host_src_text"]
    assert "aclrtMalloc or aclrtMallocHost memory" in out["host_src_text"]
    assert out["malloc"] == 0 and out["malloc_host"] == 0 and out["registered"] == 0
    assert out["freed"] == HcclResult.E_PARA


def _warn_mode(rank: int, n: int, root: bytes) -> list:
    env = open_rank(rank, n, root)
    lib, b = env.lib, env.b
    th = b.thread_acquire_with_stream(env.comm, Engine.CPU_TS, env.stream, 0)
    host = np.ones(16, np.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        b.batch_mode_start(b"w")
        code = lib.HcommLocalCopyOnThread(th, ffi.cast("char *", env.buf), env.host_ptr(host), 64)
        b.batch_mode_end(b"w")
        b.synchronize_stream(env.stream)
    reports = list(getattr(lib, "raw", lib).checker_reports())
    env.close()
    return [code, [str(w.message) for w in caught], reports]


def test_warn_mode_copies_and_reports() -> None:
    code, warned, reports = run_ranks(2, _warn_mode, timeout=60, env={"HCOMM_SIM_CHECK": "warn"})[0]
    assert code == 0
    assert any("is not device memory" in w for w in warned)
    assert any("is not device memory" in r for r in reports)


def _comm_api(rank: int, n: int, root: bytes) -> list:
    """The Comm API declares its NumPy buffers on the emulator: collectives pass under the strict checker."""
    from hcomm_cffi.binding import get_binding

    b = get_binding()
    b.set_device(rank)
    comm = hcomm_cffi.init(rank=rank, world_size=n, root_info=root)
    x = np.full(1000, rank + 1, np.float32)
    comm.allreduce(x)
    y = comm.allgather(np.full(8, rank, np.int32))
    declared = len(comm._engine.device_memory.ranges)
    comm.allreduce(x)                       # the same buffer again: nothing new declared
    again = len(comm._engine.device_memory.ranges)
    comm.destroy()
    return [float(x[0]), y.tolist(), declared, again]


def test_comm_api_declares_its_buffers() -> None:
    results = run_ranks(3, _comm_api, timeout=120)
    for value, gathered, declared, again in results:
        assert value == 18.0            # 1+2+3 = 6, then the same buffer again: 6 * 3
        assert gathered == [[0] * 8, [1] * 8, [2] * 8]
        assert declared >= 2 and again == declared


def test_device_memory_ranges() -> None:
    mem = DeviceMemory()
    mem.add(0x1000, 0x100, "a")
    mem.add(0x1040, 0x10, "view")
    mem.add(0x2000, 8, "b")
    assert mem.find(0xFFF) is None and mem.find(0x1100) is None
    assert mem.find(0x1000) == (0x1000, 0x1100, "a")
    assert mem.find(0x1045) == (0x1040, 0x1050, "view") and mem.find(0x1060) == (0x1000, 0x1100, "a")
    mem.add(0x2000, 16, "b again")              # counted; the longer end kept
    assert mem.find(0x200F) == (0x2000, 0x2010, "b")
    assert mem.remove(0x2000) and mem.find(0x2000) is not None
    assert mem.remove(0x2000) and mem.find(0x2000) is None and not mem.remove(0x2000)
    # a stale range starting inside a live one does not hide it for an operand that spans both
    mem.add(0x1080, 0x8, "stale")
    assert mem.find(0x1084, 0x40) == (0x1000, 0x1100, "a") and mem.find(0x1084) == (0x1080, 0x1088, "stale")
    assert mem.find(0x10F0, 0x20) == (0x1000, 0x1100, "a")        # past every end: the one holding its start
    with pytest.raises(ValueError, match="size=0 for z at 0x10; expected > 0"):
        mem.add(0x10, 0, "z")
