"""ACL graphs on the emulator: ``aclmdlRI*`` capture, replay, task groups and task update.

While a stream captures, whatever is launched on it is recorded instead of queued: the executor
hands the tasks of a capturing queue to its :class:`Recorder` (runtime.py's one check), HCOMM
threads launched in the same batch as a capturing stream join the capture (as HCCL adds its helper
streams to the model: hicann/hccl@09300b70:src/ops/op_common/op_common.cc:1084 CaptureSlaveStreams),
and so does a stream that waits on an event recorded inside the capture.  A library collective
(``HcclAllReduce`` ...) is validated when captured and planned again at each replay (:func:`captured`),
because its chunk parity and signature values follow the communicator's call sequence.  A replay
(``aclmdlRIExecuteAsync``) queues the recording in stream order with the captured addresses, after
checking that no captured aclrtMalloc block was freed and no communicator was destroyed since.

Capture rules follow hicann/runtime@681ef76 (cited where applied): the capture modes
(src/runtime/feature/aclgraph/context_aclgraph.cc:230 ``IsCaptureModeSupport``), synchronous memory
operations refused outside RELAXED mode (src/runtime/api/impl/api_impl.cc:2757, 2786, 3210), stream,
event and device synchronisation refused on what captures (src/runtime/api/impl/api_error.cc:1391,
1447, 1769; src/runtime/core/src/context/context.cc:1232).  The documentation says such a refusal makes
the capture fail (docs/zh/dev_guide/04-01_single_stream_capture.md:14-15): the emulator invalidates it,
so ``aclmdlRICaptureEnd`` returns ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED instead of a graph that
silently lacks the refused operation.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

from .._ffi import ffi
from ..errors import ACL_CODES
from .errors import ACL_ERROR_INVALID_PARAM, ACL_ERROR_RT_PARAM_INVALID, SimError, last_error, raise_kept
from .part import Part, check_out
from .queues import Queue, SimEvent, SimThread
from .runtime import EXECUTOR
from .state import SimState, key_of
from .tasks import EVENT_RECORD, EVENT_WAIT, EventRecord, EventWait, Task

__all__ = ["GraphCalls", "Recorder", "Capture", "SimModel", "captured", "refuse_unsafe", "refuse_sync",
           "join_batch", "join_event", "capture_of", "GLOBAL", "THREAD_LOCAL", "RELAXED"]

GLOBAL, THREAD_LOCAL, RELAXED, _NO_MODE = 0, 1, 2, 3          # aclmdlRICaptureMode (acl/acl_rt.h:407-411)
STATUS_NONE, STATUS_ACTIVE, STATUS_INVALIDATED = 0, 1, 2      # aclmdlRICaptureStatus (acl/acl_rt.h:413-417)
_MODE_NAMES = ("GLOBAL", "THREAD_LOCAL", "RELAXED")

STREAM_CAPTURED = ACL_CODES["ACL_ERROR_RT_STREAM_CAPTURED"]
EVENT_CAPTURED = ACL_CODES["ACL_ERROR_RT_EVENT_CAPTURED"]
STREAM_NOT_CAPTURED = ACL_CODES["ACL_ERROR_RT_STREAM_NOT_CAPTURED"]
MODE_NOT_SUPPORT = ACL_CODES["ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT"]
CAPTURE_UNMATCHED = ACL_CODES["ACL_ERROR_RT_STREAM_CAPTURE_UNMATCHED"]
WRONG_THREAD = ACL_CODES["ACL_ERROR_RT_STREAM_CAPTURE_WRONG_THREAD"]
CAPTURE_INVALIDATED = ACL_CODES["ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED"]
TASK_GROUP_STATUS = ACL_CODES["ACL_ERROR_STREAM_TASK_GROUP_STATUS"]
UPDATE_FAILED = ACL_CODES["ACL_ERROR_RT_MODEL_UPDATE_FAILED"]

#: the runtime's messages for the codes (hicann/runtime@681ef76:src/runtime/core/src/common/errcode_manage.cc:147-157)
_MODE_MESSAGE = "operation not permitted when a stream is capturing and the specified capture mode is not relaxed"


class _Modes(threading.local):
    """Per OS thread: the exchange mode (aclmdlRICaptureThreadExchangeMode; default GLOBAL,
    src/runtime/core/src/common/inner_thread_local.cpp:23)."""

    exchange = GLOBAL


_MODES = _Modes()


class Recorder:
    """What a queue's launches go to instead of the queue: a capture, or a task update."""

    def __init__(self, origin: Queue) -> None:
        self.origin = origin
        self.members: Set[Queue] = {origin}
        self.items: List[Any] = []          # ("tasks", queue, tasks) or ("call", lib, method, args, queue)
        self.event_records: Dict[SimEvent, int] = {}

    def record(self, queue: Queue, tasks: Sequence[Task]) -> None:
        """Keep ``tasks`` (launched on ``queue``) for the replays; an event record here is the graph's own."""
        kept = list(tasks)
        for i, t in enumerate(kept):
            if t[0] == EVENT_RECORD:
                ev = t.event
                ev.recorded -= 1          # aclrtRecordEvent counted it for eager waiters: it runs at replay only
                self.event_records[ev] = self.event_records.get(ev, 0) + 1
            elif t[0] == EVENT_WAIT and t.event in self.event_records:
                kept[i] = EventWait(t.event, self.event_records[t.event])   # waits for the graph's own record
        self.items.append(("tasks", queue, tuple(kept)))

    def join(self, queue: Queue) -> None:
        if queue.capture is None:
            queue.capture = self
            self.members.add(queue)

    def release(self) -> None:
        """The queues run their launches again."""
        for q in self.members:
            if q.capture is self:
                q.capture = None

    def library_call(self, lib: Any, method: Callable[..., int], args: tuple, queue: Queue) -> int:
        """A library collective on capturing ``queue``: validated (and planned) now, planned again at each replay.

        Planning takes the next chunk parities and pushes the chunks' stamps (sim/native.py); nothing of it runs
        now, so both are put back: the communicator's next executed chunk must have the other parity than its
        last executed one (a repeated parity lets a fast rank record a notify its peer has not consumed yet).
        """
        mark = len(self.items)
        comm = _comm_of(lib.state, args)
        nat = comm.native if comm is not None else None
        seq = nat.seq if nat is not None else 0
        stamps = len(queue.stamps)
        rc = method(lib, *args)
        del self.items[mark:]               # its tasks of this parity: the replay plans its own
        if comm is not None and comm.native is not None and (nat is None or comm.native is nat):
            comm.native.seq = seq           # (its first native call makes the state: it starts at 0)
        while len(queue.stamps) > stamps:
            queue.stamps.pop()
        if rc == 0:
            self.items.append(("call", lib, method, args, queue))
        return rc


