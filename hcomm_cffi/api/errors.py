"""Errors raised by the Comm API (library failures keep their typed HcclError as ``__cause__``)."""
from __future__ import annotations

__all__ = ["CommError", "CommTimeoutError", "MessageMismatchError", "NotMemberError", "NotInitializedError",
           "wrap_failure"]


class CommError(RuntimeError):
    """A communication operation failed; the message names the rank, the operation and the peers."""


class CommTimeoutError(CommError, TimeoutError):
    """An operation did not complete in time (a deadlock or a missing/mismatched call on a peer)."""


class MessageMismatchError(CommError, ValueError):
    """A received message does not match the receive buffer (size, dtype or sequence)."""


class NotMemberError(CommError):
    """This rank is not a member of the communicator it tried to use (a null communicator)."""


class NotInitializedError(CommError):
    """hcomm.init() has not been called (or hcomm.finalize() already was)."""


def wrap_failure(exc: BaseException, where: str) -> CommError:
    """A CommError (CommTimeoutError for timeouts) saying where, keeping the library's text."""
    cls = CommTimeoutError if isinstance(exc, TimeoutError) else CommError
    return cls(f"{where} failed: {exc}")
