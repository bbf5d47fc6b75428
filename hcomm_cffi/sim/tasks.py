"""The emulator's task kinds: one named tuple type per kind of task a queue runs.

A task is a tuple whose element 0 is its kind code and element 1 the issuing thread (None for
stream tasks of the ACL layer and the native collectives' own copies), so the executor dispatches
on ``t[0]`` with integer compares; the named types give every other element a name.  Each type is
built with the kind filled in (``ChannelWait(th, ch, idx, timeout)``); ``tuple.__new__(Type,
(KIND, ...))`` builds the same object without the constructor call where that matters.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Optional, Tuple, Union, cast

if TYPE_CHECKING:  # pragma: no cover
    from ..enums import DataType, ReduceOp

#: what a task's thread, channel and event fields hold: sim/queues.py's SimThread and SimEvent, sim/comm.py's
#: SimChannel.  Those modules hold tasks, so this one is below them and names their classes only here, untyped.
ThreadRef = Any
ChannelRef = Any
EventRef = Any

# kind codes (element 0 of every task); the race checker stores them in 7 bits of its access log
COPY, REDUCE, WRITE, WRITE_REDUCE, READ, READ_REDUCE = range(6)
T_RECORD, T_WAIT, C_RECORD, C_WAIT, EVENT_RECORD, EVENT_WAIT, CALL = range(6, 13)
REDUCE3 = 13   # emulator-internal (native collectives): dst = op(a, b)
UFUNC = 14     # emulator-internal: a NumPy ufunc over views made when the task was built

#: the vendor's names of the task kinds (what reports and traces call them)
KIND_NAMES = {
    COPY: "LocalCopy", REDUCE: "LocalReduce", WRITE: "Write", WRITE_REDUCE: "WriteReduce",
    READ: "Read", READ_REDUCE: "ReadReduce", T_RECORD: "ThreadNotifyRecord",
    T_WAIT: "ThreadNotifyWait", C_RECORD: "ChannelNotifyRecord", C_WAIT: "ChannelNotifyWait",
    EVENT_RECORD: "EventRecord", EVENT_WAIT: "StreamWaitEvent", CALL: "HostTask", REDUCE3: "Reduce3",
    UFUNC: "Reduce",
}

__all__ = ["COPY", "REDUCE", "WRITE", "WRITE_REDUCE", "READ", "READ_REDUCE", "T_RECORD", "T_WAIT", "C_RECORD",
           "C_WAIT", "EVENT_RECORD", "EVENT_WAIT", "CALL", "REDUCE3", "UFUNC", "KIND_NAMES", "Task",
           "LocalCopy", "LocalReduce", "Write", "Read", "WriteReduce", "ReadReduce", "ThreadRecord", "ThreadWait",
           "ChannelRecord", "ChannelWait", "EventRecord", "EventWait", "HostCall", "Reduce3", "UfuncReduce", "task_bytes"]

_new = tuple.__new__


class _Kinded:
    """What every task type adds to its fields: the kind's name, and copy/pickle without the kind argument."""

    __slots__ = ()
    _FILLED = 1     # leading elements the constructor fills in (the kind; the ACL stream tasks' thread too)

    def __getnewargs__(self) -> Tuple[Any, ...]:
        return cast(Tuple[Any, ...], self)[self._FILLED:]   # a mixin of tuple types only

    @property
    def name(self) -> str:
        """The vendor's name of this task's kind (``KIND_NAMES``)."""
        return KIND_NAMES[cast(Tuple[Any, ...], self)[0]]


# ---------------------------------------------------------------------- local copy and reduce
class _LocalCopy(NamedTuple):
    kind: int
    thread: Optional[ThreadRef]
    dst: Any
    src: Any
    nbytes: int


class LocalCopy(_Kinded, _LocalCopy):
    """HcommLocalCopyOnThread (and the native collectives' copies, thread None): ``nbytes`` from src to dst."""

    __slots__ = ()

    def __new__(cls, thread: Optional[ThreadRef], dst: Any, src: Any, nbytes: int) -> "LocalCopy":
        return _new(cls, (COPY, thread, dst, src, nbytes))


class _LocalReduce(NamedTuple):
    kind: int
    thread: Optional[ThreadRef]   # None: touches no HCCL buffer (the race checker skips it)
    dst: Any
    src: Any
    count: int  # type: ignore[assignment]  # named as the C argument; shadows tuple.count on purpose
    dtype: "DataType"
    op: "ReduceOp"


