"""The host calls real clients make beyond the collectives, on the emulator: groups, engine contexts, names,
configs, threads with a config, the rank graph, and a one-rank communicator's HCCL buffer."""
from __future__ import annotations

from typing import Any, Dict

import numpy as np

from hcomm_cffi._ffi import ffi
from hcomm_cffi.enums import Engine
from hcomm_cffi.initializers import thread_config_init
from multiproc import run_ranks
from simhelp import open_rank

HCCL_E_PARA = 1
HCCL_E_PTR = 2
HCCL_E_NOT_SUPPORT = 5
HCCL_E_NOT_FOUND = 6
FP32 = 4
SUM = 0


def _group_body(rank: int, n: int, root: bytes) -> Dict[str, Any]:
    env = open_rank(rank, n, root)
    lib, comm, stream = env.lib, env.comm, env.stream
    out: Dict[str, Any] = {}
    enabled = ffi.new("bool *")
    out["end without start"] = lib.HcclGroupEnd()
    assert lib.HcclGroupStatusGet(enabled) == 0 and not enabled[0]
    right, left = (rank + 1) % n, (rank - 1) % n
    mine = np.full(8, rank + 1, np.float32)
    got = np.zeros(8, np.float32)
    total = np.zeros(8, np.float32)
    # every rank receives first and sends second: without the group this order would wait forever
    assert lib.HcclGroupStart() == 0
    assert lib.HcclGroupStart() == 0                       # nested: only the outermost end launches
    assert lib.HcclGroupStatusGet(enabled) == 0 and enabled[0]
    assert lib.HcclRecv(env.ptr(got), 8, FP32, left, comm, stream) == 0
    assert lib.HcclSend(env.ptr(mine), 8, FP32, right, comm, stream) == 0
    assert lib.HcclAllReduce(env.ptr(mine), env.ptr(total), 8, FP32, SUM, comm, stream) == 0
    out["deferred"] = (got.tolist(), total.tolist())       # nothing has run inside the group
    assert lib.HcclGroupEnd() == 0
    out["inner end left it open"] = lib.HcclGroupStatusGet(enabled) == 0 and bool(enabled[0])
    out["end"] = lib.HcclGroupEnd()
    assert lib.aclrtSynchronizeStream(stream) == 0
    out["ring"] = got.tolist()
    out["allreduce"] = total.tolist()
    env.close()
    return out


def test_group_defers_send_recv_and_collectives_to_its_end() -> None:
    n = 4
    results = run_ranks(n, _group_body, timeout=60)
    for rank, out in enumerate(results):
        assert out["end without start"] == HCCL_E_NOT_SUPPORT
        assert out["deferred"] == ([0.0] * 8, [0.0] * 8)
        assert out["inner end left it open"] and out["end"] == 0
        assert out["ring"] == [float((rank - 1) % n + 1)] * 8
        assert out["allreduce"] == [float(sum(range(1, n + 1)))] * 8


