"""Control plane of the emulator: root info, communicator life cycle, buffers, threads, channels."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import secrets
import struct
import time
import uuid
from typing import Any, List


from .. import settings
from .. import trace as _trace
from .._ffi import ffi
from ..enums import (
    HCCL_ROOT_INFO_BYTES, MAX_NOTIFIES_PER_COMM, MAX_THREAD_NOTIFIES, MAX_THREADS_PER_COMM, Engine, Protocol,
)
from .comm import SimComm
from .notifies import MAX_NOTIFIES_PER_CHANNEL
from .config import CheckerWarning, SimConfig, read_config
from . import ledger
from .errors import ACL_ERROR_RT_INTERNAL_ERROR, HcclResult, SimError, entry, warn_caller
from .native import NATIVE_PROTOCOL
from . import product
from .queues import Queue, SimThread
from .runtime import EXECUTOR
from .state import SimState, c_string
from .tasks import C_WAIT, T_WAIT
from .zero_copy import remember_config

ROOT_MAGIC = b"HCOMMSIM"
ROOT_VERSION = 1
ROOT_SECRET_BYTES = 16      # after magic (8), version and pid (8), comm id (20)
COMM_CONFIG_MAGIC = 0xF0F0F0F0
CHANNEL_DESC_MAGIC = 0x0F0F0F0F
NOT_SET_U32 = 0xFFFFFFFF

# Engine and protocol acceptance, as the A2/A3 host build of libhcomm.so decides it (hcomm @ 8958adb):
# - HcclThreadAcquire accepts every valid CommEngine (coll_communicator_mgr/common/hccl_independent_common.h:54
#   IsValidCommEngine; threads of CPU/CPU_TS/CCU/AIV and AICPU/AICPU_TS are created in
#   base_comm/resources/comm_engine_res/threads/thread.cc:45 CreateThread), after turning CPU_TS into CPU and
#   AICPU_TS into AICPU (coll_communicator_mgr/api_c_adpt/resource/thread_c_adpt.cc:201 ConvertEngineToTsType);
#   anything else is HCCL_E_PARA.
# - HcclThreadAcquireWithStream converts the same way, then only CPU and CCU can wrap a stream
#   (thread.cc:63 CommHostEngineToNotifyLoadType; AICPU and AIV -> HCCL_E_PARA), unless the stream already has
#   its thread, which is returned whatever the engine (threads/thread_manager.cc:441).
# - HcclChannelAcquire (coll_communicator_mgr/resource_mgr/remote/rank_pairs/channel_manager.cc:56
#   CheckChannelParam): engines CPU, CPU_TS, AICPU, AICPU_TS and AIV; protocols HCCS, ROCE, HCCS_ONLY and SIO,
#   AIV only HCCS, HCCS_ONLY and SIO; every rejection is HCCL_E_PARA.  (The documentation's per-product engine
#   table, hcomm docs/zh/api_ref/.../HcclChannelAcquire.md, is narrower; the source decides here.)
VALID_ENGINES = {Engine.CPU, Engine.CPU_TS, Engine.AICPU, Engine.AICPU_TS, Engine.AIV, Engine.CCU}
TS_ENGINE_OF = {Engine.CPU_TS: Engine.CPU, Engine.AICPU_TS: Engine.AICPU}
STREAM_THREAD_ENGINES = {Engine.CPU, Engine.CCU}
CHANNEL_ENGINES = {Engine.CPU, Engine.CPU_TS, Engine.AICPU, Engine.AICPU_TS, Engine.AIV}
CHANNEL_PROTOCOLS = {Protocol.HCCS, Protocol.ROCE, Protocol.HCCS_ONLY, Protocol.SIO}
AIV_CHANNEL_PROTOCOLS = {Protocol.HCCS, Protocol.HCCS_ONLY, Protocol.SIO}

__all__ = ["ControlPlane"]


def _check_out(ptr: Any, what: str) -> None:
    if ptr is None or ptr == ffi.NULL:
        raise SimError(HcclResult.E_PTR, f"{what} is NULL")


def _engine_value(engine: int, what: str) -> Engine:
    """``engine`` as a CommEngine, or HCCL_E_PARA as IsValidCommEngine answers (hccl_independent_common.h:54)."""
    try:
        value = Engine(engine)
    except ValueError:
        value = None
    if value not in VALID_ENGINES:
        raise SimError(HcclResult.E_PARA, f"{what}: engine={engine} is not a valid CommEngine "
                                          f"(expected one of {sorted(int(e) for e in VALID_ENGINES)})")
    return value


class ControlPlane:
    """HCCL/HCOMM communicator and resource calls (mixed into SimLibrary)."""

    state: SimState
    _string: Any  # interned C strings, provided by AclRuntime
    _device: Any  # the calling OS thread's current device, provided by AclRuntime
    #: the emulated install's core sets it in a C program: HCOMM_TRACE from each communicator's creation on
    traces_c_program = False

    def _require_device(self, function: str) -> int:
        """The calling thread's device; CANN's init calls fail with HCCL_E_RUNTIME without one.

        hcomm @ 8958adb: HcclGetRootInfo (legacy/ascend910/framework/op_base/src/op_base.cc:1383),
        HcclCommInitRootInfoInner (:2010), HcclCommInitClusterInfo (:771) and HcclCommInitAll (:319) start with
        HcclDeviceRefresh (:5305) -> hrtGetDeviceRefresh (legacy/ascend910/platform/common/adapter/
        adapter_rts.cc:264), which returns HCCL_E_RUNTIME when aclrtGetDevice fails (no device set).
        """
        device = self._device.current
        if device < 0:
            raise SimError(HcclResult.E_RUNTIME, f"no device is set on this thread: call aclrtSetDevice before "
                                                 f"{function} (CANN's aclrtGetDevice fails here)")
        return device

    # ------------------------------------------------------------------ root info and init
    @entry
    def HcclGetRootInfo(self, rootInfo: Any) -> int:
        self._require_device("HcclGetRootInfo")
        _check_out(rootInfo, "rootInfo")
        comm_id = uuid.uuid4().hex[:20]
        # the job secret travels with the root info (through the job's rendezvous) and is checked at attach
        blob = (ROOT_MAGIC + struct.pack("<II", ROOT_VERSION, os.getpid()) + comm_id.encode()
                + secrets.token_bytes(ROOT_SECRET_BYTES))
        ffi.memmove(ffi.cast("char *", rootInfo), blob.ljust(HCCL_ROOT_INFO_BYTES, b"\0"), HCCL_ROOT_INFO_BYTES)
        return 0

    @entry
    def HcclCommInitRootInfo(self, nRanks: int, rootInfo: Any, rank: int, comm: Any) -> int:
        return self._init_root(nRanks, rootInfo, rank, None, comm)

    @entry
    def HcclCommInitRootInfoConfig(self, nRanks: int, rootInfo: Any, rank: int, config: Any, comm: Any) -> int:
        _check_out(config, "config")
        return self._init_root(nRanks, rootInfo, rank, config, comm)

    def _init_root(self, n: int, root: Any, rank: int, config: Any, out: Any) -> int:
        self._require_device("HcclCommInitRootInfoConfig" if config is not None else "HcclCommInitRootInfo")
        _check_out(root, "rootInfo")
        _check_out(out, "comm")
        blob = bytes(ffi.buffer(ffi.cast("char *", root), HCCL_ROOT_INFO_BYTES))
        if not blob.startswith(ROOT_MAGIC):
            raise SimError(HcclResult.E_PARA, "rootInfo was not produced by HcclGetRootInfo of the emulator "
                                              "(bad magic); pass the 4108 bytes unchanged to every rank")
        comm_id = blob[16:36].decode("ascii", "replace")
        # the root info's secret, and the job's (hcomm run exports one per launch): a rank of another job that
        # got hold of this root info (e.g. through a shared HCOMM_RUN_JOB_DIR) is still refused at attach
        secret = blob[36:36 + ROOT_SECRET_BYTES] + (settings.value("HCOMM_JOB_SECRET") or "").encode()
        if n < 1:
            raise SimError(HcclResult.E_PARA, f"nRanks={n}; expected at least 1")
        cfg, name = self._config(config, comm_id)
        comm = self._new_comm(comm_id, name, rank, n, cfg, secret)
        remember_config(comm.handle, config)          # the fields zero copy and windows read (sim/zero_copy.py)
        out[0] = ffi.cast("HcclComm", comm.handle)
        return 0

    def _config(self, config: Any, default_name: str) -> "tuple[SimConfig, str]":
        cfg = read_config()
        name = default_name
        if config is None or config == ffi.NULL:
            return cfg, name
        head = bytes(ffi.buffer(ffi.cast("char *", config), 24))
        size, magic, version = struct.unpack_from("<QII", head)
        if magic != COMM_CONFIG_MAGIC:
            raise SimError(HcclResult.E_PARA, f"config magic word is 0x{magic:08x}, expected 0x{COMM_CONFIG_MAGIC:08X}; "
                                              "initialise it with HcclCommConfigInit")
        c = ffi.cast("HcclCommConfig *", config)
        if c.hcclBufferSize != NOT_SET_U32:
            if c.hcclBufferSize < 1:
                raise SimError(HcclResult.E_PARA, "config.hcclBufferSize=0; expected at least 1 (MiB)")
            cfg = dataclasses.replace(cfg, buffsize_mb=int(c.hcclBufferSize))
        if c.hcclExecTimeOut >= 0:
            cfg = dataclasses.replace(cfg, exec_timeout_s=settings.exec_wait_s(float(c.hcclExecTimeOut)))
        if c.hcclCommName[0] != b"\0":
            name = ffi.string(c.hcclCommName, 128).decode("utf-8", "replace")
        return cfg, name

    def _new_comm(self, comm_id: str, name: str, rank: int, n: int, cfg: SimConfig, secret: bytes) -> SimComm:
        with self.state.lock:
            handle = self.state.new_ptr_key()
            comm = SimComm(handle, comm_id, name, rank, n, cfg, secret)
            comm.device = getattr(self, "_device").current
            self.state.comms[handle] = comm
        try:
            comm.connect()
        except BaseException:
            with self.state.lock:
                del self.state.comms[handle]
            comm.destroy()
            raise
        _record_buffer(comm, "HcclCommInit")
        if self.traces_c_program:
            _trace.start(rank)   # HCOMM_TRACE of a C program (the Comm API starts it for Python programs)
        return comm

    @entry
    def HcclCommInitClusterInfo(self, clusterInfo: Any, rank: int, comm: Any) -> int:
        return self._init_cluster(clusterInfo, rank, None, comm)

    @entry
    def HcclCommInitClusterInfoConfig(self, clusterInfo: Any, rank: int, config: Any, comm: Any) -> int:
        return self._init_cluster(clusterInfo, rank, config, comm)

    def _init_cluster(self, path_c: Any, rank: int, config: Any, out: Any) -> int:
        self._require_device("HcclCommInitClusterInfo")
        _check_out(path_c, "clusterInfo")
        _check_out(out, "comm")
        path = c_string(path_c).decode()
        try:
            with open(path, "rb") as fh:
                raw = fh.read()
        except OSError as exc:
            raise SimError(HcclResult.E_OPEN_FILE_FAILURE, f"cannot open ranktable {path!r}: {exc.strerror}") from None
        try:
            table = json.loads(raw)
        except ValueError as exc:
            raise SimError(HcclResult.E_PARA, f"ranktable {path!r} is not valid JSON: {exc}") from None
        ranks = _ranktable_rank_ids(table, path)
        if rank not in ranks:
            raise SimError(HcclResult.E_PARA, f"rank={rank} is not a rank_id of ranktable {path!r} "
                                              f"(it lists {sorted(ranks)[:8]}{'...' if len(ranks) > 8 else ''})")
        # the job secret (hcomm run exports one per launch) keeps two jobs with the same ranktable and job id apart
        secret = (settings.value("HCOMM_JOB_SECRET") or "").encode()
        digest = hashlib.sha1(os.path.realpath(path).encode() + raw
                              + (settings.value("HCOMM_JOB_ID") or "").encode() + secret).hexdigest()[:20]
        cfg, name = self._config(config, digest)
        comm = self._new_comm(digest, name, rank, len(ranks), cfg, secret)
        out[0] = ffi.cast("HcclComm", comm.handle)
        return 0

    @entry
    def HcclCreateSubCommConfig(self, comm: Any, rankNum: int, rankIds: Any, subCommId: int, subCommRankId: int,
                                config: Any, subComm: Any) -> int:
        _check_out(comm, "comm")
        _check_out(subComm, "subComm")
        _check_out(rankIds, "rankIds")
        parent = self.state.comm(comm[0])
        if rankNum < 1 or rankNum > parent.nranks:
            raise SimError(HcclResult.E_PARA, f"rankNum={rankNum}; expected 1..{parent.nranks}")
        ids = [int(rankIds[i]) for i in range(rankNum)]
        if len(set(ids)) != len(ids) or any(not 0 <= r < parent.nranks for r in ids):
            raise SimError(HcclResult.E_PARA, f"rankIds={ids} must be distinct ranks of the parent (0..{parent.nranks - 1})")
        if not 0 <= subCommRankId < rankNum or ids[subCommRankId] != parent.rank:
            raise SimError(HcclResult.E_PARA, f"subCommRankId={subCommRankId} does not point at this rank "
                                              f"({parent.rank}) in rankIds={ids}")
        digest = hashlib.sha1(f"{parent.comm_id}/{subCommId}/{ids}".encode()).hexdigest()[:20]
        cfg, name = self._config(config, digest)
        if config is None or config == ffi.NULL:
            cfg = parent.config
        sub = self._new_comm(digest, name, subCommRankId, rankNum, cfg, parent.secret)
        subComm[0] = ffi.cast("HcclComm", sub.handle)
        return 0

    @entry
    def HcclCommInitAll(self, ndev: int, devices: Any, comms: Any) -> int:
        self._require_device("HcclCommInitAll")
        _check_out(devices, "devices")
        _check_out(comms, "comms")
        devs = [int(devices[i]) for i in range(ndev)]
        if ndev < 1 or len(set(devs)) != ndev:
            raise SimError(HcclResult.E_PARA, f"devices={devs}: expected ndev >= 1 distinct device ids")
        comm_id = uuid.uuid4().hex[:20]
        secret = secrets.token_bytes(ROOT_SECRET_BYTES)
        cfg = read_config()
        made: List[SimComm] = []
        try:
            with self.state.lock:
                for r in range(ndev):
                    handle = self.state.new_ptr_key()
                    c = SimComm(handle, comm_id, comm_id, r, ndev, cfg, secret)
                    c.device = devs[r]
                    self.state.comms[handle] = c
                    made.append(c)
            deadline = time.monotonic() + cfg.connect_timeout_s
            for c in made:        # all ranks live in this process: map everyone first, then confirm
                c.map_peers(deadline)
            for c in made:
                c.wait_connected(deadline)
            for c in made:
                c.unlink_names()
        except BaseException:
            for c in made:
                self.state.comms.pop(c.handle, None)
                c.destroy()
            raise
        for r, c in enumerate(made):
            _record_buffer(c, "HcclCommInitAll")
            comms[r] = ffi.cast("HcclComm", c.handle)
        return 0

    @entry
    def HcclCommDestroy(self, comm: Any) -> int:
        c = self.state.comm(comm)
        EXECUTOR.settle()
        clean = not c.async_error
        stranded = []
        with EXECUTOR.lock:
            for th in list(c.threads) + list(c.stream_threads.values()):
                q = th.queue
                if q.tasks:
                    stranded.append(_stranded(c, th, q))
                    EXECUTOR.fail_queue(q, HcclResult.E_INTERNAL, ACL_ERROR_RT_INTERNAL_ERROR,
                                        f"{q.name}: communicator {c.name} destroyed with tasks pending")
        # after a failed operation leftovers are a consequence, not a schedule bug: report only clean runs
        # records on the native collectives' own channels come from peers already in a collective this rank
        # never joins (it finalised first): their failure names this rank; here they are not a schedule bug
        leftovers = (c.unconsumed_channel_records(skip_protocol=NATIVE_PROTOCOL)
                     if c.config.check != "off" and not c.async_error else [])
        messages = [f"checker: rank {c.rank}, communicator {c.name}: {text} was recorded but never waited on"
                    for text in leftovers]
        if clean and c.config.check != "off":
            messages += stranded
        c.reports.extend(messages)
        messages += c.strict_findings          # e.g. a thread notify left set at the end of a batch
        if c.config.check == "warn":
            for message in messages:
                warn_caller(message, CheckerWarning)
        with self.state.lock:
            for th in c.threads:
                self.state.threads.pop(th.handle, None)
                # the stream of an acquired thread dies with it (the vendor frees the Thread and its Stream):
                # its aclrtStream handle from HcclThreadResGetInfo dangles from now on
                for key in [k for k, q in self.state.streams.items() if q is th.queue]:
                    self.state.release_stream(key, f"it was the stream of {th.label}, released by HcclCommDestroy "
                                                   f"of communicator {c.name}")
            for th in c.stream_threads.values():
                self.state.threads.pop(th.handle, None)
            for ch in c.channels.values():
                self.state.channels.pop(ch.handle, None)
            for context in c.engine_contexts.values():       # HcclEngineCtxCreate's memory dies with the comm
                self.state.device.remove(int(ffi.cast("uintptr_t", context.memory)))
            c.engine_contexts.clear()
            self.state.comms.pop(c.handle, None)
        EXECUTOR.retire(c, c.destroy)            # other ranks of this process may be polling its words
        if self.traces_c_program and _trace.ACTIVE:
            _trace.flush()                       # a C program never runs the exit-time flush
        if messages and c.config.check == "strict":  # everything is released; the schedule was still wrong
            raise SimError(HcclResult.E_INTERNAL, "; ".join(messages))
        return 0

    # ------------------------------------------------------------------ queries
    @entry
    def HcclGetRankId(self, comm: Any, rank: Any) -> int:
        _check_out(rank, "rank")
        rank[0] = self.state.comm(comm).rank
        return 0

    @entry
    def HcclGetRankSize(self, comm: Any, rankSize: Any) -> int:
        _check_out(rankSize, "rankSize")
        rankSize[0] = self.state.comm(comm).nranks
        return 0

    @entry
    def HcclGetCommName(self, comm: Any, commName: Any) -> int:
        _check_out(commName, "commName")
        name = self.state.comm(comm).name.encode()[:127] + b"\0"
        ffi.memmove(ffi.cast("char *", commName), name, len(name))
        return 0

    @entry
    def HcclGetCommAsyncError(self, comm: Any, asyncError: Any) -> int:
        _check_out(asyncError, "asyncError")
        asyncError[0] = self.state.comm(comm).async_error
        return 0

    def HcclGetErrorString(self, code: int) -> Any:
        return self._string(_ERROR_STRINGS.get(int(code), f"unknown HcclResult {int(code)}"))

    def HcclGetCommConfigCapability(self) -> int:
        return 12  # every HcclCommConfigCapability item up to HCCL_COMM_CONFIG_BUFFER_NAME

    # ------------------------------------------------------------------ buffers
    @entry
    def HcclGetHcclBuffer(self, comm: Any, buffer: Any, size: Any) -> int:
        _check_out(buffer, "buffer")
        _check_out(size, "size")
        c = self.state.comm(comm)
        if c.nranks == 1:     # the vendor documents NULL and 0 for a one-rank communicator: it has no peers
            buffer[0] = ffi.NULL
            size[0] = 0
            return 0
        buffer[0] = c.buf.ptr
        size[0] = c.buffer_bytes
        return 0

    @entry
    def HcclGetHcclBufferCleared(self, comm: Any, buffer: Any, size: Any) -> int:
        _check_out(buffer, "buffer")
        _check_out(size, "size")
        self.state.comm(comm)
        # hcomm @ 8958adb coll_communicator_mgr/api_c_adpt/resource/comm_mem_c_adpt.cc:192: only the
        # communicator-V2 path (Ascend 950) implements it; A2/A3 log "not supported" and return HCCL_E_NOT_SUPPORT
        # (the documentation says it returns the buffer zeroed: the source decides here).
        raise SimError(HcclResult.E_NOT_SUPPORT, "HcclGetHcclBufferCleared is not supported on A2/A3 "
                                                 "(use HcclGetHcclBuffer and clear what you need)")

    @entry
    def HcclChannelGetHcclBuffer(self, comm: Any, channel: int, buffer: Any, size: Any) -> int:
        _check_out(buffer, "buffer")
        _check_out(size, "size")
        c = self.state.comm(comm)
        ch = self.state.channel(channel)
        if ch.comm is not c:
            raise SimError(HcclResult.E_PARA, f"channel 0x{channel:x} belongs to another communicator")
        buffer[0] = ch.peer_buf.ptr
        size[0] = ch.peer_buf.size
        return 0

    # ------------------------------------------------------------------ threads
    @entry
    def HcclThreadAcquire(self, comm: Any, engine: int, threadNum: int, notifyNumPerThread: int, threads: Any) -> int:
        c = self.state.comm(comm)
        _check_out(threads, "threads")
        eng = TS_ENGINE_OF.get(_engine_value(engine, "HcclThreadAcquire"), Engine(engine))
        if threadNum < 1:
            raise SimError(HcclResult.E_PARA, f"threadNum={threadNum}; expected at least 1")
        if notifyNumPerThread > MAX_THREAD_NOTIFIES:
            raise SimError(HcclResult.E_PARA, f"notifyNumPerThread={notifyNumPerThread}; expected at most "
                                              f"{MAX_THREAD_NOTIFIES}")
        with self.state.lock:
            if len(c.threads) + threadNum > MAX_THREADS_PER_COMM:
                raise SimError(HcclResult.E_UNAVAIL,
                               f"thread quota: communicator {c.name} has {len(c.threads)} threads, {threadNum} more "
                               f"would exceed {MAX_THREADS_PER_COMM} (HcclThreadAcquire creates new threads on every "
                               "call on A2/A3: acquire once and cache the handles)")
            if c.thread_notifies + threadNum * notifyNumPerThread > MAX_NOTIFIES_PER_COMM:
                raise SimError(HcclResult.E_UNAVAIL,
                               f"notify quota: {c.thread_notifies} thread notifies in use, "
                               f"{threadNum * notifyNumPerThread} more would exceed {MAX_NOTIFIES_PER_COMM}")
            for i in range(threadNum):
                handle = self.state.new_thread_handle()
                q = Queue(f"rank {c.rank} thread 0x{handle:x}")
                q.comm = c
                th = SimThread(handle, c, int(eng), notifyNumPerThread, q, main=False)
                c.threads.append(th)
                self.state.threads[handle] = th
                threads[i] = handle
            c.thread_notifies += threadNum * notifyNumPerThread
        ledger.record(c.name, "thread", _engine_name(engine), threadNum, notifyNumPerThread, rank=c.rank,
                      function="HcclThreadAcquire")
        return 0

    @entry
    def HcclThreadAcquireWithStream(self, comm: Any, engine: int, stream: Any, notifyNum: int, thread: Any) -> int:
        c = self.state.comm(comm)
        if stream is None or stream == ffi.NULL:   # CHK_PTR_NULL(stream): thread_c_adpt.cc:315
            raise SimError(HcclResult.E_PTR, "stream is NULL; pass the aclrtStream the thread should wrap")
        _check_out(thread, "thread")
        eng = TS_ENGINE_OF.get(_engine_value(engine, "HcclThreadAcquireWithStream"), Engine(engine))
        if notifyNum > MAX_THREAD_NOTIFIES:
            raise SimError(HcclResult.E_PARA, f"notifyNum={notifyNum}; expected at most {MAX_THREAD_NOTIFIES}")
        q = self.state.stream(stream)
        key = id(q)   # one thread per (communicator, stream), whoever asks first
        with self.state.lock:
            th = c.stream_threads.get(key)
            if th is None:
                if eng not in STREAM_THREAD_ENGINES:
                    raise SimError(HcclResult.E_PARA, f"engine={engine}: only COMM_ENGINE_CPU, COMM_ENGINE_CPU_TS "
                                                      "and COMM_ENGINE_CCU threads can wrap a stream")
                handle = self.state.new_thread_handle()
                th = SimThread(handle, c, int(eng), notifyNum, q, main=True)
                c.stream_threads[key] = th
                self.state.threads[handle] = th
                made = ("thread", 1, notifyNum)
            elif key not in c.acquired_streams:     # the library's own collectives made it: first handed out now
                made = ("thread", 1, max(notifyNum, len(th.notifies)))
                th.notifies.extend([0] * (notifyNum - len(th.notifies)))
            elif notifyNum > len(th.notifies):
                made = ("notify", notifyNum - len(th.notifies), 0)
                th.notifies.extend([0] * (notifyNum - len(th.notifies)))
            else:
                made = None
            c.acquired_streams.add(key)
            if q.comm is None:
                q.comm = c
        if made is not None:
            ledger.record(c.name, made[0], _engine_name(engine), made[1], made[2], rank=c.rank,
                          function="HcclThreadAcquireWithStream")
        thread[0] = th.handle
        return 0

    @entry
    def HcclThreadResGetInfo(self, comm: Any, thread: int, resType: int, infoLen: int, info: Any) -> int:
        _check_out(info, "info")
        c = self.state.comm(comm)
        th = self.state.thread(thread)
        if th.comm is not c or resType != 0 or infoLen != ffi.sizeof("aclrtStream"):
            raise SimError(HcclResult.E_PARA, "expected THREAD_RES_TYPE_STREAM with infoLen == sizeof(aclrtStream)")
        for key, q in self.state.streams.items():
            if q is th.queue:
                ffi.cast("aclrtStream *", info)[0] = ffi.cast("aclrtStream", key)
                return 0
        key = self.state.new_ptr_key()
        self.state.streams[key] = th.queue
        ffi.cast("aclrtStream *", info)[0] = ffi.cast("aclrtStream", key)
        return 0

    # ------------------------------------------------------------------ channels
    @entry
    def HcclChannelAcquire(self, comm: Any, engine: int, channelDescs: Any, channelNum: int, channels: Any) -> int:
        _check_out(channelDescs, "channelDescs")
        _check_out(channels, "channels")
        c = self.state.comm(comm)
        if not 0 < channelNum <= 1048576:
            raise SimError(HcclResult.E_PARA, f"channelNum={channelNum}; expected 1..1048576")
        if engine not in CHANNEL_ENGINES:
            raise SimError(HcclResult.E_PARA, f"engine={engine}: channels exist for COMM_ENGINE_CPU, CPU_TS, AICPU, "
                                              "AICPU_TS and AIV only")
        protocols = AIV_CHANNEL_PROTOCOLS if engine == Engine.AIV else CHANNEL_PROTOCOLS | product.extra_channel_protocols()
        descs = ffi.cast("HcclChannelDesc *", channelDescs)
        requests = []
        for i in range(channelNum):
            d = descs[i]
            if d.header.magicWord != CHANNEL_DESC_MAGIC:
                raise SimError(HcclResult.E_PARA, f"channelDescs[{i}] magic word is 0x{d.header.magicWord:08x}; "
                                                  "initialise descriptors with HcclChannelDescInit")
            peer = int(d.remoteRank)
            if peer == c.rank or peer >= c.nranks:
                raise SimError(HcclResult.E_PARA, f"channelDescs[{i}].remoteRank={peer}; expected another rank "
                                                  f"in [0, {c.nranks}) (this is rank {c.rank})")
            proto = int(d.channelProtocol)
            if proto not in protocols:
                raise SimError(HcclResult.E_PARA, f"channelDescs[{i}].channelProtocol={proto} is not accepted for "
                                                  f"engine {engine} (expected one of {sorted(int(p) for p in protocols)})")
            if d.notifyNum > MAX_NOTIFIES_PER_CHANNEL:
                raise SimError(HcclResult.E_PARA, f"channelDescs[{i}].notifyNum={d.notifyNum}; expected at most "
                                                  f"{MAX_NOTIFIES_PER_CHANNEL}")
            requests.append((peer, int(engine), proto, int(d.notifyNum)))
        held = {id(ch) for ch in c.channels.values()}
        made = c.connect_channels(requests, self.state.new_channel_handle)
        with self.state.lock:
            for i, ch in enumerate(made):
                self.state.channels[ch.handle] = ch
                channels[i] = ch.handle
        _record_new_channels(c, engine, made, held)
        return 0

    @entry
    def HcclChannelDestroy(self, comm: Any, channels: Any, channelNum: int) -> int:
        self.state.comm(comm)
        raise SimError(HcclResult.E_NOT_SUPPORT, "HcclChannelDestroy only releases CCU channels (Ascend 950); "
                                                 "A2/A3 channels live until HcclCommDestroy")


def _engine_name(engine: int) -> str:
    """The CommEngine's name as the caller spelled it (CPU_TS stays CPU_TS), for the ledger."""
    try:
        return Engine(engine).name
    except ValueError:
        return str(engine)


