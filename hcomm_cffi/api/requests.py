"""Requests: how a started operation completes (:class:`Pending`), the handle waited on (:class:`Request`), wait_all.

An operation is *started* when its tasks are launched onto a stream (the communicator's own, a caller's
for ``stream=`` calls, a point-to-point lane's) without waiting; it *completes* when that stream has
drained past it.  Every started operation -- a collective started, persistent or stream-ordered, a
stream-ordered send/recv, a send/recv on a lane -- completes one way, :meth:`Pending.sync`: its stream
waited for with a limit (a lane message, where the backend runs host tasks in stream order: until its own
tasks ran, never for what was posted on the lane after it), then once its flight record and trace entry
close, its checks run and what it holds (the user's buffers, the staging copies on CANN) is released.  A
Request completes with its Pending and then makes its result (``finish``).  A closed
:class:`~hcomm_cffi.api.stream.Stream` waited for what it held, so a Pending on one is complete.

What progresses when (the emulator, as MPI): queued work advances inside library calls — any
stream or event synchronisation, ``Request.wait``/``test``, and every later collective or
point-to-point call of the process, whichever communicator it is on.  A rank that computes for a
long time without calling the library delays its peers, it cannot deadlock them: every rank
issues collectives of one communicator in the same order, each communicator keeps its
collectives in one total order (one stream, or event-chained streams), and waiting on anything
drives every queue of the process.  On Ascend the device runs the queued tasks by itself.
The torch backend adds a driver of its own: a background thread that waits on the started
collectives whose Future was asked for (:mod:`hcomm_cffi.torch.progress`), so they progress
while the caller computes without calling the library.
"""
from __future__ import annotations

import math
import time
from functools import partial
from typing import Any, Callable, Generic, Iterable, List, Optional, Set, Tuple, TypeVar, cast

from ..errors import HcclError
from . import live, observe
from .buffers import NO_STAGING, Staging
from .errors import CommError, CommTimeoutError
from .state import CommState
from .stream import CAPTURE_REFUSALS, Stream
from .streams import sync_stream

__all__ = ["Pending", "Request", "request_for", "wait_all", "timeout_arg", "is_seconds"]

T = TypeVar("T")

#: how long a waiting lane message looks at its lane's stream before it checks whether its own tasks ran (seconds):
#: the first look behind messages posted after it on the lane (doubling up to the second), and the look when none
#: was (the lane drains as its own tasks end: the look ends then); the emulator's longest sleep (sim/runtime.py)
LANDED_LOOK_S = (0.001, 0.02)


def timeout_arg(value: Any, name: str = "timeout") -> Optional[float]:
    """``value`` as a wait limit in seconds (None: no limit of ours); ValueError naming ``name`` otherwise.

    Checked before anything is posted, so a refused call moves nothing (nan and inf are refused: a wait
    converts its limit to integer milliseconds).
    """
    if value is None:
        return None
    if not is_seconds(value):
        raise ValueError(f"{name}={value!r}; expected None (no limit) or a finite number of seconds >= 0")
    return float(value)


