"""One checked Python method per HCCL/HCOMM/ACL C function: nonzero return codes become typed exceptions.

``Binding(lib)`` wraps any object honouring the lib contract (``CannLibrary``, the emulator's
``SimLibrary``, a test double).  Out-parameters become return values; pointers are passed through
as cdata; counts, handles and enums are ints.  Data-plane methods are kept minimal because they
sit on hot paths: one C call, one ``if rc``.
"""
from __future__ import annotations

import os
import threading
from typing import Any, List, Optional, Sequence, Tuple, Union

from ._ffi import ffi
from .enums import HCCL_ROOT_INFO_BYTES, MemMallocPolicy
from .errors import HcclError, error_for
from .initializers import comm_config_init

__all__ = ["Binding", "get_binding", "reset_binding"]

CData = Any          # a cffi cdata object (pointer / array / handle)
PathLike = Union[str, bytes, "os.PathLike[str]"]

_U32_MAX = 0xFFFFFFFF
_ACL_REPEAT_INITIALIZE = 100002
_COMM_NAME_BYTES = 256            # HcclGetCommName writes up to 128 chars; leave headroom
_CLUSTER_INFO_MAX = 4095          # ranktable path limit (4096 bytes with the NUL)
_CONFIG_PTR = ffi.typeof("HcclCommConfig *")


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
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name}={value!r} is not an int; expected an int in {low}..{high}")
    if not low <= value <= high:
        raise ValueError(f"{name}={value!r} is out of range; expected an int in {low}..{high}")
    return value


def _tag(tag: Union[str, bytes]) -> bytes:
    return tag.encode("utf-8") if isinstance(tag, str) else tag


def _count_of(name: str, array: CData, n: Optional[int]) -> int:
    """Element count to pass with a cdata array: ``n`` if given (checked against the array), else its length."""
    try:
        length: Optional[int] = len(array)
    except TypeError:
        length = None
    if n is None:
        if length is None:
            raise ValueError(f"{name} is a pointer ({ffi.typeof(array).cname}); pass its element count as n")
        return length
    _uint("n", n)
    if length is not None and n > length:
        raise ValueError(f"n={n} exceeds the {length} elements of {name}")
    return n


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


