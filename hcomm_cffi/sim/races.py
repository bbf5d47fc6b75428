"""Read/write race detector of the checker: vector clocks carried by notifies, an access log per HCCL buffer.

Happens-before on the hardware comes only from program order on a thread, thread-notify
record -> wait, channel-notify record -> wait (across processes), event record -> stream wait
(between the streams of a process: a communicator orders its collectives across streams so,
api/streams.py) and the host's stream synchronisation.  Each thread keeps a vector clock over every
thread of the communicator (``ACTORS_PER_RANK`` slots per rank).  A record stores the recorder's clock
beside the notify (thread notifies: in this process; channel notifies: in the waiting rank's ``chk``
segment, indexed like its notify words), and the wait that consumes it joins it.

Every access to a rank's HCCL buffer is appended to that rank's access log (in its ``chk`` segment,
shared by all ranks): byte range, read or write, the accessing thread's epoch (actor, clock), its step.
Before an access runs it is compared with the logged accesses that overlap it: one of them a write,
from another thread, and not ordered before it (the accessor's clock has not seen that epoch) is a race,
whichever of the two ran first — so it is found on every run, not only when the timing goes wrong.

Memory is bounded: each rank appends only to its own part of every log (``LOG_PER_RANK`` entries, one
writer, no lock); an access by the same thread to the same range with the same kind replaces its older
entry (the newer epoch subsumes it exactly), and a full part overwrites its oldest entry (losing only
the ability to report races against accesses that old).  Nothing here exists when HCOMM_SIM_CHECK=off.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from .._ffi import ffi
from .shm import Segment
from .tasks import KIND_NAMES

ACTORS_PER_RANK = 16       # vector-clock slots per rank; threads beyond share slots (fewer findings, never false)
LOG_PER_RANK = 128         # access-log entries each rank keeps in every rank's log
NOTIFIES_PER_SLOT = 64     # channel notifies per ctl slot (comm.MAX_NOTIFIES_PER_CHANNEL)
THREAD_HANDLE_BASE = 0x7E5D_0000_0000
WRITE = 1                  # info bit: the access writes

__all__ = ["RaceLog", "RaceState", "chk_bytes", "record_event", "wait_event", "ACTORS_PER_RANK", "LOG_PER_RANK"]


def chk_bytes(nranks: int, slots: int) -> int:
    """Size of a rank's ``chk`` segment: log parts of every rank, then one clock per channel notify word."""
    entries = nranks * LOG_PER_RANK
    dims = nranks * ACTORS_PER_RANK
    return 8 * entries * 2 + 4 * entries * 5 + 4 * slots * NOTIFIES_PER_SLOT * dims


class RaceLog:
    """NumPy views over one rank's ``chk`` segment: its access log and its channel-notify clocks."""

    __slots__ = ("seg", "lo", "hi", "actor", "clock", "step", "info", "seq", "notes")

    def __init__(self, seg: Segment, nranks: int, slots: int) -> None:
        self.seg = seg
        raw = ffi.buffer(seg.ptr, seg.size)
        n = nranks * LOG_PER_RANK
        dims = nranks * ACTORS_PER_RANK
        self.lo = np.frombuffer(raw, np.uint64, n, 0)
        self.hi = np.frombuffer(raw, np.uint64, n, 8 * n)
        u32 = np.frombuffer(raw, np.uint32, 5 * n, 16 * n).reshape(5, n)
        self.actor, self.clock, self.step, self.info, self.seq = u32   # seq: odd while its entry is rewritten
        self.notes = np.frombuffer(raw, np.uint32, slots * NOTIFIES_PER_SLOT * dims, 36 * n).reshape(-1, dims)

    def entry(self, i: int) -> Optional[Tuple[int, int, int, int, int, int]]:
        """A consistent snapshot (lo, hi, actor, clock, step, info) of entry ``i``; None while it is rewritten.

        A seqlock: the one writer makes ``seq`` odd, rewrites, makes it even again; x86 and the
        interpreter keep stores (and loads) in program order, so equal even values bracket a whole entry.
        """
        before = int(self.seq[i])
        if before & 1:
            return None
        snap = (int(self.lo[i]), int(self.hi[i]), int(self.actor[i]), int(self.clock[i]), int(self.step[i]),
                int(self.info[i]))
        return snap if int(self.seq[i]) == before else None


