"""HcommWork: a ``torch.distributed`` Work over this package's Requests.

A ``dist._Work`` subclass, not ``_create_work_from_future``: a Work made from a Future swallows the
exception and ``wait()`` returns True, while the errors here must reach the caller.  A failed
work raises its error from every ``wait()``; an expired ``wait(timeout)`` leaves it pending.
``get_future()`` returns at once: the Future is completed by the backend's progress thread
(:mod:`hcomm_cffi.torch.progress`), so DDP's bucket allreduces overlap the backward pass.

A failure must reach C++ readers of the Future (DDP's reducer) as an error, not as a value:
Python's ``Future.set_exception`` stores the exception object as the *value* (only Python
unwraps it), and the reducer then read it as a tensor list and crashed with SIGSEGV.  So the
Future handed out is ``gate.then(outcome)``: completing the gate runs ``outcome``, whose raise
marks the returned Future failed in C++ (``c10::ivalue::Future::setError``).
"""
from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any, Callable, List, Optional, Sequence

import torch
import torch.distributed as dist

from ..api.errors import CommTimeoutError
from ..api.requests import Request
from .progress import LOCK, PROGRESS, SLICE_S, caller, step_aside

__all__ = ["HcommWork", "seconds_of"]


def seconds_of(timeout: Any) -> Optional[float]:
    """torch's timeout (timedelta; zero or None = no timeout) in seconds, None for none."""
    if timeout is None:
        return None
    secs = timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout)
    return None if secs <= 0 else secs


