"""A communicator of the emulator: this rank's shared segments, its peers, its channels.

Each rank of a communicator owns three /dev/shm segments, four under the strict checker:

* ``ctl``: a header (state, rank, pid, the futex doorbell) and a table of channel slots, each
  with 64 notifies.  A peer records into a slot of this segment and rings the doorbell.
* ``buf``: the HCCL buffer, 2 x HCCL_BUFFSIZE MiB, sparse, so untouched pages cost nothing.
* ``nat``: scratch memory of the same size for the emulator's own native collectives
  (HcclAllReduce, ...), so they never share memory with algorithms that use the HCCL buffer.
* ``chk`` (only when HCOMM_SIM_CHECK is ``strict``): the race checker's access log of this rank's
  HCCL buffer and the clocks beside its channel notifies (:mod:`.races`).

Rendezvous is by name: every rank creates its own segments and waits (up to
HCCL_CONNECT_TIMEOUT) for its peers' to appear.  A channel is a pair of slots, one in each rank's
``ctl``, matched by (peer, engine, protocol); its HCCL-buffer address is the peer's ``buf``
mapped into this process, so a Write is a real memmove into the peer's memory.
"""
from __future__ import annotations

import hashlib
import os
import struct
import time
from typing import Any, Dict, List, Optional, Set, Tuple

from .._ffi import ffi
from . import ledger
from .announce import TABLE_WORDS, Announcements
from .config import CHECK_MODES, CheckerWarning, SimConfig
from .errors import HcclResult, SimError, warn_caller
from .futex import futex_wait, futex_wake
from .notifies import CONSUMED, MAX_NOTIFIES_PER_CHANNEL, WORDS_PER_NOTIFY
from .races import RaceState, chk_bytes
from .queues import Queue, SimThread
from .shm import SHM_DIR, Segment, check_dir, owner_alive, sweep_stale, user_prefix
from .tasks import Task

MAGIC = 0x4D534348          # "HCSM"
# 5: the host's wait record; 4: single-writer notify words (records, values, consumed); 3: announcements table
LAYOUT_VERSION = 5
HEADER_WORDS = 20
SLOT_WORDS = 16 + WORDS_PER_NOTIFY * MAX_NOTIFIES_PER_CHANNEL    # slot header + each notify's words (notifies.py)

# header word indices
H_MAGIC, H_VERSION, H_STATE, H_NRANKS, H_RANK, H_PID, H_BELL, H_SLEEPING, H_SLOTS = range(9)
H_BUF_LO, H_BUF_HI = 9, 10
H_CONNECTED = 11            # set once this rank has mapped every peer (second phase of the rendezvous)
H_JOB_TAG = 12              # 4 words: proof of membership of the job (job_tag(secret, comm_id)), checked at attach
H_CHECK = 16                # 1 + index of this rank's HCOMM_SIM_CHECK mode in CHECK_MODES, compared at attach
H_REFUSED = 17              # set when this rank found a peer's settings different (the peer waits to see it too)
REFUSE_LINGER_S = 3.0       # how long a rank that refused a peer keeps its segments for that peer to notice
STATE_READY, STATE_DESTROYED, STATE_FAILED = 1, 2, 3   # FAILED: an operation of this rank failed
STATE_ABANDONED = 4   # an exception interrupted this rank's call; its queued work was discarded (sim/abandon.py)
# slot word indices
S_STATE, S_PEER, S_ENGINE, S_PROTOCOL, S_NOTIFY_NUM = range(5)
SLOT_PUBLISHED = 1

__all__ = ["SimComm", "SimChannel", "segment_names", "chk_segment_name", "job_tag"]


def job_tag(secret: bytes, comm_id: str) -> Tuple[int, int, int, int]:
    """Four header words proving membership of a job: a hash of the job secret and the communicator id."""
    digest = hashlib.sha256(secret + b"/" + comm_id.encode()).digest()
    return struct.unpack("<4I", digest[:16])


def segment_names(comm_id: str, rank: int) -> Tuple[str, str, str]:
    """(ctl, buf, nat) /dev/shm names of one rank of a communicator."""
    base = f"{user_prefix()}{comm_id}_r{rank}"
    return base + "_ctl", base + "_buf", base + "_nat"


