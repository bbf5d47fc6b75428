"""ACL events with flags and timing: aclrtCreateEventWithFlag, aclrtStreamWaitEvent, aclrtResetEvent, aclrtEventElapsedTime.

Semantics of hicann/runtime@681ef7610df1:
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

from typing import Any

from .._ffi import ffi
from ..errors import ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID
from .errors import ACL_ERROR_INVALID_PARAM, ACL_ERROR_RT_PARAM_INVALID, SimError
from . import acl_graphs
from .queues import SimEvent
from .runtime import EXECUTOR
from .acl import acl_event, acl_stream
from .part import Part, check_out
from .tasks import EventWait, HostCall

__all__ = ["TimedEvents", "ACL_EVENT_SYNC", "EVENT_FLAGS"]

ACL_EVENT_SYNC = 0x1
#: every flag of acl/acl_rt.h:28-33 (SYNC, CAPTURE_STREAM_PROGRESS, TIME_LINE, DEVICE_USE_ONLY, EXTERNAL, IPC)
EVENT_FLAGS = 0x1 | 0x2 | 0x8 | 0x10 | 0x20 | 0x40


class TimedEvents(Part):
    """The event calls above (acl/acl_rt.h, beside sim/acl.py's create/record/synchronize/destroy)."""

    HEADERS = ("acl/acl_rt.h",)

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