class HcommWork(dist._Work):
    """Completes when its requests have; ``then`` runs once after (copies out, AVG's division...).

    ``limit``: the process group's timeout in seconds; past it the progress thread fails the Future.
    The optional fields default at class level, so a work that already ran (:meth:`finished`, every
    blocking collective) sets three.
    """

    _requests: Sequence[Request[Any]] = ()
    _then: Optional[Callable[[], None]] = None
    _on_timeout: Optional[Callable[[float], str]] = None
    _error: Optional[BaseException] = None
    _done = False
    _future: Any = None
    _gate: Any = None     # completed by publish(); self._future follows it
    _published: Optional[threading.Lock] = None   # made with the Future; taken once to complete it
    _limit: Optional[float] = None
    _deadline: Optional[float] = None
    _finish_hooks: Sequence[Callable[[], None]] = ()   # run once when the work completes or fails
    source: Any = None   # a receive from any source: its request, whose ``source`` is the sender
    absent: Optional[Callable[[], List[int]]] = None   # a barrier: the ranks that have not entered it

    def __init__(self, what: str, requests: Sequence[Request], result: List[Any],
                 then: Optional[Callable[[], None]] = None,
                 on_timeout: Optional[Callable[[float], str]] = None, limit: Optional[float] = None) -> None:
        super().__init__()
        self.what = what
        self._requests = requests
        self._result = result
        self._then = then
        self._on_timeout = on_timeout
        self._limit = limit
        self._deadline = None if limit is None else time.monotonic() + limit

    @classmethod
    def finished(cls, what: str, result: List[Any], error: Optional[BaseException] = None) -> "HcommWork":
        """A work that already ran (the blocking path); ``error`` is raised from its wait()."""
        work = cls.__new__(cls)
        dist._Work.__init__(work)
        work.what = what
        work._result = result
        if error is None:
            work._done = True
        else:
            work._error = error
        return work

    @property
    def requests(self) -> Sequence[Request[Any]]:
        """The requests it completes with (none for a work that already ran)."""
        return self._requests

    @property
    def then(self) -> Optional[Callable[[], None]]:
        """What runs once after its requests completed (copies out, AVG's division...), if anything."""
        return self._then

    # ------------------------------------------------------------------ progress
    def advance(self, seconds: Optional[float]) -> bool:
        """Drive the work for up to ``seconds`` (None: until done); True once done; raises its failure."""
        if self._error is not None:
            raise self._error
        if self._done:
            return True
        deadline = None if seconds is None else time.monotonic() + seconds
        try:
            for req in self._requests:
                if not req.poll(None if deadline is None else max(0.0, deadline - time.monotonic())):
                    return False
            if self._then is not None:
                self._then()
        except BaseException as exc:
            self._error = exc
            self._finished()
            raise
        self._done = True
        self._finished()
        return True

    def when_finished(self, hook: Callable[[], None]) -> None:
        """Run ``hook`` once the work has completed or failed (now if it has)."""
        if self._done or self._error is not None:
            hook()
        else:
            self._finish_hooks = [*self._finish_hooks, hook]

    def _finished(self) -> None:
        hooks, self._finish_hooks = self._finish_hooks, ()
        for hook in hooks:
            hook()

    def publish(self) -> None:
        """Complete the Future once with the outcome; called outside the library lock (its callbacks run here)."""
        once = self._published
        if once is None or not (self._done or self._error is not None) or not once.acquire(False):
            return
        self._gate.set_result(None)

    def _outcome(self, _: Any) -> List[Any]:
        """The Future's value, or (raised here) its error: a C++-level failure DDP's reducer sees as one."""
        if self._error is not None:
            raise self._error
        return self._result

    def overdue(self, now: float) -> bool:
        """True when the process group's timeout has passed and the work is still pending."""
        return self._deadline is not None and now > self._deadline and not self._done and self._error is None

    def expire(self) -> None:
        """Fail the work (and its Future) for exceeding the process group's timeout."""
        limit = self._limit or 0.0
        extra = self._on_timeout(limit) if self._on_timeout is not None else ""
        self._error = CommTimeoutError(f"{self.what} did not complete within {limit:g} s: Timed out waiting "
                                       f"{limit * 1000:.0f} ms (the process group's timeout, or the barrier's "
                                       f"own){extra}")
        self._finished()

    # ------------------------------------------------------------------ torch's Work interface
    def wait(self, timeout: Any = None) -> bool:
        """Block until done (raises CommTimeoutError after ``timeout``, a timedelta; the work stays pending).

        Without ``timeout`` the wait ends at the process group's timeout (counted from the start),
        and the work then fails with CommTimeoutError (and so does its Future).
        """
        if self._done:
            return True
        if self._error is not None:
            raise self._error
        caller()
        seconds = seconds_of(timeout)
        by_group = seconds is None and self._deadline is not None
        if by_group:
            seconds = max(0.0, self._deadline - time.monotonic())  # type: ignore[operator]
        end = None if seconds is None else time.monotonic() + seconds
        try:
            finished = self._advance_in_slices(end)
            if not finished and by_group:
                self.expire()
                raise self._error  # type: ignore[misc]
        finally:
            self.publish()
        if not finished:
            secs = seconds or 0.0
            extra = self._on_timeout(secs) if self._on_timeout is not None else ""
            raise CommTimeoutError(f"{self.what} did not complete within {secs:g} s: Timed out waiting "
                                   f"{secs * 1000:.0f} ms{extra} (the work is still pending; wait again)")
        return True

    def _advance_in_slices(self, end: Optional[float]) -> bool:
        """Advance until done or ``end`` (monotonic; None: no end), taking :data:`LOCK` one slice at a time.

        Between slices other threads get the lock: a thread waiting here for its peers must not keep
        another thread's collective on another group from starting, which its peers may be waiting for.
        """
        while True:
            left = None if end is None else max(0.0, end - time.monotonic())
            with LOCK:
                if self.advance(SLICE_S if left is None else min(SLICE_S, left)):
                    return True
            if left is not None and left <= SLICE_S:
                return False
            step_aside()

    def is_completed(self) -> bool:
        """True once finished or failed (tests the requests without blocking long)."""
        if self._done or self._error is not None:
            return True
        try:
            with LOCK:
                return self.advance(0.0)
        except BaseException:
            return True
        finally:
            self.publish()

    def is_success(self) -> bool:
        """True when completed without an error."""
        return self.is_completed() and self._error is None

    def exception(self) -> Optional[BaseException]:
        """The error this work failed with, if any."""
        return self._error

    def _source_rank(self) -> int:
        """The rank a receive from any source got its message from (torch's ``dist.recv`` returns it)."""
        src = getattr(self.source, "source", None)
        if src is None:
            raise RuntimeError(f"{self.what}: no source rank (not a completed receive from any source)")
        return int(src)

    def result(self) -> List[Any]:
        """The output tensors."""
        return self._result

    def get_future(self) -> Any:
        """A Future of the output tensors, completed (or failed) by the progress thread; returns at once."""
        with LOCK:
            if self._future is None:
                self._gate = torch.futures.Future()
                self._future = self._gate.then(self._outcome)
                self._published = threading.Lock()
                if not self._done and self._error is None:
                    PROGRESS.add(self)
        self.publish()
        return self._future