def _engine_ctx_body(rank: int, n: int, root: bytes) -> Dict[str, Any]:
    env = open_rank(rank, n, root)
    lib, comm = env.lib, env.comm
    ctx = ffi.new("void **")
    size = ffi.new("uint64_t *")
    out: Dict[str, Any] = {
        "get missing": lib.HcclEngineCtxGet(comm, b"op", Engine.CPU_TS, ctx, size),
        "size 0": lib.HcclEngineCtxCreate(comm, b"op", Engine.CPU_TS, 0, ctx),
        "long tag": lib.HcclEngineCtxCreate(comm, b"t" * 256, Engine.CPU_TS, 16, ctx),
        "null ctx": lib.HcclEngineCtxCreate(comm, b"op", Engine.CPU_TS, 16, ffi.NULL),
    }
    assert lib.HcclEngineCtxCreate(comm, b"op", Engine.CPU_TS, 64, ctx) == 0
    made = ctx[0]
    out["again"] = lib.HcclEngineCtxCreate(comm, b"op", Engine.CPU_TS, 64, ctx)
    src = np.arange(4, dtype=np.uint32) + 100 * rank
    assert lib.HcclEngineCtxCopy(comm, Engine.CPU_TS, b"op", ffi.from_buffer(src), src.nbytes, 16) == 0
    out["overflow"] = lib.HcclEngineCtxCopy(comm, Engine.CPU_TS, b"op", ffi.from_buffer(src), src.nbytes, 56)
    assert lib.HcclEngineCtxGet(comm, b"op", Engine.CPU_TS, ctx, size) == 0
    out["same"] = ctx[0] == made and size[0] == 64
    out["copied"] = list(ffi.cast("uint32_t *", ctx[0])[4:8])
    out["other engine"] = lib.HcclEngineCtxGet(comm, b"op", Engine.AICPU_TS, ctx, size)
    # the context is device memory for the data plane: a local copy task may read it
    dst = np.zeros(4, np.uint32)
    threads = ffi.new("ThreadHandle[1]")
    assert lib.HcclThreadAcquire(comm, Engine.CPU_TS, 1, 1, threads) == 0
    assert lib.HcommBatchModeStart(b"ctx") == 0
    assert lib.HcommLocalCopyOnThread(threads[0], env.ptr(dst), ffi.cast("char *", made) + 16, 16) == 0
    assert lib.HcommBatchModeEnd(b"ctx") == 0
    assert lib.aclrtSynchronizeDevice() == 0
    out["read by a task"] = dst.tolist()
    out["destroy"] = lib.HcclEngineCtxDestroy(comm, b"op", Engine.CPU_TS)
    out["destroy again"] = lib.HcclEngineCtxDestroy(comm, b"op", Engine.CPU_TS)
    env.close()
    return out


def test_engine_contexts_follow_the_vendor_checks() -> None:
    for rank, out in enumerate(run_ranks(2, _engine_ctx_body, timeout=60)):
        assert out["get missing"] == HCCL_E_NOT_FOUND
        assert out["size 0"] == HCCL_E_PARA and out["long tag"] == HCCL_E_PARA and out["null ctx"] == HCCL_E_PTR
        assert out["again"] == HCCL_E_PARA and out["overflow"] == HCCL_E_PARA
        assert out["same"] and out["copied"] == [100 * rank + i for i in range(4)]
        assert out["other engine"] == HCCL_E_NOT_FOUND
        assert out["read by a task"] == [100 * rank + i for i in range(4)]
        assert out["destroy"] == 0 and out["destroy again"] == HCCL_E_NOT_FOUND


