"""hccl/hccl_res.h and hccl/hccl_channel.h on the emulator: the HCCL buffer, threads, engine contexts, channels.

Each follows the vendor's hcomm source for its checks and return codes (cited per function).
"""
from __future__ import annotations

from typing import Any, Dict, List, Tuple

from .._ffi import ffi
from ..enums import MAX_NOTIFIES_PER_COMM, MAX_THREAD_NOTIFIES, MAX_THREADS_PER_COMM, Engine, Protocol
from .comm import SimComm
from .notifies import MAX_NOTIFIES_PER_CHANNEL
from . import ledger
from .errors import HcclResult, SimError
from . import product
from .part import Part, check_out
from .queues import Queue, SimThread
from .state import c_string

__all__ = ["HcclResCalls", "HcclChannelCalls", "ENGINE_CTX_TAG_MAX"]

CHANNEL_DESC_MAGIC = 0x0F0F0F0F
ENGINE_CTX_TAG_MAX = 255
_THREAD_TYPE_TS = 0
_THREAD_CONFIG_MAGIC = 0x0F0F0F2F        # HCOMM_THREAD_CONFIG_MAGIC_WORD (hcomm_res_defs.h)
_ENGINES = range(0, 6)                   # CommEngine: CPU .. CCU


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


def _engine_name(engine: int) -> str:
    """The CommEngine's name as the caller spelled it (CPU_TS stays CPU_TS), for the ledger."""
    try:
        return Engine(engine).name
    except ValueError:
        return str(engine)


def _record_new_channels(c: SimComm, engine: int, made: List[Any], held: "set[int]") -> None:
    """One ledger record per notify count for the channels this call created (reused ones are not new)."""
    fresh: "dict[int, list[int]]" = {}
    seen = set(held)
    for ch in made:
        if id(ch) not in seen:
            seen.add(id(ch))
            fresh.setdefault(ch.notify_num, []).append(ch.peer)
    for notifies, peers in fresh.items():
        ledger.record(c.name, "channel", _engine_name(engine), len(peers), notifies, rank=c.rank,
                      peers=tuple(peers), function="HcclChannelAcquire")


def _tag(ptr: Any) -> str:
    check_out(ptr, "ctxTag")
    tag = c_string(ptr).decode("utf-8", "replace")
    if len(tag) > ENGINE_CTX_TAG_MAX:
        raise SimError(HcclResult.E_PARA, f"ctxTag has {len(tag)} characters; expected at most {ENGINE_CTX_TAG_MAX}")
    return tag


class _EngineCtx:
    """One engine context: memory the engine's data plane may use (registered as device memory)."""

    __slots__ = ("memory", "size")

    def __init__(self, size: int) -> None:
        self.memory = ffi.new("char[]", size)
        self.size = size