class Capture(Recorder):
    """An active ``aclmdlRICaptureBegin`` on one stream."""

    def __init__(self, origin: Queue, mode: int, model: "SimModel") -> None:
        super().__init__(origin)
        self.mode = mode
        self.thread = threading.get_ident()
        self.status = STATUS_ACTIVE
        self.why = ""                       # what invalidated it
        self.model = model
        self.group_start: Optional[int] = None  # aclmdlRICaptureTaskGrpBegin: first item of the open group

    def invalidate(self, why: str) -> None:
        if self.status == STATUS_ACTIVE:
            self.status = STATUS_INVALIDATED
            self.why = why


class SimModel:
    """An ``aclmdlRI``: the recording of a capture, replayed by aclmdlRIExecuteAsync."""

    def __init__(self, handle: int) -> None:
        self.handle = handle
        self.origin: Optional[Queue] = None
        self.items: List[Any] = []
        self.events: Set[SimEvent] = set()
        self.groups: Dict[int, List[int]] = {}   # aclrtTaskGrp handle -> [first item, end item)
        self.blocks: Dict[int, Tuple[Any, int, str]] = {}   # aclrtMalloc blocks the tasks address: start -> block
        self.comms: Set[Any] = set()
        self.steps: List[Any] = []       # seal(): what a replay launches
        self.raced = False               # a communicator of the recording has the race checker (strict)
        self.checked_at = -1             # state.releases when its streams and blocks were last found alive
        self.streams: Set[Queue] = set()  # the streams other than the captured one that joined the capture

    # ------------------------------------------------------------------ what it references
    def note_references(self, state: SimState) -> None:
        """Remember the communicators and aclrtMalloc blocks the recording uses (checked before each replay);
        make the launch steps."""
        self.blocks.clear()
        self.comms.clear()
        for item in self.items:
            if item[0] == "call":
                values: Sequence[Any] = item[3]
                comm = _comm_of(state, item[3])
                if comm is not None:
                    self.comms.add(comm)
            else:
                values = [v for t in item[2] for v in t[1:]]
                th = item[2][0][1] if item[2] and item[2][0][0] not in (EVENT_RECORD, EVENT_WAIT) else None
                if th is not None and hasattr(th, "comm"):
                    self.comms.add(th.comm)
            for v in values:
                closure = getattr(v, "__closure__", None) if callable(v) else None
                operands = [cell.cell_contents for cell in closure] if closure else [v]   # a host task: its operands
                for w in operands:
                    if isinstance(w, ffi.CData) and ffi.typeof(w).kind == "pointer" and w != ffi.NULL:
                        self._note_block(state, int(ffi.cast("uintptr_t", w)))
        self.raced = any(c.race is not None for c in self.comms)
        self.checked_at = -1
        streams = {id(q) for q in state.streams.values()}
        self.streams = {q for q in map(_queue_of, self.items) if q is not self.origin and id(q) in streams}
        self.seal()

    def _note_block(self, state: SimState, addr: int) -> None:
        found = state.device.find(addr)
        if found is not None and found[0] in state.memory:
            self.blocks[found[0]] = (state.memory[found[0]], found[1] - found[0], found[2])

    def check(self, state: SimState) -> None:
        """Checker: refuse a replay whose communicator was destroyed or whose captured buffer was freed."""
        for comm in self.comms:
            if comm.destroyed:
                raise SimError(ACL_ERROR_RT_PARAM_INVALID,
                               f"checker: aclmdlRI 0x{self.handle:x} was captured on communicator {comm.name}, which "
                               "was destroyed since; a replay would use its freed channels and buffers (destroy the "
                               "graph before the communicator, recapture on a new one)")
        if self.checked_at == state.releases:    # nothing was freed or destroyed since they were found alive
            return
        if self.streams:
            live = {id(q) for q in state.streams.values()}
            for q in self.streams:
                if id(q) not in live:
                    raise SimError(ACL_ERROR_RT_PARAM_INVALID,
                                   f"checker: aclmdlRI 0x{self.handle:x} replays tasks captured on {q.name}, which was "
                                   "destroyed since (keep the streams of a graph until aclmdlRIDestroy)")
        for start, (block, size, name) in self.blocks.items():
            if state.memory.get(start) is not block:
                raise SimError(ACL_ERROR_RT_PARAM_INVALID,
                               f"checker: aclmdlRI 0x{self.handle:x} addresses [0x{start:x}, +{size}) ({name}), "
                               "which was freed after the capture; a replay would read or write freed memory "
                               "(keep captured buffers until aclmdlRIDestroy)")
        self.checked_at = state.releases

    # ------------------------------------------------------------------ replay
    def seal(self) -> None:
        """Merge the recording into launch steps: between two library calls, one task list per queue (each queue
        is FIFO and queues order each other only through notifies and events, so this keeps stream order)."""
        steps: List[Any] = []
        lists: Dict[Queue, List[Task]] = {}
        for item in self.items:
            if item[0] == "tasks":
                lists.setdefault(item[1], []).extend(item[2])
                continue
            if lists:
                steps.append(("tasks", [(q, tuple(ts)) for q, ts in lists.items()]))
                lists = {}
            steps.append(item)
        if lists:
            steps.append(("tasks", [(q, tuple(ts)) for q, ts in lists.items()]))
        self.steps = steps

    def replay(self, stream_queue: Queue, stream: Any) -> None:
        """Queue the recording: the origin stream's tasks on ``stream_queue``, each joined queue's on its own."""
        fresh: Dict[SimEvent, SimEvent] = {ev: SimEvent(ev.handle) for ev in self.events} if self.events else {}
        origin = self.origin
        for step in self.steps:
            if step[0] == "tasks":
                for q, tasks in step[1]:
                    if self.raced:
                        _host_issues(tasks)
                    EXECUTOR.submit(stream_queue if q is origin else q, _with_events(tasks, fresh) if fresh else tasks)
            else:
                _, lib, method, args, q = step     # on the replay's stream, or on the joined stream it was on
                rc = method(lib, *args[:-1], stream if q is origin else args[-1])
                if rc:
                    raise SimError(rc, f"replay of {getattr(method, '__name__', 'a collective')} failed: "
                                       f"{last_error() or 'no message'}")


