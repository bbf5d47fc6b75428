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
    """A CommError (CommTimeoutError for timeouts) saying where, keeping the library's text.

    The library names communicators by its own id (``HcclGetCommName``); the text says the Comm's name
    instead, so one message never gives one communicator two names.
    """
    cls = CommTimeoutError if isinstance(exc, TimeoutError) else CommError
    return cls(_one_name(f"{where} failed: {exc}"))


def _one_name(text: str) -> str:
    """``text`` with every live communicator's library id replaced by its Comm name."""
    from . import live       # lazy: live imports this module
    for comm in [live.current_world(), *live.registered()]:
        handle = getattr(comm, "handle", None)
        if handle is None:
            continue
        try:
            lib_name = comm.binding.get_comm_name(handle)
        except Exception:    # noqa: BLE001 - a failing library must not hide the failure being reported
            continue
        if lib_name and lib_name in text:
            text = text.replace(f"communicator {lib_name}", f"communicator {comm.name!r}")
    return text
