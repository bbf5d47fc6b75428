"""Where algorithms issue their tasks: the :class:`TaskSink` protocol, and :class:`TaskBatch` (record, then launch).

An algorithm never calls the library directly: it issues through a sink with the data-plane
methods of :class:`~hcomm_cffi.binding.Binding` (which satisfies the protocol).  A
:class:`TaskBatch` records the calls and launches them only once the algorithm issued all of
them without error — a validation error half-way never launches half an operation, which would
hang the peers — data-plane calls between ``HcommBatchModeStart`` / ``End``, library
collectives (``native``) on their stream outside batch mode, in issue order.  The dry run
(:mod:`.dryrun`) is a third sink that records without any library.
"""
from __future__ import annotations

from typing import Any, Callable, List, Protocol, Set, Tuple

from .. import trace as _trace
from ..lib.contract import DataPlaneCall

__all__ = ["TaskSink", "TaskBatch", "PreparedLaunch"]

CData = Any


class TaskSink(Protocol):
    """The data-plane calls an algorithm issues (same names and arguments as :class:`Binding`)."""

    def local_copy(self, thread: int, dst: CData, src: CData, nbytes: int) -> None:
        """HcommLocalCopyOnThread."""

    def local_reduce(self, thread: int, dst: CData, src: CData, count: int, dtype: int, op: int) -> None:
        """HcommLocalReduceOnThread."""

    def write(self, thread: int, channel: int, dst: CData, src: CData, nbytes: int) -> None:
        """HcommWriteOnThread."""

    def read(self, thread: int, channel: int, dst: CData, src: CData, nbytes: int) -> None:
        """HcommReadOnThread."""

    def channel_notify_record(self, thread: int, channel: int, idx: int) -> None:
        """HcommChannelNotifyRecordOnThread."""

    def channel_notify_wait(self, thread: int, channel: int, idx: int, timeout_s: int) -> None:
        """HcommChannelNotifyWaitOnThread."""

    def thread_notify_record(self, thread: int, dst_thread: int, idx: int) -> None:
        """HcommThreadNotifyRecordOnThread."""

    def thread_notify_wait(self, thread: int, idx: int, timeout_s: int) -> None:
        """HcommThreadNotifyWaitOnThread."""

    def library_call(self, name: str, *args: Any) -> None:
        """A library collective (``all_reduce``, ``broadcast``, ... of Binding) enqueued on its stream."""




class TaskBatch:
    """Records an algorithm's calls (a :class:`TaskSink`) for one atomic :meth:`launch` through ``binding``."""

    __slots__ = ("_b", "calls", "unbatched")

    def __init__(self, binding: Any) -> None:
        self._b = binding
        self.calls: List[DataPlaneCall] = []
        self.unbatched: Set[int] = set()    # indices of library calls (run outside batch mode)

    # one recorder per data-plane method: the hot path is a tuple append
    def local_copy(self, *a: Any) -> None:
        """Record HcommLocalCopyOnThread."""
        self.calls.append((self._b.local_copy, a))

    def local_reduce(self, *a: Any) -> None:
        """Record HcommLocalReduceOnThread."""
        self.calls.append((self._b.local_reduce, a))

    def write(self, *a: Any) -> None:
        """Record HcommWriteOnThread."""
        self.calls.append((self._b.write, a))

    def read(self, *a: Any) -> None:
        """Record HcommReadOnThread."""
        self.calls.append((self._b.read, a))

    def channel_notify_record(self, *a: Any) -> None:
        """Record HcommChannelNotifyRecordOnThread."""
        self.calls.append((self._b.channel_notify_record, a))

    def channel_notify_wait(self, *a: Any) -> None:
        """Record HcommChannelNotifyWaitOnThread."""
        self.calls.append((self._b.channel_notify_wait, a))

    def thread_notify_record(self, *a: Any) -> None:
        """Record HcommThreadNotifyRecordOnThread."""
        self.calls.append((self._b.thread_notify_record, a))

    def thread_notify_wait(self, *a: Any) -> None:
        """Record HcommThreadNotifyWaitOnThread."""
        self.calls.append((self._b.thread_notify_wait, a))

    def library_call(self, name: str, *args: Any) -> None:
        """Record a library collective (``Binding.<name>(*args)``), launched on its stream outside batch mode."""
        self.unbatched.add(len(self.calls))
        self.calls.append((getattr(self._b, name), args))

    def extend(self, other: "TaskBatch") -> None:
        """Append ``other``'s calls after this batch's (library calls stay outside batch mode)."""
        base = len(self.calls)
        self.unbatched.update(base + i for i in other.unbatched)
        self.calls.extend(other.calls)

    def __len__(self) -> int:
        return len(self.calls)

    def launch(self) -> None:
        """Replay the recorded calls: data-plane runs inside one batch each, library calls between them."""
        if not self.calls:
            return
        b = self._b
        calls = self.calls if not _trace.HOST else [(_host_timed(fn), a) for fn, a in self.calls]
        if len(self.unbatched) == len(calls):      # library collectives only (native): no batch mode
            for fn, args in calls:
                fn(*args)
            return
        if not self.unbatched:
            b.batch_mode_start()
            try:
                for fn, args in calls:
                    fn(*args)
            finally:
                b.batch_mode_end()
            return
        open_batch = False
        try:
            for i, (fn, args) in enumerate(calls):
                if i in self.unbatched:
                    if open_batch:
                        open_batch = False
                        b.batch_mode_end()
                elif not open_batch:
                    b.batch_mode_start()
                    open_batch = True
                fn(*args)
        finally:
            if open_batch:
                b.batch_mode_end()


class PreparedLaunch:
    """A batch the backend prepared once (``Backend.prepare_batch``), launched inside one batch through ``binding``."""

    __slots__ = ("_b", "prepared")

    def __init__(self, binding: Any, prepared: Any) -> None:
        self._b = binding
        self.prepared = prepared

    def __len__(self) -> int:
        return len(self.prepared)

    def launch(self) -> None:
        """HcommBatchModeStart, the prepared tasks, HcommBatchModeEnd (its errors raise as from the binding)."""
        b = self._b
        b.batch_mode_start()
        try:
            b.lib.issue_prepared(self.prepared)
        finally:
            b.batch_mode_end()


_NBYTES_AT = {"local_copy": 3, "write": 4, "read": 4}   # argument holding the bytes of a data-plane call


def _host_timed(fn: Callable[..., None]) -> Callable[..., None]:
    """``fn`` that also traces the host-side time of its call (HCOMM_TRACE on a backend that runs tasks itself)."""
    name = getattr(fn, "__name__", "call")

    def timed(*args: Any) -> None:
        t0 = _trace.now()
        fn(*args)
        track = f"host: thread 0x{args[0]:x}" if args and isinstance(args[0], int) else "host: library calls"
        at = _NBYTES_AT.get(name)
        _trace.task(track, name, t0, _trace.now(), args[at] if at is not None and len(args) > at else 0)
    return timed
