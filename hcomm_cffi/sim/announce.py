"""Each rank announces its collectives in order; a wait blocked on a peer compares the peer's announcements.

The in-band signatures (the library collectives' notify words, the package's handshake) catch two
ranks in different calls only when their waits meet.  Some never meet -- a reduce whose ranks name
different roots, a reduce against an allreduce (two-phase notifies against parity notifies), a library
collective against a package algorithm (different channels) -- and would wait until ``HCCL_EXEC_TIMEOUT``.

So every rank writes, when it issues a call, the call's number and a 32-bit value of its signature
into a small table in its own control segment (and, once per distinct value, its description);
peers read it whenever one of their waits on this rank has been blocked for ``BLOCKED_S`` (the
executor's liveness round, ``runtime.Executor._check_peers``).  Two numbering spaces: ``LIBRARY``,
the library collectives (HcclAllReduce, ... each counted by the emulator), and ``API``, the Comm
API's collectives (``Backend.collective_announcer``; its sequence numbers, whatever the algorithm).
Two ranks whose entries for the same number differ are in different calls: the blocked wait fails
with the COLLECTIVE_MISMATCH text naming both, on every rank that waits -- within a second, with
no task added and nothing read on the path of a call that agrees.  Each entry is written
seq, value, seq (a reader accepts it only when both copies agree), so a torn read is never a mismatch.

Some calls never meet a collective and are not collectives: a point-to-point wait, the member-list
exchange of a sub-communicator's creation.  So a rank also publishes what its host is committed to
waiting in (``Backend.announce_wait``; the Comm API publishes only waits that return, or break the
communicator, when the awaited operation ends, and only once they have lasted a moment): ``WAIT_P2P``
on a peer, with the number of collectives it has announced, or ``WAIT_COLLECTIVE`` number k while it
has no point-to-point operation outstanding on the communicator.  When rank R waits in a
point-to-point operation with rank Q, and Q waits in collective #k which R has not announced, neither
can go on: Q posts nothing more until its collective completes, which needs R, and R announces nothing
more until its wait returns, which needs Q.  A wait blocked on a peer finds it in the records (its own,
the peer's and the peer's partner's) and fails naming both calls (:meth:`Announcements.stuck`).  A
record ``WAIT_COLLECTIVE`` left from a collective that completed can never match: every rank had
announced it.
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Tuple

from .._ffi import ffi
from ..errors import COLLECTIVE_MISMATCH
from ..lib.contract import WAIT_COLLECTIVE, WAIT_NONE, WAIT_P2P

__all__ = ["LIBRARY", "API", "ENTRIES", "TABLE_WORDS", "BLOCKED_S", "Announcements", "entry"]

LIBRARY, API = 0, 1
SPACES = ("library collective", "collective")
ENTRIES = 64                # calls remembered per numbering space (a peer far behind is compared later)
ENTRY_WORDS = 3             # seq + 1, value, seq + 1
DESCRIPTIONS = 128          # descriptions kept, indexed by value % DESCRIPTIONS
DESC_WORDS = 40             # value, text bytes, then the text (152 bytes)
TEXT_BYTES = 4 * (DESC_WORDS - 2)
WAIT_WORDS = 6 + DESC_WORDS  # mark, kind, number, peer, text bytes, the text (TEXT_BYTES + 8 bytes), mark
WAIT_TEXT_BYTES = 4 * (WAIT_WORDS - 6)
TABLE_WORDS = 2 * ENTRIES * ENTRY_WORDS + DESCRIPTIONS * DESC_WORDS + WAIT_WORDS
BLOCKED_S = 0.2             # a wait blocked this long on a peer looks at the peer's announcements


DESC_BASE = 2 * ENTRIES * ENTRY_WORDS
WAIT_BASE = DESC_BASE + DESCRIPTIONS * DESC_WORDS
_W_MARK, _W_KIND, _W_NUMBER, _W_PEER, _W_LEN, _W_TEXT = range(6)
_W_END = WAIT_WORDS - 1     # the mark again: a reader accepts the record only when both copies agree


def entry(space: int, seq: int) -> Tuple[int, int]:
    """(where in the table, the mark it holds): the entry of call number ``seq`` of ``space``, whose three words are
    mark, value, mark (:meth:`Announcements.announce`, or engine.c's hce_enter for a repeated call)."""
    return (space * ENTRIES + seq % ENTRIES) * ENTRY_WORDS, (seq + 1) & 0xFFFFFFFF


def _desc(value: int) -> int:
    return DESC_BASE + (value % DESCRIPTIONS) * DESC_WORDS


class Announcements:
    """This rank's table (in its control segment, from word ``base``) and the reading of a peer's."""

    __slots__ = ("words", "table", "counts")

    def __init__(self, words: Any, base: int) -> None:
        self.words = words + base              # uint32_t * into this rank's control segment
        #: the same words as a memoryview: a store through it costs two thirds of one through the cdata pointer
        self.table = memoryview(ffi.buffer(self.words, TABLE_WORDS * 4)).cast("I")
        #: per space: the number of its next call (LIBRARY counts its own); C memory, which engine.c's hce_enter
        #: advances for a repeated call (sim/compiled.py Repeat)
        self.counts = ffi.new("int64_t[2]")

    def described(self, value: int) -> bool:
        """The table holds ``value``'s description (one word read)."""
        return self.words[_desc(value & 0xFFFFFFFF)] == value & 0xFFFFFFFF

    def announce(self, space: int, seq: int, value: int, text: str) -> None:
        """Call number ``seq`` of ``space`` has signature ``value`` (32 bits), described by ``text`` ("": none to give).

        On every collective's path: a few word stores, the description only when its slot does not hold it.
        """
        w = self.table
        at = DESC_BASE + (value % DESCRIPTIONS) * DESC_WORDS
        if text and w[at] != value:
            raw = text.encode()[:TEXT_BYTES]
            w[at] = 0                          # being rewritten: a reader sees no description, not a torn one
            w[at + 1] = len(raw)
            ffi.memmove(ffi.cast("char *", self.words + at + 2), raw, len(raw))
            w[at] = value
        at, mark = entry(space, seq)
        w[at] = 0
        w[at + 1] = value
        w[at + 2] = mark
        w[at] = mark
        self.counts[space] = seq + 1

    def wait(self, kind: int, number: int, peer: int, text: str) -> None:
        """Publish what this rank's host waits in (``WAIT_NONE``: nothing any more; module docstring)."""
        w = self.words + WAIT_BASE
        mark = (w[_W_MARK] + 1) & 0xFFFFFFFF or 1
        w[_W_MARK] = 0                         # being rewritten: a reader sees no record, not a torn one
        w[_W_KIND], w[_W_NUMBER], w[_W_PEER] = kind, number & 0xFFFFFFFF, peer & 0xFFFFFFFF
        raw = text.encode()[:WAIT_TEXT_BYTES]
        w[_W_LEN] = len(raw)
        ffi.memmove(ffi.cast("char *", w + _W_TEXT), raw, len(raw))
        w[_W_END] = mark
        w[_W_MARK] = mark

    def stuck(self, rank: int, comm: str, peer: int, words_of: Callable[[int], Any], base: int) -> Optional[str]:
        """The COLLECTIVE_MISMATCH text when this rank or ``peer`` waits in a point-to-point operation with a rank
        that waits in a collective the first has not announced (module docstring), else None.

        ``words_of(r)``: rank r's control words (``base``: where its table starts), None for no such rank.
        """
        def record(r: int) -> Optional[Tuple[int, int, int, str]]:
            words = words_of(r)
            return None if words is None else _waiting(words + base)

        records = {rank: _waiting(self.words), peer: record(peer)}
        for r in (rank, peer):
            mine = records[r]
            if mine is None or mine[0] != WAIT_P2P:
                continue
            _, count, partner, text = mine
            if partner not in records:
                records[partner] = record(partner)
            theirs = records[partner]
            if theirs is None or theirs[0] != WAIT_COLLECTIVE or theirs[1] <= count:
                continue
            made = f"after {count} collective{'s' if count != 1 else ''}"
            if r == rank:
                what = (f"is in {text} ({made}), while rank {partner} is in collective #{theirs[1]}: {theirs[3]}, "
                        f"which rank {rank} has not reached")
            elif partner == rank:
                what = (f"is in collective #{theirs[1]}: {theirs[3]}, while rank {r} is in {text} ({made}) and has "
                        "not reached it")
            else:
                what = (f"waits for rank {r}, which is in {text} ({made}), while rank {partner} is in collective "
                        f"#{theirs[1]}: {theirs[3]}, which rank {r} has not reached")
            return (f"checker: {COLLECTIVE_MISMATCH}: rank {rank} of communicator {comm} {what}: neither can go on "
                    "(every rank must make the same collectives in the same order, and a point-to-point operation "
                    "must not wait for a rank that is in a collective; found while rank "
                    f"{rank} waited for rank {peer})")
        return None

    def disagreement(self, peer_words: Any, base: int) -> Optional[Tuple[int, int, int, int, str, str]]:
        """(space, seq, my value, its value, my text, its text) of the first call both announced differently."""
        theirs = peer_words + base
        found = None
        for space in (API, LIBRARY):
            for i in range(ENTRIES):
                at = (space * ENTRIES + i) * ENTRY_WORDS
                mark = self.words[at]
                if not mark or mark != self.words[at + 2] or theirs[at] != mark:
                    continue
                mine, other = self.words[at + 1], theirs[at + 1]
                if theirs[at + 2] != mark or theirs[at] != mark or mine == other:
                    continue
                seq = mark - 1
                if found is None or (space, seq) < found[:2]:
                    found = (space, seq, mine, other, _text(self.words, mine), _text(theirs, other))
            if found is not None:
                return found            # the Comm API's numbering names the user's calls: it comes first
        return None

    def message(self, rank: int, comm: str, peer: int, found: Tuple[int, int, int, int, str, str]) -> str:
        """The COLLECTIVE_MISMATCH text of ``found`` (runtime fails the blocked wait with it)."""
        space, seq, _, _, mine, theirs = found
        what = SPACES[space]
        return (f"checker: {COLLECTIVE_MISMATCH}: rank {rank} of communicator {comm} is in {what} #{seq}: {mine}, "
                f"but rank {peer} is in {what} #{seq}: {theirs} (every rank must call the same collectives in the "
                "same order with the same arguments; found while rank "
                f"{rank} waited for rank {peer}, whose call never meets this one)")


def _waiting(table: Any) -> Optional[Tuple[int, int, int, str]]:
    """(kind, number, peer, text) of the wait record of the table at ``table``, None when none or being rewritten."""
    w = table + WAIT_BASE
    mark = w[_W_MARK]
    if not mark or w[_W_END] != mark or w[_W_KIND] == WAIT_NONE:
        return None
    kind, number, peer = int(w[_W_KIND]), int(w[_W_NUMBER]), int(w[_W_PEER])
    n = min(int(w[_W_LEN]), WAIT_TEXT_BYTES)
    text = ffi.unpack(ffi.cast("char *", w + _W_TEXT), n).decode(errors="replace")
    if w[_W_MARK] != mark or w[_W_END] != mark:
        return None
    return kind, number, peer, text


def _text(words: Any, value: int) -> str:
    at = _desc(value)
    if words[at] != value:
        return f"a call with signature 0x{value:08x}"
    n = min(int(words[at + 1]), TEXT_BYTES)
    raw = ffi.unpack(ffi.cast("char *", words + at + 2), n)
    return raw.decode(errors="replace") if words[at] == value else f"a call with signature 0x{value:08x}"