class _Part:
    """This rank's own part of one rank's log: where to append, and which entry holds which access."""

    __slots__ = ("base", "head", "keys", "where")

    def __init__(self, base: int) -> None:
        self.base = base
        self.head = 0
        self.keys: List[Optional[tuple]] = [None] * LOG_PER_RANK
        self.where: Dict[tuple, int] = {}


class RaceState:
    """The race checker of one rank: its log, its peers' logs, its threads' clocks, the host's clock."""

    def __init__(self, rank: int, nranks: int, slots: int, own: Segment) -> None:
        self.rank = rank
        self.nranks = nranks
        self.slots = slots
        self.dims = nranks * ACTORS_PER_RANK
        self.logs: Dict[int, RaceLog] = {rank: RaceLog(own, nranks, slots)}
        self.parts: Dict[int, _Part] = {}
        self.host = np.zeros(self.dims, np.uint32)        # what the host has seen complete (stream syncs)
        self.thread_notes: Dict[Tuple[int, int], np.ndarray] = {}
        self.scratch_note = np.zeros(self.dims, np.uint32)  # a record to a peer without a log carries nowhere
        self._actors = 0

    def add_peer(self, rank: int, seg: Segment) -> None:
        """Map a peer's log (a peer that runs with the checker off has none: nothing is logged there)."""
        self.logs[rank] = RaceLog(seg, self.nranks, self.slots)

    # ------------------------------------------------------------------ clocks
    def clock_of(self, th: Any) -> np.ndarray:
        """The thread's vector clock, created on its first checked task (its own component starts at 1)."""
        vc = th.vc
        if vc is None:
            th.actor = self.rank * ACTORS_PER_RANK + self._actors % ACTORS_PER_RANK
            self._actors += 1
            th.vc = vc = self.host.copy()
            vc[th.actor] = max(int(vc[th.actor]), 1)
        return vc

    def release(self, th: Any, note: np.ndarray) -> None:
        """A record: the notify carries the recorder's clock; later tasks of the recorder are a new epoch."""
        vc = self.clock_of(th)
        note[:] = vc
        vc[th.actor] += 1

    def acquire(self, th: Any, note: np.ndarray) -> None:
        """A completed wait: the waiter has now seen everything the recorder had seen."""
        vc = self.clock_of(th)
        np.maximum(vc, note, out=vc)

    def thread_note(self, dst: Any, idx: int) -> np.ndarray:
        """The clock slot beside thread notify ``idx`` of ``dst`` (same process)."""
        key = (dst.handle, idx)
        note = self.thread_notes.get(key)
        if note is None:
            self.thread_notes[key] = note = np.zeros(self.dims, np.uint32)
        return note

    def channel_note(self, owner: int, slot: int, idx: int) -> Optional[np.ndarray]:
        """The clock beside channel notify ``idx`` of ctl slot ``slot`` of rank ``owner`` (None: no log there)."""
        log = self.logs.get(owner)
        if log is None:
            return None
        return log.notes[slot * NOTIFIES_PER_SLOT + idx]

    def host_saw(self, th: Any) -> None:
        """The host synchronised with ``th``'s queue: what it did is ordered before the host's next issues."""
        if th.vc is not None:
            np.maximum(self.host, th.vc, out=self.host)

    def host_issues(self, th: Any) -> None:
        """Tasks issued now are ordered after everything the host has seen complete."""
        vc = self.clock_of(th)
        np.maximum(vc, self.host, out=vc)

    # ------------------------------------------------------------------ accesses
    def access(self, owner: int, th: Any, lo: int, hi: int, write: bool, step: int, kind: int) -> Optional[str]:
        """Log an access to bytes [lo, hi) of rank ``owner``'s HCCL buffer; a text naming the race it can be in."""
        log = self.logs.get(owner)
        if log is None or hi <= lo:
            return None
        vc = self.clock_of(th)
        me = th.actor
        epoch = int(vc[me])
        info = (WRITE if write else 0) | (kind << 1) | ((th.handle - THREAD_HANDLE_BASE) & 0xFFFF) << 16
        self._append(owner, log, (lo, hi, me, write), epoch, step, info)
        hits = np.flatnonzero((log.lo < hi) & (log.hi > lo))
        for i in hits.tolist():
            snap = log.entry(i)
            if snap is None:
                continue            # being replaced by its writer: it held an older access of that rank
            olo, ohi, other, clock, other_step, other_info = snap
            if other == me or not (olo < hi and lo < ohi):
                continue            # program order (or a thread sharing this clock slot: never a false finding)
            if not (write or other_info & WRITE):
                continue
            if vc[other] >= clock:
                continue            # ordered before this access by a notify chain
            return _describe(owner, lo, hi, write, olo, ohi, other, other_info, other_step)
        return None

    def _append(self, owner: int, log: RaceLog, key: tuple, epoch: int, step: int, info: int) -> None:
        part = self.parts.get(owner)
        if part is None:
            self.parts[owner] = part = _Part(self.rank * LOG_PER_RANK)
        i = part.where.get(key)
        seq = log.seq
        if i is None:
            j = part.head
            part.head = (j + 1) % LOG_PER_RANK
            old = part.keys[j]
            if old is not None:
                del part.where[old]
            part.keys[j] = key
            part.where[key] = i = part.base + j
            seq[i] += 1              # odd: readers skip it while it is rewritten
            log.lo[i] = key[0]
            log.hi[i] = key[1]
            log.actor[i] = key[2]
        else:
            seq[i] += 1
        log.clock[i] = epoch
        log.step[i] = step
        log.info[i] = info
        seq[i] += 1


