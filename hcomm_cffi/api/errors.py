"""Errors raised by the Comm API: :class:`~hcomm_cffi.errors.HcclError` s with a code (library failures keep their
typed HcclError as ``__cause__``, and its code).

A failure's message is its headline: what went wrong at the user's line (the call site, as the
flight recorder keeps it), naming communicators by their Comm names; the library's function, code
and name stay on the ``__cause__`` (printed with ``HCOMM_DEBUG`` set, :mod:`hcomm_cffi.excepthook`).
"""
from __future__ import annotations

import re
from typing import Any, Mapping, Optional, Tuple, Type

from .. import callsite
from ..errors import COLLECTIVE_MISMATCH, HcclError

__all__ = ["CommError", "CommTimeoutError", "MessageMismatchError", "NotMemberError", "NotInitializedError",
           "ForeignProcessError", "wrap_failure", "with_comm_names", "failure_error"]

_CHECKER = "checker: "
#: the emulator's account of where in its task lists a wait failed ("..., while rank 0 thread 0x7e5d00000001
#: (stream) waited on channel notify 4 from it (step 40)"): library-internal, left to the cause
_WHERE_IN_LIBRARY = re.compile(r",? while rank \d+ thread \S+ \([^)]*\) waited on channel notify \d+( from it)?"
                               r"( \(step \d+\))?")


class CommError(HcclError, RuntimeError):
    """A communication operation failed; the message names the rank, the operation and the peers.

    An :class:`~hcomm_cffi.errors.HcclError` (code that catches the binding's errors catches these too) whose
    ``code`` is the library's when a library failure caused it, else its class's ``default_code``; its text is
    the message alone (``from_library`` False: no function, code name or library message of its own).
    """

    default_code = 4            # HCCL_E_INTERNAL
    from_library = False

    def __init__(self, message: str = "", code: Optional[int] = None) -> None:
        super().__init__(self.default_code if code is None else code, "hcomm_cffi.api", None, None, None, None)
        self.message = message
        self.args = (message,)

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> Tuple[Any, ...]:
        return (type(self), (self.message, self.code))


class CommTimeoutError(CommError, TimeoutError):
    """An operation did not complete in time (a deadlock or a missing/mismatched call on a peer)."""

    default_code = 9            # HCCL_E_TIMEOUT


class MessageMismatchError(CommError, ValueError):
    """A received message does not match the receive buffer (size, dtype or sequence)."""

    default_code = 1            # HCCL_E_PARA


class NotMemberError(CommError):
    """This rank is not a member of the communicator it tried to use (a null communicator)."""

    default_code = 1            # HCCL_E_PARA


class NotInitializedError(CommError):
    """hcomm.init() has not been called (or hcomm.finalize() already was)."""

    default_code = 7            # HCCL_E_UNAVAIL


class ForeignProcessError(CommError):
    """A communicator (or a request of one) was used by a process other than the one that created it: a child
    forked after ``hcomm.init()``.  Refused before anything reaches the library; the creator's job is unaffected."""

    default_code = 5            # HCCL_E_NOT_SUPPORT


def _site() -> str:
    """' at failures.py:50': the user's line of the call that failed (we are still inside it)."""
    site = callsite.here(3).decode("utf-8", "replace")
    return f" at {site}" if site else ""


def wrap_failure(exc: BaseException, where: str, names: Mapping[str, str],
                 cls: Optional[Type[CommError]] = None) -> CommError:
    """A ``cls`` error (default CommError, CommTimeoutError for timeouts) saying where and why, at the user's line.

    The library names communicators by its own id (``HcclGetCommName``); ``names`` maps those ids to the
    Comm names (``live.library_names()``), so one message never gives one communicator two names (the
    library's error, kept as ``__cause__``, is renamed alike).  The message is the library's reason
    without its function, code and code name (those stay on the cause); a hint is kept.
    """
    if cls is None:
        cls = CommTimeoutError if isinstance(exc, TimeoutError) else CommError
    code = exc.code if isinstance(exc, HcclError) else None     # the library's code, carried
    if isinstance(exc, HcclError) and exc.library_message:
        exc.library_message = with_comm_names(exc.library_message, names)
        reason = exc.library_message.rstrip(". ")
        reason = reason[len(_CHECKER):] if reason.startswith(_CHECKER) else reason
        if reason.startswith(COLLECTIVE_MISMATCH + ": "):       # the user's mistake says it all
            who = where.split(": ", 1)[0]                       # "rank 0 of communicator 'world'"
            rest = reason[len(COLLECTIVE_MISMATCH) + 2:]
            if rest.startswith(f"{who} is in "):
                rest = "this rank is in " + rest[len(who) + len(" is in "):]
            return cls(f"{who}: {COLLECTIVE_MISMATCH}{_site()}: {rest}", code)
        reason = _WHERE_IN_LIBRARY.sub("", reason)       # which thread, notify and step: the cause keeps it
        if exc.hint:
            reason += f". Hint: {exc.hint}"
    else:
        reason = with_comm_names(str(exc), names)
    return cls(f"{where}{_site()} failed: {reason}", code)


def failure_error(exc: BaseException, where: str, names: Mapping[str, str], mismatch: Optional[str],
                  mismatch_cls: Type[CommError]) -> CommError:
    """The error a failed call raises: the handshake's ``mismatch`` when it saw one (a ``mismatch_cls``), else
    :func:`wrap_failure` (a ``mismatch_cls`` when the backend's own check found ranks in different collectives)."""
    if mismatch is not None:
        return mismatch_cls(with_comm_names(mismatch, names) + f" (this rank's call{_site()})",
                            exc.code if isinstance(exc, HcclError) else None)
    in_band = COLLECTIVE_MISMATCH in (getattr(exc, "library_message", None) or "")
    return wrap_failure(exc, where, names, mismatch_cls if in_band else None)


def with_comm_names(text: str, names: Mapping[str, str]) -> str:
    """``text`` with each library communicator id of ``names`` replaced by its Comm name."""
    for lib_name, name in names.items():
        text = text.replace(f"communicator {lib_name}", f"communicator {name!r}")
    return text
