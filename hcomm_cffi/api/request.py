"""Request: a handle to a non-blocking operation (isend/irecv), with wait/test and wait_all."""
from __future__ import annotations

import math
import time
from typing import Any, Callable, Generic, Iterable, List, Optional, TypeVar, cast

from .errors import CommError, CommTimeoutError

__all__ = ["Request", "wait_all", "timeout_arg", "is_seconds"]


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

T = TypeVar("T")


class Request(Generic[T]):
    """Completes when the streams it was issued on have drained; ``wait`` then runs its checks.

    ``Request[T]``: ``wait()`` returns what ``finish`` returns (the output buffer of an ``i*``
    collective, the filled buffer of an irecv), None without ``finish``.  Waiting on a request also
    waits for operations issued earlier on the same lane (per-peer FIFO order, as MPI's
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
