"""Errors raised by the Comm API (library failures keep their typed HcclError as ``__cause__``)."""
from __future__ import annotations

from typing import Mapping

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


def wrap_failure(exc: BaseException, where: str, names: Mapping[str, str]) -> CommError:
    """A CommError (CommTimeoutError for timeouts) saying where, keeping the library's text.

    The library names communicators by its own id (``HcclGetCommName``); ``names`` maps those ids to the
    Comm names (``live.library_names()``), so one message never gives one communicator two names.
    """
    cls = CommTimeoutError if isinstance(exc, TimeoutError) else CommError
    text = f"{where} failed: {exc}"
    for lib_name, name in names.items():
        text = text.replace(f"communicator {lib_name}", f"communicator {name!r}")
    return cls(text)
