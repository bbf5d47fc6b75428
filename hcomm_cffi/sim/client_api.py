"""Host calls that real clients make beyond the collectives: engine contexts, names, configs, rank graph.

Mixed into SimLibrary.  Each follows the vendor's hcomm source for its checks and return codes
(cited per function); what the emulator's one-host world cannot mean (network layers beyond the
first, heterogeneous clusters) is answered as a single-server communicator would answer it.
"""
from __future__ import annotations

from typing import Any, Dict, List, Tuple

from .._ffi import ffi
from .errors import HcclResult, SimError, entry
from . import product
from .state import SimState, c_string

__all__ = ["ClientCalls", "ENGINE_CTX_TAG_MAX"]

#: hcomm HCCL_OP_TAG_LEN_MAX / HCCL_RES_TAG_MAX_LEN: the longest ctxTag (HcclEngineCtxCreate checks strlen > 255)
ENGINE_CTX_TAG_MAX = 255
_HCCL_DETERMINISTIC = 0
_THREAD_TYPE_TS = 0
_THREAD_CONFIG_MAGIC = 0x0F0F0F2F        # HCOMM_THREAD_CONFIG_MAGIC_WORD (hcomm_res_defs.h)
_COMM_TOPO_1DMESH = 1
_COMM_LINK_MAGIC_WORD = 0x0F0E0F0F        # hccl/hccl_rank_graph.h
_COMM_ADDR_TYPE_ID = 2
_ENDPOINT_LOC_TYPE_DEVICE = 0
_ENGINES = range(0, 6)                   # CommEngine: CPU .. CCU
_HCCL_HETEROG_MODE_HOMOGENEOUS = 0


def _out(ptr: Any, what: str) -> None:
    if ptr is None or ptr == ffi.NULL:
        raise SimError(HcclResult.E_PTR, f"{what} is NULL")


def _tag(ptr: Any) -> str:
    _out(ptr, "ctxTag")
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


