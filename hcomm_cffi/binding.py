"""One checked Python method per HCCL/HCOMM/ACL C function: nonzero return codes become typed exceptions.

``Binding(lib)`` wraps any object honouring the lib contract (``CannLibrary``, the emulator's
``SimLibrary``, a test double).  Out-parameters become return values; pointers are passed through
as cdata; counts, handles and enums are ints.

The methods are generated, once at import, from one declarative table (:data:`C_FUNCTIONS`, in
the manner of vLLM's ``pynccl_wrapper``): each entry gives the method, the C prototype, the
argument kinds and the declared out-parameters.  Every method runs the same template -- one C
call, one ``if rc: raise self._error(...)`` -- written out per method (see
``calltable.source_of(Binding, name)``) so the hot data-plane calls cost what a hand-written
method costs.  The few methods that validate or reshape their arguments beyond a table entry
are written by hand and call the table's private raw entries (``_HcclCommInitRootInfo``, ...).
Type checkers and IDEs see the generated methods through ``_binding_methods.BindingMethods``, their
typed signatures written from the same table (``typed_methods_source``; ``scripts/generate_typed.py``).
"""
from __future__ import annotations

import os
import threading
from typing import Any, List, Optional, Sequence, Tuple, Union

from ._binding_methods import BindingMethods
from ._ffi import ffi
from .calltable import CFunction, Out, OutArray, install, stub_source
from .enums import HCCL_ROOT_INFO_BYTES, MemMallocPolicy
from .errors import ACL_ERROR_REPEAT_INITIALIZE, HcclError, error_for
from .initializers import comm_config_init
from .types import CData, PathLike

__all__ = ["Binding", "get_binding", "reset_binding", "C_FUNCTIONS", "typed_methods_source"]

_U32_MAX = 0xFFFFFFFF
_COMM_NAME_BYTES = 256            # HcclGetCommName writes up to 128 chars; leave headroom
_CLUSTER_INFO_MAX = 4095          # ranktable path limit (4096 bytes with the NUL)
_CONFIG_PTR = ffi.typeof("HcclCommConfig *")


# ---------------------------------------------------------------------------------------------
# argument helpers (the table's expressions and checks call these)

def _c_string(value: Any) -> Optional[str]:
    """Text from a ``char *`` cdata (or bytes/str from a Python lib); None for NULL/empty."""
    if value is None:
        return None
    if isinstance(value, str):
        return value or None
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace") or None
    if value == ffi.NULL:
        return None
    return ffi.string(value).decode("utf-8", "replace") or None


def _uint(name: str, value: Any, low: int = 0, high: int = _U32_MAX) -> int:
    """``value`` if it is an int in ``low..high``, else ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name}={value!r} is not an int; expected an int in {low}..{high}")
    if not low <= value <= high:
        raise ValueError(f"{name}={value!r} is out of range; expected an int in {low}..{high}")
    return value


def _size(value: Any) -> None:
    """ValueError unless ``value`` is a positive int number of bytes."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"size={value!r} is not a positive int number of bytes")


def _fits(count: int, capacity_name: str, capacity: int) -> None:
    """ValueError if ``count`` bytes do not fit the ``capacity`` of the destination."""
    if count > capacity:
        raise ValueError(f"count={count} exceeds {capacity_name}={capacity}; the destination is too small")


def _tag(tag: Union[None, str, bytes]) -> CData:
    """A ``const char *`` argument: None is NULL (to the vendor an empty string is a tag, not "no tag")."""
    if tag is None:
        return ffi.NULL
    return tag.encode("utf-8") if isinstance(tag, str) else tag


def _count_of(name: str, array: CData, n: Optional[int], nonempty: bool = False) -> int:
    """Element count to pass with a cdata array: ``n`` if given (checked against the array), else its length."""
    try:
        length: Optional[int] = len(array)
    except TypeError:
        length = None
    if n is None:
        if length is None:
            raise ValueError(f"{name} is a pointer ({ffi.typeof(array).cname}); pass its element count as n")
        count = length
    else:
        count = _uint("n", n)
        if length is not None and n > length:
            raise ValueError(f"n={n} exceeds the {length} elements of {name}")
    if nonempty and count == 0:
        raise ValueError(f"{name} is empty; expected at least one element")
    return count


def _config_ptr(config: Optional[CData]) -> CData:
    """An ``HcclCommConfig *`` view of a v11 or v10 config cdata (both share the v10 prefix)."""
    if config is None:
        return None
    try:
        ctype = ffi.typeof(config)
    except TypeError:
        raise ValueError(
            f"config={config!r} is not a cdata HcclCommConfig pointer; build one with "
            "hcomm_cffi.initializers.make_comm_config()"
        ) from None
    if ctype is _CONFIG_PTR:
        return config
    if ctype is ffi.typeof("HcclCommConfigV10 *"):
        return ffi.cast(_CONFIG_PTR, config)
    raise ValueError(
        f"config has C type {ctype.cname!r}; expected 'HcclCommConfig *' (from make_comm_config/comm_config_init)"
    )


# ---------------------------------------------------------------------------------------------
# the table: one entry per C function (prototypes as declared in build_ffi.py)

_HANDLE = Out("HcclComm *", "{}[0]")                      # an out-parameter returning the handle itself
_BUFFER = Out("void **", 'ffi.cast("char *", {}[0])')      # an out-pointer returned as ``char *``
_SIZE = Out("uint64_t *")
_STR = "Union[str, bytes]"
_RX = "thread: int, channel: int, dst: CData, src: CData"  # the operands of a one-sided transfer
_RED = "count: int, dtype: int, op: int"

