"""Errors raised by the Comm API (library failures keep their typed HcclError as ``__cause__``)."""
from __future__ import annotations

from typing import Mapping, Optional, Type

__all__ = ["CommError", "CommTimeoutError", "MessageMismatchError", "NotMemberError", "NotInitializedError",
           "wrap_failure", "with_comm_names"]


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


def wrap_failure(exc: BaseException, where: str, names: Mapping[str, str],
                 cls: Optional[Type[CommError]] = None) -> CommError:
    """A ``cls`` error (default CommError, CommTimeoutError for timeouts) saying where, keeping the library's text.

    The library names communicators by its own id (``HcclGetCommName``); ``names`` maps those ids to the
    Comm names (``live.library_names()``), so one message never gives one communicator two names.
    """
    if cls is None:
        cls = CommTimeoutError if isinstance(exc, TimeoutError) else CommError
    return cls(with_comm_names(f"{where} failed: {exc}", names))


def with_comm_names(text: str, names: Mapping[str, str]) -> str:
    """``text`` with each library communicator id of ``names`` replaced by its Comm name."""
    for lib_name, name in names.items():
        text = text.replace(f"communicator {lib_name}", f"communicator {name!r}")
    return text
