"""The communicator's collectives, announced to the backend in launch order (``Backend.collective_announcer``).

The signature handshakes catch two ranks in different collectives when their waits meet; a library
collective against another whose notifies differ, or against a package algorithm, never meets, and
both ranks would wait for the execution timeout.  The emulator keeps each rank's
announcements where a peer's blocked wait reads them and fails naming both calls (sim/announce.py).
A call is announced right before its launch, inside the region where an interrupted call breaks the
communicator (api/engine.py), so a call cut short never leaves the ranks' numbering apart.  A call
an ACL graph captures runs nothing then: it is announced at each replay (``replayed``).

A point-to-point operation is not a collective and takes no number, so a rank waiting in one while its
peer waits in a collective never meets it either.  :meth:`Announcer.waiting` therefore publishes what
the host waits in (``Backend.announce_wait``) once a wait has lasted ``PUBLISH_AFTER_S``, and only waits
the host is committed to: no limit of the caller's (or one whose expiry breaks the communicator), and a
collective only while no point-to-point operation of the communicator is outstanding -- so a published
pair that cannot go on really cannot (sim/announce.py).
"""
from __future__ import annotations

import zlib
from typing import Any, Callable, Dict, NamedTuple, Optional, Tuple

from ..lib.contract import WAIT_COLLECTIVE, WAIT_NONE, WAIT_P2P
from ..enums import DataType, ReduceOp

__all__ = ["Announcer", "Record", "describe", "PUBLISH_AFTER_S"]


class Record(NamedTuple):
    """What the flight recorder and the DEBUG line keep of one operation."""

    collective: str          # the operation: a collective name, or send/recv/send_multi/recv_multi
    algorithm: str
    count: int  # type: ignore[assignment]  # named as the C argument; shadows tuple.count on purpose
    nbytes: int
    dtype: DataType
    redop: Optional[ReduceOp]
    peer: int                # the root of a rooted collective, the peer of a send/recv; -1: none


KNOWN_MAX = 256          # call shapes whose value and text are kept per communicator
#: a committed wait that lasted this long is published (most complete first and publish nothing); a peer's
#: blocked wait looks after BLOCKED_S (sim/announce.py), so a wait that never meets is named within a second
PUBLISH_AFTER_S = 0.05


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

    __slots__ = ("count", "text", "p2p_pending", "_fn", "_wait", "_handle", "_known", "_last", "_value")

    def __init__(self, lib: Any, handle: Any, p2p_pending: Callable[[], int]) -> None:
        self.count = 0                                  # collectives announced so far
        self.text = ""                                  # the description of the collective announced last
        #: point-to-point operations of the communicator posted and not yet seen complete
        self.p2p_pending = p2p_pending
        self._fn = lib.collective_announcer(handle)     # CANN: None, nothing to tell
        self._wait = lib.announce_wait if lib.capabilities.emulator else None
        self._handle = handle
        self._known: Dict[Tuple[Record, bool], Tuple[int, str]] = {}
        self._last: Any = None       # the record announced last, not replayed (a repeated call passes the same)
        self._value = 0              # its signature value (``text`` is its description)

    def __call__(self, record: Record, replayed: bool = False) -> None:
        """Announce the next collective, described by its flight ``record``.

        ``replayed``: an ACL graph's replay of a call whose signature handshake has the captured form; it
        never meets the same call made eagerly, so it is announced as another call (a peer blocked on it
        then fails naming both, instead of waiting for the execution timeout).
        """
        self.count += 1
        fn = self._fn
        if fn is None:
            return
        if record is not self._last or replayed:
            key = (record, replayed)
            got = self._known.get(key)
            if got is None:
                text = describe(record, replayed)
                if len(self._known) >= KNOWN_MAX:
                    self._known.clear()
                got = self._known[key] = (zlib.crc32(text.encode()) or 1, text)
            self._value, self.text = got
            self._last = None if replayed else record
        fn(self.count, self._value, self.text)

    def waiting(self, wait: Callable[[Optional[float]], bool], peer: int = -1, text: str = "",
                collective: Optional[Tuple[int, str]] = None) -> bool:
        """``wait(None)``, a wait the host is committed to, published once it lasted PUBLISH_AFTER_S (module
        docstring): a point-to-point operation with ``peer`` described by ``text``, or ``collective`` (its
        number and description).  Returns what ``wait`` returns; its exceptions pass through, and leave the
        record published: the communicator is broken then (this rank takes no part any more), and a peer
        still waiting learns what this rank was in."""
        fn = self._wait
        if fn is None:
            return wait(None)
        if wait(PUBLISH_AFTER_S):
            return True
        if collective is None:
            fn(self._handle, WAIT_P2P, self.count, peer, text)
        elif not self.p2p_pending():
            fn(self._handle, WAIT_COLLECTIVE, collective[0], -1, collective[1])
        else:                   # a posted send or receive may still complete a peer's wait: nothing to publish
            return wait(None)
        done = wait(None)
        fn(self._handle, WAIT_NONE, 0, -1, "")
        return done

    @property
    def current(self) -> Tuple[int, str]:
        """The number and description of the collective announced last (what a wait for it publishes)."""
        return self.count, self.text
