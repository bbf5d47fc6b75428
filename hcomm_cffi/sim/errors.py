"""Return codes of the emulator, the exception carrying them, and ``failed``: where an error becomes a return code.

Every emulated C function is wrapped by ``entry`` (a library collective by ``group.collective``), whose
``failed`` turns a ``SimError`` into its code, keeping the message for ``aclGetRecentErrMsg`` as the real
runtime does for its last error.
"""
from __future__ import annotations

import functools
import os
import sys
import threading
import warnings
from types import FrameType
from typing import Any, Callable, NoReturn, Optional, TypeVar

from ..enums import HcclResult
# aclError values: the emulator returns the codes of the one ACL table in hcomm_cffi.errors
# (re-exported here for the emulator modules)
from ..errors import (
    ACL_ERROR_INVALID_PARAM, ACL_ERROR_REPEAT_INITIALIZE, ACL_ERROR_RT_CONTEXT_NULL,
    ACL_ERROR_RT_EVENT_SYNC_TIMEOUT, ACL_ERROR_RT_FFTS_PLUS_TIMEOUT, ACL_ERROR_RT_INTERNAL_ERROR,
    ACL_ERROR_RT_INVALID_DEVICEID, ACL_ERROR_RT_INVALID_HANDLE, ACL_ERROR_RT_MEMORY_ALLOCATION,
    ACL_ERROR_RT_PARAM_INVALID, ACL_ERROR_RT_STREAM_SYNC_TIMEOUT, ACL_ERROR_RT_SUSPECT_REMOTE_ERROR,
    ACL_ERROR_UNINITIALIZE, ACL_SUCCESS,
)

__all__ = [
    "SimError", "entry", "failed", "raise_kept", "last_error", "set_last_error", "warn_caller", "HcclResult",
    "ACL_SUCCESS", "ACL_ERROR_INVALID_PARAM", "ACL_ERROR_UNINITIALIZE", "ACL_ERROR_REPEAT_INITIALIZE",
    "ACL_ERROR_RT_PARAM_INVALID", "ACL_ERROR_RT_INVALID_DEVICEID", "ACL_ERROR_RT_CONTEXT_NULL",
    "ACL_ERROR_RT_INVALID_HANDLE", "ACL_ERROR_RT_MEMORY_ALLOCATION", "ACL_ERROR_RT_INTERNAL_ERROR",
    "ACL_ERROR_RT_STREAM_SYNC_TIMEOUT", "ACL_ERROR_RT_EVENT_SYNC_TIMEOUT",
    "ACL_ERROR_RT_FFTS_PLUS_TIMEOUT", "ACL_ERROR_RT_SUSPECT_REMOTE_ERROR",
]


class SimError(Exception):
    """An error the C function reports by return code; ``code`` is what it returns.

    ``named``: ``message`` is the whole last-error text (it names its source itself); otherwise the text
    is ``"<C function>: <message>"``.
    """

    def __init__(self, code: int, message: str, named: bool = False) -> None:
        super().__init__(message)
        self.code = int(code)
        self.message = message
        self.named = named


def raise_kept(holder: Any, prefix: str = "", named: bool = False) -> NoReturn:
    """Raise the failure a queue or an event keeps (``holder.error``: HcclResult, aclError, message), clearing it."""
    _, acl_code, message = holder.error
    holder.error = None
    raise SimError(acl_code, prefix + message, named)


_tls = threading.local()


def set_last_error(message: str) -> None:
    """Remember the detailed text of the calling OS thread's last failure."""
    _tls.message = message


def last_error() -> Optional[str]:
    """The calling OS thread's last failure text, if any."""
    return getattr(_tls, "message", None)


F = TypeVar("F", bound=Callable[..., Any])


def entry(func: F, name: Optional[str] = None, divert: Optional[Callable[..., Any]] = None,
          failure: Any = None) -> F:
    """Wrap an emulated C function: its exceptions become its return value (:func:`failed`).

    ``name``: the C function the last-error text names (default: ``func``'s own name).  ``divert``: called first
    with the same arguments; a result other than None is returned instead of calling ``func`` (a repeated small
    collective: sim/group.py; ``diverted`` says so).  ``failure``: returned instead of the code by a function whose
    result is not a code (NULL for one returning a pointer).  The wrapper's ``c_function`` is ``name``.
    """
    name = name or func.__name__

    @functools.wraps(func)
    def wrapper(*args: Any) -> Any:
        try:
            if divert is not None:
                diverted = divert(*args)
                if diverted is not None:
                    return diverted
            return func(*args)
        except Exception as exc:
            return failed(exc, name, failure)

    wrapper.c_function = name  # type: ignore[attr-defined]
    wrapper.diverted = divert is not None  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]


def failed(exc: Exception, name: str, failure: Any = None) -> Any:
    """What C function ``name`` returns when ``exc`` escaped it (the module docstring): a SimError's code, E_INTERNAL
    for anything else (an emulator bug), or ``failure`` for a function whose result is not a code."""
    if isinstance(exc, SimError):
        set_last_error(exc.message if exc.named else f"{name}: {exc.message}")
        code = exc.code
    else:
        set_last_error(f"{name}: internal error in the emulator: {exc!r}")
        code = int(HcclResult.E_INTERNAL)
    return code if failure is None else failure


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _caller_stacklevel() -> int:
    """The stacklevel of the first frame outside hcomm_cffi, counted from warn_caller's caller."""
    frame: Optional[FrameType] = sys._getframe(2)
    level = 2
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame = frame.f_back
        level += 1
    return level if frame is not None else 2


def warn_caller(message: str, category: type) -> None:
    """Warn at the user's line: the first frame outside the hcomm_cffi package, not the emulator's own."""
    warnings.warn(message, category, stacklevel=_caller_stacklevel())