def _live(threads: List[Any]) -> List[Any]:
    """The checked threads of a stream whose communicator still checks (a destroyed one's are dropped here)."""
    live = [th for th in threads if th.comm.race is not None]
    if len(live) != len(threads):
        threads[:] = live
    return live


def record_event(threads: List[Any], clocks: Dict[Any, np.ndarray]) -> None:
    """An event recorded on a stream: it carries the clocks of the checked threads running there, per communicator
    (a later record of the event replaces them); their later tasks are a new epoch."""
    seen = set()
    for th in _live(threads):
        race = th.comm.race
        vc = race.clock_of(th)
        if race in seen:
            np.maximum(clocks[race], vc, out=clocks[race])
        else:
            seen.add(race)
            clocks[race] = vc.copy()
    for th in threads:
        th.vc[th.actor] += 1


def wait_event(threads: List[Any], clocks: Dict[Any, np.ndarray]) -> None:
    """A stream's wait for an event passed: its checked threads have seen what the record's threads had seen."""
    if not clocks:
        return
    for th in _live(threads):
        note = clocks.get(th.comm.race)
        if note is not None:
            th.comm.race.acquire(th, note)


def _describe(owner: int, lo: int, hi: int, write: bool, olo: int, ohi: int, other: int, other_info: int,
              other_step: int) -> str:
    other_rank = other // ACTORS_PER_RANK
    other_thread = THREAD_HANDLE_BASE + (other_info >> 16)
    what = "write" if write else "read"
    other_what = "write" if other_info & WRITE else "read"
    other_kind = KIND_NAMES.get((other_info >> 1) & 0x7F, "?")
    return (f"{what} of rank {owner}'s HCCL buffer bytes [{lo}, {hi}) can race a {other_what} of bytes "
            f"[{olo}, {ohi}) by rank {other_rank}, thread 0x{other_thread:x}, step {other_step} ({other_kind}): "
            f"no notify handshake or event orders the two ({_HINT[bool(write), bool(other_info & WRITE)]})")


_HINT = {
    (False, True): "a read-side race: read a landing slot only after waiting for the DATA notify of the write",
    (True, False): "a read-side race: record 'slot free' (ACK) only after the last read of the slot, "
                   "on the thread that reads it or after a thread notify from it",
    (True, True): "two writes to the same bytes: hand the region over with a notify between them",
}