def _host_issues(tasks: Sequence[Task]) -> None:
    """Race checker: a replay's tasks come after everything the host saw complete (as dataplane._host_issues)."""
    seen = set()
    with EXECUTOR.lock:
        for t in tasks:
            th = t[1] if t[0] not in (EVENT_RECORD, EVENT_WAIT) else None
            if th is not None and th not in seen and getattr(th, "comm", None) is not None and th.comm.race is not None:
                seen.add(th)
                th.comm.race.host_issues(th)


def _queue_of(item: Any) -> Queue:
    """The queue a recorded item was launched on."""
    return item[1] if item[0] == "tasks" else item[4]


def _moved(item: Any, queue: Queue) -> Any:
    """``item`` as launched on ``queue``."""
    return ("tasks", queue, item[2]) if item[0] == "tasks" else item[:4] + (queue,)


def _with_events(tasks: Tuple[Task, ...], fresh: Dict[SimEvent, SimEvent]) -> List[Task]:
    """The tasks with the graph's own events replaced by this replay's (a wait counts this replay's records)."""
    out: List[Task] = []
    for t in tasks:
        kind = t[0]
        if kind == EVENT_RECORD and t.event in fresh:
            t = EventRecord(fresh[t.event])
        elif kind == EVENT_WAIT and t.event in fresh:
            t = EventWait(fresh[t.event], t.records)
        out.append(t)
    return out


