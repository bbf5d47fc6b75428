"""Sub-communicator creation: the members compare their rank lists before the library call.

``HcclCreateSubCommConfig`` identifies a sub-communicator by an id each member derives from its own
ordered rank list, so members that list the ranks in different orders (or list different ranks)
never meet: on the emulator and on CANN they wait the whole connect timeout and fail with a text
that does not say why.  Before that call, every member therefore sends one fixed-size message —
the communicator's name, how many communicators of that name and list it created before, and its
ordered rank list — to every other rank it lists, over the parent's point-to-point (eager: a
message of one piece completes without the receiver), and receives theirs.  A difference raises
:class:`MembershipError` on every member that sees it, naming the ranks and their lists; a listed
rank that sends nothing is a :class:`CommTimeoutError` naming it after ``HCCL_CONNECT_TIMEOUT``.

Cost: one message of :data:`MESSAGE_BYTES` each way per pair of members (and the parent's
point-to-point lanes to those members, which later sends reuse).  Point-to-point traffic between
members on the parent must be complete before they create a sub-communicator (its messages would
be received here, and the header check then says so).
"""
from __future__ import annotations

import time
import zlib
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .. import settings
from .launch_order import PUBLISH_AFTER_S
from .consistency import CollectiveMismatchError
from .errors import CommError, CommTimeoutError, MessageMismatchError
from .op import lane_call
from .point_to_point import PointToPoint
from .requests import Request
from .state import CommState

__all__ = ["MembershipError", "agree", "encode", "decode", "MESSAGE_BYTES", "SHOWN_RANKS"]

MAGIC = 0x48434F4D4D5342   # "HCOMMSB"
NAME_WORDS = 16            # 128 bytes: names are at most 127 ASCII bytes
SHOWN_RANKS = 64           # ranks carried verbatim; longer lists are compared by length and checksum
_MAGIC, _NTH, _LEN, _CRC = range(4)
_NAME = 4
_RANKS = _NAME + NAME_WORDS
WORDS = _RANKS + SHOWN_RANKS
MESSAGE_BYTES = 8 * WORDS
#: Grace for our own eager sends to leave once a difference is known (they need no receiver).
SEND_GRACE_S = 2.0


class MembershipError(CommError, ValueError):
    """Members of a new sub-communicator passed different names or rank lists (order included)."""


def encode(name: str, nth: int, ranks: Sequence[int]) -> np.ndarray:
    """The message one member sends: magic, nth, list length, list checksum, name, first ranks."""
    msg = np.full(WORDS, -1, np.int64)
    msg[_MAGIC], msg[_NTH], msg[_LEN] = MAGIC, nth, len(ranks)
    msg[_CRC] = zlib.crc32(np.asarray(ranks, np.int64).tobytes())
    raw = name.encode().ljust(8 * NAME_WORDS, b"\0")
    msg[_NAME:_RANKS] = np.frombuffer(raw, np.int64)
    shown = list(ranks)[:SHOWN_RANKS]
    msg[_RANKS:_RANKS + len(shown)] = shown
    return msg


def decode(msg: np.ndarray) -> Tuple[str, int, Tuple[int, ...], int, int]:
    """(name, nth, shown ranks, list length, checksum) of a received message."""
    name = msg[_NAME:_RANKS].tobytes().rstrip(b"\0").decode("ascii", errors="replace")
    length = int(msg[_LEN])
    shown = tuple(int(r) for r in msg[_RANKS:_RANKS + min(length, SHOWN_RANKS)])
    return name, int(msg[_NTH]), shown, length, int(msg[_CRC])


def _describe(key: Tuple[str, int, Tuple[int, ...], int, int], ranks: List[int], same_name: bool) -> str:
    name, nth, shown, length, _ = key
    listed = "[" + ", ".join(map(str, shown)) + (f", ... ({length} ranks)]" if length > len(shown) else "]")
    who = ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))
    verb = "lists" if len(ranks) == 1 else "list"
    text = f"{who} {verb} {listed}"
    if not same_name:
        text += f" for {name!r}"
    return text + (f" (its communicator #{nth + 1} of that name and list)" if nth else "")


def difference(mine: np.ndarray, my_rank: int, theirs: Dict[int, np.ndarray]) -> Optional[str]:
    """None when every received message equals ``mine``, else 'rank 1 lists [3, 1]; rank 3 lists [1, 3]'."""
    groups: Dict[Tuple[str, int, Tuple[int, ...], int, int], List[int]] = {decode(mine): [my_rank]}
    for rank, msg in sorted(theirs.items()):
        groups.setdefault(decode(msg), []).append(rank)
    if len(groups) == 1:
        return None
    same_name = len({key[0] for key in groups}) == 1
    ordered = sorted(groups.items(), key=lambda kv: min(kv[1]))
    return "; ".join(_describe(key, sorted(rs), same_name) for key, rs in ordered)