class LocalReduce(_Kinded, _LocalReduce):
    """HcommLocalReduceOnThread: dst = op(dst, src) over ``count`` elements."""

    __slots__ = ()

    def __new__(cls, thread: Optional[ThreadRef], dst: Any, src: Any, count: int, dtype: "DataType",
                op: "ReduceOp") -> "LocalReduce":
        return _new(cls, (REDUCE, thread, dst, src, count, dtype, op))


class _Reduce3(NamedTuple):
    kind: int
    thread: ThreadRef
    dst: Any
    a: Any
    b: Any
    count: int  # type: ignore[assignment]  # named as the C argument; shadows tuple.count on purpose
    dtype: "DataType"
    op: "ReduceOp"


class Reduce3(_Kinded, _Reduce3):
    """Native collectives (bf16): dst = op(a, b) over ``count`` elements, through float32."""

    __slots__ = ()

    def __new__(cls, thread: ThreadRef, dst: Any, a: Any, b: Any, count: int, dtype: "DataType",
                op: "ReduceOp") -> "Reduce3":
        return _new(cls, (REDUCE3, thread, dst, a, b, count, dtype, op))


class _UfuncReduce(NamedTuple):
    kind: int
    thread: ThreadRef
    ufunc: Callable[..., Any]
    out: Any
    a: Any
    b: Any


class UfuncReduce(_Kinded, _UfuncReduce):
    """Native collectives: ``ufunc(a, b, out=out)`` over NumPy views made when the task was built."""

    __slots__ = ()

    def __new__(cls, thread: ThreadRef, ufunc: Callable[..., Any], out: Any, a: Any, b: Any) -> "UfuncReduce":
        return _new(cls, (UFUNC, thread, ufunc, out, a, b))


# ---------------------------------------------------------------------- remote (through a channel)
class _Transfer(NamedTuple):
    kind: int
    thread: ThreadRef
    channel: ChannelRef
    dst: Any
    src: Any
    nbytes: int


class Write(_Kinded, _Transfer):
    """HcommWriteOnThread: ``nbytes`` from local src to dst in the peer's HCCL buffer."""

    __slots__ = ()

    def __new__(cls, thread: ThreadRef, channel: ChannelRef, dst: Any, src: Any, nbytes: int) -> "Write":
        return _new(cls, (WRITE, thread, channel, dst, src, nbytes))


class Read(_Kinded, _Transfer):
    """HcommReadOnThread: ``nbytes`` from src in the peer's HCCL buffer to local dst."""

    __slots__ = ()

    def __new__(cls, thread: ThreadRef, channel: ChannelRef, dst: Any, src: Any, nbytes: int) -> "Read":
        return _new(cls, (READ, thread, channel, dst, src, nbytes))


class _TransferReduce(NamedTuple):
    kind: int
    thread: ThreadRef
    channel: ChannelRef
    dst: Any
    src: Any
    count: int  # type: ignore[assignment]  # named as the C argument; shadows tuple.count on purpose
    dtype: "DataType"
    op: "ReduceOp"


class WriteReduce(_Kinded, _TransferReduce):
    """HcommWriteReduceOnThread: peer dst = op(peer dst, local src) over ``count`` elements."""

    __slots__ = ()

    def __new__(cls, thread: ThreadRef, channel: ChannelRef, dst: Any, src: Any, count: int,
                dtype: "DataType", op: "ReduceOp") -> "WriteReduce":
        return _new(cls, (WRITE_REDUCE, thread, channel, dst, src, count, dtype, op))


class ReadReduce(_Kinded, _TransferReduce):
    """HcommReadReduceOnThread: local dst = op(local dst, peer src) over ``count`` elements."""

    __slots__ = ()

    def __new__(cls, thread: ThreadRef, channel: ChannelRef, dst: Any, src: Any, count: int,
                dtype: "DataType", op: "ReduceOp") -> "ReadReduce":
        return _new(cls, (READ_REDUCE, thread, channel, dst, src, count, dtype, op))


# ---------------------------------------------------------------------- notifies
class _ThreadRecord(NamedTuple):
    kind: int
    thread: ThreadRef
    target: ThreadRef
    index: int  # type: ignore[assignment]  # named as the C argument; shadows tuple.index on purpose


class ThreadRecord(_Kinded, _ThreadRecord):
    """HcommThreadNotifyRecordOnThread: set notify ``index`` of thread ``target`` (same rank)."""

    __slots__ = ()

    def __new__(cls, thread: ThreadRef, target: ThreadRef, index: int) -> "ThreadRecord":
        return _new(cls, (T_RECORD, thread, target, index))