def _record_new_channels(c: SimComm, engine: int, made: List[Any], held: "set[int]") -> None:
    """One ledger record per notify count for the channels this call created (reused ones are not new)."""
    fresh: "dict[int, list[int]]" = {}
    seen: "set[int]" = set()
    for ch in made:
        if id(ch) in held or id(ch) in seen:
            continue
        seen.add(id(ch))
        fresh.setdefault(ch.notify_num, []).append(ch.peer)
    for notifies, peers in fresh.items():
        ledger.record(c.name, "channel", _engine_name(engine), len(peers), notifies, rank=c.rank,
                      peers=tuple(peers), function="HcclChannelAcquire")


def _stranded(c: SimComm, th: SimThread, q: Queue) -> str:
    """The checker's words for a thread whose tasks never ran before its communicator was destroyed."""
    head = q.tasks[0]
    if head[0] == T_WAIT:
        waits = f"waits on thread notify {head.index}, which nothing recorded"
    elif head[0] == C_WAIT:
        waits = f"waits on channel notify {head.index} from rank {head.channel.peer}, which it never recorded"
    else:
        waits = f"is {head.name}"
    return (f"checker: rank {c.rank}, communicator {c.name}: destroyed while {th.label} still had {len(q.tasks)} "
            f"task(s) (step {q.executed} {waits}); they never ran: every thread's work must end before the stream "
            "that waits for it is synchronised (a missing record, or a thread left out of the join)")


