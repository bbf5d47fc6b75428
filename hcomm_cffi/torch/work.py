"""HcommWork: a ``torch.distributed`` Work over this package's Requests.

A ``dist._Work`` subclass, not ``_create_work_from_future``: a Work made from a Future swallows the
exception and ``wait()`` returns True, while the errors here must reach the caller.  The emulator
progresses inside library calls (see :mod:`hcomm_cffi.api.nonblocking`), so ``get_future()``
completes the work before returning its (then finished) Future: code that only waits on the
Future (DDP's reducer) is never left blocked on work nothing drives.
"""
from __future__ import annotations

import time
from datetime import timedelta
from typing import Any, Callable, List, Optional, Sequence

import torch
import torch.distributed as dist

from ..api.errors import CommTimeoutError
from ..api.request import Request

__all__ = ["HcommWork", "seconds_of"]


def seconds_of(timeout: Any) -> Optional[float]:
    """torch's timeout (timedelta; zero or None = no timeout) in seconds, None for none."""
    if timeout is None:
        return None
    secs = timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout)
    return None if secs <= 0 else secs


class HcommWork(dist._Work):
    """Completes when its requests have; ``then`` runs once after (copies out, AVG's division...)."""

    def __init__(self, what: str, requests: Sequence[Request], result: List[Any],
                 then: Optional[Callable[[], None]] = None,
                 on_timeout: Optional[Callable[[float], str]] = None) -> None:
        super().__init__()
        self.what = what
        self._requests = list(requests)
        self._result = result
        self._then = then
        self._on_timeout = on_timeout
        self._error: Optional[BaseException] = None
        self._done = False
        self._future: Any = torch.futures.Future()

    def _complete(self, seconds: Optional[float]) -> None:
        if self._error is not None:
            raise self._error
        if self._done:
            return
        deadline = None if seconds is None else time.monotonic() + seconds
        try:
            for req in self._requests:
                req.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if self._then is not None:
                self._then()
        except CommTimeoutError as exc:
            if seconds is None:
                self._fail(exc)
            extra = self._on_timeout(seconds) if self._on_timeout is not None else ""
            raise CommTimeoutError(f"{self.what} did not complete within {seconds:g} s{extra} (the work is still "
                                   "pending; wait again)") from exc
        except BaseException as exc:
            self._fail(exc)
        self._done = True
        self._future.set_result(self._result)

    def _fail(self, exc: BaseException) -> None:
        self._error = exc
        self._future.set_exception(exc)
        raise exc

    def wait(self, timeout: Any = None) -> bool:
        """Block until done (``timeout``: a timedelta; raises CommTimeoutError, the work stays pending)."""
        self._complete(seconds_of(timeout))
        return True

    def is_completed(self) -> bool:
        """True once finished or failed (tests the requests without blocking)."""
        if self._done or self._error is not None:
            return True
        if all(req.test() for req in self._requests):
            try:
                self._complete(None)
            except BaseException:
                pass
            return True
        return False

    def is_success(self) -> bool:
        """True when completed without an error."""
        return self.is_completed() and self._error is None

    def exception(self) -> Optional[BaseException]:
        """The error this work failed with, if any."""
        return self._error

    def result(self) -> List[Any]:
        """The output tensors."""
        return self._result

    def get_future(self) -> Any:
        """A Future of the output tensors, completed here (its errors are set on it, not raised)."""
        try:
            self._complete(None)
        except BaseException:
            pass
        return self._future