class ClientCalls:
    """HcclEngineCtx*, HcclCommGetHandleWithName, HcclGet/SetConfig, HcclThreadAcquireWithConfig, HcclRankGraph*."""

    state: SimState

    def _client_state(self) -> Dict[str, Any]:
        return self.state.client_calls

    # ------------------------------------------------------------------ engine contexts
    # hcomm: HcclEngineCtxCreate/Get/Copy (independent-op context manager, framework/hcom): comm, ctxTag and ctx
    # NULL -> HCCL_E_PTR; strlen(ctxTag) > HCCL_OP_TAG_LEN_MAX (255) or size == 0 -> HCCL_E_PARA; a context is
    # keyed by communicator + ctxTag + engine and lives until HcclEngineCtxDestroy or the communicator's destroy.
    def _contexts(self, comm: Any) -> Dict[Tuple[str, int], _EngineCtx]:
        c = self.state.comm(comm)
        contexts: Dict[Tuple[str, int], _EngineCtx] = c.engine_contexts
        return contexts

    @entry
    def HcclEngineCtxCreate(self, comm: Any, ctxTag: Any, engine: int, size: int, ctx: Any) -> int:
        contexts = self._contexts(comm)
        tag = _tag(ctxTag)
        _out(ctx, "ctx")
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

    @entry
    def HcclEngineCtxGet(self, comm: Any, ctxTag: Any, engine: int, ctx: Any, size: Any) -> int:
        contexts = self._contexts(comm)
        tag = _tag(ctxTag)
        _out(ctx, "ctx")
        _out(size, "size")
        found = contexts.get((tag, int(engine)))
        if found is None:
            raise SimError(HcclResult.E_NOT_FOUND, f"no engine context with ctxTag={tag!r} for engine {int(engine)}")
        ctx[0] = found.memory
        size[0] = found.size
        return 0

    @entry
    def HcclEngineCtxCopy(self, comm: Any, engine: int, ctxTag: Any, srcCtx: Any, size: int, dstCtxOffset: int) -> int:
        contexts = self._contexts(comm)
        tag = _tag(ctxTag)
        _out(srcCtx, "srcCtx")
        if size == 0:
            raise SimError(HcclResult.E_PARA, "size=0; expected the number of bytes to copy")
        found = contexts.get((tag, int(engine)))
        if found is None:
            raise SimError(HcclResult.E_NOT_FOUND, f"no engine context with ctxTag={tag!r} for engine {int(engine)}")
        if dstCtxOffset + size > found.size:
            raise SimError(HcclResult.E_PARA, f"dstCtxOffset={dstCtxOffset} + size={size} exceeds the context's "
                                              f"{found.size} bytes")
        ffi.memmove(found.memory + dstCtxOffset, srcCtx, size)
        return 0

    @entry
    def HcclEngineCtxDestroy(self, comm: Any, ctxTag: Any, engine: int) -> int:
        contexts = self._contexts(comm)
        tag = _tag(ctxTag)
        found = contexts.pop((tag, int(engine)), None)
        if found is None:
            raise SimError(HcclResult.E_NOT_FOUND, f"no engine context with ctxTag={tag!r} for engine {int(engine)}")
        self.state.device.remove(int(ffi.cast("uintptr_t", found.memory)))
        return 0

    # ------------------------------------------------------------------ communicators by name
    @entry
    def HcclCommGetHandleWithName(self, commName: Any, comm: Any) -> int:
        """hcomm op_base HcclCommGetHandleWithName: NULL -> HCCL_E_PTR, an unknown name -> HCCL_E_PARA.

        One process may hold one communicator of a name per device (a thread per device): the calling
        thread's current device (aclrtSetDevice) picks among them, as the vendor's per-device lookup does.
        """
        _out(commName, "commName")
        _out(comm, "comm")
        name = c_string(commName).decode("utf-8", "replace")
        with self.state.lock:
            found = [c for c in self.state.comms.values() if c.name == name and not c.destroyed]
        if not found:
            raise SimError(HcclResult.E_PARA, f"no communicator named {name!r} in this process")
        if len(found) > 1:
            device = getattr(self, "_device").current
            mine = [c for c in found if c.device == device]
            if len(mine) != 1:
                raise SimError(HcclResult.E_PARA, f"{len(found)} communicators are named {name!r} in this process and "
                                                  f"{len(mine)} of them on this thread's device {device}; set the "
                                                  "device of the one you want first (aclrtSetDevice)")
            found = mine
        comm[0] = ffi.cast("HcclComm", found[0].handle)
        return 0

    # ------------------------------------------------------------------ process-wide configuration
    # hcomm HcclSetConfig/HcclGetConfig: only HCCL_DETERMINISTIC; its value is 0 or 1, anything else HCCL_E_PARA.
    @entry
    def HcclSetConfig(self, config: int, configValue: int) -> int:
        if config != _HCCL_DETERMINISTIC:
            raise SimError(HcclResult.E_NOT_SUPPORT, f"config={config}; only HCCL_DETERMINISTIC (0) is supported")
        if configValue not in (0, 1):
            raise SimError(HcclResult.E_PARA, f"HCCL_DETERMINISTIC value={configValue}; expected 0 or 1")
        self._client_state()["deterministic"] = int(configValue)
        return 0

    @entry
    def HcclGetConfig(self, config: int, configValue: Any) -> int:
        _out(configValue, "configValue")
        if config != _HCCL_DETERMINISTIC:
            raise SimError(HcclResult.E_NOT_SUPPORT, f"config={config}; only HCCL_DETERMINISTIC (0) is supported")
        configValue[0].value = self._client_state().get("deterministic", 0)
        return 0

    # ------------------------------------------------------------------ threads with a config
    @entry
    def HcclThreadAcquireWithConfig(self, comm: Any, engine: int, threadNum: int, type: int, config: Any,
                                    threads: Any) -> int:
        """HcclThreadAcquire with the notify count from a ThreadConfig (ThreadConfigInit); type THREAD_TYPE_TS."""
        self.state.comm(comm)
        _out(config, "config")
        if type != _THREAD_TYPE_TS:
            raise SimError(HcclResult.E_PARA, f"type={type}; expected THREAD_TYPE_TS (0)")
        header = config.header
        if header.magicWord != _THREAD_CONFIG_MAGIC:
            raise SimError(HcclResult.E_PARA, f"config->header.magicWord=0x{header.magicWord:x}; expected "
                                              f"0x{_THREAD_CONFIG_MAGIC:x} (initialise it with ThreadConfigInit)")
        acquire = getattr(self, "HcclThreadAcquire")
        return int(acquire(comm, engine, threadNum, int(config.notifyNumPerThread), threads))

    # ------------------------------------------------------------------ rank graph: one server, one layer
    # On one host every rank is in network layer 0, one topology instance of the 1D-mesh type (the
    # server's HCCS mesh); hcomm's rank-graph queries answer from the cluster's rank table the same way
    # for a single server.  Returned arrays belong to the communicator (valid until HcclCommDestroy).
    def _graph(self, comm: Any, layer: int) -> Any:
        c = self.state.comm(comm)
        if layer != 0:
            raise SimError(HcclResult.E_PARA, f"netLayer={layer}; this communicator has one network layer (0)")
        return c

    def _answer(self, c: Any, values: List[int], out: Any, count: Any, names: Tuple[str, str]) -> int:
        """``*out`` = an array of ``values`` the communicator keeps, ``*count`` = its length."""
        _out(out, names[0])
        _out(count, names[1])
        key = f"{names[0]} {values}"
        array = c.rank_graph.get(key)
        if array is None:
            array = c.rank_graph[key] = ffi.new("uint32_t[]", values)
        out[0] = array
        count[0] = len(values)
        return 0

    def _topology(self, comm: Any, layer: int, topoType: Any, inst: int = 0) -> int:
        self._graph(comm, layer)
        if inst != 0:
            raise SimError(HcclResult.E_PARA, f"topoInstId={inst}; layer 0 has one topology instance (0)")
        _out(topoType, "topoType")
        topoType[0] = _COMM_TOPO_1DMESH
        return 0

    @entry
    def HcclRankGraphGetLayers(self, comm: Any, netLayers: Any, netLayerNum: Any) -> int:
        return self._answer(self.state.comm(comm), [0], netLayers, netLayerNum, ("netLayers", "netLayerNum"))

    @entry
    def HcclRankGraphGetRanksByLayer(self, comm: Any, netLayer: int, ranks: Any, rankNum: Any) -> int:
        c = self._graph(comm, netLayer)
        return self._answer(c, list(range(c.nranks)), ranks, rankNum, ("ranks", "rankNum"))

    @entry
    def HcclRankGraphGetRankSizeByLayer(self, comm: Any, netLayer: int, rankNum: Any) -> int:
        c = self._graph(comm, netLayer)
        _out(rankNum, "rankNum")
        rankNum[0] = c.nranks
        return 0

    @entry
    def HcclRankGraphGetTopoTypeByLayer(self, comm: Any, netLayer: int, topoType: Any) -> int:
        return self._topology(comm, netLayer, topoType)

    @entry
    def HcclRankGraphGetInstSizeListByLayer(self, comm: Any, netLayer: int, instSizeList: Any, listSize: Any) -> int:
        c = self._graph(comm, netLayer)
        return self._answer(c, [c.nranks], instSizeList, listSize, ("instSizeList", "listSize"))

    @entry
    def HcclRankGraphGetTopoInstsByLayer(self, comm: Any, netLayer: int, topoInsts: Any, topoInstNum: Any) -> int:
        return self._answer(self._graph(comm, netLayer), [0], topoInsts, topoInstNum, ("topoInsts", "topoInstNum"))

    @entry
    def HcclRankGraphGetTopoType(self, comm: Any, netLayer: int, topoInstId: int, topoType: Any) -> int:
        return self._topology(comm, netLayer, topoType, topoInstId)

    @entry
    def HcclRankGraphGetRanksByTopoInst(self, comm: Any, netLayer: int, topoInstId: int, ranks: Any,
                                        rankNum: Any) -> int:
        c = self._graph(comm, netLayer)
        if topoInstId != 0:
            raise SimError(HcclResult.E_PARA, f"topoInstId={topoInstId}; layer 0 has one topology instance (0)")
        return self._answer(c, list(range(c.nranks)), ranks, rankNum, ("ranks", "rankNum"))

    @entry
    def HcclRankGraphGetLinks(self, comm: Any, netLayer: int, srcRank: int, dstRank: int, links: Any,
                              linkNum: Any) -> int:
        """One HCCS link, one hop, between two ranks of the server (the ranks' endpoints: device = rank)."""
        c = self._graph(comm, netLayer)
        _out(links, "links")
        _out(linkNum, "linkNum")
        for what, rank in (("srcRank", srcRank), ("dstRank", dstRank)):
            if not 0 <= rank < c.nranks:
                raise SimError(HcclResult.E_PARA, f"{what}={rank} is outside [0, {c.nranks})")
        if srcRank == dstRank:
            raise SimError(HcclResult.E_PARA, f"srcRank == dstRank == {srcRank}: a rank has no link to itself")
        key = f"links {srcRank} {dstRank}"
        link = c.rank_graph.get(key)
        if link is None:
            link = c.rank_graph[key] = ffi.new("CommLink[1]")
            link[0].header.version = 1                       # COMM_LINK_VERSION
            link[0].header.magicWord = _COMM_LINK_MAGIC_WORD
            link[0].header.size = ffi.sizeof("CommLink")
            for desc, rank in ((link[0].srcEndpointDesc, srcRank), (link[0].dstEndpointDesc, dstRank)):
                desc.protocol = product.link_protocol()
                desc.commAddr.type = _COMM_ADDR_TYPE_ID
                desc.commAddr.id = rank
                desc.loc.locType = _ENDPOINT_LOC_TYPE_DEVICE
                desc.loc.device.devPhyId = rank
            link[0].linkAttr.linkProtocol = product.link_protocol()
            link[0].linkAttr.hop = 1
        links[0] = link
        linkNum[0] = 1
        return 0

    # ------------------------------------------------------------------ threads seen from another engine
    @entry
    def HcclThreadExportToCommEngine(self, comm: Any, threadNum: int, threads: Any, dstCommEngine: int,
                                     exportedThreads: Any) -> int:
        """hccl_res_expt.h: a thread usable from ``dstCommEngine`` (the custom-op samples export the host
        thread to AICPU_TS and the AICPU thread to CPU_TS).  The emulator runs every engine's tasks on the
        same queues, so the exported handle is the thread itself, after checking it is the comm's."""
        c = self.state.comm(comm)
        _out(threads, "threads")
        _out(exportedThreads, "exportedThreads")
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

    @entry
    def HcclGetHeterogMode(self, comm: Any, mode: Any) -> int:
        self.state.comm(comm)
        _out(mode, "mode")
        mode[0] = _HCCL_HETEROG_MODE_HOMOGENEOUS
        return 0