def _record_buffer(c: SimComm, function: str) -> None:
    """The communicator's HCCL buffer, made with it (``2 x HCCL_BUFFSIZE`` per rank; none on one rank, whose
    HcclGetHcclBuffer answers NULL and 0)."""
    if c.nranks > 1:
        ledger.record(c.name, "buffer", "", c.buffer_bytes, 0, rank=c.rank, function=function)


def _ranktable_rank_ids(table: Any, path: str) -> List[int]:
    """Rank ids listed in a ranktable (1.0/1.2 server_list, or 2.0 rank_list)."""
    ids: List[int] = []
    try:
        if "rank_list" in table:
            ids = [int(r["rank_id"]) for r in table["rank_list"]]
        else:
            for server in table["server_list"]:
                ids.extend(int(d["rank_id"]) for d in server["device"])
    except (KeyError, TypeError, ValueError) as exc:
        raise SimError(HcclResult.E_PARA, f"ranktable {path!r}: cannot read rank ids ({exc!r})") from None
    if sorted(ids) != list(range(len(ids))):
        raise SimError(HcclResult.E_PARA, f"ranktable {path!r}: rank ids {sorted(ids)} are not 0..{len(ids) - 1}")
    return ids


_ERROR_STRINGS = {
    0: "no error", 1: "parameter error", 2: "empty pointer", 3: "memory error", 4: "internal error",
    5: "not support feature", 6: "not found specific resource", 7: "resource unavailable",
    8: "call system interface error", 9: "timeout", 10: "open file fail", 11: "tcp connect fail",
    12: "roce connect fail", 13: "tcp transfer fail", 14: "roce transfer fail", 15: "call runtime api fail",
    16: "call driver api fail", 17: "call profiling api fail", 18: "call cce api fail",
    19: "call network api fail", 20: "try again", 21: "error cqe", 22: "communicator suspended",
    23: "operator retry failed", 24: "out of memory", 1041: "see status output",
}
