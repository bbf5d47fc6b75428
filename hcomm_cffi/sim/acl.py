"""The ACL runtime subset of the emulator: devices and their modes, streams, events, memory, copies.

"Device memory" is host memory of the rank's process (shared memfd mappings the peers can map,
sim/peer_memory.py; page-aligned, lazily committed); streams are task queues driven by the same executor as HCOMM threads, so a stream
wrapped by HcclThreadAcquireWithStream and the thread share one FIFO.

``aclrtGetSocName`` answers the SoC of the emulated platform (``HCOMM_SIM_PLATFORM``; sim/product.py names it),
so clients that branch on it (hccl_test's 910B overflow mode and Ascend950 options, ranktable versions, custom
operators) take the platform's branch.

Events follow hicann/runtime@681ef7610df1:
* a wait on an event that has a record pending waits for it; a wait on an event with no record since its
  last reset holds the stream until the next record when the event was created with ACL_EVENT_SYNC
  (RT_EVENT_DDSYNC_NS, pkg_inc/runtime/runtime/event.h:56; src/runtime/core/src/event/event.cc:720-728 lets
  such a wait through to the hardware, which blocks on the event), and is refused otherwise ("The event has not
  been recorded", RT_ERROR_INVALID_VALUE -> ACL_ERROR_RT_PARAM_INVALID, same lines);
* aclrtResetEvent is a task in stream order (event.cc:764-800, TS_TASK_TYPE_EVENT_RESET): the next wait waits
  for a new record;
* aclrtEventElapsedTime is the difference of the two records' timestamps, in ms (event.cc:1247-1279); an event
  without an executed record has no timestamp: ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID.
The timestamps are the emulator's stream clock: ``perf_counter_ns`` when the executor runs the record task, so
the interval is what the stream spent between the two records (the operations' execution, not their issue).
"""
from __future__ import annotations

import threading
import time
from typing import Any, Dict, Tuple

import numpy as np

from .. import settings
from .._ffi import ffi
from ..errors import ACL_ERROR_API_NOT_SUPPORT, ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID
from . import product
from .errors import (
    ACL_ERROR_INVALID_PARAM, ACL_ERROR_REPEAT_INITIALIZE, ACL_ERROR_RT_CONTEXT_NULL,
    ACL_ERROR_RT_INVALID_DEVICEID, ACL_ERROR_RT_INVALID_HANDLE,
    ACL_ERROR_RT_MEMORY_ALLOCATION, ACL_ERROR_RT_PARAM_INVALID, ACL_ERROR_RT_STREAM_SYNC_TIMEOUT, ACL_ERROR_UNINITIALIZE,
    SimError, last_error, raise_kept,
)
from . import acl_graphs, peer_memory
from .queues import Queue, SimEvent
from .runtime import EXECUTOR
from .tasks import EventRecord, EventWait, HostCall
from .part import Part, check_out
from .state import SimState, key_of

__all__ = ["AclRuntime", "acl_event", "acl_stream", "current_device", "require_device", "interned"]

ACL_EVENT_SYNC = 0x1
#: every flag of acl/acl_rt.h:28-33 (SYNC, CAPTURE_STREAM_PROGRESS, TIME_LINE, DEVICE_USE_ONLY, EXTERNAL, IPC)
EVENT_FLAGS = 0x1 | 0x2 | 0x8 | 0x10 | 0x20 | 0x40
OVERFLOW_MODE_SATURATION, OVERFLOW_MODE_INFNAN = 0, 1        # aclrtFloatOverflowMode (acl/acl_rt.h:280-284)
CONTINUE_ON_FAILURE, STOP_ON_FAILURE = 0, 1                  # aclrtSetStreamFailureMode's modes


class _Device(threading.local):
    current = -1


_DEVICE = _Device()   # per OS thread and process-wide, as the runtime's current context is
_STRINGS: Dict[str, Any] = {}


def current_device() -> int:
    """The calling OS thread's current device (aclrtSetDevice), -1 when none."""
    return _DEVICE.current


def require_device() -> int:
    """The calling OS thread's current device; ACL_ERROR_RT_CONTEXT_NULL when none is set."""
    if _DEVICE.current < 0:
        raise SimError(ACL_ERROR_RT_CONTEXT_NULL, "no device set on this thread (call aclrtSetDevice)")
    return _DEVICE.current