def _misc_body(rank: int, n: int, root: bytes) -> Dict[str, Any]:
    env = open_rank(rank, n, root)
    lib, comm = env.lib, env.comm
    out: Dict[str, Any] = {}
    name = ffi.new("char[128]")
    assert lib.HcclGetCommName(comm, name) == 0
    found = ffi.new("HcclComm *")
    assert lib.HcclCommGetHandleWithName(name, found) == 0
    out["by name"] = found[0] == comm
    out["unknown name"] = lib.HcclCommGetHandleWithName(b"no such communicator", found)
    value = ffi.new("HcclConfigValue *")
    out["set 1"] = lib.HcclSetConfig(0, 1)
    assert lib.HcclGetConfig(0, value) == 0
    out["get"] = value[0].value
    out["set 2"] = lib.HcclSetConfig(0, 2)
    assert lib.HcclSetConfig(0, 0) == 0
    cfg = thread_config_init()
    cfg[0].notifyNumPerThread = 3
    threads = ffi.new("ThreadHandle[2]")
    out["with config"] = lib.HcclThreadAcquireWithConfig(comm, Engine.CPU_TS, 2, 0, cfg, threads)
    bad = ffi.new("ThreadConfig *")
    out["uninitialised config"] = lib.HcclThreadAcquireWithConfig(comm, Engine.CPU_TS, 1, 0, bad, threads)
    # the notify count of the config is real: notify 2 exists, notify 3 does not
    assert lib.HcommBatchModeStart(b"n") == 0
    out["notify 2"] = lib.HcommThreadNotifyRecordOnThread(threads[0], threads[1], 2)
    assert lib.HcommThreadNotifyWaitOnThread(threads[1], 2, 5000) == 0
    assert lib.HcommThreadNotifyRecordOnThread(threads[1], threads[0], 0) == 0     # join the main thread
    assert lib.HcommThreadNotifyWaitOnThread(threads[0], 0, 5000) == 0
    assert lib.HcommBatchModeEnd(b"n") == 0
    assert lib.aclrtSynchronizeDevice() == 0
    assert lib.HcommBatchModeStart(b"n3") == 0
    out["notify 3"] = (lib.HcommThreadNotifyRecordOnThread(threads[0], threads[1], 3), lib.HcommBatchModeEnd(b"n3"))
    layers = ffi.new("uint32_t **")
    count = ffi.new("uint32_t *")
    assert lib.HcclRankGraphGetLayers(comm, layers, count) == 0
    out["layers"] = [layers[0][i] for i in range(count[0])]
    assert lib.HcclRankGraphGetRanksByLayer(comm, 0, layers, count) == 0
    out["ranks"] = [layers[0][i] for i in range(count[0])]
    assert lib.HcclRankGraphGetRankSizeByLayer(comm, 0, count) == 0
    out["rank size"] = count[0]
    assert lib.HcclRankGraphGetInstSizeListByLayer(comm, 0, layers, count) == 0
    out["inst sizes"] = [layers[0][i] for i in range(count[0])]
    assert lib.HcclRankGraphGetTopoInstsByLayer(comm, 0, layers, count) == 0
    out["insts"] = [layers[0][i] for i in range(count[0])]
    assert lib.HcclRankGraphGetRanksByTopoInst(comm, 0, 0, layers, count) == 0
    out["inst ranks"] = [layers[0][i] for i in range(count[0])]
    links = ffi.new("CommLink **")
    assert lib.HcclRankGraphGetLinks(comm, 0, rank, (rank + 1) % n, links, count) == 0
    link = links[0][0]
    out["link"] = (count[0], int(link.linkAttr.linkProtocol), link.linkAttr.hop,
                   link.srcEndpointDesc.loc.device.devPhyId, link.dstEndpointDesc.loc.device.devPhyId)
    out["self link"] = lib.HcclRankGraphGetLinks(comm, 0, rank, rank, links, count)
    topo = ffi.new("CommTopo *")
    assert lib.HcclRankGraphGetTopoTypeByLayer(comm, 0, topo) == 0
    out["topo"] = int(topo[0])
    out["layer 1"] = lib.HcclRankGraphGetRankSizeByLayer(comm, 1, count)
    env.close()
    return out


def test_names_configs_threads_with_config_and_the_rank_graph() -> None:
    n = 3
    for rank, out in enumerate(run_ranks(n, _misc_body, timeout=60)):
        assert out["by name"] and out["unknown name"] == HCCL_E_PARA
        assert out["set 1"] == 0 and out["get"] == 1 and out["set 2"] == HCCL_E_PARA
        assert out["with config"] == 0 and out["uninitialised config"] == HCCL_E_PARA
        assert out["notify 2"] == 0 and out["notify 3"] != (0, 0)
        assert out["layers"] == [0] and out["ranks"] == list(range(n)) and out["rank size"] == n
        assert out["inst sizes"] == [n] and out["insts"] == [0] and out["inst ranks"] == list(range(n))
        assert out["topo"] == 1 and out["layer 1"] == HCCL_E_PARA
        assert out["link"] == (1, 0, 1, rank, (rank + 1) % n) and out["self link"] == HCCL_E_PARA


def _one_rank_buffer(rank: int, n: int, root: bytes) -> Any:
    env = open_rank(rank, n, root)
    out = (env.buf == ffi.NULL, env.buf_size)
    env.close()
    return out


def test_a_one_rank_communicator_has_no_hccl_buffer() -> None:
    """The vendor documents HcclGetHcclBuffer of a one-rank communicator as NULL and size 0."""
    assert run_ranks(1, _one_rank_buffer, timeout=60) == [(True, 0)]
