"""Process-wide registries of the emulator: handles of comms, threads, channels, streams, events.

Handles are what the C API hands out: ``HcclComm``/``aclrtStream``/``aclrtEvent`` are fake
pointers (registry keys cast to ``void *``), ``ThreadHandle``/``ChannelHandle`` are integers.
"""
from __future__ import annotations

import itertools
import threading
from typing import Any, Dict, Optional

from .._ffi import ffi
from .comm import SimChannel, SimComm
from .devmem import DeviceMemory
from .errors import HcclResult, SimError
from .queues import Queue, SimEvent, SimThread

_NULL = ffi.NULL
DEFAULT_NOTIFY_WAIT_S = 1836 + 27   # host default of the *WithDefaultTimeout waits

__all__ = ["SimState", "key_of", "c_string"]


def c_string(obj: Any) -> bytes:
    """The bytes of a ``const char *`` argument: Python bytes/str (as cffi accepts) or a char* cdata."""
    if obj is None:
        return b""
    if isinstance(obj, bytes):
        return obj.split(b"\0", 1)[0]
    if isinstance(obj, str):
        return obj.encode()
    if obj == _NULL:
        return b""
    return ffi.string(ffi.cast("char *", obj))


def key_of(obj: Any) -> int:
    """The integer behind a handle argument: a cdata pointer, an int, or NULL (0)."""
    if isinstance(obj, int):
        return obj
    if obj is None:
        return 0
    return int(ffi.cast("uintptr_t", obj))


class SimState:
    """All emulator objects of this process."""

    def __init__(self) -> None:
        self.client_calls: Dict[str, Any] = {}      # process-wide settings of HcclSetConfig (sim/hccl_comm.py)
        self.memory: Dict[int, Any] = {}            # aclrtMalloc'ed blocks by address
        self.device = DeviceMemory()                # ranges a device task may touch (devmem.py)
        self.released_streams: Dict[int, str] = {}  # stream handles that died with their owner, and why
        self.releases = 0                           # aclrtFree's and stream destructions so far (acl_graphs.py's checks)
        self.default_wait_s = float(DEFAULT_NOTIFY_WAIT_S)  # of the *WithDefaultTimeout waits (process-wide)
        self._ptr_keys = itertools.count(0x10000, 0x100)
        self._thread_ids = itertools.count(1)
        self._channel_ids = itertools.count(1)
        self.own_registries()

    def own_registries(self) -> None:
        """Empty registries of the objects only the process that made them may use, and a default stream: at init,
        and in a forked child, whose parent's communicators, threads, channels, streams and events are not its
        (their handles are refused as unknown, and never destroyed there: that would end them in the parent's job)."""
        self.lock = threading.RLock()
        self.comms: Dict[int, SimComm] = {}
        self.threads: Dict[int, SimThread] = {}
        self.channels: Dict[int, SimChannel] = {}
        self.events: Dict[int, SimEvent] = {}
        self.default_stream = Queue("default stream")
        self.streams: Dict[int, Queue] = {0: self.default_stream}
        # callers pass the same handle objects again and again: remember the last lookups by identity
        self._last_comm: tuple = (None, None)
        self._last_stream: tuple = (None, None)
        # the native collectives' small calls kept for their repeats (native.py _keep): argument tuple -> what it keeps
        self.call_cache: Dict[tuple, Any] = {}

    def new_ptr_key(self) -> int:
        return next(self._ptr_keys)

    def new_thread_handle(self) -> int:
        return 0x7E5D_0000_0000 + next(self._thread_ids)

    def new_channel_handle(self) -> int:
        return 0x7C4A_0000_0000 + next(self._channel_ids)

    # ------------------------------------------------------------------ lookups
    def comm(self, handle: Any) -> SimComm:
        obj, comm = self._last_comm
        if obj is handle and not comm.destroyed:
            return comm
        key = key_of(handle)
        if key == 0:
            raise SimError(HcclResult.E_PTR, "comm is NULL")
        comm = self.comms.get(key)
        if comm is None:
            raise SimError(HcclResult.E_PARA, f"comm 0x{key:x} is not a communicator of this process")
        if comm.destroyed:
            raise SimError(HcclResult.E_PARA, f"communicator {comm.name} was destroyed")
        if not isinstance(handle, int):
            self._last_comm = (handle, comm)
        return comm

    def thread(self, handle: int) -> SimThread:
        th = self.threads.get(handle)
        if th is None:
            if not handle:
                raise SimError(HcclResult.E_PTR, "thread handle is 0")
            raise SimError(HcclResult.E_PTR, f"thread 0x{handle:x} is not a thread of this process")
        if th.comm.destroyed:
            raise SimError(HcclResult.E_PARA, f"thread 0x{handle:x} belongs to a destroyed communicator")
        return th

    def channel(self, handle: int) -> SimChannel:
        ch = self.channels.get(handle)
        if ch is None:
            if not handle:
                raise SimError(HcclResult.E_PTR, "channel handle is 0")
            raise SimError(HcclResult.E_PARA, f"channel 0x{handle:x} is not a channel of this process")
        if ch.comm.destroyed:
            raise SimError(HcclResult.E_PARA, f"channel 0x{handle:x} belongs to a destroyed communicator")
        return ch

    def stream(self, handle: Any, unknown: int = HcclResult.E_PARA) -> Queue:
        """The queue of a stream handle; NULL is the default stream.  ``unknown``: the error code of a handle that
        is not a stream of this process (an aclrt* call's is ACL_ERROR_RT_INVALID_HANDLE)."""
        obj, q = self._last_stream
        if obj is handle and q is not None:
            return q
        key = key_of(handle)
        q = self.streams.get(key)
        if q is None:
            why = self.released_streams.get(key)
            raise SimError(unknown, f"stream 0x{key:x} is not a stream of this process"
                                              + (f": {why}" if why else ""))
        if not isinstance(handle, int) and handle is not None:
            self._last_stream = (handle, q)
        return q

    def forget_stream(self, key: int) -> None:
        """Drop a destroyed stream, the identity cache that may point at it, and every communicator's thread
        on it (HcclThreadAcquireWithStream's, the native collectives'): a job that creates a stream per step
        must not keep one thread per stream it ever had."""
        q = self.streams.pop(key, None)
        self.releases += 1
        if q is not None:
            for c in self.comms.values():
                th = c.stream_threads.pop(id(q), None)
                if th is not None:
                    self.threads.pop(th.handle, None)
        self._last_stream = (None, None)
        self.forget_calls()         # the one small-call cache: its task lists name threads and queues of streams

    def forget_calls(self) -> None:
        """Empty the small-call cache (sim/native.py ``_keep``), each entry told so (``forget``)."""
        for kept in self.call_cache.values():
            kept.forget()
        self.call_cache.clear()

    def release_stream(self, key: int, why: str) -> None:
        """Drop a stream that died with its owner; later uses of the handle are told ``why``."""
        self.forget_stream(key)
        self.released_streams[key] = why

    def event(self, handle: Any) -> Optional[SimEvent]:
        return self.events.get(key_of(handle))