def interned(text: str) -> Any:
    """A ``const char *`` the caller may keep (strings are interned per text)."""
    s = _STRINGS.get(text)
    if s is None:
        s = _STRINGS[text] = ffi.new("char[]", text.encode("utf-8", "replace"))
    return s


def acl_stream(state: SimState, stream: Any) -> Queue:
    """The queue of an aclrt* call's stream argument; an unknown handle is ACL_ERROR_RT_INVALID_HANDLE."""
    return state.stream(stream, ACL_ERROR_RT_INVALID_HANDLE)


def acl_event(state: SimState, event: Any) -> SimEvent:
    """The event of an aclrt* call's event argument; an unknown handle is ACL_ERROR_RT_INVALID_HANDLE."""
    ev = state.event(event)
    if ev is None:
        raise SimError(ACL_ERROR_RT_INVALID_HANDLE, f"event 0x{key_of(event):x} is not an event of this process")
    return ev


class AclRuntime(Part):
    """aclInit/aclrt* calls: devices and their modes, streams, events, memory (acl/acl_rt.h; aclrtGetSocName of
    acl/acl_base_rt.h)."""

    HEADERS = ("acl/acl_base_rt.h", "acl/acl_rt.h")
    _overflow_mode = OVERFLOW_MODE_INFNAN

    def __init__(self, state: SimState) -> None:
        super().__init__(state)
        self._acl_initialised = False
        self._device_count = int(settings.value("HCOMM_SIM_DEVICE_COUNT"))
        #: bumped by every aclrtSetDevice / aclrtResetDevice of any thread: a caller that caches a thread's
        #: current device (the emulated npu device's guard, per operation) asks again only when it moved
        self.device_changes = ffi.new("uint64_t *")

    # ------------------------------------------------------------------ init and devices
    def aclInit(self, configPath: Any) -> int:
        if self._acl_initialised:
            raise SimError(ACL_ERROR_REPEAT_INITIALIZE, "aclInit was already called in this process")
        self._acl_initialised = True
        return 0

    def aclFinalize(self) -> int:
        if not self._acl_initialised:
            raise SimError(ACL_ERROR_UNINITIALIZE, "aclFinalize without aclInit")
        self._acl_initialised = False
        return 0

    def aclGetRecentErrMsg(self) -> Any:
        text = last_error()
        return ffi.NULL if text is None else interned(text)

    def aclrtSetDevice(self, deviceId: int) -> int:
        if not 0 <= deviceId < self._device_count:
            raise SimError(ACL_ERROR_RT_INVALID_DEVICEID, f"deviceId={deviceId}; the emulator has devices "
                                                          f"0..{self._device_count - 1} (HCOMM_SIM_DEVICE_COUNT)")
        _DEVICE.current = deviceId
        self.device_changes[0] += 1
        return 0

    def aclrtResetDevice(self, deviceId: int) -> int:
        if not 0 <= deviceId < self._device_count:
            raise SimError(ACL_ERROR_RT_INVALID_DEVICEID, f"deviceId={deviceId} is not a device")
        if _DEVICE.current == deviceId:
            _DEVICE.current = -1
        self.device_changes[0] += 1
        return 0

    def aclrtGetDevice(self, deviceId: Any) -> int:
        deviceId[0] = require_device()
        return 0

    def aclrtGetDeviceCount(self, count: Any) -> int:
        count[0] = self._device_count
        return 0

    def aclrtSynchronizeDevice(self) -> int:
        """Wait for every queue of the process; a task that failed on any of them fails the call.

        runtime @ 681ef76: aclrtSynchronizeDeviceImpl (src/acl/aclrt_impl/device.cpp:159) returns the error of
        rtDeviceSynchronize -> ApiImpl::DeviceSynchronize (src/runtime/api/impl/api_impl.cc:3975), which needs a
        current context and returns Context::Synchronize's error (src/runtime/core/src/context/context.cc:1219).
        """
        acl_graphs.refuse_sync("aclrtSynchronizeDevice")
        require_device()
        EXECUTOR.run_until(lambda: not EXECUTOR.active)
        self._host_saw(lambda q: True)
        queues = list(self.state.streams.values()) + [th.queue for th in self.state.threads.values()]
        for q in queues:
            if q.error is not None:
                raise_kept(q, f"a task failed on {q.name}: ")
        return 0

    def aclrtGetSocName(self) -> Any:
        return interned(product.soc_name())

    def aclrtSetDeviceSatMode(self, mode: int) -> int:
        """runtime device.cpp:243-249 forwards to rtSetDeviceSatMode.  The emulator's kernels compute IEEE results
        (an fp16/bf16 overflow is inf, NumPy's arithmetic), which is INFNAN mode: saturation is refused."""
        if mode == OVERFLOW_MODE_INFNAN:
            AclRuntime._overflow_mode = mode
            return 0
        if mode == OVERFLOW_MODE_SATURATION:
            raise SimError(ACL_ERROR_API_NOT_SUPPORT, "mode=ACL_RT_OVERFLOW_MODE_SATURATION: the emulator's "
                                                           "kernels compute inf/nan on overflow (INFNAN mode) only")
        raise SimError(ACL_ERROR_RT_PARAM_INVALID, f"mode={mode}; expected ACL_RT_OVERFLOW_MODE_SATURATION (0) or "
                                                   "ACL_RT_OVERFLOW_MODE_INFNAN (1)")

    def aclrtGetDeviceSatMode(self, mode: Any) -> int:
        mode[0] = AclRuntime._overflow_mode
        return 0

    # ------------------------------------------------------------------ memory
    def _alloc(self, out: Any, size: int, what: str) -> int:
        check_out(out, "devPtr", ACL_ERROR_INVALID_PARAM)
        if size <= 0:
            raise SimError(ACL_ERROR_INVALID_PARAM, f"size={size}; expected > 0")
        try:
            mm, fd = peer_memory.allocate(size)      # memfd-backed: the peers' collectives map it
        except (OSError, ValueError) as exc:
            raise SimError(ACL_ERROR_RT_MEMORY_ALLOCATION, f"cannot allocate {size} bytes: {exc}") from None
        ptr = ffi.cast("char *", ffi.from_buffer(mm))
        start = int(ffi.cast("uintptr_t", ptr))
        peer_memory.register(start, size, fd)
        self.state.memory[start] = (mm, ptr)
        self.state.device.add(start, size, f"its {what} block")
        out[0] = ptr
        return 0

    def _release(self, ptr: Any) -> int:
        block: Tuple[Any, Any] = self.state.memory.pop(key_of(ptr), None)
        if block is None:
            raise SimError(ACL_ERROR_RT_PARAM_INVALID, f"0x{key_of(ptr):x} was not allocated by aclrtMalloc")
        self.state.releases += 1
        peer_memory.release(key_of(ptr))
        mm, cptr = block
        self.state.device.remove(key_of(ptr))
        try:
            mm.close()
        except BufferError:
            pass  # still referenced by a live view; freed with the process
        return 0

    def aclrtMalloc(self, devPtr: Any, size: int, policy: int) -> int:
        return self._alloc(devPtr, size, "aclrtMalloc")

    def aclrtFree(self, devPtr: Any) -> int:
        return self._release(devPtr)

    def aclrtMallocHost(self, hostPtr: Any, size: int) -> int:
        return self._alloc(hostPtr, size, "aclrtMallocHost")

    def aclrtFreeHost(self, hostPtr: Any) -> int:
        return self._release(hostPtr)

    def aclrtMemcpy(self, dst: Any, destMax: int, src: Any, count: int, kind: int) -> int:
        acl_graphs.refuse_unsafe("aclrtMemcpy")
        self._check_copy(dst, destMax, src, count, kind)
        if count:
            ffi.memmove(dst, src, count)
        return 0

    def aclrtMemcpyAsync(self, dst: Any, destMax: int, src: Any, count: int, kind: int, stream: Any) -> int:
        self._check_copy(dst, destMax, src, count, kind)
        q = acl_stream(self.state, stream)
        if count:
            EXECUTOR.submit(q, [HostCall(lambda: ffi.memmove(dst, src, count))])
            EXECUTOR.settle()
        return 0

    @staticmethod
    def _check_copy(dst: Any, destMax: int, src: Any, count: int, kind: int) -> None:
        if dst == ffi.NULL or src == ffi.NULL:
            raise SimError(ACL_ERROR_INVALID_PARAM, "dst or src is NULL")
        if count > destMax:
            raise SimError(ACL_ERROR_INVALID_PARAM, f"count={count} exceeds destMax={destMax}")
        if not 0 <= kind <= 7:
            raise SimError(ACL_ERROR_INVALID_PARAM, f"kind={kind} is not an aclrtMemcpyKind")

    def aclrtMemset(self, devPtr: Any, maxCount: int, value: int, count: int) -> int:
        acl_graphs.refuse_unsafe("aclrtMemset")
        check_out(devPtr, "devPtr", ACL_ERROR_INVALID_PARAM)
        if count > maxCount:
            raise SimError(ACL_ERROR_INVALID_PARAM, f"count={count} exceeds maxCount={maxCount}")
        if count:
            np.frombuffer(ffi.buffer(ffi.cast("char *", devPtr), count), np.uint8)[:] = value & 0xFF
        return 0

    # ------------------------------------------------------------------ streams
    def aclrtCreateStream(self, stream: Any) -> int:
        check_out(stream, "stream", ACL_ERROR_INVALID_PARAM)
        key = self.state.new_ptr_key()
        self.state.streams[key] = Queue(f"stream 0x{key:x}")
        stream[0] = ffi.cast("aclrtStream", key)
        return 0

    def aclrtDestroyStream(self, stream: Any) -> int:
        key = key_of(stream)
        q = self.state.streams.get(key)
        if q is None or key == 0:
            raise SimError(ACL_ERROR_RT_INVALID_HANDLE, f"stream 0x{key:x} is not a stream of this process")
        acl_graphs.refuse_sync("aclrtDestroyStream", queue=q)
        if q.tasks:
            EXECUTOR.settle()
        self.state.forget_stream(key)
        return 0

    def _sync(self, q: Queue, deadline: "float | None", timeout_code: int) -> int:
        """Drive the executor until the tasks ``q`` holds now have run (or it failed); its error, the timeout's code,
        or 0.  Tasks another host thread launches onto ``q`` meanwhile are not waited for (as the runtime waits for
        the work submitted before the call): one thread's wait never depends on another thread's later work."""
        finished = q.head() is None or EXECUTOR.drain(q, deadline)
        if q.error is not None:
            raise_kept(q, named=True)
        if not finished:
            raise SimError(timeout_code, f"{q.name}: not finished before the synchronisation timeout", named=True)
        if q.checked:       # only a race-checked thread's queue has anything to tell the checker
            self._host_saw(lambda other: other is q)
        return 0

    def _host_saw(self, synced: Any) -> None:
        """Race checker: what the threads on the synchronised queues did is ordered before the host's next issues."""
        for th in list(self.state.threads.values()):
            race = th.comm.race
            if race is not None and synced(th.queue):
                race.host_saw(th)

    def aclrtSynchronizeStream(self, stream: Any) -> int:
        q = self.state.stream(stream, ACL_ERROR_RT_INVALID_HANDLE)
        if q.capture is not None:
            acl_graphs.refuse_sync("aclrtSynchronizeStream", queue=q)
        return self._sync(q, None, ACL_ERROR_RT_STREAM_SYNC_TIMEOUT)

    def aclrtSynchronizeStreamWithTimeout(self, stream: Any, timeout: int) -> int:
        q = self.state.stream(stream, ACL_ERROR_RT_INVALID_HANDLE)
        if q.capture is not None:
            acl_graphs.refuse_sync("aclrtSynchronizeStreamWithTimeout", queue=q)
        deadline = None if timeout < 0 else time.monotonic() + timeout / 1000.0
        return self._sync(q, deadline, ACL_ERROR_RT_STREAM_SYNC_TIMEOUT)

    def aclrtSetStreamFailureMode(self, stream: Any, mode: int) -> int:
        """runtime stream.cpp:258-264 (rtStreamSetMode).  The emulator stops a stream at its first failed task
        and fails what waits on it (sim/runtime.py fail_queue), which is STOP_ON_FAILURE; both modes are accepted,
        continuing past a failed task is not emulated."""
        acl_stream(self.state, stream)                      # an unknown stream: ACL_ERROR_RT_INVALID_HANDLE
        if mode not in (CONTINUE_ON_FAILURE, STOP_ON_FAILURE):
            raise SimError(ACL_ERROR_RT_PARAM_INVALID, f"mode={mode}; expected 0 (continue on failure) or 1 (stop "
                                                       "on failure)")
        return 0

    # ------------------------------------------------------------------ events
    def aclrtCreateEvent(self, event: Any) -> int:
        check_out(event, "event", ACL_ERROR_INVALID_PARAM)
        key = self.state.new_ptr_key()
        self.state.events[key] = SimEvent(key)
        event[0] = ffi.cast("aclrtEvent", key)
        return 0

    def aclrtDestroyEvent(self, event: Any) -> int:
        ev = acl_event(self.state, event)
        del self.state.events[ev.handle]
        return 0

    def aclrtRecordEvent(self, event: Any, stream: Any) -> int:
        ev = acl_event(self.state, event)
        q = acl_stream(self.state, stream)
        ev.recorded += 1
        EXECUTOR.submit(q, [EventRecord(ev)])
        EXECUTOR.settle()
        return 0

    def aclrtSynchronizeEvent(self, event: Any) -> int:
        ev = acl_event(self.state, event)
        acl_graphs.refuse_sync("aclrtSynchronizeEvent", event=ev)
        target = ev.recorded
        EXECUTOR.run_until(lambda: ev.completed >= target)
        if ev.error is not None:
            raise_kept(ev, "the stream of this event failed: ", named=True)
        return 0

    def aclrtCreateEventWithFlag(self, event: Any, flag: int) -> int:
        check_out(event, "event", ACL_ERROR_INVALID_PARAM)
        if flag & ~EVENT_FLAGS:
            raise SimError(ACL_ERROR_INVALID_PARAM, f"flag=0x{flag:x} has bits that are no ACL_EVENT_* flag "
                                                    f"(expected a combination of 0x{EVENT_FLAGS:x})")
        key = self.state.new_ptr_key()
        self.state.events[key] = SimEvent(key, flag)
        event[0] = ffi.cast("aclrtEvent", key)
        return 0

    def aclrtStreamWaitEvent(self, stream: Any, event: Any) -> int:
        ev = acl_event(self.state, event)
        q = acl_stream(self.state, stream)
        acl_graphs.join_event(q, ev, self.state.default_stream)    # waiting on a captured event joins the capture
        if q.capture is not None or ev.recorded > ev.reset_at:
            target = ev.recorded                        # the last record issued
        elif ev.flag & ACL_EVENT_SYNC:
            target = ev.recorded + 1                    # the next record, whenever it is issued
        else:
            raise SimError(ACL_ERROR_RT_PARAM_INVALID, f"event 0x{ev.handle:x} has not been recorded; record it "
                                                       "first (or create it with ACL_EVENT_SYNC to wait for its "
                                                       "next record)")
        EXECUTOR.submit(q, [EventWait(ev, target)])
        EXECUTOR.settle()
        return 0

    def aclrtResetEvent(self, event: Any, stream: Any) -> int:
        ev = acl_event(self.state, event)
        q = acl_stream(self.state, stream)
        ev.reset_at = ev.recorded

        def reset() -> None:
            ev.stamp = 0
        EXECUTOR.submit(q, [HostCall(reset)])
        EXECUTOR.settle()
        return 0

    def aclrtEventElapsedTime(self, ms: Any, startEvent: Any, endEvent: Any) -> int:
        check_out(ms, "ms", ACL_ERROR_INVALID_PARAM)
        start, end = acl_event(self.state, startEvent), acl_event(self.state, endEvent)
        for name, ev in (("startEvent", start), ("endEvent", end)):
            if not ev.stamp:
                raise SimError(ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID, f"{name} 0x{ev.handle:x} has no executed record "
                                                                     "(record it and synchronize its stream first)")
        ms[0] = (end.stamp - start.stamp) / 1e6
        return 0
