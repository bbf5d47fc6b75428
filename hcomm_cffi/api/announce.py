"""The communicator's collectives, announced to the backend in launch order (``Backend.announce_collective``).

The signature handshakes catch two ranks in different collectives when their waits meet; a library
collective against another whose notifies differ, or against a package algorithm, never meets, and
both ranks would wait for the execution timeout.  The emulator keeps each rank's
announcements where a peer's blocked wait reads them and fails naming both calls (sim/announce.py).
A call is announced right before its launch, inside the region where an interrupted call breaks the
communicator (api/interrupts.py), so a call cut short never leaves the ranks' numbering apart.
"""
from __future__ import annotations

import zlib
from typing import Any, Dict, Tuple

from .observe import Record

__all__ = ["Announcer", "describe"]

KNOWN_MAX = 256          # call shapes whose value and text are kept per communicator


#: how a call replayed from an ACL graph whose handshake has the captured form is described (api/signatures.py)
REPLAYED = ", replayed from an ACL graph (its handshake meets only replays)"


def describe(record: Record, replayed: bool = False) -> str:
    """'allreduce of 4 x fp32, op sum, root 1 (algorithm native)': what a peer's mismatch message shows."""
    text = f"{record.collective} of {record.count} x {record.dtype.name.lower()}"
    if record.redop is not None:
        text += f", op {record.redop.name.lower()}"
    if record.peer >= 0:
        text += f", root {record.peer}"
    return f"{text} (algorithm {record.algorithm}){REPLAYED if replayed else ''}"


class Announcer:
    """Announces each launched collective of one communicator: its number (from 1) and its signature."""

    __slots__ = ("count", "_fn", "_handle", "_known", "_last", "_last_known")

    def __init__(self, lib: Any, handle: Any) -> None:
        self.count = 0                                  # collectives announced so far
        self._fn = lib.announce_collective if lib.capabilities.emulator else None    # CANN: nothing to tell
        self._handle = handle
        self._known: Dict[Tuple[Record, bool], Tuple[int, str]] = {}
        self._last: Any = None                          # the record announced last (a repeated call passes the same)
        self._last_known: Tuple[int, str] = (0, "")

    def __call__(self, record: Record, replayed: bool = False) -> None:
        """Announce the next collective, described by its flight ``record``.

        ``replayed``: an ACL graph's replay of a call whose signature handshake has the captured form; it
        never meets the same call made eagerly, so it is announced as another call (a peer blocked on it
        then fails naming both, instead of waiting for the execution timeout).
        """
        self.count += 1
        if self._fn is None:
            return
        if record is self._last and not replayed:
            known = self._last_known
        else:
            key = (record, replayed)
            got = self._known.get(key)
            if got is None:
                text = describe(record, replayed)
                if len(self._known) >= KNOWN_MAX:
                    self._known.clear()
                got = self._known[key] = (zlib.crc32(text.encode()) or 1, text)
            if replayed:
                self._fn(self._handle, self.count, got[0], got[1])
                return
            known = self._last_known = got
            self._last = record
        self._fn(self._handle, self.count, known[0], known[1])