class HcclResCalls(Part):
    """The HCCL buffer, HcclThreadAcquire*, HcclEngineCtx* and HcclThreadExportToCommEngine (hccl_res_expt.h)."""

    HEADERS = ("hccl/hccl_res.h", "hccl/hccl_res_expt.h")

    # ------------------------------------------------------------------ buffers
    def HcclGetHcclBuffer(self, comm: Any, buffer: Any, size: Any) -> int:
        check_out(buffer, "buffer")
        check_out(size, "size")
        c = self.state.comm(comm)
        # the vendor documents NULL and 0 for a one-rank communicator: it has no peers
        buffer[0], size[0] = (ffi.NULL, 0) if c.nranks == 1 else (c.buf.ptr, c.buffer_bytes)
        return 0

    def HcclGetHcclBufferCleared(self, comm: Any, buffer: Any, size: Any) -> int:
        check_out(buffer, "buffer")
        check_out(size, "size")
        self.state.comm(comm)
        # hcomm @ 8958adb coll_communicator_mgr/api_c_adpt/resource/comm_mem_c_adpt.cc:192: only the
        # communicator-V2 path (Ascend 950) implements it; A2/A3 log "not supported" and return HCCL_E_NOT_SUPPORT
        # (the documentation says it returns the buffer zeroed: the source decides here).
        raise SimError(HcclResult.E_NOT_SUPPORT, "HcclGetHcclBufferCleared is not supported on A2/A3 "
                                                 "(use HcclGetHcclBuffer and clear what you need)")

    # ------------------------------------------------------------------ threads
    def HcclThreadAcquire(self, comm: Any, engine: int, threadNum: int, notifyNumPerThread: int, threads: Any) -> int:
        c = self.state.comm(comm)
        check_out(threads, "threads")
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

    def HcclThreadAcquireWithStream(self, comm: Any, engine: int, stream: Any, notifyNum: int, thread: Any) -> int:
        c = self.state.comm(comm)
        if stream is None or stream == ffi.NULL:   # CHK_PTR_NULL(stream): thread_c_adpt.cc:315
            raise SimError(HcclResult.E_PTR, "stream is NULL; pass the aclrtStream the thread should wrap")
        check_out(thread, "thread")
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

    def HcclThreadResGetInfo(self, comm: Any, thread: int, resType: int, infoLen: int, info: Any) -> int:
        check_out(info, "info")
        c = self.state.comm(comm)
        th = self.state.thread(thread)
        if th.comm is not c or resType != 0 or infoLen != ffi.sizeof("aclrtStream"):
            raise SimError(HcclResult.E_PARA, "expected THREAD_RES_TYPE_STREAM with infoLen == sizeof(aclrtStream)")
        key = next((k for k, q in self.state.streams.items() if q is th.queue), None)
        if key is None:                     # first asked: the thread's queue gets a stream handle
            key = self.state.new_ptr_key()
            self.state.streams[key] = th.queue
        ffi.cast("aclrtStream *", info)[0] = ffi.cast("aclrtStream", key)
        return 0

    # ------------------------------------------------------------------ threads with a config
    def HcclThreadAcquireWithConfig(self, comm: Any, engine: int, threadNum: int, type: int, config: Any,
                                    threads: Any) -> int:
        """HcclThreadAcquire with the notify count from a ThreadConfig (ThreadConfigInit); type THREAD_TYPE_TS."""
        self.state.comm(comm)
        check_out(config, "config")
        if type != _THREAD_TYPE_TS:
            raise SimError(HcclResult.E_PARA, f"type={type}; expected THREAD_TYPE_TS (0)")
        header = config.header
        if header.magicWord != _THREAD_CONFIG_MAGIC:
            raise SimError(HcclResult.E_PARA, f"config->header.magicWord=0x{header.magicWord:x}; expected "
                                              f"0x{_THREAD_CONFIG_MAGIC:x} (initialise it with ThreadConfigInit)")
        acquire = self.HcclThreadAcquire
        return int(acquire(comm, engine, threadNum, int(config.notifyNumPerThread), threads))

    # ------------------------------------------------------------------ threads seen from another engine
    def HcclThreadExportToCommEngine(self, comm: Any, threadNum: int, threads: Any, dstCommEngine: int,
                                     exportedThreads: Any) -> int:
        """hccl_res_expt.h: a thread usable from ``dstCommEngine`` (the custom-op samples export the host
        thread to AICPU_TS and the AICPU thread to CPU_TS).  The emulator runs every engine's tasks on the
        same queues, so the exported handle is the thread itself, after checking it is the comm's."""
        c = self.state.comm(comm)
        check_out(threads, "threads")
        check_out(exportedThreads, "exportedThreads")
        if threadNum < 1:
            raise SimError(HcclResult.E_PARA, f"threadNum={threadNum}; expected at least 1")
        if int(dstCommEngine) not in _ENGINES:
            raise SimError(HcclResult.E_PARA, f"dstCommEngine={int(dstCommEngine)} is not a CommEngine")
        for i in range(threadNum):
            handle = int(threads[i])
            th = self.state.threads.get(handle)
            if th is None or th.comm is not c:
                raise SimError(HcclResult.E_PARA, f"threads[{i}]=0x{handle:x} is not a thread of communicator "
                                                  f"{c.name}")
            exportedThreads[i] = handle
        return 0

    # ------------------------------------------------------------------ engine contexts
    # hcomm: HcclEngineCtxCreate/Get/Copy (independent-op context manager, framework/hcom): comm, ctxTag and ctx
    # NULL -> HCCL_E_PTR; strlen(ctxTag) > HCCL_OP_TAG_LEN_MAX (255) or size == 0 -> HCCL_E_PARA; a context is
    # keyed by communicator + ctxTag + engine and lives until HcclEngineCtxDestroy or the communicator's destroy.
    def _contexts(self, comm: Any) -> Dict[Tuple[str, int], _EngineCtx]:
        return self.state.comm(comm).engine_contexts

    @staticmethod
    def _found(contexts: Dict[Tuple[str, int], _EngineCtx], tag: str, engine: int, pop: bool = False) -> _EngineCtx:
        """The context of ``tag`` and ``engine`` (taken out of ``contexts`` when ``pop``); HCCL_E_NOT_FOUND if none."""
        key = (tag, int(engine))
        found = contexts.pop(key, None) if pop else contexts.get(key)
        if found is None:
            raise SimError(HcclResult.E_NOT_FOUND, f"no engine context with ctxTag={tag!r} for engine {int(engine)}")
        return found

    def HcclEngineCtxCreate(self, comm: Any, ctxTag: Any, engine: int, size: int, ctx: Any) -> int:
        contexts = self._contexts(comm)
        tag = _tag(ctxTag)
        check_out(ctx, "ctx")
        if size == 0:
            raise SimError(HcclResult.E_PARA, "size=0; an engine context needs at least one byte")
        key = (tag, int(engine))
        if key in contexts:
            raise SimError(HcclResult.E_PARA, f"an engine context with ctxTag={tag!r} for engine {int(engine)} "
                                              "already exists (HcclEngineCtxGet it, or destroy it first)")
        made = _EngineCtx(int(size))
        addr = int(ffi.cast("uintptr_t", made.memory))
        self.state.device.add(addr, made.size, f"engine context {tag!r}")
        contexts[key] = made
        ctx[0] = made.memory
        return 0

    def HcclEngineCtxGet(self, comm: Any, ctxTag: Any, engine: int, ctx: Any, size: Any) -> int:
        contexts = self._contexts(comm)
        tag = _tag(ctxTag)
        check_out(ctx, "ctx")
        check_out(size, "size")
        found = self._found(contexts, tag, engine)
        ctx[0] = found.memory
        size[0] = found.size
        return 0

    def HcclEngineCtxCopy(self, comm: Any, engine: int, ctxTag: Any, srcCtx: Any, size: int, dstCtxOffset: int) -> int:
        contexts = self._contexts(comm)
        tag = _tag(ctxTag)
        check_out(srcCtx, "srcCtx")
        if size == 0:
            raise SimError(HcclResult.E_PARA, "size=0; expected the number of bytes to copy")
        found = self._found(contexts, tag, engine)
        if dstCtxOffset + size > found.size:
            raise SimError(HcclResult.E_PARA, f"dstCtxOffset={dstCtxOffset} + size={size} exceeds the context's "
                                              f"{found.size} bytes")
        ffi.memmove(found.memory + dstCtxOffset, srcCtx, size)
        return 0

    def HcclEngineCtxDestroy(self, comm: Any, ctxTag: Any, engine: int) -> int:
        contexts = self._contexts(comm)
        found = self._found(contexts, _tag(ctxTag), engine, pop=True)
        self.state.device.remove(int(ffi.cast("uintptr_t", found.memory)))
        return 0