class Binding:
    """Checked calls over a lib object (see docs/ARCHITECTURE.md, 'The binding contract')."""

    def __init__(self, lib: Any) -> None:
        self._lib = lib

    @property
    def lib(self) -> Any:
        """The wrapped lib object."""
        return self._lib

    # ------------------------------------------------------------------ error path
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
        """The typed exception for return code ``rc`` of ``function`` (to be raised by the caller)."""
        return error_for(rc, function, self._library_message(rc, function), detail)

    # ------------------------------------------------------------------ communicators
    def get_root_info(self) -> bytes:
        """HcclGetRootInfo on the root rank: the 4108 opaque bytes every rank passes to comm_init_root_info."""
        info = ffi.new("HcclRootInfo *")
        rc = self._lib.HcclGetRootInfo(info)
        if rc:
            raise self._error(rc, "HcclGetRootInfo")
        return bytes(ffi.buffer(info))

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
        comm = ffi.new("HcclComm *")
        if config is None:
            rc = self._lib.HcclCommInitRootInfo(n_ranks, info, rank, comm)
            if rc:
                raise self._error(rc, "HcclCommInitRootInfo", f"n_ranks={n_ranks} rank={rank}")
        else:
            rc = self._lib.HcclCommInitRootInfoConfig(n_ranks, info, rank, _config_ptr(config), comm)
            if rc:
                raise self._error(rc, "HcclCommInitRootInfoConfig", f"n_ranks={n_ranks} rank={rank}")
        return comm[0]

    def comm_init_cluster_info(self, path: PathLike, rank: int, config: Optional[CData] = None) -> CData:
        """HcclCommInitClusterInfo(Config): a communicator from a ranktable JSON file."""
        raw = os.fsencode(path)
        if not raw or len(raw) > _CLUSTER_INFO_MAX:
            raise ValueError(f"path={path!r} is {len(raw)} bytes; expected a ranktable path of 1..{_CLUSTER_INFO_MAX} bytes")
        _uint("rank", rank)
        comm = ffi.new("HcclComm *")
        if config is None:
            rc = self._lib.HcclCommInitClusterInfo(raw, rank, comm)
            if rc:
                raise self._error(rc, "HcclCommInitClusterInfo", f"ranktable {raw.decode(errors='replace')}, rank={rank}")
        else:
            rc = self._lib.HcclCommInitClusterInfoConfig(raw, rank, _config_ptr(config), comm)
            if rc:
                raise self._error(rc, "HcclCommInitClusterInfoConfig", f"ranktable {raw.decode(errors='replace')}, rank={rank}")
        return comm[0]

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
        parent = ffi.new("HcclComm *", comm)
        ids_c = ffi.new("uint32_t[]", ids)
        cfg = _config_ptr(config) if config is not None else comm_config_init()
        sub = ffi.new("HcclComm *")
        rc = self._lib.HcclCreateSubCommConfig(parent, len(ids), ids_c, sub_comm_id, sub_comm_rank_id, cfg, sub)
        if rc:
            raise self._error(rc, "HcclCreateSubCommConfig")
        return sub[0]

    def comm_init_all(self, devices: Sequence[int]) -> List[CData]:
        """HcclCommInitAll: one communicator per listed device id, in this single process."""
        devs = list(devices)
        if not devs:
            raise ValueError("devices=[] is empty; expected at least one device id")
        if len(set(devs)) != len(devs):
            raise ValueError(f"devices={devs!r} lists a device twice; expected distinct device ids")
        for i, d in enumerate(devs):
            _uint(f"devices[{i}]", d, 0, 0x7FFFFFFF)
        comms = ffi.new("HcclComm[]", len(devs))
        rc = self._lib.HcclCommInitAll(len(devs), ffi.new("int32_t[]", devs), comms)
        if rc:
            raise self._error(rc, "HcclCommInitAll")
        return [comms[i] for i in range(len(devs))]

    def comm_destroy(self, comm: CData) -> None:
        """HcclCommDestroy: release the communicator and everything acquired from it."""
        rc = self._lib.HcclCommDestroy(comm)
        if rc:
            raise self._error(rc, "HcclCommDestroy")

    def get_rank_id(self, comm: CData) -> int:
        """HcclGetRankId: this process's rank in ``comm``."""
        out = ffi.new("uint32_t *")
        rc = self._lib.HcclGetRankId(comm, out)
        if rc:
            raise self._error(rc, "HcclGetRankId")
        return int(out[0])

    def get_rank_size(self, comm: CData) -> int:
        """HcclGetRankSize: number of ranks in ``comm``."""
        out = ffi.new("uint32_t *")
        rc = self._lib.HcclGetRankSize(comm, out)
        if rc:
            raise self._error(rc, "HcclGetRankSize")
        return int(out[0])

    def get_comm_name(self, comm: CData) -> str:
        """HcclGetCommName: the communicator's name."""
        buf = ffi.new("char[]", _COMM_NAME_BYTES)
        rc = self._lib.HcclGetCommName(comm, buf)
        if rc:
            raise self._error(rc, "HcclGetCommName")
        return ffi.string(buf).decode("utf-8", "replace")

    def comm_get_handle_with_name(self, name: Union[str, bytes]) -> CData:
        """HcclCommGetHandleWithName: the communicator called ``name``."""
        comm = ffi.new("HcclComm *")
        rc = self._lib.HcclCommGetHandleWithName(_tag(name), comm)
        if rc:
            raise self._error(rc, "HcclCommGetHandleWithName", f"name={name!r}")
        return comm[0]

    def get_comm_async_error(self, comm: CData) -> int:
        """HcclGetCommAsyncError: the asynchronous HcclResult recorded on ``comm`` (0 = none)."""
        out = ffi.new("HcclResult *")
        rc = self._lib.HcclGetCommAsyncError(comm, out)
        if rc:
            raise self._error(rc, "HcclGetCommAsyncError")
        return int(out[0])

    def get_error_string(self, code: int) -> str:
        """HcclGetErrorString: the library's short text for an HcclResult code."""
        return _c_string(self._lib.HcclGetErrorString(code)) or ""

    def get_comm_config_capability(self) -> int:
        """HcclGetCommConfigCapability: config items with an enum value below this number are supported."""
        return int(self._lib.HcclGetCommConfigCapability())

    def set_config(self, config: int, value: int) -> None:
        """HcclSetConfig: set a process-wide option (only HCCL_DETERMINISTIC = 0 exists)."""
        rc = self._lib.HcclSetConfig(config, value)
        if rc:
            raise self._error(rc, "HcclSetConfig")

    def get_config(self, config: int) -> int:
        """HcclGetConfig: read a process-wide option."""
        out = ffi.new("HcclConfigValue *")
        rc = self._lib.HcclGetConfig(config, out)
        if rc:
            raise self._error(rc, "HcclGetConfig")
        return int(out.value)

    def comm_suspend(self, comm: CData) -> None:
        """HcclCommSuspend: suspend a communicator (fault handling)."""
        rc = self._lib.HcclCommSuspend(comm)
        if rc:
            raise self._error(rc, "HcclCommSuspend")

    def comm_resume(self, comm: CData) -> None:
        """HcclCommResume: resume a suspended communicator."""
        rc = self._lib.HcclCommResume(comm)
        if rc:
            raise self._error(rc, "HcclCommResume")

    def group_start(self) -> None:
        """HcclGroupStart: begin a group of operations."""
        rc = self._lib.HcclGroupStart()
        if rc:
            raise self._error(rc, "HcclGroupStart")

    def group_end(self) -> None:
        """HcclGroupEnd: end a group of operations."""
        rc = self._lib.HcclGroupEnd()
        if rc:
            raise self._error(rc, "HcclGroupEnd")

    def barrier(self, comm: CData, stream: CData) -> None:
        """HcclBarrier: enqueue a barrier on ``stream``."""
        rc = self._lib.HcclBarrier(comm, stream)
        if rc:
            raise self._error(rc, "HcclBarrier")

    # ------------------------------------------------------------------ resources
    def get_hccl_buffer(self, comm: CData) -> Tuple[CData, int]:
        """HcclGetHcclBuffer: (``char *`` to this rank's communicator-owned buffer, its size in bytes)."""
        ptr = ffi.new("void **")
        size = ffi.new("uint64_t *")
        rc = self._lib.HcclGetHcclBuffer(comm, ptr, size)
        if rc:
            raise self._error(rc, "HcclGetHcclBuffer")
        return ffi.cast("char *", ptr[0]), int(size[0])

    def get_hccl_buffer_cleared(self, comm: CData) -> Tuple[CData, int]:
        """HcclGetHcclBufferCleared: like get_hccl_buffer, with the buffer zeroed."""
        ptr = ffi.new("void **")
        size = ffi.new("uint64_t *")
        rc = self._lib.HcclGetHcclBufferCleared(comm, ptr, size)
        if rc:
            raise self._error(rc, "HcclGetHcclBufferCleared")
        return ffi.cast("char *", ptr[0]), int(size[0])

    def thread_acquire(self, comm: CData, engine: int, thread_num: int, notify_num_per_thread: int) -> List[int]:
        """HcclThreadAcquire: ``thread_num`` comm-owned thread handles, each with ``notify_num_per_thread`` notifies."""
        _uint("thread_num", thread_num)
        _uint("notify_num_per_thread", notify_num_per_thread)
        threads = ffi.new("ThreadHandle[]", thread_num)
        rc = self._lib.HcclThreadAcquire(comm, engine, thread_num, notify_num_per_thread, threads)
        if rc:
            raise self._error(rc, "HcclThreadAcquire",
                              f"engine={engine} thread_num={thread_num} notify_num_per_thread={notify_num_per_thread}")
        return list(threads)

    def thread_acquire_with_stream(self, comm: CData, engine: int, stream: CData, notify_num: int) -> int:
        """HcclThreadAcquireWithStream: a thread handle wrapping ``stream``."""
        _uint("notify_num", notify_num)
        thread = ffi.new("ThreadHandle *")
        rc = self._lib.HcclThreadAcquireWithStream(comm, engine, stream, notify_num, thread)
        if rc:
            raise self._error(rc, "HcclThreadAcquireWithStream", f"engine={engine} notify_num={notify_num}")
        return int(thread[0])

    def thread_acquire_with_config(
        self, comm: CData, engine: int, configs: CData, thread_num: Optional[int] = None, thread_type: int = 0,
    ) -> List[int]:
        """HcclThreadAcquireWithConfig: one thread per ``ThreadConfig`` (from initializers.thread_config_init)."""
        n = _count_of("configs", configs, thread_num)
        threads = ffi.new("ThreadHandle[]", n)
        rc = self._lib.HcclThreadAcquireWithConfig(comm, engine, n, thread_type, configs, threads)
        if rc:
            raise self._error(rc, "HcclThreadAcquireWithConfig")
        return list(threads)

    def channel_acquire(self, comm: CData, engine: int, descs: CData, n: Optional[int] = None) -> List[int]:
        """HcclChannelAcquire: one channel handle per ``HcclChannelDesc`` (from initializers.make_channel_descs)."""
        count = _count_of("descs", descs, n)
        if count < 1:
            raise ValueError("descs is empty; expected at least one HcclChannelDesc")
        channels = ffi.new("ChannelHandle[]", count)
        rc = self._lib.HcclChannelAcquire(comm, engine, descs, count, channels)
        if rc:
            raise self._error(rc, "HcclChannelAcquire", f"engine={engine} channels={count}")
        return list(channels)

    def channel_get_hccl_buffer(self, comm: CData, channel: int) -> Tuple[CData, int]:
        """HcclChannelGetHcclBuffer: (``char *`` to the peer's HCCL buffer as seen through ``channel``, its size)."""
        ptr = ffi.new("void **")
        size = ffi.new("uint64_t *")
        rc = self._lib.HcclChannelGetHcclBuffer(comm, channel, ptr, size)
        if rc:
            raise self._error(rc, "HcclChannelGetHcclBuffer", f"channel={channel:#x}")
        return ffi.cast("char *", ptr[0]), int(size[0])

    def channel_destroy(self, comm: CData, channels: Sequence[int]) -> None:
        """HcclChannelDestroy (2026-08 headers): release channels."""
        handles = list(channels)
        if not handles:
            return
        rc = self._lib.HcclChannelDestroy(comm, ffi.new("ChannelHandle[]", handles), len(handles))
        if rc:
            raise self._error(rc, "HcclChannelDestroy")

    def engine_ctx_create(self, comm: CData, tag: Union[str, bytes], engine: int, size: int) -> CData:
        """HcclEngineCtxCreate: a ``char *`` to a new engine context of ``size`` bytes named ``tag``."""
        ctx = ffi.new("void **")
        rc = self._lib.HcclEngineCtxCreate(comm, _tag(tag), engine, size, ctx)
        if rc:
            raise self._error(rc, "HcclEngineCtxCreate", f"tag={tag!r}")
        return ffi.cast("char *", ctx[0])

    def engine_ctx_get(self, comm: CData, tag: Union[str, bytes], engine: int) -> Tuple[CData, int]:
        """HcclEngineCtxGet: (``char *``, size) of the context named ``tag``; HcclNotFoundError if none."""
        ctx = ffi.new("void **")
        size = ffi.new("uint64_t *")
        rc = self._lib.HcclEngineCtxGet(comm, _tag(tag), engine, ctx, size)
        if rc:
            raise self._error(rc, "HcclEngineCtxGet", f"tag={tag!r}")
        return ffi.cast("char *", ctx[0]), int(size[0])

    def engine_ctx_destroy(self, comm: CData, tag: Union[str, bytes], engine: int) -> None:
        """HcclEngineCtxDestroy: free the context named ``tag``."""
        rc = self._lib.HcclEngineCtxDestroy(comm, _tag(tag), engine)
        if rc:
            raise self._error(rc, "HcclEngineCtxDestroy", f"tag={tag!r}")

    # ------------------------------------------------------------------ data plane (hot paths)
    def local_copy(self, thread: int, dst: CData, src: CData, nbytes: int) -> None:
        """HcommLocalCopyOnThread: enqueue a local copy of ``nbytes`` bytes."""
        rc = self._lib.HcommLocalCopyOnThread(thread, dst, src, nbytes)
        if rc:
            raise self._error(rc, "HcommLocalCopyOnThread")

    def local_reduce(self, thread: int, dst: CData, src: CData, count: int, dtype: int, op: int) -> None:
        """HcommLocalReduceOnThread: enqueue ``dst = op(dst, src)`` over ``count`` elements."""
        rc = self._lib.HcommLocalReduceOnThread(thread, dst, src, count, dtype, op)
        if rc:
            raise self._error(rc, "HcommLocalReduceOnThread")

    def write(self, thread: int, channel: int, dst: CData, src: CData, nbytes: int) -> None:
        """HcommWriteOnThread: enqueue a write of ``nbytes`` from local ``src`` to remote ``dst``."""
        rc = self._lib.HcommWriteOnThread(thread, channel, dst, src, nbytes)
        if rc:
            raise self._error(rc, "HcommWriteOnThread")

    def read(self, thread: int, channel: int, dst: CData, src: CData, nbytes: int) -> None:
        """HcommReadOnThread: enqueue a read of ``nbytes`` from remote ``src`` to local ``dst``."""
        rc = self._lib.HcommReadOnThread(thread, channel, dst, src, nbytes)
        if rc:
            raise self._error(rc, "HcommReadOnThread")

    def write_reduce(self, thread: int, channel: int, dst: CData, src: CData, count: int, dtype: int, op: int) -> None:
        """HcommWriteReduceOnThread: enqueue remote ``dst = op(dst, src)`` over ``count`` elements."""
        rc = self._lib.HcommWriteReduceOnThread(thread, channel, dst, src, count, dtype, op)
        if rc:
            raise self._error(rc, "HcommWriteReduceOnThread")

    def read_reduce(self, thread: int, channel: int, dst: CData, src: CData, count: int, dtype: int, op: int) -> None:
        """HcommReadReduceOnThread: enqueue local ``dst = op(dst, remote src)`` over ``count`` elements."""
        rc = self._lib.HcommReadReduceOnThread(thread, channel, dst, src, count, dtype, op)
        if rc:
            raise self._error(rc, "HcommReadReduceOnThread")

    def write_with_notify(self, thread: int, channel: int, dst: CData, src: CData, nbytes: int, remote_notify_idx: int) -> None:
        """HcommWriteWithNotifyOnThread: a write followed by a record of the peer's notify (not on A2/A3)."""
        rc = self._lib.HcommWriteWithNotifyOnThread(thread, channel, dst, src, nbytes, remote_notify_idx)
        if rc:
            raise self._error(rc, "HcommWriteWithNotifyOnThread")

    def write_reduce_with_notify(
        self, thread: int, channel: int, dst: CData, src: CData, count: int, dtype: int, op: int, remote_notify_idx: int,
    ) -> None:
        """HcommWriteReduceWithNotifyOnThread: a write-reduce followed by a record of the peer's notify."""
        rc = self._lib.HcommWriteReduceWithNotifyOnThread(thread, channel, dst, src, count, dtype, op, remote_notify_idx)
        if rc:
            raise self._error(rc, "HcommWriteReduceWithNotifyOnThread")

    def write_nbi(self, thread: int, channel: int, dst: CData, src: CData, nbytes: int) -> None:
        """HcommWriteNbiOnThread: non-blocking write (order it with fence/channel_fence)."""
        rc = self._lib.HcommWriteNbiOnThread(thread, channel, dst, src, nbytes)
        if rc:
            raise self._error(rc, "HcommWriteNbiOnThread")

    def read_nbi(self, thread: int, channel: int, dst: CData, src: CData, nbytes: int) -> None:
        """HcommReadNbiOnThread: non-blocking read (order it with fence/channel_fence)."""
        rc = self._lib.HcommReadNbiOnThread(thread, channel, dst, src, nbytes)
        if rc:
            raise self._error(rc, "HcommReadNbiOnThread")

    def batch_transfer(self, thread: int, channel: int, descs: CData, n: Optional[int] = None) -> None:
        """HcommBatchTransferOnThread: enqueue an array of ``HcommBatchTransferDesc``."""
        count = _count_of("descs", descs, n)
        rc = self._lib.HcommBatchTransferOnThread(thread, channel, descs, count)
        if rc:
            raise self._error(rc, "HcommBatchTransferOnThread")

    def thread_notify_record(self, thread: int, dst_thread: int, idx: int) -> None:
        """HcommThreadNotifyRecordOnThread: set notify ``idx`` of local thread ``dst_thread``."""
        rc = self._lib.HcommThreadNotifyRecordOnThread(thread, dst_thread, idx)
        if rc:
            raise self._error(rc, "HcommThreadNotifyRecordOnThread")

    def thread_notify_wait(self, thread: int, idx: int, timeout_s: int) -> None:
        """HcommThreadNotifyWaitOnThread: wait for (and clear) this thread's notify ``idx``; ``timeout_s`` in seconds, 0 = forever."""
        rc = self._lib.HcommThreadNotifyWaitOnThread(thread, idx, timeout_s)
        if rc:
            raise self._error(rc, "HcommThreadNotifyWaitOnThread")

    def channel_notify_record(self, thread: int, channel: int, idx: int) -> None:
        """HcommChannelNotifyRecordOnThread: set the peer's notify ``idx`` of ``channel``."""
        rc = self._lib.HcommChannelNotifyRecordOnThread(thread, channel, idx)
        if rc:
            raise self._error(rc, "HcommChannelNotifyRecordOnThread")

    def channel_notify_wait(self, thread: int, channel: int, idx: int, timeout_s: int) -> None:
        """HcommChannelNotifyWaitOnThread: wait for (and clear) local notify ``idx`` of ``channel``; seconds, 0 = forever."""
        rc = self._lib.HcommChannelNotifyWaitOnThread(thread, channel, idx, timeout_s)
        if rc:
            raise self._error(rc, "HcommChannelNotifyWaitOnThread")

    def batch_mode_start(self, tag: Union[str, bytes] = b"") -> None:
        """HcommBatchModeStart: start recording data-plane calls (launched by batch_mode_end)."""
        rc = self._lib.HcommBatchModeStart(_tag(tag))
        if rc:
            raise self._error(rc, "HcommBatchModeStart")

    def batch_mode_end(self, tag: Union[str, bytes] = b"") -> None:
        """HcommBatchModeEnd: launch the calls recorded since batch_mode_start."""
        rc = self._lib.HcommBatchModeEnd(_tag(tag))
        if rc:
            raise self._error(rc, "HcommBatchModeEnd")

    def fence(self, thread: int) -> None:
        """HcommFenceOnThread: order all earlier non-blocking transfers of ``thread``."""
        rc = self._lib.HcommFenceOnThread(thread)
        if rc:
            raise self._error(rc, "HcommFenceOnThread")

    def channel_fence(self, thread: int, channel: int) -> None:
        """HcommChannelFenceOnThread: order earlier non-blocking transfers on ``channel``."""
        rc = self._lib.HcommChannelFenceOnThread(thread, channel)
        if rc:
            raise self._error(rc, "HcommChannelFenceOnThread")

    def channel_drain(self, thread: int, channel: int) -> None:
        """HcommChannelDrainOnThread: wait until ``channel``'s outstanding transfers have completed."""
        rc = self._lib.HcommChannelDrainOnThread(thread, channel)
        if rc:
            raise self._error(rc, "HcommChannelDrainOnThread")

    def set_notify_wait_timeout(self, timeout_s: float) -> None:
        """HcommSetNotifyWaitTimeOut: default timeout (seconds) of the *WithDefaultTimeout waits."""
        rc = self._lib.HcommSetNotifyWaitTimeOut(timeout_s)
        if rc:
            raise self._error(rc, "HcommSetNotifyWaitTimeOut")

    def acquire_comm(self, comm_id: Union[str, bytes]) -> None:
        """HcommAcquireComm: take the communicator named ``comm_id`` for exclusive data-plane use."""
        rc = self._lib.HcommAcquireComm(_tag(comm_id))
        if rc:
            raise self._error(rc, "HcommAcquireComm", f"comm_id={comm_id!r}")

    def release_comm(self, comm_id: Union[str, bytes]) -> None:
        """HcommReleaseComm: give back a communicator taken with acquire_comm."""
        rc = self._lib.HcommReleaseComm(_tag(comm_id))
        if rc:
            raise self._error(rc, "HcommReleaseComm", f"comm_id={comm_id!r}")

    # ------------------------------------------------------------------ ACL runtime
    def acl_init(self, config_path: Optional[PathLike] = None) -> bool:
        """aclInit: True if this call initialised ACL, False if it already was (ACL_ERROR_REPEAT_INITIALIZE)."""
        rc = self._lib.aclInit(os.fsencode(config_path) if config_path is not None else ffi.NULL)
        if rc == _ACL_REPEAT_INITIALIZE:
            return False
        if rc:
            raise self._error(rc, "aclInit")
        return True

    def acl_finalize(self) -> None:
        """aclFinalize: tear ACL down (once per process, after every device is reset)."""
        rc = self._lib.aclFinalize()
        if rc:
            raise self._error(rc, "aclFinalize")

    def set_device(self, device: int) -> None:
        """aclrtSetDevice: bind this OS thread to ``device``."""
        rc = self._lib.aclrtSetDevice(device)
        if rc:
            raise self._error(rc, "aclrtSetDevice", f"device={device}")

    def reset_device(self, device: int) -> None:
        """aclrtResetDevice: release ``device``'s resources held by this process."""
        rc = self._lib.aclrtResetDevice(device)
        if rc:
            raise self._error(rc, "aclrtResetDevice", f"device={device}")

    def get_device(self) -> int:
        """aclrtGetDevice: the device bound to this OS thread."""
        out = ffi.new("int32_t *")
        rc = self._lib.aclrtGetDevice(out)
        if rc:
            raise self._error(rc, "aclrtGetDevice")
        return int(out[0])

    def get_device_count(self) -> int:
        """aclrtGetDeviceCount: number of visible devices."""
        out = ffi.new("uint32_t *")
        rc = self._lib.aclrtGetDeviceCount(out)
        if rc:
            raise self._error(rc, "aclrtGetDeviceCount")
        return int(out[0])

    def synchronize_device(self) -> None:
        """aclrtSynchronizeDevice: wait for all work on the current device."""
        rc = self._lib.aclrtSynchronizeDevice()
        if rc:
            raise self._error(rc, "aclrtSynchronizeDevice")

    def create_stream(self) -> CData:
        """aclrtCreateStream: a new ``aclrtStream``."""
        out = ffi.new("aclrtStream *")
        rc = self._lib.aclrtCreateStream(out)
        if rc:
            raise self._error(rc, "aclrtCreateStream")
        return out[0]

    def destroy_stream(self, stream: CData) -> None:
        """aclrtDestroyStream."""
        rc = self._lib.aclrtDestroyStream(stream)
        if rc:
            raise self._error(rc, "aclrtDestroyStream")

    def synchronize_stream(self, stream: CData) -> None:
        """aclrtSynchronizeStream: wait until everything enqueued on ``stream`` has run."""
        rc = self._lib.aclrtSynchronizeStream(stream)
        if rc:
            raise self._error(rc, "aclrtSynchronizeStream")

    def synchronize_stream_with_timeout(self, stream: CData, timeout_ms: int) -> None:
        """aclrtSynchronizeStreamWithTimeout: like synchronize_stream, giving up after ``timeout_ms`` (-1 = forever)."""
        rc = self._lib.aclrtSynchronizeStreamWithTimeout(stream, timeout_ms)
        if rc:
            raise self._error(rc, "aclrtSynchronizeStreamWithTimeout", f"timeout_ms={timeout_ms}")

    def malloc(self, size: int, policy: int = MemMallocPolicy.HUGE_FIRST) -> CData:
        """aclrtMalloc: ``size`` bytes of device memory as a ``char *`` cdata (free it with free())."""
        if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
            raise ValueError(f"size={size!r} is not a positive int number of bytes")
        out = ffi.new("void **")
        rc = self._lib.aclrtMalloc(out, size, policy)
        if rc:
            raise self._error(rc, "aclrtMalloc", f"size={size} policy={int(policy)}")
        return ffi.cast("char *", out[0])

    def free(self, ptr: CData) -> None:
        """aclrtFree: release memory from malloc()."""
        rc = self._lib.aclrtFree(ptr)
        if rc:
            raise self._error(rc, "aclrtFree")

    def malloc_host(self, size: int) -> CData:
        """aclrtMallocHost: ``size`` bytes of page-locked host memory as a ``char *`` cdata."""
        if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
            raise ValueError(f"size={size!r} is not a positive int number of bytes")
        out = ffi.new("void **")
        rc = self._lib.aclrtMallocHost(out, size)
        if rc:
            raise self._error(rc, "aclrtMallocHost", f"size={size}")
        return ffi.cast("char *", out[0])

    def free_host(self, ptr: CData) -> None:
        """aclrtFreeHost: release memory from malloc_host()."""
        rc = self._lib.aclrtFreeHost(ptr)
        if rc:
            raise self._error(rc, "aclrtFreeHost")

    def memcpy(self, dst: CData, dst_max: int, src: CData, count: int, kind: int) -> None:
        """aclrtMemcpy: synchronous copy of ``count`` bytes (``kind`` an aclrtMemcpyKind)."""
        if count > dst_max:
            raise ValueError(f"count={count} exceeds dst_max={dst_max}; the destination is too small")
        rc = self._lib.aclrtMemcpy(dst, dst_max, src, count, kind)
        if rc:
            raise self._error(rc, "aclrtMemcpy", f"count={count} kind={int(kind)}")

    def memcpy_async(self, dst: CData, dst_max: int, src: CData, count: int, kind: int, stream: CData) -> None:
        """aclrtMemcpyAsync: copy of ``count`` bytes enqueued on ``stream``."""
        if count > dst_max:
            raise ValueError(f"count={count} exceeds dst_max={dst_max}; the destination is too small")
        rc = self._lib.aclrtMemcpyAsync(dst, dst_max, src, count, kind, stream)
        if rc:
            raise self._error(rc, "aclrtMemcpyAsync", f"count={count} kind={int(kind)}")

    def memset(self, ptr: CData, max_count: int, value: int, count: int) -> None:
        """aclrtMemset: set ``count`` bytes to ``value``."""
        if count > max_count:
            raise ValueError(f"count={count} exceeds max_count={max_count}")
        rc = self._lib.aclrtMemset(ptr, max_count, value, count)
        if rc:
            raise self._error(rc, "aclrtMemset")

    def create_event(self) -> CData:
        """aclrtCreateEvent: a new ``aclrtEvent``."""
        out = ffi.new("aclrtEvent *")
        rc = self._lib.aclrtCreateEvent(out)
        if rc:
            raise self._error(rc, "aclrtCreateEvent")
        return out[0]

    def record_event(self, event: CData, stream: CData) -> None:
        """aclrtRecordEvent: record ``event`` at the current end of ``stream``."""
        rc = self._lib.aclrtRecordEvent(event, stream)
        if rc:
            raise self._error(rc, "aclrtRecordEvent")

    def stream_wait_event(self, stream: CData, event: CData) -> None:
        """aclrtStreamWaitEvent: make ``stream`` wait for ``event``."""
        rc = self._lib.aclrtStreamWaitEvent(stream, event)
        if rc:
            raise self._error(rc, "aclrtStreamWaitEvent")

    def synchronize_event(self, event: CData) -> None:
        """aclrtSynchronizeEvent: block until ``event`` has completed."""
        rc = self._lib.aclrtSynchronizeEvent(event)
        if rc:
            raise self._error(rc, "aclrtSynchronizeEvent")

    def destroy_event(self, event: CData) -> None:
        """aclrtDestroyEvent."""
        rc = self._lib.aclrtDestroyEvent(event)
        if rc:
            raise self._error(rc, "aclrtDestroyEvent")

    def get_soc_name(self) -> Optional[str]:
        """aclrtGetSocName: the SoC name (e.g. 'Ascend910B1'), or None if the runtime cannot tell."""
        return _c_string(self._lib.aclrtGetSocName())

    # ------------------------------------------------------------------ collectives (libhccl.so)
    def all_reduce(self, send: CData, recv: CData, count: int, dtype: int, op: int, comm: CData, stream: CData) -> None:
        """HcclAllReduce: ``count`` elements, enqueued on ``stream``."""
        rc = self._lib.HcclAllReduce(send, recv, count, dtype, op, comm, stream)
        if rc:
            raise self._error(rc, "HcclAllReduce")

    def broadcast(self, buf: CData, count: int, dtype: int, root: int, comm: CData, stream: CData) -> None:
        """HcclBroadcast: ``count`` elements of ``buf`` from ``root``."""
        rc = self._lib.HcclBroadcast(buf, count, dtype, root, comm, stream)
        if rc:
            raise self._error(rc, "HcclBroadcast")

    def all_gather(self, send: CData, recv: CData, send_count: int, dtype: int, comm: CData, stream: CData) -> None:
        """HcclAllGather: each rank contributes ``send_count`` elements."""
        rc = self._lib.HcclAllGather(send, recv, send_count, dtype, comm, stream)
        if rc:
            raise self._error(rc, "HcclAllGather")

    def all_gather_v(
        self, send: CData, send_count: int, recv: CData, recv_counts: CData, recv_displs: CData,
        dtype: int, comm: CData, stream: CData,
    ) -> None:
        """HcclAllGatherV: per-rank counts/displacements as uint64 arrays."""
        rc = self._lib.HcclAllGatherV(send, send_count, recv, recv_counts, recv_displs, dtype, comm, stream)
        if rc:
            raise self._error(rc, "HcclAllGatherV")

    def reduce_scatter(self, send: CData, recv: CData, recv_count: int, dtype: int, op: int, comm: CData, stream: CData) -> None:
        """HcclReduceScatter: each rank receives ``recv_count`` reduced elements."""
        rc = self._lib.HcclReduceScatter(send, recv, recv_count, dtype, op, comm, stream)
        if rc:
            raise self._error(rc, "HcclReduceScatter")

    def reduce_scatter_v(
        self, send: CData, send_counts: CData, send_displs: CData, recv: CData, recv_count: int,
        dtype: int, op: int, comm: CData, stream: CData,
    ) -> None:
        """HcclReduceScatterV: per-rank counts/displacements as uint64 arrays."""
        rc = self._lib.HcclReduceScatterV(send, send_counts, send_displs, recv, recv_count, dtype, op, comm, stream)
        if rc:
            raise self._error(rc, "HcclReduceScatterV")

    def reduce(self, send: CData, recv: CData, count: int, dtype: int, op: int, root: int, comm: CData, stream: CData) -> None:
        """HcclReduce: ``count`` elements reduced onto ``root``."""
        rc = self._lib.HcclReduce(send, recv, count, dtype, op, root, comm, stream)
        if rc:
            raise self._error(rc, "HcclReduce")

    def scatter(self, send: CData, recv: CData, recv_count: int, dtype: int, root: int, comm: CData, stream: CData) -> None:
        """HcclScatter: ``recv_count`` elements to each rank from ``root``."""
        rc = self._lib.HcclScatter(send, recv, recv_count, dtype, root, comm, stream)
        if rc:
            raise self._error(rc, "HcclScatter")

    def all_to_all(
        self, send: CData, send_count: int, send_type: int, recv: CData, recv_count: int, recv_type: int,
        comm: CData, stream: CData,
    ) -> None:
        """HcclAlltoAll: the same count to and from every rank."""
        rc = self._lib.HcclAlltoAll(send, send_count, send_type, recv, recv_count, recv_type, comm, stream)
        if rc:
            raise self._error(rc, "HcclAlltoAll")

    def all_to_all_v(
        self, send: CData, send_counts: CData, send_displs: CData, send_type: int, recv: CData,
        recv_counts: CData, recv_displs: CData, recv_type: int, comm: CData, stream: CData,
    ) -> None:
        """HcclAlltoAllV: per-rank counts/displacements as uint64 arrays."""
        rc = self._lib.HcclAlltoAllV(send, send_counts, send_displs, send_type, recv, recv_counts,
                                     recv_displs, recv_type, comm, stream)
        if rc:
            raise self._error(rc, "HcclAlltoAllV")

    def all_to_all_vc(
        self, send: CData, send_count_matrix: CData, send_type: int, recv: CData, recv_type: int,
        comm: CData, stream: CData,
    ) -> None:
        """HcclAlltoAllVC: driven by a rank_size x rank_size uint64 count matrix."""
        rc = self._lib.HcclAlltoAllVC(send, send_count_matrix, send_type, recv, recv_type, comm, stream)
        if rc:
            raise self._error(rc, "HcclAlltoAllVC")

    def send(self, buf: CData, count: int, dtype: int, dst: int, comm: CData, stream: CData) -> None:
        """HcclSend: ``count`` elements to rank ``dst`` (pairs with recv on the peer)."""
        rc = self._lib.HcclSend(buf, count, dtype, dst, comm, stream)
        if rc:
            raise self._error(rc, "HcclSend")

    def recv(self, buf: CData, count: int, dtype: int, src: int, comm: CData, stream: CData) -> None:
        """HcclRecv: ``count`` elements from rank ``src``."""
        rc = self._lib.HcclRecv(buf, count, dtype, src, comm, stream)
        if rc:
            raise self._error(rc, "HcclRecv")

    def batch_send_recv(self, items: CData, n: Optional[int], comm: CData, stream: CData) -> None:
        """HcclBatchSendRecv: an ``HcclSendRecvItem[n]`` array of sends and receives in one call."""
        count = _count_of("items", items, n)
        rc = self._lib.HcclBatchSendRecv(items, count, comm, stream)
        if rc:
            raise self._error(rc, "HcclBatchSendRecv")


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
