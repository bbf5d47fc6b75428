"""The torch backend's progress thread never waits without bound on the library lock (torch/progress.py).

An exception raised by a signal handler inside ``LibraryLock.__enter__`` could leave the lock taken or its
count of waiters raised; the thread that completes DDP's Futures then waited for ever (no deadline applied:
the deadline is checked in the thread's turn).  Now a work still fails at its deadline while another thread
holds the lock, a raised waiter count only slows the thread, and ``__enter__`` gives back a lock an exception
left taken.  An operation in a forked child holds the child's lock (the one every wait takes), not a copy of
the parent's.
"""
from __future__ import annotations

import os
import threading
import time
from typing import Optional

import pytest

pytest.importorskip("torch")

from hcomm_cffi.torch.profiling import operation  # noqa: E402
from hcomm_cffi.torch.progress import LOCK, Progress  # noqa: E402


class _Work:
    """A work for the thread: done after ``turns`` slices, or failed once ``deadline`` passed."""

    library = True

    def __init__(self, turns: int, deadline: float) -> None:
        self.turns, self.deadline = turns, deadline
        self.outcome: Optional[str] = None
        self.published = threading.Event()

    def advance(self, seconds: Optional[float]) -> bool:
        self.turns -= 1
        if self.turns <= 0:
            self.outcome = "done"
            return True
        return False

    def overdue(self, now: float) -> bool:
        return self.outcome is None and now > self.deadline

    def expire(self) -> None:
        self.outcome = "expired"

    def publish(self) -> None:
        if self.outcome is not None:
            self.published.set()


def test_a_work_fails_at_its_deadline_while_another_thread_holds_the_library_lock() -> None:
    progress = Progress()
    work = _Work(turns=10**9, deadline=time.monotonic() + 0.3)
    LOCK.lock.acquire()            # as an exception left it in the caller's thread
    try:
        t0 = time.monotonic()
        progress.add(work)
        assert work.published.wait(5), "the progress thread waited on the lock past the work's deadline"
        assert work.outcome == "expired" and time.monotonic() - t0 < 3
    finally:
        LOCK.lock.release()
        progress.stop()


def test_a_waiter_count_left_raised_only_slows_the_thread() -> None:
    progress = Progress()
    work = _Work(turns=20, deadline=time.monotonic() + 60)
    LOCK.wanted += 1               # as an exception between the increment and the decrement left it
    try:
        progress.add(work)
        assert work.published.wait(5) and work.outcome == "done"
    finally:
        LOCK.wanted -= 1
        progress.stop()


def test_enter_gives_back_a_lock_an_exception_left_taken() -> None:
    class Interrupting:
        """An RLock whose blocking acquire takes it, then raises (a signal handler right after the acquire)."""

        def __init__(self) -> None:
            self.inner = threading.RLock()

        def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
            if not blocking:
                return False        # taken by the background thread: __enter__ queues for it
            self.inner.acquire()
            raise KeyboardInterrupt("right after the acquire")

        def _is_owned(self) -> bool:
            return self.inner._is_owned()   # type: ignore[attr-defined]

        def release(self) -> None:
            self.inner.release()

    saved = LOCK.lock
    LOCK.lock = Interrupting()     # type: ignore[assignment]
    try:
        with pytest.raises(KeyboardInterrupt):
            LOCK.__enter__()
        assert not LOCK.lock._is_owned() and LOCK.wanted == 0
    finally:
        LOCK.lock = saved


@operation("probe")
def _holds_the_lock(self: object) -> bool:
    """An operation (made in this process, before any fork) that says whether it runs holding LOCK's lock."""
    return bool(LOCK.lock._is_owned())   # type: ignore[attr-defined]


def test_an_operation_in_a_forked_child_holds_the_childs_lock() -> None:
    """After fork the child's lock is a new one (progress._reset_after_fork): an operation must take that one, or
    two threads of the child (an operation on one, a wait on another) exclude each other with different locks."""
    assert _holds_the_lock(None)
    pid = os.fork()
    if pid == 0:                                    # the child: exit code 0 when the operation held the lock
        os._exit(0 if _holds_the_lock(None) else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the operation ran holding the parent's copied lock"