def is_seconds(value: Any) -> bool:
    """True for a finite, non-negative int or float that is not a bool (a duration in seconds)."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value) and value >= 0


class Pending:
    """One started operation until its stream passes it: what it waits for, closes once and holds until then."""

    __slots__ = ("state", "what", "stream", "source", "books", "peer", "keep", "staging", "check", "announced",
                 "slot", "name", "seq", "done", "error", "landed")

    def __init__(self, state: CommState, what: str, stream: Any, keep: Any, books: Set["Pending"],
                 record: Tuple[int, str, int], check: Optional[Callable[[], None]] = None,
                 announced: Optional[Tuple[int, str]] = None, source: Any = None, peer: int = -1,
                 staging: Staging = NO_STAGING, landed: Optional[List[bool]] = None) -> None:
        self.state = state             # the communicator's state
        self.what = what
        self.stream = stream           # the stream handle it completes on
        self.source = source           # the caller's ``stream=`` (a Stream: closed, it is complete)
        self.books = books             # the set holding it until it completes (the communicator's in-flight, a lane's)
        self.peer = peer               # a send/recv on a lane (-1: none): a wait completes what the lane took before it
        self.keep = keep               # the user's buffers stay alive until it completes
        self.staging = staging
        self.error: Optional[BaseException] = None   # the failure, raised again by every later sync
        # a lane's message whose backend runs host tasks in stream order: [True] once its own tasks ran (a task
        # queued right after them sets it), so its wait ends there, not when the lane drains past other threads'
        # later posts (which may wait for what this thread does next: a deadlock MPI's rules do not allow)
        self.landed = landed
        (self.slot, self.name, self.seq), self.check, self.announced = record, check, announced   # as restart()
        self.done = False
        books.add(self)

    def restart(self, record: Tuple[int, str, int], check: Optional[Callable[[], None]],
                announced: Optional[Tuple[int, str]]) -> None:
        """Launched (again: a persistent request's next start): pending until it completes, with this start's flight
        slot, trace name and number (observe.issue), its handshake's comparison and its announced number and text."""
        (self.slot, self.name, self.seq), self.check, self.announced = record, check, announced
        self.done = False
        self.books.add(self)

    def sync(self, timeout: Optional[float]) -> bool:
        """Wait up to ``timeout`` s (None: the communicator's limits) for the stream: True once complete, False if still
        pending; raises CommError on failure, and again on every later sync (a second wait never reports success)."""
        if self.error is not None:
            raise self.error
        state = self.state
        if state.pid != live.PID:        # a forked child: the stream is its parent's (refused, nothing waited for)
            state.check_process(self.what)
        if self.done:
            return True
        source = self.source
        issued = (self,) if self.peer < 0 else tuple(self.books)   # a lane runs in order: what it took before this wait
        stream_done = partial(sync_stream, state.binding, self.stream)
        wait = stream_done if self.landed is None else partial(self._until_landed, stream_done)
        if not (isinstance(source, Stream) and source.handle is None):      # (closed: Stream.close waited for it)
            if state.handle is None:    # destroyed: its stream may be gone with it; say so, not "invalid handle"
                raise CommError(f"rank {state.rank}: {self.what} on communicator {state.name!r} can no longer "
                                "complete: the communicator was destroyed (hcomm.finalize() or destroy()) while it was "
                                "pending; wait for requests before destroying their communicator")
            try:
                if timeout is None and (self.peer >= 0 or self.announced is not None):   # committed: published if
                    finished = state.announcer.waiting(wait, self.peer, self.what, self.announced)   # it lasts
                else:                                                                  # (api/launch_order.py)
                    finished = wait(timeout)
            except HcclError as exc:
                if exc.code in CAPTURE_REFUSALS:   # refused because an ACL graph captures the stream: nothing failed
                    raise
                self.forget()
                self._check()                      # a mismatch explains the failure better than its symptom
                self.error = observe.fail(state, exc, self.what)
                raise self.error from exc
            except BaseException as exc:        # Ctrl-C, an alarm...: its queued work must never run later
                state.interrupted(self.what, exc)
                raise
            if not finished:
                return False
            if self.landed is not None and not self.landed[0]:   # the lane drained without running it: its queue
                self.forget()                                     # failed (another wait took the error)
                self.error = CommError(f"{state.where()}: {self.what} was in flight when the communicator failed"
                                       f"{f' ({state.broken})' if state.broken else ''}; its result is not valid")
                raise self.error
        for pending in issued:      # complete, each once: the wait that takes it out of its books closes its record
            if pending.landed is not None and not pending.landed[0]:   # posted after this one, still running
                continue
            try:
                pending.books.remove(pending)
            except KeyError:        # another thread's wait on the lane did
                continue
            pending.done, pending.keep = True, ()
            observe.done(state, pending.slot, pending.name, pending.seq)
            if pending.check is not None:
                pending._check()
            if state.broken and pending.peer < 0:   # the stream failed while it was queued; an earlier wait took the
                pending.error = CommError(f"{state.where()}: {pending.what} was in flight when the communicator "
                                          f"failed ({state.broken}); its result is not valid")      # error
                raise pending.error
            if pending.staging is not NO_STAGING:
                pending.staging.finish()
        return True

    def _until_landed(self, stream_done: Callable[[Optional[float]], bool], timeout: Optional[float]) -> bool:
        """Wait up to ``timeout`` s (None: no limit) until this lane message's own tasks ran or the whole lane drained
        (then it ran, or its queue failed: the caller tells which); each look drives every queue of the process."""
        landed = self.landed
        assert landed is not None
        deadline = None if timeout is None else time.monotonic() + timeout
        short = LANDED_LOOK_S[0]
        while not landed[0]:
            behind = any(p.seq > self.seq for p in tuple(self.books))    # messages posted after it on the lane
            look = short if behind else LANDED_LOOK_S[1]
            left = look if deadline is None else min(look, max(0.0, deadline - time.monotonic()))
            if stream_done(left):
                return True
            if not landed[0] and deadline is not None and time.monotonic() >= deadline:
                return False
            if behind:
                short = min(2 * short, LANDED_LOOK_S[1])
        return True

    def _check(self) -> None:
        """Raise the mismatch the signature handshake found, if any (compared once)."""
        check, self.check = self.check, None
        if check is not None:
            try:
                check()
            except BaseException as mismatch:
                self.error = mismatch
                raise

    def forget(self) -> None:
        """Retire it without waiting (it failed, or the ACL graph that held it was reset): nothing is held any more."""
        self.done = True
        self.keep = ()
        self.books.discard(self)


class Request(Generic[T]):
    """Completes when the operation it was made for has (``sync``); ``wait`` then returns its result.

    ``Request[T]``: ``wait()`` returns what ``finish`` returns (the filled buffer of an irecv, checked),
    else ``result`` (the output buffer of an ``i*`` collective), None without either.  Waiting on a
    send/recv also completes those issued earlier on the same lane (per-peer FIFO order, as MPI's
    non-overtaking rule requires anyway).
    """

    def __init__(self, what: str, sync: Callable[[Optional[float]], bool],
                 finish: Optional[Callable[[], T]] = None, result: Optional[T] = None) -> None:
        """``finish``: what wait() returns, made on completion -- again by the next wait when it raised or was cut
        short, so it must be repeatable (an irecv's copy-back and checks); else ``result`` is (the output buffer)."""
        self.what = what
        self._sync = sync
        self._finish = finish
        self._done = False
        self._result: Optional[T] = result

    @property
    def done(self) -> bool:
        """True once wait() or test() has seen the operation complete."""
        return self._done

    def wait(self, timeout: Optional[float] = None) -> T:
        """Block until complete (raises CommTimeoutError after ``timeout`` s; the request stays pending)."""
        if not self.poll(timeout):
            raise CommTimeoutError(f"{self.what} did not complete within {timeout:g} s (the request is still "
                                   "pending; wait again or check that the peer posts the matching call)")
        return cast(T, self._result)   # None only for a request without finish, whose T is None

    def poll(self, timeout: Optional[float]) -> bool:
        """Wait up to ``timeout`` s (None: no limit of ours): True once complete, False if still pending.

        Unlike wait(), an expired wait is not an exception: only a failure of the operation raises.
        """
        if timeout is not None:
            timeout = timeout_arg(timeout)
        if self._done:
            return True
        if not self._sync(timeout):
            return False
        if self._finish is not None:     # raised or cut short (an alarm): the next wait makes it again
            self._result = self._finish()
        self._done = True
        return True

    def test(self) -> bool:
        """Non-blocking: True (and finished) if the operation has completed."""
        return self.poll(0.0)

    def then(self, step: Callable[[T], T]) -> "Request[T]":
        """Run ``step`` on the result once, when the operation is seen complete (what wait() returns is its result);
        returns this request.  E.g. ``op='avg'``'s division after the sum."""
        if self._done:
            self._result = step(cast(T, self._result))
            return self
        inner = self._finish
        made = self._result
        begun: List[bool] = []

        def finish() -> T:
            value = inner() if inner is not None else made
            if begun:         # the step is not repeatable (a division in place): cut short, its result is lost
                raise CommError(f"{self.what}: the step that completes its result on the host was cut short (an "
                                "exception while it ran); its result is not valid")
            begun.append(True)
            return step(cast(T, value))
        self._finish = finish
        return self

    def __repr__(self) -> str:
        return f"<Request {self.what} {'done' if self._done else 'pending'}>"


def request_for(pending: Optional[Pending], result: Any) -> Request[Any]:
    """The Request of a started collective (its ``pending``: never None); wait() returns ``result`` (the output buffer)."""
    assert pending is not None
    return Request(f"{pending.state.where()}: {pending.what}", pending.sync, result=result)


def wait_all(requests: Iterable[Request[Any]], timeout: Optional[float] = None) -> List[Any]:
    """Wait for every request (one overall ``timeout``); returns their results in order."""
    timeout = timeout_arg(timeout)
    reqs = list(requests)
    for i, r in enumerate(reqs):
        if not isinstance(r, Request):
            raise TypeError(f"requests[{i}] is a {type(r).__name__}; expected a Request from isend/irecv")
    deadline = None if timeout is None else time.monotonic() + timeout
    out = []
    for r in reqs:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        out.append(r.wait(left))
    return out