def _comm_of(state: SimState, args: tuple) -> Any:
    """The communicator among a library collective's arguments (the one before the stream)."""
    return state.comms.get(key_of(args[-2])) if len(args) >= 2 else None


class _Graphs:
    """Process-wide: the active captures and the models."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.captures: List[Capture] = []
        self.models: Dict[int, SimModel] = {}
        self.groups: Dict[int, Tuple[SimModel, int]] = {}     # aclrtTaskGrp handle -> (model, group key)
        self.last: Tuple[Any, Any] = (None, None)              # the last aclmdlRI argument and its model


_GRAPHS = _Graphs()


def capture_of(queue: Queue) -> Optional[Capture]:
    """The capture ``queue`` takes part in, if any."""
    rec = queue.capture
    return rec if isinstance(rec, Capture) else None


# ---------------------------------------------------------------------- hooks of the other entry points
def captured(lib: Any, method: Callable[..., int], args: tuple) -> Optional[int]:
    """A library collective (stream last) on a capturing stream: recorded, its return code; else None (it runs)."""
    try:
        q = lib.state.stream(args[-1])
    except SimError:
        return None                         # the collective names the bad stream
    rec = q.capture
    return None if rec is None else rec.library_call(lib, method, args, q)


def _context_mode() -> int:
    return min((c.mode for c in _GRAPHS.captures if c.status != STATUS_NONE), default=_NO_MODE)


def _thread_mode() -> int:
    me = threading.get_ident()
    return min((c.mode for c in _GRAPHS.captures if c.thread == me), default=_NO_MODE)


def _mode_supported() -> bool:
    """hicann/runtime@681ef76:src/runtime/feature/aclgraph/context_aclgraph.cc:230 Context::IsCaptureModeSupport."""
    if _context_mode() == _NO_MODE:
        return True
    exchange, thread = _MODES.exchange, _thread_mode()
    if exchange == RELAXED:
        return True
    if exchange == GLOBAL and (_context_mode() == GLOBAL or thread == THREAD_LOCAL):
        return False
    if exchange == THREAD_LOCAL and thread in (GLOBAL, THREAD_LOCAL):
        return False
    return True


def refuse_unsafe(what: str) -> None:
    """A synchronous memory operation (aclrtMemcpy, aclrtMemset) while a capture forbids it: refused, captures fail.

    runtime@681ef76 src/runtime/api/impl/api_impl.cc:2757 (MemCopySync), 3210 (MemSetSync):
    CHECK_CAPTURE_MODE_SUPPORT_AND_RETURN -> ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT.
    """
    if not _GRAPHS.captures or _mode_supported():
        return
    why = (f"{what} during a capture: {_MODE_MESSAGE} (the mode set by aclmdlRICaptureBegin is "
           f"{_MODE_NAMES[_context_mode()]}; call aclmdlRICaptureThreadExchangeMode with "
           "ACL_MODEL_RI_CAPTURE_MODE_RELAXED first if the operation does not affect the capture)")
    me = threading.get_ident()
    for c in _GRAPHS.captures:
        if c.mode == GLOBAL or c.thread == me:
            c.invalidate(why)
    raise SimError(MODE_NOT_SUPPORT, why)


def refuse_sync(what: str, queue: Optional[Queue] = None, event: Optional[SimEvent] = None) -> None:
    """Synchronising (or destroying) what captures: refused in every mode, the capture fails.

    ``queue``: that stream's capture; ``event``: an event recorded inside a capture; neither: any capture
    (device synchronisation).  runtime@681ef76 src/runtime/api/impl/api_error.cc:1391 (StreamDestroy), 1447
    (StreamSynchronize), 1769 (EventSynchronize, ACL_ERROR_RT_EVENT_CAPTURED), src/runtime/core/src/context/
    context.cc:1232 (a device synchronisation meets a capturing stream).
    """
    if not _GRAPHS.captures:
        return
    if event is not None:
        hit = [c for c in _GRAPHS.captures if event in c.event_records]
        code, thing = EVENT_CAPTURED, f"event 0x{event.handle:x}"
    elif queue is not None:
        hit = [queue.capture] if isinstance(queue.capture, Capture) else []
        code, thing = STREAM_CAPTURED, queue.name
    else:
        hit = list(_GRAPHS.captures)
        code, thing = STREAM_CAPTURED, "the device"
    if not hit:
        return
    why = (f"{what}: {thing} is captured (aclmdlRICaptureBegin on {hit[0].origin.name}): synchronising or "
           "querying a stream, event or device during the capture stage is not supported in any capture mode; "
           "end the capture (aclmdlRICaptureEnd) first")
    for c in hit:
        c.invalidate(why)
    raise SimError(code, why)


def join_batch(threads: Sequence[SimThread]) -> None:
    """A batch launched on a capturing stream: its other threads join the capture (HCCL's helper streams)."""
    for th in threads:
        rec = th.queue.capture
        if rec is not None:             # the first capturing queue's capture takes them all
            for other in threads:
                rec.join(other.queue)
            return


def join_event(queue: Queue, event: SimEvent, default: Queue) -> None:
    """A stream that waits on an event recorded in a capture joins that capture; the default stream may not
    (runtime@681ef76 src/runtime/api/impl/api_impl.cc:1631: ACL_ERROR_RT_STREAM_CAPTURE_IMPLICIT)."""
    if queue.capture is not None or not _GRAPHS.captures:
        return
    for c in _GRAPHS.captures:
        if event in c.event_records:
            if queue is default:
                why = (f"the default stream waits on event 0x{event.handle:x}, recorded in the capture of "
                       f"{c.origin.name}: the default stream cannot be used in an ACL graph (a disallowed implicit "
                       "dependency); wait on it from a created stream")
                c.invalidate(why)
                raise SimError(ACL_CODES["ACL_ERROR_RT_STREAM_CAPTURE_IMPLICIT"], why)
            c.join(queue)
            return


# ---------------------------------------------------------------------- the C entry points
class GraphCalls(Part):
    """aclmdlRI* calls (acl/acl_rt.h)."""

    HEADERS = ("acl/acl_rt.h",)

    def _queue(self, stream: Any) -> Queue:
        try:
            q = self.state.stream(stream)
        except SimError as exc:
            raise SimError(ACL_ERROR_RT_PARAM_INVALID, exc.message) from None
        if q is self.state.default_stream:
            # capture on the default stream is illegal (docs/zh/dev_guide/04-01_single_stream_capture.md:18)
            raise SimError(ACL_ERROR_RT_PARAM_INVALID, "stream is the default stream; an ACL graph is captured on a "
                                                       "stream made by aclrtCreateStream")
        return q

    def _model(self, modelRI: Any) -> SimModel:
        last = _GRAPHS.last
        if last[0] is modelRI and last[1].handle in _GRAPHS.models:      # the same handle object as last time
            return last[1]
        if modelRI is None or modelRI == ffi.NULL or key_of(modelRI) == 0:
            raise SimError(ACL_ERROR_INVALID_PARAM, "modelRI is NULL")
        model = _GRAPHS.models.get(key_of(modelRI))
        if model is None:
            raise SimError(ACL_ERROR_RT_PARAM_INVALID, f"modelRI 0x{key_of(modelRI):x} is not an ACL graph of this "
                                                       "process (never captured, or destroyed)")
        if not isinstance(modelRI, int):
            _GRAPHS.last = (modelRI, model)
        return model

    def aclmdlRICaptureBegin(self, stream: Any, mode: int) -> int:
        q = self._queue(stream)
        if not GLOBAL <= mode <= RELAXED:   # api_error_aclgraph.cc:41
            raise SimError(ACL_ERROR_RT_PARAM_INVALID, f"mode={mode}; expected an aclmdlRICaptureMode "
                                                       "(GLOBAL 0, THREAD_LOCAL 1, RELAXED 2)")
        if q.capture is not None:           # context_aclgraph.cc:292
            state = "active" if not isinstance(q.capture, Capture) or q.capture.status == STATUS_ACTIVE else "invalidated"
            raise SimError(STREAM_CAPTURED, f"{q.name} is already in capture status ({state})")
        with _GRAPHS.lock:
            model = SimModel(self.state.new_ptr_key())
            cap = Capture(q, mode, model)
            q.capture = cap
            _GRAPHS.captures.append(cap)
        return 0

    def aclmdlRICaptureGetInfo(self, stream: Any, status: Any, modelRI: Any) -> int:
        if status is None or status == ffi.NULL or modelRI is None or modelRI == ffi.NULL:
            raise SimError(ACL_ERROR_INVALID_PARAM, "status or modelRI is NULL")
        q = self._queue(stream)
        cap = capture_of(q)
        status[0] = STATUS_NONE if cap is None else cap.status
        modelRI[0] = ffi.NULL if cap is None else ffi.cast("aclmdlRI", cap.model.handle)
        return 0

    def aclmdlRICaptureEnd(self, stream: Any, modelRI: Any) -> int:
        check_out(modelRI, "modelRI", ACL_ERROR_INVALID_PARAM)
        q = self._queue(stream)
        modelRI[0] = ffi.NULL
        cap = capture_of(q)
        if cap is None:                     # context_aclgraph.cc:512
            raise SimError(STREAM_NOT_CAPTURED, f"{q.name} is not in capture status; call aclmdlRICaptureBegin first")
        if cap.origin is not q:             # context_aclgraph.cc:519
            raise SimError(CAPTURE_UNMATCHED, f"the capture was not initiated in {q.name} (it joined the capture "
                                              f"of {cap.origin.name})")
        with _GRAPHS.lock:
            cap.release()                   # the capture ends whatever is wrong with it
            if cap in _GRAPHS.captures:
                _GRAPHS.captures.remove(cap)
            if cap.mode != RELAXED and cap.thread != threading.get_ident():    # context_aclgraph.cc:527
                raise SimError(WRONG_THREAD, "aclmdlRICaptureEnd ran on another thread than aclmdlRICaptureBegin "
                                             f"(mode {_MODE_NAMES[cap.mode]})")
            if cap.status == STATUS_INVALIDATED:    # context_aclgraph.cc:544
                raise SimError(CAPTURE_INVALIDATED, f"the capture of {q.name} was invalidated: {cap.why}")
            model = cap.model
            model.origin = q
            model.items = cap.items
            model.events = set(cap.event_records)
            model.note_references(self.state)
            _GRAPHS.models[model.handle] = model
        modelRI[0] = ffi.cast("aclmdlRI", model.handle)
        return 0

    def aclmdlRIExecuteAsync(self, modelRI: Any, stream: Any) -> int:
        model = self._model(modelRI)
        q = self._queue(stream)
        model.check(self.state)
        model.replay(q, stream)
        EXECUTOR.settle()
        return 0

    def aclmdlRIExecute(self, modelRI: Any, timeout: int) -> int:
        """Replay on a stream of its own and wait (``timeout`` ms; -1 waits for ever)."""
        model = self._model(modelRI)
        model.check(self.state)
        q = model.origin
        assert q is not None
        model.replay(q, ffi.cast("aclrtStream", _stream_key(self.state, q)))
        deadline = None if timeout < 0 else time.monotonic() + timeout / 1000.0
        if not EXECUTOR.run_until(lambda: not q.tasks or q.error is not None, deadline):
            raise SimError(ACL_CODES["ACL_ERROR_RT_STREAM_SYNC_TIMEOUT"], f"aclmdlRI 0x{model.handle:x} did not "
                                                                           f"finish within {timeout} ms")
        if q.error is not None:
            raise_kept(q)
        return 0

    def aclmdlRIDestroy(self, modelRI: Any) -> int:
        model = self._model(modelRI)
        with _GRAPHS.lock:
            del _GRAPHS.models[model.handle]
            for key in [k for k, (m, _) in _GRAPHS.groups.items() if m is model]:
                del _GRAPHS.groups[key]
        model.items = []
        return 0

    def aclmdlRICaptureThreadExchangeMode(self, mode: Any) -> int:
        """Swap this thread's capture mode with ``*mode`` (context_aclgraph.cc:716)."""
        check_out(mode, "mode", ACL_ERROR_INVALID_PARAM)
        new = int(mode[0])
        if not GLOBAL <= new <= RELAXED:
            raise SimError(ACL_ERROR_RT_PARAM_INVALID, f"*mode={new}; expected an aclmdlRICaptureMode")
        mode[0], _MODES.exchange = _MODES.exchange, new
        return 0

    # ------------------------------------------------------------------ task groups and task update
    def aclmdlRICaptureTaskGrpBegin(self, stream: Any) -> int:
        cap = capture_of(self._queue(stream))
        if cap is None:                     # context_aclgraph.cc:783 (RT_ERROR_STREAM_NOT_CAPTURED)
            raise SimError(STREAM_NOT_CAPTURED, "aclmdlRICaptureTaskGrpBegin on a stream that is not capturing")
        if cap.group_start is not None:     # context_aclgraph.cc:780
            raise SimError(TASK_GROUP_STATUS, "a task group is already open on this capture")
        cap.group_start = len(cap.items)
        return 0

    def aclmdlRICaptureTaskGrpEnd(self, stream: Any, handle: Any) -> int:
        check_out(handle, "handle", ACL_ERROR_INVALID_PARAM)
        cap = capture_of(self._queue(stream))
        if cap is None or cap.group_start is None:
            raise SimError(TASK_GROUP_STATUS, "the end operation cannot be performed on a stream that has not "
                                              "started a task group")
        key = self.state.new_ptr_key()
        cap.model.groups[key] = [cap.group_start, len(cap.items)]
        _GRAPHS.groups[key] = (cap.model, key)
        cap.group_start = None
        handle[0] = ffi.cast("aclrtTaskGrp", key)
        if cap.status == STATUS_INVALIDATED:
            handle[0] = ffi.NULL
            raise SimError(CAPTURE_INVALIDATED, f"the ACL graph capture of this stream was invalidated: {cap.why}")
        return 0

    def aclmdlRICaptureTaskUpdateBegin(self, stream: Any, handle: Any) -> int:
        q = self._queue(stream)
        if q.capture is not None:           # api_error_aclgraph.cc:88: not on a capturing stream
            raise SimError(STREAM_CAPTURED, f"{q.name} is capturing (or updating): a task update is issued on "
                                            "another stream, after aclmdlRICaptureEnd")
        found = _GRAPHS.groups.get(key_of(handle))
        if found is None:
            raise SimError(ACL_ERROR_RT_PARAM_INVALID, f"handle 0x{key_of(handle):x} is not a task group of a live "
                                                       "ACL graph")
        if found[0].origin is None:
            raise SimError(TASK_GROUP_STATUS, "the task group's capture has not ended: update it after "
                                              "aclmdlRICaptureEnd")
        q.capture = _Update(q, found[0], found[1])
        return 0

    def aclmdlRICaptureTaskUpdateEnd(self, stream: Any) -> int:
        q = self._queue(stream)
        upd = q.capture
        if not isinstance(upd, _Update):
            raise SimError(TASK_GROUP_STATUS, f"{q.name} has no task update in progress")
        upd.release()
        upd.apply(self.state)
        return 0


class _Update(Recorder):
    """aclmdlRICaptureTaskUpdateBegin..End: launches on the stream become the group's new tasks."""

    def __init__(self, origin: Queue, model: SimModel, key: int) -> None:
        super().__init__(origin)
        self.model = model
        self.key = key

    def apply(self, state: SimState) -> None:
        """Replace the group's items with the update's: the same operations with new arguments, else refused."""
        lo, hi = self.model.groups[self.key]
        old = self.model.items[lo:hi]
        origin = self.model.origin
        assert origin is not None          # a task group exists only in an ended capture
        new = [_moved(it, origin) if _queue_of(it) is self.origin else it for it in self.items]
        def shape(items: List[Any]) -> List[Any]:      # what each item runs: its method, or its task kinds
            return [(it[0], it[2] if it[0] == "call" else tuple(t[0] for t in it[2])) for it in items]
        if shape(old) != shape(new):
            raise SimError(UPDATE_FAILED, f"the task update launched {len(new)} operation(s) that differ from the "
                                          f"{len(old)} of the task group; an update changes arguments, not tasks")
        self.model.items[lo:hi] = new
        self.model.note_references(state)


def _stream_key(state: SimState, q: Queue) -> int:
    for key, queue in state.streams.items():
        if queue is q:
            return key
    raise SimError(ACL_ERROR_RT_PARAM_INVALID, f"{q.name} was destroyed")