class HcclChannelCalls(Part):
    """HcclChannelAcquire, HcclChannelDestroy, HcclChannelGetHcclBuffer."""

    HEADERS = ("hccl/hccl_channel.h",)

    def HcclChannelGetHcclBuffer(self, comm: Any, channel: int, buffer: Any, size: Any) -> int:
        check_out(buffer, "buffer")
        check_out(size, "size")
        c = self.state.comm(comm)
        ch = self.state.channel(channel)
        if ch.comm is not c:
            raise SimError(HcclResult.E_PARA, f"channel 0x{channel:x} belongs to another communicator")
        buffer[0] = ch.peer_buf.ptr
        size[0] = ch.peer_buf.size
        return 0

    # ------------------------------------------------------------------ channels
    def HcclChannelAcquire(self, comm: Any, engine: int, channelDescs: Any, channelNum: int, channels: Any) -> int:
        check_out(channelDescs, "channelDescs")
        check_out(channels, "channels")
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

    def HcclChannelDestroy(self, comm: Any, channels: Any, channelNum: int) -> int:
        self.state.comm(comm)
        raise SimError(HcclResult.E_NOT_SUPPORT, "HcclChannelDestroy only releases CCU channels (Ascend 950); "
                                                 "A2/A3 channels live until HcclCommDestroy")
