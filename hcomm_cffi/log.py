"""The package's ``logging`` hierarchy (``hcomm_cffi.*``): quiet by default, ``HCOMM_DEBUG`` turns it on per rank.

Every module logs through :func:`get` (``hcomm_cffi.<part>``).  The root of the hierarchy has a
``NullHandler`` only, so an application sees nothing unless it configures logging itself or sets
``HCOMM_DEBUG=WARN|INFO|DEBUG``: then :func:`configure` — called when the first communicator
of the process is created — adds one handler (stderr, or ``HCOMM_DEBUG_FILE`` with ``%r``
replaced by the rank) whose lines carry the rank::

    12:00:01.234 hcomm[rank 2] INFO comm: communicator 'world' created: rank 2 of 4, ...

INFO says what was chosen and why (backend and libraries, communicators and their resources,
the algorithm of each collective signature); DEBUG adds one line per collective and
point-to-point call with its sizes.
"""
from __future__ import annotations

import logging
import os
from typing import Optional

from . import files, settings

__all__ = ["ROOT", "get", "configure", "set_rank"]

ROOT = logging.getLogger("hcomm_cffi")
ROOT.addHandler(logging.NullHandler())
_LEVELS = {"WARN": logging.WARNING, "INFO": logging.INFO, "DEBUG": logging.DEBUG}
_state = {"rank": "?", "configured": False}
_handler: Optional[logging.Handler] = None


class _RankFilter(logging.Filter):
    """Adds ``record.rank`` (this process's rank, '?' before it is known) to every record."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.rank = _state["rank"]
        return True


def get(part: str) -> logging.Logger:
    """The logger ``hcomm_cffi.<part>`` (e.g. ``get("comm")``)."""
    return ROOT.getChild(part)


def set_rank(rank: int) -> None:
    """The rank shown in log lines from now on (the world rank once it is known)."""
    _state["rank"] = str(rank)


def configure(rank: Optional[int] = None) -> bool:
    """Install the HCOMM_DEBUG handler once per process (later calls only update the rank); True if logging is on.

    A bad ``HCOMM_DEBUG`` raises :class:`~hcomm_cffi.settings.SettingsError` naming it.
    """
    global _handler
    if rank is not None and _state["rank"] == "?":
        set_rank(rank)
    if _state["configured"]:
        return _handler is not None
    _state["configured"] = True
    level = settings.value("HCOMM_DEBUG")
    if level is None:
        return False
    path = settings.value("HCOMM_DEBUG_FILE")
    if path:
        path = os.path.abspath(os.path.expanduser(path.replace("%r", _state["rank"])))
        stream = os.fdopen(files.open_own(path, "HCOMM_DEBUG_FILE"), "a", encoding="utf-8")
        _handler = logging.StreamHandler(stream)
    else:
        _handler = logging.StreamHandler()
    _handler.addFilter(_RankFilter())
    _handler.setFormatter(logging.Formatter("%(asctime)s.%(msecs)03d hcomm[rank %(rank)s] %(levelname)s "
                                            "%(name)s: %(message)s", datefmt="%H:%M:%S"))
    _handler.setLevel(_LEVELS[level])
    ROOT.addHandler(_handler)
    ROOT.setLevel(_LEVELS[level])
    return True