class _ThreadWait(NamedTuple):
    kind: int
    thread: ThreadRef
    index: int  # type: ignore[assignment]  # named as the C argument; shadows tuple.index on purpose
    timeout: float


class ThreadWait(_Kinded, _ThreadWait):
    """HcommThreadNotifyWaitOnThread: wait for (and clear) the thread's own notify ``index``; timeout 0 = default."""

    __slots__ = ()

    def __new__(cls, thread: ThreadRef, index: int, timeout: float) -> "ThreadWait":
        return _new(cls, (T_WAIT, thread, index, timeout))


class _ChannelRecord(NamedTuple):
    kind: int
    thread: ThreadRef
    channel: ChannelRef
    index: int  # type: ignore[assignment]  # named as the C argument; shadows tuple.index on purpose
    value: int   # what the peer's notify word is set to: 1, or a native collective's signature (sim/native.py)


class ChannelRecord(_Kinded, _ChannelRecord):
    """HcommChannelNotifyRecordOnThread: set the peer's notify ``index`` of this channel (to ``value``)."""

    __slots__ = ()

    def __new__(cls, thread: ThreadRef, channel: ChannelRef, index: int, value: int = 1) -> "ChannelRecord":
        return _new(cls, (C_RECORD, thread, channel, index, value))


class _ChannelWait(NamedTuple):
    kind: int
    thread: ThreadRef
    channel: ChannelRef
    index: int  # type: ignore[assignment]  # named as the C argument; shadows tuple.index on purpose
    timeout: float
    expect: int   # 0: any record; else the value the record must carry (a native collective's signature)


class ChannelWait(_Kinded, _ChannelWait):
    """HcommChannelNotifyWaitOnThread: wait for (and clear) local notify ``index`` of the channel; timeout 0 = default.

    ``expect``: the value the peer's record must have written (else the queue fails: the two ranks are in
    different calls).
    """

    __slots__ = ()

    def __new__(cls, thread: ThreadRef, channel: ChannelRef, index: int, timeout: float,
                expect: int = 0) -> "ChannelWait":
        return _new(cls, (C_WAIT, thread, channel, index, timeout, expect))


# ---------------------------------------------------------------------- ACL stream tasks
class _EventRecord(NamedTuple):
    kind: int
    thread: None
    event: EventRef


class EventRecord(_Kinded, _EventRecord):
    """aclrtRecordEvent: one more record of ``event`` completed when the stream reaches it."""

    __slots__ = ()
    _FILLED = 2

    def __new__(cls, event: EventRef) -> "EventRecord":
        return _new(cls, (EVENT_RECORD, None, event))


class _EventWait(NamedTuple):
    kind: int
    thread: None
    event: EventRef
    records: int


class EventWait(_Kinded, _EventWait):
    """aclrtStreamWaitEvent: the stream waits until ``records`` records of ``event`` have completed."""

    __slots__ = ()
    _FILLED = 2

    def __new__(cls, event: EventRef, records: int) -> "EventWait":
        return _new(cls, (EVENT_WAIT, None, event, records))


class _HostCall(NamedTuple):
    kind: int
    thread: None
    fn: Callable[[], Any]


class HostCall(_Kinded, _HostCall):
    """A host function run in stream order (aclrtMemcpyAsync's copy)."""

    __slots__ = ()
    _FILLED = 2

    def __new__(cls, fn: Callable[[], Any]) -> "HostCall":
        return _new(cls, (CALL, None, fn))


#: any task a queue runs.  The executor dispatches on the kind code ``t[0]``, which a type checker cannot
#: narrow a Union by, so a task is typed as Any there; the named types above document each kind's fields.
Task = Any
TASK_TYPES = (LocalCopy, LocalReduce, Reduce3, UfuncReduce, Write, Read, WriteReduce, ReadReduce, ThreadRecord,
              ThreadWait, ChannelRecord, ChannelWait, EventRecord, EventWait, HostCall)


def task_bytes(t: Task) -> int:
    """Bytes a data task moves or reduces (0 for notifies, events and host calls)."""
    kind = t[0]
    if kind == COPY or kind == WRITE or kind == READ:
        return t.nbytes
    if kind == REDUCE or kind == WRITE_REDUCE or kind == READ_REDUCE:
        return t.count * t.dtype.itemsize
    return 0