C_FUNCTIONS: Tuple[CFunction, ...] = (
    # ---- communicators (libhcomm.so / libhccl.so)
    CFunction("get_root_info", "HcclResult HcclGetRootInfo(HcclRootInfo* rootInfo)",
              doc="on the root rank: the 4108 opaque bytes every rank passes to comm_init_root_info.",
              returns="bytes", args=(Out("HcclRootInfo *", "bytes(ffi.buffer({}))"),)),
    CFunction("_HcclCommInitRootInfo",
              "HcclResult HcclCommInitRootInfo(uint32_t nRanks, const HcclRootInfo* rootInfo, uint32_t rank, HcclComm* comm)",
              "n_ranks: int, info: CData, rank: int", returns="CData",
              args=("n_ranks", "info", "rank", _HANDLE), detail="n_ranks={n_ranks} rank={rank}"),
    CFunction("_HcclCommInitRootInfoConfig",
              "HcclResult HcclCommInitRootInfoConfig(uint32_t nRanks, const HcclRootInfo* rootInfo, uint32_t rank, "
              "const HcclCommConfig* config, HcclComm* comm)",
              "n_ranks: int, info: CData, rank: int, config: CData", returns="CData",
              args=("n_ranks", "info", "rank", "config", _HANDLE), detail="n_ranks={n_ranks} rank={rank}"),
    CFunction("_HcclCommInitClusterInfo",
              "HcclResult HcclCommInitClusterInfo(const char* clusterInfo, uint32_t rank, HcclComm* comm)",
              "path: bytes, rank: int", returns="CData", args=("path", "rank", _HANDLE),
              detail="ranktable {path.decode(errors='replace')}, rank={rank}"),
    CFunction("_HcclCommInitClusterInfoConfig",
              "HcclResult HcclCommInitClusterInfoConfig(const char* clusterInfo, uint32_t rank, HcclCommConfig* config, "
              "HcclComm* comm)",
              "path: bytes, rank: int, config: CData", returns="CData", args=("path", "rank", "config", _HANDLE),
              detail="ranktable {path.decode(errors='replace')}, rank={rank}"),
    CFunction("_HcclCreateSubCommConfig",
              "HcclResult HcclCreateSubCommConfig(HcclComm* comm, uint32_t rankNum, uint32_t* rankIds, uint64_t subCommId, "
              "uint32_t subCommRankId, HcclCommConfig* config, HcclComm* subComm)",
              "parent: CData, n: int, ids: CData, sub_comm_id: int, sub_comm_rank_id: int, config: CData",
              returns="CData", args=("parent", "n", "ids", "sub_comm_id", "sub_comm_rank_id", "config", _HANDLE)),
    CFunction("_HcclCommInitAll", "HcclResult HcclCommInitAll(uint32_t ndev, int32_t* devices, HcclComm* comms)",
              "n: int, devices: CData", returns="List[CData]", args=("n", "devices", OutArray("HcclComm", "n"))),
    CFunction("comm_destroy", "HcclResult HcclCommDestroy(HcclComm comm)", "comm: CData",
              "release the communicator and everything acquired from it."),
    CFunction("get_rank_id", "HcclResult HcclGetRankId(HcclComm comm, uint32_t* rank)", "comm: CData",
              "this process's rank in ``comm``.", "int", args=("comm", Out("uint32_t *"))),
    CFunction("get_rank_size", "HcclResult HcclGetRankSize(HcclComm comm, uint32_t* rankSize)", "comm: CData",
              "number of ranks in ``comm``.", "int", args=("comm", Out("uint32_t *"))),
    CFunction("get_comm_name", "HcclResult HcclGetCommName(HcclComm comm, char* commName)", "comm: CData",
              "the communicator's name.", "str",
              args=("comm", OutArray("char", "_COMM_NAME_BYTES", 'ffi.string({}).decode("utf-8", "replace")'))),
    CFunction("comm_get_handle_with_name", "HcclResult HcclCommGetHandleWithName(const char* commName, HcclComm* comm)",
              f"name: {_STR}", "the communicator called ``name``.", "CData", args=("_tag(name)", _HANDLE),
              detail="name={name!r}"),
    CFunction("get_comm_async_error", "HcclResult HcclGetCommAsyncError(HcclComm comm, HcclResult* asyncError)",
              "comm: CData", "the asynchronous HcclResult recorded on ``comm`` (0 = none).", "int",
              args=("comm", Out("HcclResult *"))),
    CFunction("get_error_string", "const char* HcclGetErrorString(HcclResult code)", "code: int",
              "the library's short text for an HcclResult code.", "str", checked=False, result="_c_string(rc) or ''"),
    CFunction("get_comm_config_capability", "uint32_t HcclGetCommConfigCapability(void)",
              doc="config items with an enum value below this number are supported.", returns="int",
              checked=False, result="int(rc)"),
    CFunction("set_config", "HcclResult HcclSetConfig(HcclConfig config, int32_t configValue)",
              "config: int, value: int", "set a process-wide option (only HCCL_DETERMINISTIC = 0 exists)."),
    CFunction("get_config", "HcclResult HcclGetConfig(HcclConfig config, HcclConfigValue* configValue)", "config: int",
              "read a process-wide option.", "int", args=("config", Out("HcclConfigValue *", "int({}.value)"))),
    CFunction("comm_suspend", "HcclResult HcclCommSuspend(HcclComm comm)", "comm: CData",
              "suspend a communicator (fault handling)."),
    CFunction("comm_resume", "HcclResult HcclCommResume(HcclComm comm)", "comm: CData",
              "resume a suspended communicator."),
    CFunction("group_start", "HcclResult HcclGroupStart(void)", doc="begin a group of operations."),
    CFunction("group_end", "HcclResult HcclGroupEnd(void)", doc="end a group of operations."),
    CFunction("barrier", "HcclResult HcclBarrier(HcclComm comm, aclrtStream stream)", "comm: CData, stream: CData",
              "enqueue a barrier on ``stream``."),

    # ---- resources
    CFunction("get_hccl_buffer", "HcclResult HcclGetHcclBuffer(HcclComm comm, void** buffer, uint64_t* size)",
              "comm: CData", "(``char *`` to this rank's communicator-owned buffer, its size in bytes).",
              "Tuple[CData, int]", args=("comm", _BUFFER, _SIZE)),
    CFunction("get_hccl_buffer_cleared",
              "HcclResult HcclGetHcclBufferCleared(HcclComm comm, void** buffer, uint64_t* size)", "comm: CData",
              "like get_hccl_buffer, with the buffer zeroed.", "Tuple[CData, int]", args=("comm", _BUFFER, _SIZE)),
    CFunction("thread_acquire",
              "HcclResult HcclThreadAcquire(HcclComm comm, CommEngine engine, uint32_t threadNum, "
              "uint32_t notifyNumPerThread, ThreadHandle* threads)",
              "comm: CData, engine: int, thread_num: int, notify_num_per_thread: int",
              "``thread_num`` comm-owned thread handles, each with ``notify_num_per_thread`` notifies.", "List[int]",
              args=("comm", "engine", "thread_num", "notify_num_per_thread", OutArray("ThreadHandle", "thread_num")),
              checks=("_uint('thread_num', thread_num)", "_uint('notify_num_per_thread', notify_num_per_thread)"),
              detail="engine={engine} thread_num={thread_num} notify_num_per_thread={notify_num_per_thread}"),
    CFunction("thread_acquire_with_stream",
              "HcclResult HcclThreadAcquireWithStream(HcclComm comm, CommEngine engine, aclrtStream stream, "
              "uint32_t notifyNum, ThreadHandle* thread)",
              "comm: CData, engine: int, stream: CData, notify_num: int", "a thread handle wrapping ``stream``.", "int",
              args=("comm", "engine", "stream", "notify_num", Out("ThreadHandle *")),
              checks=("_uint('notify_num', notify_num)",), detail="engine={engine} notify_num={notify_num}"),
    CFunction("thread_acquire_with_config",
              "HcclResult HcclThreadAcquireWithConfig(HcclComm comm, CommEngine engine, uint32_t threadNum, "
              "ThreadType type, const ThreadConfig* config, ThreadHandle* threads)",
              "comm: CData, engine: int, configs: CData, thread_num: Optional[int] = None, thread_type: int = 0",
              "one thread per ``ThreadConfig`` (from initializers.thread_config_init).", "List[int]",
              args=("comm", "engine", "n", "thread_type", "configs", OutArray("ThreadHandle", "n")),
              checks=("n = _count_of('configs', configs, thread_num)",)),
    CFunction("channel_acquire",
              "HcclResult HcclChannelAcquire(HcclComm comm, CommEngine engine, const HcclChannelDesc* channelDescs, "
              "uint32_t channelNum, ChannelHandle* channels)",
              "comm: CData, engine: int, descs: CData, n: Optional[int] = None",
              "one channel handle per ``HcclChannelDesc`` (from initializers.make_channel_descs).", "List[int]",
              args=("comm", "engine", "descs", "count", OutArray("ChannelHandle", "count")),
              checks=("count = _count_of('descs', descs, n, nonempty=True)",), detail="engine={engine} channels={count}"),
    CFunction("channel_get_hccl_buffer",
              "HcclResult HcclChannelGetHcclBuffer(HcclComm comm, ChannelHandle channel, void** buffer, uint64_t* size)",
              "comm: CData, channel: int", "(``char *`` to the peer's HCCL buffer as seen through ``channel``, its size).",
              "Tuple[CData, int]", args=("comm", "channel", _BUFFER, _SIZE), detail="channel={channel:#x}"),
    CFunction("_HcclChannelDestroy",
              "HcclResult HcclChannelDestroy(HcclComm comm, const ChannelHandle* channels, uint32_t channelNum)",
              "comm: CData, handles: CData, n: int"),
    CFunction("engine_ctx_create",
              "HcclResult HcclEngineCtxCreate(HcclComm comm, const char* ctxTag, CommEngine engine, uint64_t size, void** ctx)",
              f"comm: CData, tag: {_STR}, engine: int, size: int",
              "a ``char *`` to a new engine context of ``size`` bytes named ``tag``.", "CData",
              args=("comm", "_tag(tag)", "engine", "size", _BUFFER), detail="tag={tag!r}"),
    CFunction("engine_ctx_get",
              "HcclResult HcclEngineCtxGet(HcclComm comm, const char* ctxTag, CommEngine engine, void** ctx, uint64_t* size)",
              f"comm: CData, tag: {_STR}, engine: int",
              "(``char *``, size) of the context named ``tag``; HcclNotFoundError if none.", "Tuple[CData, int]",
              args=("comm", "_tag(tag)", "engine", _BUFFER, _SIZE), detail="tag={tag!r}"),
    CFunction("engine_ctx_destroy", "HcclResult HcclEngineCtxDestroy(HcclComm comm, const char* ctxTag, CommEngine engine)",
              f"comm: CData, tag: {_STR}, engine: int", "free the context named ``tag``.",
              args=("comm", "_tag(tag)", "engine"), detail="tag={tag!r}"),

    # ---- data plane (hot paths: the generated body is one C call and one ``if rc``)
    CFunction("local_copy", "int32_t HcommLocalCopyOnThread(ThreadHandle thread, void* dst, const void* src, uint64_t len)",
              "thread: int, dst: CData, src: CData, nbytes: int", "enqueue a local copy of ``nbytes`` bytes."),
    CFunction("local_reduce",
              "int32_t HcommLocalReduceOnThread(ThreadHandle thread, void* dst, const void* src, uint64_t count, "
              "HcommDataType dataType, HcommReduceOp reduceOp)",
              f"thread: int, dst: CData, src: CData, {_RED}", "enqueue ``dst = op(dst, src)`` over ``count`` elements."),
    CFunction("write",
              "int32_t HcommWriteOnThread(ThreadHandle thread, ChannelHandle channel, void* dst, const void* src, uint64_t len)",
              f"{_RX}, nbytes: int", "enqueue a write of ``nbytes`` from local ``src`` to remote ``dst``."),
    CFunction("read",
              "int32_t HcommReadOnThread(ThreadHandle thread, ChannelHandle channel, void* dst, const void* src, uint64_t len)",
              f"{_RX}, nbytes: int", "enqueue a read of ``nbytes`` from remote ``src`` to local ``dst``."),
    CFunction("write_reduce",
              "int32_t HcommWriteReduceOnThread(ThreadHandle thread, ChannelHandle channel, void* dst, const void* src, "
              "uint64_t count, HcommDataType dataType, HcommReduceOp reduceOp)",
              f"{_RX}, {_RED}", "enqueue remote ``dst = op(dst, src)`` over ``count`` elements."),
    CFunction("read_reduce",
              "int32_t HcommReadReduceOnThread(ThreadHandle thread, ChannelHandle channel, void* dst, const void* src, "
              "uint64_t count, HcommDataType dataType, HcommReduceOp reduceOp)",
              f"{_RX}, {_RED}", "enqueue local ``dst = op(dst, remote src)`` over ``count`` elements."),
    CFunction("write_with_notify",
              "int32_t HcommWriteWithNotifyOnThread(ThreadHandle thread, ChannelHandle channel, void* dst, const void* src, "
              "uint64_t len, uint32_t remoteNotifyIdx)",
              f"{_RX}, nbytes: int, remote_notify_idx: int",
              "a write followed by a record of the peer's notify (not on A2/A3)."),
    CFunction("write_reduce_with_notify",
              "int32_t HcommWriteReduceWithNotifyOnThread(ThreadHandle thread, ChannelHandle channel, void* dst, "
              "const void* src, uint64_t count, HcommDataType dataType, HcommReduceOp reduceOp, uint32_t remoteNotifyIdx)",
              f"{_RX}, {_RED}, remote_notify_idx: int", "a write-reduce followed by a record of the peer's notify."),
    CFunction("write_nbi",
              "int32_t HcommWriteNbiOnThread(ThreadHandle thread, ChannelHandle channel, void* dst, const void* src, "
              "uint64_t len)",
              f"{_RX}, nbytes: int", "non-blocking write (order it with fence/channel_fence)."),
    CFunction("read_nbi",
              "int32_t HcommReadNbiOnThread(ThreadHandle thread, ChannelHandle channel, void* dst, const void* src, "
              "uint64_t len)",
              f"{_RX}, nbytes: int", "non-blocking read (order it with fence/channel_fence)."),
    CFunction("batch_transfer",
              "int32_t HcommBatchTransferOnThread(ThreadHandle thread, ChannelHandle channel, "
              "const HcommBatchTransferDesc* transferDescs, uint32_t transferDescNum)",
              "thread: int, channel: int, descs: CData, n: Optional[int] = None",
              "enqueue an array of ``HcommBatchTransferDesc``.",
              args=("thread", "channel", "descs", "count"), checks=("count = _count_of('descs', descs, n)",)),
    CFunction("thread_notify_record",
              "int32_t HcommThreadNotifyRecordOnThread(ThreadHandle thread, ThreadHandle dstThread, uint32_t dstNotifyIdx)",
              "thread: int, dst_thread: int, idx: int", "set notify ``idx`` of local thread ``dst_thread``."),
    CFunction("thread_notify_wait",
              "int32_t HcommThreadNotifyWaitOnThread(ThreadHandle thread, uint32_t notifyIdx, uint32_t timeOut)",
              "thread: int, idx: int, timeout_s: int",
              "wait for (and clear) this thread's notify ``idx``; ``timeout_s`` in seconds, 0 = forever."),
    CFunction("channel_notify_record",
              "int32_t HcommChannelNotifyRecordOnThread(ThreadHandle thread, ChannelHandle channel, uint32_t remoteNotifyIdx)",
              "thread: int, channel: int, idx: int", "set the peer's notify ``idx`` of ``channel``."),
    CFunction("channel_notify_wait",
              "int32_t HcommChannelNotifyWaitOnThread(ThreadHandle thread, ChannelHandle channel, uint32_t localNotifyIdx, "
              "uint32_t timeOut)",
              "thread: int, channel: int, idx: int, timeout_s: int",
              "wait for (and clear) local notify ``idx`` of ``channel``; seconds, 0 = forever."),
    # No tag is NULL: the vendor (hcomm @ 8958adb) treats b"" as a tag and turns on its
    # task cache under a temporary key, so an untagged batch passes NULL.
    CFunction("batch_mode_start", "int32_t HcommBatchModeStart(const char* batchTag)", f"tag: Optional[{_STR}] = None",
              "start recording data-plane calls (launched by batch_mode_end); no tag is NULL.", args=("_tag(tag)",)),
    CFunction("batch_mode_end", "int32_t HcommBatchModeEnd(const char* batchTag)", f"tag: Optional[{_STR}] = None",
              "launch the calls recorded since batch_mode_start; no tag is NULL.", args=("_tag(tag)",)),
    CFunction("fence", "int32_t HcommFenceOnThread(ThreadHandle thread)", "thread: int",
              "order all earlier non-blocking transfers of ``thread``."),
    CFunction("channel_fence", "int32_t HcommChannelFenceOnThread(ThreadHandle thread, ChannelHandle channel)",
              "thread: int, channel: int", "order earlier non-blocking transfers on ``channel``."),
    CFunction("channel_drain", "int32_t HcommChannelDrainOnThread(ThreadHandle thread, ChannelHandle channel)",
              "thread: int, channel: int", "wait until ``channel``'s outstanding transfers have completed."),
    CFunction("set_notify_wait_timeout", "int32_t HcommSetNotifyWaitTimeOut(float timeOut)", "timeout_s: float",
              "default timeout (seconds) of the *WithDefaultTimeout waits."),
    CFunction("acquire_comm", "int32_t HcommAcquireComm(const char* commId)", f"comm_id: {_STR}",
              "take the communicator named ``comm_id`` for exclusive data-plane use.", args=("_tag(comm_id)",),
              detail="comm_id={comm_id!r}"),
    CFunction("release_comm", "int32_t HcommReleaseComm(const char* commId)", f"comm_id: {_STR}",
              "give back a communicator taken with acquire_comm.", args=("_tag(comm_id)",), detail="comm_id={comm_id!r}"),

    # ---- ACL runtime (libacl_rt.so)
    CFunction("acl_init", "aclError aclInit(const char* configPath)", "config_path: Optional[PathLike] = None",
              "True if this call initialised ACL, False if it already was (ACL_ERROR_REPEAT_INITIALIZE).", "bool",
              args=("os.fsencode(config_path) if config_path is not None else ffi.NULL",),
              accept=("ACL_ERROR_REPEAT_INITIALIZE",), result="rc != ACL_ERROR_REPEAT_INITIALIZE"),
    CFunction("acl_finalize", "aclError aclFinalize(void)",
              doc="tear ACL down (once per process, after every device is reset)."),
    CFunction("set_device", "aclError aclrtSetDevice(int32_t deviceId)", "device: int",
              "bind this OS thread to ``device``.", detail="device={device}"),
    CFunction("reset_device", "aclError aclrtResetDevice(int32_t deviceId)", "device: int",
              "release ``device``'s resources held by this process.", detail="device={device}"),
    CFunction("get_device", "aclError aclrtGetDevice(int32_t* deviceId)", doc="the device bound to this OS thread.",
              returns="int", args=(Out("int32_t *"),)),
    CFunction("get_device_count", "aclError aclrtGetDeviceCount(uint32_t* count)", doc="number of visible devices.",
              returns="int", args=(Out("uint32_t *"),)),
    CFunction("synchronize_device", "aclError aclrtSynchronizeDevice(void)",
              doc="wait for all work on the current device."),
    CFunction("create_stream", "aclError aclrtCreateStream(aclrtStream* stream)", doc="a new ``aclrtStream``.",
              returns="CData", args=(Out("aclrtStream *", "{}[0]"),)),
    CFunction("destroy_stream", "aclError aclrtDestroyStream(aclrtStream stream)", "stream: CData"),
    CFunction("synchronize_stream", "aclError aclrtSynchronizeStream(aclrtStream stream)", "stream: CData",
              "wait until everything enqueued on ``stream`` has run."),
    CFunction("synchronize_stream_with_timeout",
              "aclError aclrtSynchronizeStreamWithTimeout(aclrtStream stream, int32_t timeout)",
              "stream: CData, timeout_ms: int",
              "like synchronize_stream, giving up after ``timeout_ms`` (-1 = forever).", detail="timeout_ms={timeout_ms}"),
    CFunction("malloc", "aclError aclrtMalloc(void** devPtr, size_t size, aclrtMemMallocPolicy policy)",
              "size: int, policy: int = MemMallocPolicy.HUGE_FIRST",
              "``size`` bytes of device memory as a ``char *`` cdata (free it with free()).", "CData",
              args=(_BUFFER, "size", "policy"), checks=("_size(size)",), detail="size={size} policy={int(policy)}"),
    CFunction("free", "aclError aclrtFree(void* devPtr)", "ptr: CData", "release memory from malloc()."),
    CFunction("malloc_host", "aclError aclrtMallocHost(void** hostPtr, size_t size)", "size: int",
              "``size`` bytes of page-locked host memory as a ``char *`` cdata.", "CData",
              args=(_BUFFER, "size"), checks=("_size(size)",), detail="size={size}"),
    CFunction("free_host", "aclError aclrtFreeHost(void* hostPtr)", "ptr: CData", "release memory from malloc_host()."),
    CFunction("memcpy",
              "aclError aclrtMemcpy(void* dst, size_t destMax, const void* src, size_t count, aclrtMemcpyKind kind)",
              "dst: CData, dst_max: int, src: CData, count: int, kind: int",
              "synchronous copy of ``count`` bytes (``kind`` an aclrtMemcpyKind).",
              checks=("_fits(count, 'dst_max', dst_max)",), detail="count={count} kind={int(kind)}"),
    CFunction("memcpy_async",
              "aclError aclrtMemcpyAsync(void* dst, size_t destMax, const void* src, size_t count, aclrtMemcpyKind kind, "
              "aclrtStream stream)",
              "dst: CData, dst_max: int, src: CData, count: int, kind: int, stream: CData",
              "copy of ``count`` bytes enqueued on ``stream``.",
              checks=("_fits(count, 'dst_max', dst_max)",), detail="count={count} kind={int(kind)}"),
    CFunction("memset", "aclError aclrtMemset(void* devPtr, size_t maxCount, int32_t value, size_t count)",
              "ptr: CData, max_count: int, value: int, count: int", "set ``count`` bytes to ``value``.",
              checks=("_fits(count, 'max_count', max_count)",)),
    CFunction("create_event", "aclError aclrtCreateEvent(aclrtEvent* event)", doc="a new ``aclrtEvent``.",
              returns="CData", args=(Out("aclrtEvent *", "{}[0]"),)),
    CFunction("record_event", "aclError aclrtRecordEvent(aclrtEvent event, aclrtStream stream)",
              "event: CData, stream: CData", "record ``event`` at the current end of ``stream``."),
    CFunction("stream_wait_event", "aclError aclrtStreamWaitEvent(aclrtStream stream, aclrtEvent event)",
              "stream: CData, event: CData", "make ``stream`` wait for ``event``."),
    CFunction("synchronize_event", "aclError aclrtSynchronizeEvent(aclrtEvent event)", "event: CData",
              "block until ``event`` has completed."),
    CFunction("destroy_event", "aclError aclrtDestroyEvent(aclrtEvent event)", "event: CData"),
    CFunction("get_soc_name", "const char* aclrtGetSocName(void)",
              doc="the SoC name (e.g. 'Ascend910B1'), or None if the runtime cannot tell.", returns="Optional[str]",
              checked=False, result="_c_string(rc)"),

    # ---- ACL graphs (libacl_rt.so; acl/acl_rt.h aclmdlRI*: capture, replay, task groups and update)
    CFunction("capture_begin", "aclError aclmdlRICaptureBegin(aclrtStream stream, aclmdlRICaptureMode mode)",
              "stream: CData, mode: int = 0",
              "record what is launched on ``stream`` instead of running it (``mode`` an aclmdlRICaptureMode).",
              detail="mode={int(mode)}"),
    CFunction("capture_get_info",
              "aclError aclmdlRICaptureGetInfo(aclrtStream stream, aclmdlRICaptureStatus* status, aclmdlRI* modelRI)",
              "stream: CData", "(aclmdlRICaptureStatus, the aclmdlRI under capture or NULL) of ``stream``.",
              "Tuple[int, CData]", args=("stream", Out("aclmdlRICaptureStatus *"), Out("aclmdlRI *", "{}[0]"))),
    CFunction("capture_end", "aclError aclmdlRICaptureEnd(aclrtStream stream, aclmdlRI* modelRI)", "stream: CData",
              "end the capture of ``stream``: the graph (``aclmdlRI``).", "CData",
              args=("stream", Out("aclmdlRI *", "{}[0]"))),
    CFunction("capture_thread_exchange_mode", "aclError aclmdlRICaptureThreadExchangeMode(aclmdlRICaptureMode* mode)",
              "mode: int", "set this OS thread's capture mode to ``mode``; returns the previous one.", "int",
              args=("_mode",), checks=("_mode = ffi.new('aclmdlRICaptureMode *', mode)",), result="int(_mode[0])"),
    CFunction("graph_execute_async", "aclError aclmdlRIExecuteAsync(aclmdlRI modelRI, aclrtStream stream)",
              "model: CData, stream: CData", "replay the graph ``model`` on ``stream`` (one launch)."),
    CFunction("graph_execute", "aclError aclmdlRIExecute(aclmdlRI modelRI, int32_t timeout)",
              "model: CData, timeout_ms: int = -1", "replay ``model`` and wait for it (-1 = no time limit).",
              detail="timeout_ms={timeout_ms}"),
    CFunction("graph_destroy", "aclError aclmdlRIDestroy(aclmdlRI modelRI)", "model: CData",
              "release the graph ``model``."),
    CFunction("capture_task_group_begin", "aclError aclmdlRICaptureTaskGrpBegin(aclrtStream stream)", "stream: CData",
              "start a task group in the capture of ``stream`` (its tasks can be updated after the capture)."),
    CFunction("capture_task_group_end", "aclError aclmdlRICaptureTaskGrpEnd(aclrtStream stream, aclrtTaskGrp* handle)",
              "stream: CData", "end the task group: its handle (``aclrtTaskGrp``).", "CData",
              args=("stream", Out("aclrtTaskGrp *", "{}[0]"))),
    CFunction("capture_task_update_begin",
              "aclError aclmdlRICaptureTaskUpdateBegin(aclrtStream stream, aclrtTaskGrp handle)",
              "stream: CData, group: CData",
              "what is launched on ``stream`` until capture_task_update_end replaces the tasks of ``group``."),
    CFunction("capture_task_update_end", "aclError aclmdlRICaptureTaskUpdateEnd(aclrtStream stream)", "stream: CData",
              "apply the task update of ``stream``."),

    # ---- collectives (libhccl.so)
    CFunction("all_reduce",
              "HcclResult HcclAllReduce(void* sendBuf, void* recvBuf, uint64_t count, HcclDataType dataType, "
              "HcclReduceOp op, HcclComm comm, aclrtStream stream)",
              "send: CData, recv: CData, count: int, dtype: int, op: int, comm: CData, stream: CData",
              "``count`` elements, enqueued on ``stream``."),
    CFunction("broadcast",
              "HcclResult HcclBroadcast(void* buf, uint64_t count, HcclDataType dataType, uint32_t root, HcclComm comm, "
              "aclrtStream stream)",
              "buf: CData, count: int, dtype: int, root: int, comm: CData, stream: CData",
              "``count`` elements of ``buf`` from ``root``."),
    CFunction("all_gather",
              "HcclResult HcclAllGather(void* sendBuf, void* recvBuf, uint64_t sendCount, HcclDataType dataType, "
              "HcclComm comm, aclrtStream stream)",
              "send: CData, recv: CData, send_count: int, dtype: int, comm: CData, stream: CData",
              "each rank contributes ``send_count`` elements."),
    CFunction("all_gather_v",
              "HcclResult HcclAllGatherV(void* sendBuf, uint64_t sendCount, void* recvBuf, const void* recvCounts, "
              "const void* recvDispls, HcclDataType dataType, HcclComm comm, aclrtStream stream)",
              "send: CData, send_count: int, recv: CData, recv_counts: CData, recv_displs: CData, dtype: int, "
              "comm: CData, stream: CData",
              "per-rank counts/displacements as uint64 arrays."),
    CFunction("reduce_scatter",
              "HcclResult HcclReduceScatter(void* sendBuf, void* recvBuf, uint64_t recvCount, HcclDataType dataType, "
              "HcclReduceOp op, HcclComm comm, aclrtStream stream)",
              "send: CData, recv: CData, recv_count: int, dtype: int, op: int, comm: CData, stream: CData",
              "each rank receives ``recv_count`` reduced elements."),
    CFunction("reduce_scatter_v",
              "HcclResult HcclReduceScatterV(void* sendBuf, const void* sendCounts, const void* sendDispls, "
              "void* recvBuf, uint64_t recvCount, HcclDataType dataType, HcclReduceOp op, HcclComm comm, "
              "aclrtStream stream)",
              "send: CData, send_counts: CData, send_displs: CData, recv: CData, recv_count: int, dtype: int, op: int, "
              "comm: CData, stream: CData",
              "per-rank counts/displacements as uint64 arrays."),
    CFunction("reduce",
              "HcclResult HcclReduce(void* sendBuf, void* recvBuf, uint64_t count, HcclDataType dataType, "
              "HcclReduceOp op, uint32_t root, HcclComm comm, aclrtStream stream)",
              "send: CData, recv: CData, count: int, dtype: int, op: int, root: int, comm: CData, stream: CData",
              "``count`` elements reduced onto ``root``."),
    CFunction("scatter",
              "HcclResult HcclScatter(void* sendBuf, void* recvBuf, uint64_t recvCount, HcclDataType dataType, "
              "uint32_t root, HcclComm comm, aclrtStream stream)",
              "send: CData, recv: CData, recv_count: int, dtype: int, root: int, comm: CData, stream: CData",
              "``recv_count`` elements to each rank from ``root``."),
    CFunction("all_to_all",
              "HcclResult HcclAlltoAll(const void* sendBuf, uint64_t sendCount, HcclDataType sendType, "
              "const void* recvBuf, uint64_t recvCount, HcclDataType recvType, HcclComm comm, aclrtStream stream)",
              "send: CData, send_count: int, send_type: int, recv: CData, recv_count: int, recv_type: int, "
              "comm: CData, stream: CData",
              "the same count to and from every rank."),
    CFunction("all_to_all_v",
              "HcclResult HcclAlltoAllV(const void* sendBuf, const void* sendCounts, const void* sdispls, "
              "HcclDataType sendType, const void* recvBuf, const void* recvCounts, const void* rdispls, "
              "HcclDataType recvType, HcclComm comm, aclrtStream stream)",
              "send: CData, send_counts: CData, send_displs: CData, send_type: int, recv: CData, recv_counts: CData, "
              "recv_displs: CData, recv_type: int, comm: CData, stream: CData",
              "per-rank counts/displacements as uint64 arrays."),
    CFunction("all_to_all_vc",
              "HcclResult HcclAlltoAllVC(const void* sendBuf, const void* sendCountMatrix, HcclDataType sendType, "
              "const void* recvBuf, HcclDataType recvType, HcclComm comm, aclrtStream stream)",
              "send: CData, send_count_matrix: CData, send_type: int, recv: CData, recv_type: int, comm: CData, "
              "stream: CData",
              "driven by a rank_size x rank_size uint64 count matrix."),
    CFunction("send",
              "HcclResult HcclSend(void* sendBuf, uint64_t count, HcclDataType dataType, uint32_t destRank, "
              "HcclComm comm, aclrtStream stream)",
              "buf: CData, count: int, dtype: int, dst: int, comm: CData, stream: CData",
              "``count`` elements to rank ``dst`` (pairs with recv on the peer)."),
    CFunction("recv",
              "HcclResult HcclRecv(void* recvBuf, uint64_t count, HcclDataType dataType, uint32_t srcRank, "
              "HcclComm comm, aclrtStream stream)",
              "buf: CData, count: int, dtype: int, src: int, comm: CData, stream: CData",
              "``count`` elements from rank ``src``."),
    CFunction("batch_send_recv",
              "HcclResult HcclBatchSendRecv(HcclSendRecvItem* sendRecvInfo, uint32_t itemNum, HcclComm comm, "
              "aclrtStream stream)",
              "items: CData, n: Optional[int], comm: CData, stream: CData",
              "an ``HcclSendRecvItem[n]`` array of sends and receives in one call.",
              args=("items", "count", "comm", "stream"), checks=("count = _count_of('items', items, n)",)),
)


