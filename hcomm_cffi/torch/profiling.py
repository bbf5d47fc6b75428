"""The entry of every backend operation (:func:`operation`): its tensors made plain ones with storage
(:func:`~.operands.storage_operands`), then run under the library lock, and a torch.profiler event
named as gloo's are (``hcomm:all_reduce``, ``hcomm:send``...) while torch profiles.

An event starts when the operation is started and ends, on the backend's progress thread, once its
work has completed: an asynchronous event, as gloo's (which end on gloo's worker threads).  It
carries the operation's input tensors (``input_shapes`` with ``record_shapes=True``) and their
total ``bytes`` as a keyword input.  Nothing is done while no profiler is on.
"""
from __future__ import annotations

import functools
import threading
from typing import Any, Callable, Iterator, TypeVar

import torch
from torch._C._profiler import _RecordFunctionFast

from .operands import argument_names, storage_keywords, storage_operands
from .progress import CALLERS, LOCK, PROGRESS, THREAD_NAME as PROGRESS_THREAD, serialised

END_WAIT_S = 1.0

__all__ = ["operation"]

F = TypeVar("F", bound=Callable[..., Any])
_NESTED = threading.local()   # an operation built of others (the coalesced forms) records one event


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)


class _End:
    """Ends a record on the progress thread (so every event is asynchronous, as gloo's end on its worker).

    Called on another thread, :meth:`now` waits until the progress thread has ended it (at most
    ``END_WAIT_S``; then it ends here): the event is complete when the operation returns, so a
    profiler stopped right after still records it.
    """

    library = False   # the progress thread runs it without the library lock (the caller may hold it)

    def __init__(self, record: Any) -> None:
        self.record = record
        self._once = threading.Lock()
        self._ended = threading.Event()

    def now(self) -> None:
        if threading.current_thread().name == PROGRESS_THREAD:
            self.publish()
            return
        PROGRESS.add(self)
        if not self._ended.wait(END_WAIT_S):
            self.publish()

    def advance(self, seconds: Any) -> bool:
        return True

    def overdue(self, now: float) -> bool:
        return False

    def expire(self) -> None:
        pass

    def publish(self) -> None:
        if self._once.acquire(False):
            self.record.__exit__(None, None, None)
            self._ended.set()


def operation(title: str, inputs: int = 0) -> Callable[[F], F]:
    """A backend operation: its tensor arguments made plain tensors with storage (an AsyncCollectiveTensor waited
    for, before the lock is taken: its wait is another operation's), then run holding the library lock (as
    :func:`~.progress.serialised`) and, while torch profiles, recorded as ``hcomm:<title>`` until its work
    completes; the event's inputs are the tensors of positional argument ``inputs`` (as gloo's: the inputs, not
    the outputs).

    One wrapper for both, and the free lock taken inline: each frame between torch and the method costs
    every call (and every flight record's walk to the user's line, callsite.py) about 0.2 us.
    """
    def wrap(method: F) -> F:
        locked = serialised(method)
        callers, current_thread = CALLERS, threading.current_thread
        names = argument_names(method)

        @functools.wraps(method)
        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            callers.add(current_thread())     # progress.caller(), inline (every call)
            args = storage_operands(args, names, lambda: self._label(title))  # type: ignore[assignment]
            if kwargs:
                kwargs = storage_keywords(kwargs, lambda: self._label(title))
            if not torch.autograd._profiler_enabled() or getattr(_NESTED, "on", False):
                lock = LOCK.lock    # read per call: a forked child gets a fresh lock (progress._reset_after_fork)
                if not lock.acquire(False):     # taken by the background thread: queue for it
                    LOCK.queue()
                try:
                    return method(self, *args, **kwargs)
                finally:
                    lock.release()
            ts = list(_tensors(args[inputs] if len(args) > inputs else ()))
            record = _RecordFunctionFast(f"hcomm:{title}", input_values=ts,
                                         keyword_values={"bytes": sum(t.numel() * t.element_size() for t in ts)})
            record.__enter__()
            _NESTED.on = True
            try:
                work = locked(self, *args, **kwargs)
            except BaseException:
                record.__exit__(None, None, None)
                raise
            finally:
                _NESTED.on = False
            work.when_finished(_End(record).now)
            return work
        return run  # type: ignore[return-value]
    return wrap