def chk_segment_name(comm_id: str, rank: int) -> str:
    """The /dev/shm name of one rank's race-checker segment (exists only when its checker is on)."""
    return f"{user_prefix()}{comm_id}_r{rank}_chk"


class SimChannel:
    """One end of a channel: my notify slot, the peer's slot, the peer's HCCL buffer."""

    __slots__ = ("handle", "comm", "peer", "engine", "protocol", "notify_num", "local_words", "local_base",
                 "remote_words", "remote_base", "peer_ctl", "peer_bell_addr", "peer_sleep_index",
                 "peer_buf", "buf_lo", "buf_hi", "pending", "signalled", "local_slot", "remote_slot")

    def __init__(self, handle: int, comm: "SimComm", peer: int, engine: int, protocol: int, notify_num: int,
                 local_slot: int, remote_slot: int) -> None:
        self.handle = handle
        self.comm = comm
        self.peer = peer
        self.engine = engine
        self.protocol = protocol
        self.notify_num = notify_num
        self.local_words = comm.words
        self.local_slot = local_slot      # ctl slot indices (the race checker keeps a clock beside each notify)
        self.remote_slot = remote_slot
        self.local_base = HEADER_WORDS + local_slot * SLOT_WORDS + 16
        peer_ctl = comm.peer_ctl[peer]
        self.peer_ctl = peer_ctl
        self.remote_words = ffi.cast("uint32_t *", peer_ctl.ptr)
        self.remote_base = HEADER_WORDS + remote_slot * SLOT_WORDS + 16
        self.peer_bell_addr = peer_ctl.addr + 4 * H_BELL
        self.peer_buf = comm.peer_buffer(peer)
        self.buf_lo = self.peer_buf.addr
        self.buf_hi = self.peer_buf.addr + self.peer_buf.size
        # checker state: peer-buffer ranges written since my last record / handed over since my last wait
        # (the executor moves them at each record and wait task, sim/runtime.py _execute)
        self.pending: List[Tuple[int, int]] = []
        self.signalled: List[Tuple[int, int]] = []

    def has_record(self, index: int) -> bool:
        """Whether local notify ``index`` holds a record this rank has not consumed (sim/notifies.py)."""
        i = self.local_base + index
        return self.local_words[i] != self.local_words[i + CONSUMED]

    def ring_peer(self) -> None:
        """Bump the peer's doorbell (a rank polling or about to sleep sees it); ``wake_peer`` wakes a sleeper."""
        words = self.remote_words
        words[H_BELL] = (words[H_BELL] + 1) & 0xFFFFFFFF

    def wake_peer(self) -> None:
        """Wake the peer if it sleeps on its doorbell (after ``ring_peer``: it then sees the ring)."""
        if self.remote_words[H_SLEEPING]:
            futex_wake(self.peer_bell_addr)

    def check_write(self, executor: Any, q: Queue, task: Task, dst: Any, nbytes: int) -> None:
        """Checker: a write may not overwrite peer memory handed over and not yet released."""
        if self.comm.config.check == "off" or nbytes <= 0:
            return
        lo = int(ffi.cast("uintptr_t", dst))
        hi = lo + nbytes
        for a, b in self.signalled:
            if lo < b and a < hi:
                executor.report(task.thread, q, task,
                                f"write of {nbytes} bytes at offset {lo - self.buf_lo} of rank {self.peer}'s "
                                f"HCCL buffer overlaps data already handed to it (offset {a - self.buf_lo}, "
                                f"{b - a} bytes) that rank {self.peer} has not released by a notify since")
                break
        self.pending.append((lo, hi))