def agree(state: CommState, p2p: PointToPoint, name: str, nth: int, ranks: List[int]) -> None:
    """Exchange ``(name, nth, ranks)`` with every other listed rank over the parent (its ``state``, its
    point-to-point ``p2p``); raise on any difference.

    Bounded by ``HCCL_CONNECT_TIMEOUT``.  When the exchange cannot finish cleanly (a listed rank never
    answered, or a message was left unreceived), the parent's point-to-point with those ranks is out of
    step, so the parent is marked unusable with the reason (through its ``state``).
    """
    peers = [r for r in ranks if r != state.rank]
    if not peers:
        return
    where = f"rank {state.rank} of communicator {state.name!r}: Comm({name!r}, ranks={ranks})"
    mine = encode(name, nth, ranks)
    inbox = {p: np.zeros(WORDS, np.int64) for p in peers}
    try:
        sends = [p2p.post(lane_call(state, True, "isend", p, mine)) for p in peers]
        recvs = {p: p2p.post(lane_call(state, False, "irecv", p, inbox[p])) for p in peers}
    except MessageMismatchError as exc:
        raise MembershipError(f"{where}: {exc}") from exc
    timeout = float(settings.current().connect_timeout_s)
    src = settings.current().source("HCCL_CONNECT_TIMEOUT")
    deadline = time.monotonic() + timeout
    got: Dict[int, np.ndarray] = {}
    found: Optional[str] = None
    delay = 0.0005

    def exchange(limit: Optional[float]) -> bool:
        """Receive lists until every one arrived or one differs (True), or ``limit`` s passed (False)."""
        nonlocal found, delay
        stop = None if limit is None else time.monotonic() + limit
        while True:
            progressed = False
            for p, req in recvs.items():
                if p in got:
                    continue
                try:
                    done = req.test()
                except MessageMismatchError as exc:
                    raise MembershipError(f"{where}: {exc}; point-to-point traffic between members on the parent "
                                          "must be complete before a sub-communicator is created") from exc
                except CollectiveMismatchError as exc:   # the peer is in a collective of the parent (api/launch_order.py)
                    raise CollectiveMismatchError(f"{exc} (while this rank created Comm({name!r}))") from exc
                except CommError as exc:    # the library's wait gave up first: name the user's call and the rank
                    state.mark_broken(f"{where}: rank {p} never sent its rank list")
                    raise CommTimeoutError(f"{where}: rank {p} did not send its rank list ({exc}); every listed "
                                           f"rank must call Comm({name!r}) with the same ranks in the same order"
                                           ) from exc
                if done:
                    if int(inbox[p][_MAGIC]) != MAGIC:
                        bad = (f"{where}: the message from rank {p} is not a member list; point-to-point traffic "
                               "between members on the parent communicator must be complete before a "
                               "sub-communicator is created")
                        state.mark_broken(bad)
                        raise MembershipError(bad)
                    got[p] = inbox[p]
                    progressed = True
            found = difference(mine, state.rank, got)
            if found is not None or len(got) == len(peers):
                return True
            now = time.monotonic()
            if now >= deadline:
                missing = [p for p in peers if p not in got]
                msg = (f"{where}: rank(s) {', '.join(map(str, missing))} did not send their rank list within "
                       f"{timeout:g} s ({src}); every listed rank must call Comm({name!r}) with the same ranks in "
                       "the same order (a rank listing other ranks, or not calling at all, never answers)")
                state.mark_broken(f"{msg}; its point-to-point with those ranks is out of step")
                raise CommTimeoutError(msg)
            if stop is not None and now >= stop:
                return False
            if not progressed:
                time.sleep(delay)
                delay = min(delay * 2, 0.01)

    # committed until every list arrived or the communicator breaks: published while it lasts, so a listed rank
    # that is in a collective of the parent meanwhile is named at once (api/launch_order.py)
    if not exchange(PUBLISH_AFTER_S):
        first = min(p for p in peers if p not in got)
        state.announcer.waiting(exchange, peer=first, text=f"the creation of sub-communicator {name!r} (ranks "
                               f"{ranks}), waiting for rank {first}'s member list")
    _settle_sends(state, sends, where, [p for p in peers if p not in got])
    if found is not None:
        pending = [p for p in peers if p not in got]
        also = f" (no list from rank(s) {', '.join(map(str, pending))} yet)" if pending else ""
        raise MembershipError(f"{where}: the members disagree on the new communicator: {found}{also}. Every "
                              "listed rank must pass the same name and the same ranks in the same order")


def _settle_sends(state: CommState, sends: List[Request[Any]], where: str, unanswered: List[int]) -> None:
    """Let our eager sends leave; anything still pending (or never received) leaves the parent out of step."""
    end = time.monotonic() + SEND_GRACE_S
    pending = list(sends)
    while pending and time.monotonic() < end:
        pending = [s for s in pending if not s.test()]
        if pending:
            time.sleep(0.001)
    if pending or unanswered:
        state.mark_broken(f"{where} stopped at a difference before every member list was exchanged; the "
                         "parent's point-to-point with those ranks is out of step")
