"""One clean error per rank: an uncaught error raised inside the package is printed at the user's line.

Python prints an uncaught exception with every frame down to where it was raised and, before it, its
whole ``__cause__`` chain.  For an error raised inside this package that is a page per rank of the
package's own frames and the library's error (``AclRtInternalError`` ... ``(507000)``) in front of
the message that says what the user did.  :func:`install` (from ``hcomm.init()``, only while
``sys.excepthook`` is Python's own) prints such an error with the frames down to the user's last
line only and without a library cause (an :class:`~hcomm_cffi.errors.HcclError`), followed by one
line saying what was left out.  Nothing about the exception changes: ``__cause__`` and
``__traceback__`` are still there for code that catches it, and with ``HCOMM_DEBUG`` set
(or for any error not raised inside the package) Python's own printing is used.
"""
from __future__ import annotations

import sys
import traceback
from types import TracebackType
from typing import Optional, Type

from . import callsite, settings
from .errors import HcclError

__all__ = ["install", "format_clean"]

_state = {"installed": False}


def _debugging() -> bool:
    try:
        return settings.value("HCOMM_DEBUG") is not None
    except ValueError:                   # a bad value: the logger says so; print everything meanwhile
        return True


def format_clean(value: BaseException, tb: Optional[TracebackType]) -> Optional[str]:
    """The clean text of ``value`` (raised inside the package below a user's frame), or None when it is not one."""
    trimmed, cut = callsite.trim_traceback(tb)
    if not cut:
        return None
    cause, suppress = value.__cause__, value.__suppress_context__
    hide = isinstance(cause, HcclError) and cause.from_library     # a library's code: the message said it
    if hide:
        value.__cause__, value.__suppress_context__ = None, True
    try:
        text = "".join(traceback.TracebackException(type(value), value, trimmed, compact=True).format())
    finally:
        value.__cause__, value.__suppress_context__ = cause, suppress
    left = f"{cut} frame{'s' if cut != 1 else ''} inside hcomm_cffi"
    if hide:
        left += f" and the library's error ({type(cause).__name__}, the exception's __cause__)"
    return text + f"(hcomm: {left} not shown; HCOMM_DEBUG=INFO prints them)\n"


def _hook(etype: Type[BaseException], value: BaseException, tb: Optional[TracebackType]) -> None:
    text = None if _debugging() else format_clean(value, tb)
    if text is None:
        sys.__excepthook__(etype, value, tb)
        return
    sys.stderr.write(text)
    sys.stderr.flush()


def install() -> None:
    """Print the package's uncaught errors cleanly (once; only where the program kept Python's own hook)."""
    if not _state["installed"] and sys.excepthook is sys.__excepthook__:
        _state["installed"] = True
        sys.excepthook = _hook
