"""Return codes the emulator hands back, and the internal exception that carries them.

Entry points catch ``SimError`` and return its code, keeping the message for
``aclGetRecentErrMsg`` as the real runtime does for its last error.
"""
from __future__ import annotations

import functools
import os
import sys
import threading
import warnings
from types import FrameType
from typing import Any, Callable, Optional, TypeVar

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
    "SimError", "entry", "failure_code", "last_error", "set_last_error", "warn_caller", "HcclResult",
    "ACL_SUCCESS", "ACL_ERROR_INVALID_PARAM", "ACL_ERROR_UNINITIALIZE", "ACL_ERROR_REPEAT_INITIALIZE",
    "ACL_ERROR_RT_PARAM_INVALID", "ACL_ERROR_RT_INVALID_DEVICEID", "ACL_ERROR_RT_CONTEXT_NULL",
    "ACL_ERROR_RT_INVALID_HANDLE", "ACL_ERROR_RT_MEMORY_ALLOCATION", "ACL_ERROR_RT_INTERNAL_ERROR",
    "ACL_ERROR_RT_STREAM_SYNC_TIMEOUT", "ACL_ERROR_RT_EVENT_SYNC_TIMEOUT",
    "ACL_ERROR_RT_FFTS_PLUS_TIMEOUT", "ACL_ERROR_RT_SUSPECT_REMOTE_ERROR",
]


class SimError(Exception):
    """An error the C function reports by return code; ``code`` is what it returns."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = int(code)
        self.message = message


_tls = threading.local()


def set_last_error(message: str) -> None:
    """Remember the detailed text of the calling OS thread's last failure."""
    _tls.message = message


def last_error() -> Optional[str]:
    """The calling OS thread's last failure text, if any."""
    return getattr(_tls, "message", None)


F = TypeVar("F", bound=Callable[..., Any])


def entry(func: F, name: Optional[str] = None) -> F:
    """Wrap a C entry point: a SimError becomes its return code plus a remembered message.

    ``name``: the C function the messages name (default: ``func``'s own name).
    """
    name = name or func.__name__

    @functools.wraps(func)
    def wrapper(*args: Any) -> Any:
        try:
            return func(*args)
        except Exception as exc:
            return failure_code(name, exc)

    return wrapper  # type: ignore[return-value]


def failure_code(name: str, exc: Exception) -> int:
    """What C entry point ``name`` returns for ``exc`` (remembering its text): a C function never raises.

    A SimError carries its code; anything else is an emulator bug and becomes E_INTERNAL.
    """
    if isinstance(exc, SimError):
        set_last_error(f"{name}: {exc.message}")
        return exc.code
    set_last_error(f"{name}: internal error in the emulator: {exc!r}")
    return int(HcclResult.E_INTERNAL)


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