def typed_methods_source() -> str:
    """The text of ``_binding_methods.py``: the typed signatures of the methods :data:`C_FUNCTIONS` generates."""
    return stub_source(C_FUNCTIONS, "BindingMethods", (
        "Generated by scripts/generate_typed.py from hcomm_cffi.binding.C_FUNCTIONS: do not edit.\n\n"
        "The typed signature of every method the binding's C-function table generates, for type checkers and\n"
        "IDEs (``Binding`` derives from ``BindingMethods``; at run time the class is empty and the methods are\n"
        "compiled by ``calltable.install``).  tests/test_typed_generated.py fails when this file is stale.\n"),
        "from .types import CData, PathLike")


class Binding(BindingMethods):
    """Checked calls over a lib object (see docs/design/architecture.md, 'The binding contract').

    Besides the methods written here, every entry of :data:`C_FUNCTIONS` is a method (typed in
    :class:`BindingMethods`).
    """

    def __init__(self, lib: Any) -> None:
        self._lib = lib

    @property
    def lib(self) -> Any:
        """The wrapped lib object."""
        return self._lib

    # ------------------------------------------------------------------ the one check
    def _library_message(self, rc: int, function: str) -> Optional[str]:
        """The library's text for the failure: aclGetRecentErrMsg() first, else HcclGetErrorString(rc).

        Never raises: a missing or failing getter just yields None.
        """
        lib = self._lib
        try:
            getter = getattr(lib, "aclGetRecentErrMsg", None)
            text = _c_string(getter()) if getter is not None else None
        except Exception:
            text = None
        if text or rc >= 100000 or rc < 0 or function.startswith("acl"):
            return text
        try:
            getter = getattr(lib, "HcclGetErrorString", None)
            return _c_string(getter(rc)) if getter is not None else None
        except Exception:
            return None

    def _error(self, rc: int, function: str, detail: Optional[str] = None) -> HcclError:
        """The typed exception for return code ``rc`` of ``function`` (raised by every generated method)."""
        return error_for(rc, function, self._library_message(rc, function), detail)

    # ------------------------------------------------------------------ methods beyond one table entry
    def comm_init_root_info(
        self, n_ranks: int, root_info: Union[bytes, bytearray, memoryview], rank: int,
        config: Optional[CData] = None,
    ) -> CData:
        """HcclCommInitRootInfo(Config): this rank's communicator (an ``HcclComm`` cdata)."""
        _uint("n_ranks", n_ranks, 1)
        _uint("rank", rank, 0, n_ranks - 1)
        raw = bytes(root_info)
        if len(raw) != HCCL_ROOT_INFO_BYTES:
            raise ValueError(
                f"root_info is {len(raw)} bytes; expected exactly {HCCL_ROOT_INFO_BYTES} (from get_root_info())"
            )
        info = ffi.new("HcclRootInfo *")
        ffi.memmove(info, raw, HCCL_ROOT_INFO_BYTES)
        if config is None:
            return self._HcclCommInitRootInfo(n_ranks, info, rank)
        return self._HcclCommInitRootInfoConfig(n_ranks, info, rank, _config_ptr(config))

    def comm_init_cluster_info(self, path: PathLike, rank: int, config: Optional[CData] = None) -> CData:
        """HcclCommInitClusterInfo(Config): a communicator from a ranktable JSON file."""
        raw = os.fsencode(path)
        if not raw or len(raw) > _CLUSTER_INFO_MAX:
            raise ValueError(f"path={path!r} is {len(raw)} bytes; expected a ranktable path of 1..{_CLUSTER_INFO_MAX} bytes")
        _uint("rank", rank)
        if config is None:
            return self._HcclCommInitClusterInfo(raw, rank)
        return self._HcclCommInitClusterInfoConfig(raw, rank, _config_ptr(config))

    def create_sub_comm(
        self, comm: CData, rank_ids: Sequence[int], sub_comm_id: int, sub_comm_rank_id: int,
        config: Optional[CData] = None,
    ) -> CData:
        """HcclCreateSubCommConfig: a communicator over ``rank_ids`` (parent ranks) where this rank is ``sub_comm_rank_id``."""
        ids = list(rank_ids)
        if not ids:
            raise ValueError("rank_ids=[] is empty; expected the parent-communicator ranks of the sub-communicator")
        for i, r in enumerate(ids):
            _uint(f"rank_ids[{i}]", r)
        _uint("sub_comm_id", sub_comm_id, 0, 2**64 - 1)
        _uint("sub_comm_rank_id", sub_comm_rank_id, 0, len(ids) - 1)
        cfg = _config_ptr(config) if config is not None else comm_config_init()
        return self._HcclCreateSubCommConfig(ffi.new("HcclComm *", comm), len(ids), ffi.new("uint32_t[]", ids),
                                             sub_comm_id, sub_comm_rank_id, cfg)

    def comm_init_all(self, devices: Sequence[int]) -> List[CData]:
        """HcclCommInitAll: one communicator per listed device id, in this single process."""
        devs = list(devices)
        if not devs:
            raise ValueError("devices=[] is empty; expected at least one device id")
        if len(set(devs)) != len(devs):
            raise ValueError(f"devices={devs!r} lists a device twice; expected distinct device ids")
        for i, d in enumerate(devs):
            _uint(f"devices[{i}]", d, 0, 0x7FFFFFFF)
        return self._HcclCommInitAll(len(devs), ffi.new("int32_t[]", devs))

    def channel_destroy(self, comm: CData, channels: Sequence[int]) -> None:
        """HcclChannelDestroy (2026-08 headers): release channels (nothing to do for none)."""
        handles = list(channels)
        if handles:
            self._HcclChannelDestroy(comm, ffi.new("ChannelHandle[]", handles), len(handles))


install(Binding, C_FUNCTIONS, globals())


_BINDING: Optional[Binding] = None
_BINDING_LOCK = threading.Lock()


def get_binding() -> Binding:
    """The process-wide Binding over ``hcomm_cffi.lib.load()`` (created on first use)."""
    global _BINDING
    binding = _BINDING
    if binding is None:
        with _BINDING_LOCK:
            if _BINDING is None:
                from . import lib as _lib_pkg

                _BINDING = Binding(_lib_pkg.load())
            binding = _BINDING
    return binding


def reset_binding(binding: Optional[Binding] = None) -> None:
    """Replace (or with None, forget) the process-wide Binding, e.g. after changing HCOMM_BACKEND in tests."""
    global _BINDING
    with _BINDING_LOCK:
        _BINDING = binding
