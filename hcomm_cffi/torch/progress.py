"""Background completion of the Futures torch waits on, and the lock that serialises the backend's library calls.

Why a thread: DDP's reducer waits on each bucket's Future in C++ (``Reducer::finalize_backward``
calls ``bucket.future_work->wait()``, torch/csrc/distributed/c10d/reducer.cpp, torch 2.13), with
no Python call between the last bucket's allreduce and that wait.  On the emulator a collective
progresses only inside library calls (see :mod:`hcomm_cffi.api.requests`), so a Future that
only a later library call could complete would never complete there.  Until torch 2.13 the work
was therefore completed inside ``get_future()`` (no overlap with the backward pass).

Here ``get_future()`` hands the work to one daemon thread per process that drives the library
in short slices (``SLICE_S``) and completes each Future (result or exception) as soon as its
collective is done, while the backward pass computes on the caller's thread (autograd runs C++
without the GIL).  Every slice is bounded, and a work pending longer than its process group's
timeout fails its Future with :class:`CommTimeoutError`: nothing waits forever.

The emulator and the Comm bookkeeping are not meant to be driven from two threads at once, so
every library call the backend makes (starting a collective, waiting on one, creating or
destroying a communicator) holds :data:`LOCK`; the thread takes it only for one slice at a
time and steps aside while the caller's thread wants it.  Direct :class:`hcomm_cffi.Comm` calls
made by user code on another thread while Futures are pending are not covered by the lock.
"""
from __future__ import annotations

import atexit
import functools
import os
import threading
import time
import warnings
from collections import deque
from typing import Any, Callable, Deque, Optional, Protocol, Set, TypeVar

__all__ = ["LOCK", "PROGRESS", "SLICE_S", "THREAD_NAME", "CALLERS", "serialised", "caller", "alone", "step_aside",
           "Progress", "LibraryLock"]

#: How long the background thread drives the library per turn (the lock is held that long at most).
SLICE_S = 0.002
#: The thread exits after this long without pending works (it restarts on the next get_future).
IDLE_EXIT_S = 0.5
#: The background thread's name.
THREAD_NAME = "hcomm-progress"
#: How long the thread sleeps between turns while the caller's thread wants the lock.
YIELD_S = 50e-6
#: The longest the thread steps aside per turn (a count of waiters left behind by an exception never stalls it).
ASIDE_MAX_S = 0.01
#: How long the thread waits for the lock per turn before checking its work's deadline without it.
LOCK_WAIT_S = 0.5


class LibraryLock:
    """A re-entrant lock with a count of callers waiting for it, so the background thread can step aside."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.wanted = 0

    def __enter__(self) -> "LibraryLock":
        if not self.lock.acquire(False):   # taken (by the background thread): queue for it
            self.queue()
        return self

    def queue(self) -> None:
        """Wait for the lock, counted in ``wanted`` meanwhile (the background thread steps aside)."""
        self.wanted += 1
        try:
            self.lock.acquire()
        except BaseException:          # a signal handler raised once it was taken: give it back
            if self.lock._is_owned():  # type: ignore[attr-defined]  # (RLock's own test of the caller)
                self.lock.release()
            raise
        finally:
            self.wanted -= 1

    def __exit__(self, *exc: Any) -> None:
        self.lock.release()


LOCK = LibraryLock()

F = TypeVar("F", bound=Callable[..., Any])


def serialised(method: F) -> F:
    """Run ``method`` holding :data:`LOCK` (creating and shutting down a group; the operations' own wrapper,
    ``profiling.operation``, takes the lock inline)."""
    @functools.wraps(method)
    def locked(*args: Any, **kwargs: Any) -> Any:
        with LOCK:
            return method(*args, **kwargs)
    return locked  # type: ignore[return-value]


#: the threads that called the backend (an operation, a wait, a group's creation); the dead ones are dropped
#: by :func:`alone`.  A set of Thread objects: ``add``, ``discard`` and ``tuple()`` of it are atomic under the GIL.
CALLERS: Set[threading.Thread] = set()


def caller() -> None:
    """Count the calling thread among the backend's callers (every operation, wait and group creation does)."""
    CALLERS.add(threading.current_thread())