class SimComm:
    """State of one communicator in this process (one rank of it)."""

    def __init__(self, handle: int, comm_id: str, name: str, rank: int, nranks: int, config: SimConfig,
                 secret: bytes = b"") -> None:
        if not 0 <= rank < nranks:
            raise SimError(HcclResult.E_PARA, f"rank={rank} is outside [0, {nranks})")
        self.handle = handle
        self.comm_id = comm_id
        self.secret = secret
        self.tag = job_tag(secret, comm_id)
        self.name = name
        self.rank = rank
        self.nranks = nranks
        self.config = config
        self.buffer_bytes = 2 * config.buffsize_mb * (1 << 20)
        self.slots = max(64, 8 * nranks)
        self.async_error = 0
        self.failure: Optional[str] = None
        self.reports: List[str] = []
        self.strict_findings: List[str] = []   # strict-mode checker findings HcclCommDestroy must still report
        self.idle_notifies_reported: Set[Tuple[int, int]] = set()   # (thread, notify) left set and reported
        #: thread notifies of this rank's threads set now (the executor counts each record that sets one and each wait
        #: that clears one), those of released threads included: 0 means none is set (runtime.Executor._check_idle)
        self.thread_notifies_set = 0
        self.destroyed = False
        self.closing = False      # being retired: executors stop reading its memory (runtime.Executor.retire)
        self.pins: Dict[int, int] = {}   # host thread -> how many of its reads of this memory are outside the lock now
        self.device = -1          # the creating thread's device (aclrtSetDevice); HcclCommGetHandleWithName uses it
        self.engine_contexts: Dict[Tuple[str, int], Any] = {}   # HcclEngineCtxCreate: (ctxTag, engine) -> context
        self.rank_graph: Dict[str, Any] = {}                    # arrays the HcclRankGraph* queries hand out
        self.threads: List[SimThread] = []
        self.thread_notifies = 0
        self.stream_threads: Dict[int, SimThread] = {}
        self.acquired_streams: Set[int] = set()   # stream threads handed out by HcclThreadAcquireWithStream (ledger)
        self.channels: Dict[Tuple[int, int, int], SimChannel] = {}
        self.peer_ctl: Dict[int, Segment] = {}
        self._peer_buf: Dict[int, Segment] = {}
        self.peer_scratch: Dict[int, Segment] = {}
        self._used_slots = 0
        self.native: Any = None  # state of the native collectives, created on first use
        self.race: Optional[RaceState] = None   # the read/write race checker (HCOMM_SIM_CHECK warn/strict)
        check_dir()
        ledger.check_dir()
        sweep_stale()
        ctl_name, buf_name, nat_name = segment_names(comm_id, rank)
        try:
            self.ctl = Segment(ctl_name, 4 * (self.announce_base() + TABLE_WORDS), create=True)
        except FileExistsError:
            raise SimError(HcclResult.E_PARA, f"rank {rank} of communicator {name} is already initialised "
                                              "(by this or another live process)") from None
        made = [self.ctl]
        try:
            self.buf = Segment(buf_name, self.buffer_bytes, create=True)
            made.append(self.buf)
            self.scratch = Segment(nat_name, self.buffer_bytes, create=True)
            made.append(self.scratch)
            # the race analysis (vector clocks, access logs) is strict mode's; warn keeps the cheap checks (lost
            # signals, writes into unreleased memory, signatures) at a few per cent of a small call
            if config.check == "strict":   # before the ctl is READY: a peer that sees READY finds it
                chk = Segment(chk_segment_name(comm_id, rank), chk_bytes(nranks, self.slots), create=True)
                made.append(chk)
                self.race = RaceState(rank, nranks, self.slots, chk)
        except BaseException:
            for seg in made:
                seg.close()
                seg.unlink()
            raise
        self.words = ffi.cast("uint32_t *", self.ctl.ptr)
        self.announced = Announcements(self.words, self.announce_base())   # its calls in order (sim/announce.py)
        self.bell_addr = self.ctl.addr + 4 * H_BELL
        w = self.words
        w[H_MAGIC], w[H_VERSION], w[H_NRANKS], w[H_RANK] = MAGIC, LAYOUT_VERSION, nranks, rank
        w[H_PID], w[H_SLOTS] = os.getpid(), self.slots
        w[H_BUF_LO], w[H_BUF_HI] = self.buffer_bytes & 0xFFFFFFFF, self.buffer_bytes >> 32
        for i, word in enumerate(self.tag):
            w[H_JOB_TAG + i] = word
        w[H_CHECK] = 1 + CHECK_MODES.index(config.check)
        w[H_STATE] = STATE_READY
        self.peer_ctl[rank] = self.ctl
        self._peer_buf[rank] = self.buf
        self.peer_scratch[rank] = self.scratch

    # ------------------------------------------------------------------ rendezvous
    def connect(self) -> None:
        """Rendezvous: map every peer, then wait until every peer has mapped everyone too."""
        deadline = time.monotonic() + self.config.connect_timeout_s
        self.map_peers(deadline)
        self.wait_connected(deadline)
        self.unlink_names()

    def unlink_names(self) -> None:
        """Once every rank has mapped everyone, this rank's segments need no names: unlinked, nobody outside
        the communicator can attach to them any more, and the memory goes with the last process that maps it
        (even when every rank dies without a launcher)."""
        for seg in (self.ctl, self.buf, self.scratch):
            seg.unlink()
        if self.race is not None:
            self.race.logs[self.rank].seg.unlink()

    def map_peers(self, deadline: float) -> None:
        """Wait until every peer's segments exist and agree on the rank count, and map them."""
        missing = [r for r in range(self.nranks) if r != self.rank]
        delay = 0.0005
        while missing:
            still = []
            for r in missing:
                seg = self._open_peer_ctl(r)
                if seg is None:
                    still.append(r)
                    continue
                pw = ffi.cast("uint32_t *", seg.ptr)
                if not seg.owner_alive():
                    seg.close()
                    raise SimError(HcclResult.E_REMOTE, f"rank {self.rank} of communicator {self.name}: rank {r} "
                                                        "died while connecting (its process exited or was killed)")
                if pw[H_NRANKS] != self.nranks:
                    seg.close()
                    raise SimError(HcclResult.E_PARA, f"rank {r} of communicator {self.name} was created with "
                                                      f"nRanks={pw[H_NRANKS]}, this rank with {self.nranks}")
                differs = self._settings_differ(r, pw)
                if differs:
                    self._linger(seg)
                    seg.close()
                    raise SimError(HcclResult.E_PARA, differs)
                self.peer_ctl[r] = seg
                try:
                    self.peer_buffer(r)  # map now, while every rank is known to be alive
                    self.peer_scratch[r] = Segment(segment_names(self.comm_id, r)[2])
                    self._map_peer_log(r)
                except FileNotFoundError:
                    raise SimError(HcclResult.E_REMOTE, f"rank {r} of communicator {self.name} disappeared "
                                                        "during initialisation") from None
            missing = still
            if not missing:
                break
            if time.monotonic() >= deadline:
                raise SimError(HcclResult.E_TIMEOUT,
                               f"rank {self.rank} of communicator {self.name}: ranks {missing} of {self.nranks} "
                               f"never arrived within {self.config.connect_timeout_s:g} s (HCCL_CONNECT_TIMEOUT)")
            time.sleep(delay)
            delay = min(delay * 2, 0.02)
        self.words[H_CONNECTED] = 1

    def _settings_differ(self, rank: int, pw: Any) -> Optional[str]:
        """The settings in which peer ``rank``'s header differs from this rank's, as an error text, or None.

        The HCCL buffer size and the checker mode decide where data lands and what is written beside it:
        ranks that differ would mix data or report mismatches that are not there.
        """
        theirs = pw[H_BUF_LO] | (pw[H_BUF_HI] << 32)
        if theirs != self.buffer_bytes:
            return (f"rank {self.rank} of communicator {self.name}: HCCL_BUFFSIZE (or config.hcclBufferSize) differs "
                    f"between ranks: rank {rank} has {theirs // (2 << 20)} MiB, rank {self.rank} has "
                    f"{self.buffer_bytes // (2 << 20)} MiB; every rank must use the same value")
        mode = pw[H_CHECK]
        if mode != self.words[H_CHECK]:
            theirs_mode = CHECK_MODES[mode - 1] if 1 <= mode <= len(CHECK_MODES) else f"mode {mode}"
            return (f"rank {self.rank} of communicator {self.name}: HCOMM_SIM_CHECK differs between ranks: rank {rank} "
                    f"has HCOMM_SIM_CHECK={theirs_mode}, rank {self.rank} has HCOMM_SIM_CHECK={self.config.check}; "
                    "every rank must run the checker in the same mode")
        return None

    def _linger(self, peer: Segment) -> None:
        """Keep this rank's segments up until the refused peer has seen the difference too (or a short while),
        so it fails with the same text instead of waiting for a rank that is gone."""
        self.words[H_REFUSED] = 1
        pw = ffi.cast("uint32_t *", peer.ptr)
        end = time.monotonic() + REFUSE_LINGER_S
        while not pw[H_REFUSED] and peer.owner_alive() and time.monotonic() < end:
            time.sleep(0.005)

    def _map_peer_log(self, rank: int) -> None:
        """Map a peer's race-checker segment when both ends check (a peer with the checker off has none)."""
        if self.race is None:
            return
        try:
            self.race.add_peer(rank, Segment(chk_segment_name(self.comm_id, rank)))
        except FileNotFoundError:
            pass

    def wait_connected(self, deadline: float) -> None:
        """Second phase: nobody returns (and may destroy) before every rank has mapped everyone."""
        waiting = [r for r in range(self.nranks) if r != self.rank]
        delay = 0.0002
        while waiting:
            waiting = [r for r in waiting
                       if not ffi.cast("uint32_t *", self.peer_ctl[r].ptr)[H_CONNECTED]]
            if not waiting:
                break
            dead = [r for r in waiting if not self.peer_ctl[r].owner_alive()]
            if dead:
                raise SimError(HcclResult.E_REMOTE, f"rank {self.rank} of communicator {self.name}: rank(s) {dead} "
                                                    "died while connecting (their processes exited or were killed)")
            if time.monotonic() >= deadline:
                raise SimError(HcclResult.E_TIMEOUT,
                               f"rank {self.rank} of communicator {self.name}: ranks {waiting} of {self.nranks} "
                               f"arrived but did not finish connecting within {self.config.connect_timeout_s:g} s "
                               "(HCCL_CONNECT_TIMEOUT)")
            time.sleep(delay)
            delay = min(delay * 2, 0.01)

    def _open_peer_ctl(self, rank: int) -> Optional[Segment]:
        name = segment_names(self.comm_id, rank)[0]
        try:
            seg = Segment(name, keep_fd=True)    # kept open: the peer's liveness lock, after the name is gone
        except (FileNotFoundError, ValueError):  # ValueError: created but not sized yet
            return None
        words = ffi.cast("uint32_t *", seg.ptr)
        if seg.size < 4 * HEADER_WORDS or words[H_MAGIC] != MAGIC or words[H_STATE] != STATE_READY:
            seg.close()
            return None
        if tuple(words[H_JOB_TAG + i] for i in range(4)) != self.tag:
            seg.close()
            raise SimError(HcclResult.E_PARA,
                           f"rank {self.rank} of communicator {self.name}: the segment of rank {rank} belongs to "
                           "another job (its job secret differs): two jobs use the same communicator id, e.g. the "
                           "same ranktable and HCOMM_JOB_ID; give each job its own HCOMM_JOB_ID (hcomm run does)")
        return seg

    def peer_buffer(self, rank: int) -> Segment:
        """The HCCL buffer of ``rank`` mapped into this process (mapped on first use)."""
        seg = self._peer_buf.get(rank)
        if seg is None:
            seg = Segment(segment_names(self.comm_id, rank)[1])
            self._peer_buf[rank] = seg
        return seg

    # ------------------------------------------------------------------ channels
    def connect_channels(self, requests: List[Tuple[int, int, int, int]], next_handle: Any) -> List[SimChannel]:
        """Create or reuse channels for (peer, engine, protocol, notify_num) requests, all concurrently."""
        result: List[Optional[SimChannel]] = [None] * len(requests)
        todo: List[Tuple[int, int, int, int, int, int]] = []
        for i, (peer, engine, protocol, notify_num) in enumerate(requests):
            key = (peer, engine, protocol)
            existing = self.channels.get(key)
            if existing is not None:
                if existing.notify_num != notify_num and self.config.check != "off":
                    self.finding(f"checker: rank {self.rank}, communicator {self.name}: channel to rank {peer} (engine "
                                 f"{engine}, protocol {protocol}) is reused with its {existing.notify_num} notifies "
                                 f"although {notify_num} were requested: channels are reused by (engine, remoteRank, "
                                 "protocol), as on the hardware")
                result[i] = existing
                continue
            if any(t[1:4] == (peer, engine, protocol) for t in todo):
                todo.append((i, peer, engine, protocol, notify_num, -1))  # same request twice in one call
                continue
            slot = self._publish_slot(peer, engine, protocol, notify_num)
            todo.append((i, peer, engine, protocol, notify_num, slot))
        deadline = time.monotonic() + self.config.connect_timeout_s
        delay = 0.0002
        pending = [t for t in todo if t[5] >= 0]
        while pending:
            still = []
            for t in pending:
                i, peer, engine, protocol, notify_num, slot = t
                remote = self._find_remote_slot(peer, engine, protocol)
                if remote is None:
                    left = self.peer_left(peer)      # finalised or failed: it will never answer either
                    if left is not None or not self.peer_ctl[peer].owner_alive():
                        raise SimError(HcclResult.E_REMOTE, f"peer rank {peer} of communicator {self.name} "
                                                            f"{left or 'is gone'}, while this rank connected a "
                                                            "channel to it")
                    still.append(t)
                    continue
                remote_slot, remote_notify = remote
                if remote_notify != notify_num:
                    raise SimError(HcclResult.E_PARA,
                                   f"channel to rank {peer}: notifyNum differs between the ends (local "
                                   f"{notify_num}, remote {remote_notify}); both ends must ask for the same")
                ch = SimChannel(next_handle(), self, peer, engine, protocol, notify_num, slot, remote_slot)
                self.channels[(peer, engine, protocol)] = ch
                result[i] = ch
            pending = still
            if not pending:
                break
            if time.monotonic() >= deadline:
                peers = sorted({t[1] for t in pending})
                raise SimError(HcclResult.E_TIMEOUT,
                               f"rank {self.rank} of communicator {self.name}: channel setup with ranks {peers} "
                               f"did not complete within {self.config.connect_timeout_s:g} s "
                               "(HCCL_CONNECT_TIMEOUT); both ends must call HcclChannelAcquire")
            time.sleep(delay)
            delay = min(delay * 2, 0.01)
        for t in todo:
            if t[5] < 0:
                result[t[0]] = self.channels[(t[1], t[2], t[3])]
        return [c for c in result if c is not None]

    def _publish_slot(self, peer: int, engine: int, protocol: int, notify_num: int) -> int:
        if self._used_slots >= self.slots:
            raise SimError(HcclResult.E_UNAVAIL, f"communicator {self.name}: all {self.slots} channel slots used")
        slot = self._used_slots
        self._used_slots += 1
        base = HEADER_WORDS + slot * SLOT_WORDS
        w = self.words
        w[base + S_PEER] = peer
        w[base + S_ENGINE] = engine & 0xFFFFFFFF
        w[base + S_PROTOCOL] = protocol & 0xFFFFFFFF
        w[base + S_NOTIFY_NUM] = notify_num
        w[base + S_STATE] = SLOT_PUBLISHED
        return slot

    def _find_remote_slot(self, peer: int, engine: int, protocol: int) -> Optional[Tuple[int, int]]:
        seg = self.peer_ctl[peer]
        w = ffi.cast("uint32_t *", seg.ptr)
        for slot in range(w[H_SLOTS]):
            base = HEADER_WORDS + slot * SLOT_WORDS
            if w[base + S_STATE] != SLOT_PUBLISHED:
                break  # slots are published in order
            if (w[base + S_PEER] == self.rank and w[base + S_ENGINE] == engine & 0xFFFFFFFF
                    and w[base + S_PROTOCOL] == protocol & 0xFFFFFFFF):
                return slot, w[base + S_NOTIFY_NUM]
        return None

    def finding(self, message: str, code: int = HcclResult.E_PARA) -> None:
        """A checker finding at a host call (not a task): reported, then SimError(``code``) when strict, else a warning."""
        self.reports.append(message)
        if self.config.check == "strict":
            raise SimError(code, message)
        warn_caller(message, CheckerWarning)

    def announce_base(self) -> int:
        """Word of the control segment where the announcements table starts (after the channel slots)."""
        return HEADER_WORDS + self.slots * SLOT_WORDS

    def disagreeing_call(self, peer: int) -> Optional[str]:
        """The mismatch message when ``peer`` announced another call under a number this rank used, or when this
        rank or ``peer`` waits in a point-to-point operation with a rank that waits in a collective the other
        never reaches (sim/announce.py), else None."""
        base = self.announce_base()
        found = self.announced.disagreement(ffi.cast("uint32_t *", self.peer_ctl[peer].ptr), base)
        if found is not None:
            return self.announced.message(self.rank, self.name, peer, found)
        return self.announced.stuck(self.rank, self.name, peer, self._ctl_words, base)

    def _ctl_words(self, rank: int) -> Any:
        """Rank ``rank``'s control words (None: no such rank)."""
        seg = self.peer_ctl.get(rank)
        return None if seg is None else ffi.cast("uint32_t *", seg.ptr)

    # ------------------------------------------------------------------ doorbell
    def bell_value(self) -> int:
        return self.words[H_BELL]

    def ring_self(self) -> None:
        """Local record: wake another OS thread of this process sleeping on this rank's doorbell."""
        w = self.words
        w[H_BELL] = (w[H_BELL] + 1) & 0xFFFFFFFF
        if w[H_SLEEPING]:
            futex_wake(self.bell_addr)

    def sleep_on_bell(self, value: int, timeout: float) -> None:
        w = self.words
        w[H_SLEEPING] = 1
        try:
            futex_wait(self.bell_addr, value, timeout)
        finally:
            w[H_SLEEPING] = 0

    # ------------------------------------------------------------------ bookkeeping
    def record_failure(self, code: int, message: str) -> None:
        if not self.async_error:
            self.async_error = code
            self.failure = message
            if not self.destroyed:
                self.words[H_STATE] = STATE_FAILED   # peers blocked on this rank stop waiting (peer_left)

    def peer_left(self, rank: int) -> Optional[str]:
        """Why peer ``rank`` will never signal again though its process lives (finalised or failed), or None."""
        state = ffi.cast("uint32_t *", self.peer_ctl[rank].ptr)[H_STATE]
        if state == STATE_DESTROYED:
            return "destroyed its communicator (finalised)"
        if state == STATE_FAILED:
            return "failed an operation of this communicator (its own error says why) and will not take part again"
        if state == STATE_ABANDONED:
            return ("abandoned its communicator (an exception interrupted its call while it waited; its queued work "
                    "was discarded) and will not take part again")
        return None

    def abandoned(self) -> None:
        """An exception interrupted this rank's call: peers blocked on it fail at once (no grace for a better error)."""
        if not self.destroyed:
            self.words[H_STATE] = STATE_ABANDONED

    def all_threads(self) -> List[SimThread]:
        """Every thread of this rank: acquired ones and the stream-bound ones."""
        return list(self.threads) + list(self.stream_threads.values())

    def unconsumed_channel_records(self, skip_protocol: Optional[int] = None) -> List[str]:
        """Channel notifies of this rank still set (recorded by a peer, never waited on), except on ``skip_protocol``."""
        found = []
        for ch in self.channels.values():
            if ch.protocol == skip_protocol:
                continue
            for idx in range(ch.notify_num):
                if ch.has_record(idx):
                    found.append(f"channel notify {idx} from rank {ch.peer} (engine {ch.engine}, "
                                 f"protocol {ch.protocol})")
        return found

    def destroy(self) -> None:
        """Release every segment this rank created or mapped."""
        if self.destroyed:
            return
        self.destroyed = True
        if self.native is not None:      # the peers' device memory its direct collectives mapped
            self.native.mapped.close()
        self.words[H_STATE] = STATE_DESTROYED
        self.words = ffi.cast("uint32_t *", ffi.new("uint32_t[]", HEADER_WORDS))  # no use after unmap
        logs = [log.seg for log in self.race.logs.values()] if self.race is not None else []
        for seg in list(self.peer_ctl.values()) + list(self._peer_buf.values()) + list(self.peer_scratch.values()) + logs:
            if not seg.owner:
                seg.close()
        for seg in [self.ctl, self.buf, self.scratch] + [s for s in logs if s.owner]:
            seg.unlink()
            seg.close()
        self.race = None
        # peers that died cannot unlink their own segments: do it for them
        for r in range(self.nranks):
            for name in segment_names(self.comm_id, r) + (chk_segment_name(self.comm_id, r),):
                path = os.path.join(SHM_DIR, name)
                if os.path.exists(path) and not owner_alive(path):
                    try:
                        os.unlink(path)
                    except FileNotFoundError:
                        pass