def alone() -> bool:
    """True when no other live thread has called the backend.

    Only then may an operation wait for its peers inside one blocking library call: that call holds
    :data:`LOCK` throughout, and another thread's collective on another group (``dcp.async_save``'s
    thread on its own group while the training loop uses the default one) would wait for the lock
    while its peers wait for it: a deadlock across ranks.  Threads that never call the backend (the
    package's own watchers, a data loader's) do not count.  A thread counts from its first call on,
    and the thread that created the groups counts from then: a blocking call of one thread waits only
    for the same call of its peers, never for another thread's.
    """
    me = threading.current_thread()
    for thread in tuple(CALLERS):
        if thread is not me:
            if thread.is_alive():
                return False
            CALLERS.discard(thread)
    return True


def step_aside() -> None:
    """Between two slices of a wait: let the threads queued for :data:`LOCK` have it first (at most ASIDE_MAX_S)."""
    aside_until = time.monotonic() + ASIDE_MAX_S
    while LOCK.wanted and time.monotonic() < aside_until:
        time.sleep(YIELD_S)


class Advancing(Protocol):
    """What the thread needs of a work: advance it a while, fail it when overdue, complete its Future.

    An item whose ``library`` attribute is False calls no library function: it is not run under :data:`LOCK`
    (so a caller holding the lock may wait for it).
    """

    def advance(self, seconds: Optional[float]) -> bool: ...

    def overdue(self, now: float) -> bool: ...

    def expire(self) -> None: ...

    def publish(self) -> None: ...


class Progress:
    """The per-process background completer of works whose Future was asked for."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._works: Deque[Advancing] = deque()
        self._thread: Optional[threading.Thread] = None
        self._stopping = False

    def add(self, work: Advancing) -> None:
        """Complete ``work`` in the background (starts the thread if it is not running)."""
        with self._cond:
            self._works.append(work)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=THREAD_NAME, daemon=True)
                self._thread.start()
            self._cond.notify()

    def pending(self) -> int:
        """Works not yet completed by the thread."""
        return len(self._works)

    def _next(self) -> Optional[Advancing]:
        """The oldest pending work, or None (and the thread ends) after IDLE_EXIT_S without any."""
        with self._cond:
            if not self._works and not self._stopping:
                self._cond.wait(IDLE_EXIT_S)
            if not self._works or self._stopping:
                self._thread = None
                return None
            work = self._works.popleft()
        return work

    def _loop(self) -> None:
        while True:
            work = self._next()
            if work is None:
                return
            if not getattr(work, "library", True):      # calls no library function (ends a profiler record)
                finished = self._turn(work)
            elif LOCK.lock.acquire(timeout=LOCK_WAIT_S):
                try:
                    finished = self._turn(work)
                finally:
                    LOCK.lock.release()
            else:       # the caller's thread holds the lock this long: the work still fails at its deadline
                finished = self._expire_if_overdue(work)
            if finished:
                try:
                    work.publish()             # outside the lock: the Future's callbacks run here
                except BaseException as exc:   # the thread must live on: other works depend on it
                    warnings.warn(f"hcomm progress thread: completing a Future failed: {exc!r}", RuntimeWarning)
            else:
                with self._cond:
                    self._works.append(work)   # round robin: the others get their turn
            step_aside()

    @staticmethod
    def _expire_if_overdue(work: Advancing) -> bool:
        """Fail ``work`` if its deadline passed; True if it did (expiring calls no library function: no lock needed)."""
        if work.overdue(time.monotonic()):
            work.expire()
            return True
        return False

    @staticmethod
    def _turn(work: Advancing) -> bool:
        """One slice of ``work``; True once it is finished (done, failed or expired)."""
        try:
            finished = work.advance(SLICE_S)
        except BaseException:   # the work recorded its error; publish() hands it to the Future
            finished = True
        return finished or Progress._expire_if_overdue(work)

    def stop(self) -> None:
        """At interpreter exit: end the thread (after its current slice) before the library is torn down."""
        with self._cond:
            self._stopping = True
            thread = self._thread
            self._cond.notify()
        if thread is not None:
            thread.join(timeout=1.0)

    def _after_fork(self) -> None:
        """A forked child has no thread: start afresh."""
        self._cond = threading.Condition()
        self._works = deque()
        self._thread = None
        self._stopping = False


PROGRESS = Progress()


def _reset_after_fork() -> None:
    """Locks and the thread do not survive fork: the child starts with fresh ones."""
    LOCK.lock = threading.RLock()
    LOCK.wanted = 0
    CALLERS.clear()
    PROGRESS._after_fork()


os.register_at_fork(after_in_child=_reset_after_fork)
# threading's exit hooks run before atexit's (where the emulator unmaps its segments); atexit is the fallback
getattr(threading, "_register_atexit", atexit.register)(PROGRESS.stop)
