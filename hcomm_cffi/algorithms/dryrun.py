"""Dry run: issue an algorithm for every rank of a topology into a recording sink, check the schedule, derive its plan.

No library and no processes: addresses are virtual integers (rank, region, offset), threads and
channels are virtual handles.  The recorded tasks of all ranks are then executed symbolically —
binary notifies, FIFO threads — which finds, before anything runs:

* a wait that no peer (or thread) ever records, and a cycle of waits (a deadlock);
* a record that nobody waits for, and a record on a notify still set (a lost signal);
* a write to a peer with no channel: a peer outside the algorithm's declared channels, or one
  that never uses its end of the channel (a channel is acquired by both ranks);
* addresses outside the HCCL buffer, threads beyond the declared ones;
* an access to an HCCL buffer not ordered after the accesses it conflicts with (:mod:`.races`),
  in one call and in the call followed by itself: a landing slot reused without an ACK.

From the same run it derives, per rank, what the schedule uses — threads, notifies per thread,
channels per peer and protocol with their notifies, HCCL buffer bytes touched — and the number
of dependent transfer rounds (``steps``).  Errors name the rank, thread, task (step) and peer.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Set, Tuple

from ..enums import MAX_THREADS_PER_COMM, DataType
from ..plan import ChannelSpec, RankResources, Topology, rank_resources
from ..resources import channel_class
from .interface import MAX_ALGORITHM_NOTIFIES, Algorithm, CollectiveCall, IssueContext, UnsupportedError
from .races import RaceChecker

__all__ = ["ScheduleError", "DryRun", "RankSchedule", "dry_run", "virtual_call", "REGION_NAMES", "walk", "notify_key"]

_RANK_SHIFT, _REGION_SHIFT = 40, 36
_OFF_MASK = (1 << _REGION_SHIFT) - 1
HCCL, SEND, RECV, SCRATCH = 0, 1, 2, 3
REGION_NAMES = {HCCL: "HCCL buffer", SEND: "send buffer", RECV: "receive buffer", SCRATCH: "scratch"}


class ScheduleError(UnsupportedError):
    """The dry run found a schedule that would hang, lose a signal or write where it must not."""


def _addr(rank: int, region: int, off: int = 0) -> int:
    return ((rank + 1) << _RANK_SHIFT) | (region << _REGION_SHIFT) | off


def _scratch_of(rank: int) -> Callable[[int], int]:
    """The dry run's scratch allocator of ``rank``: its one virtual scratch region, whatever the size."""
    return lambda nbytes: _addr(rank, SCRATCH)


def _where(addr: int) -> Tuple[int, int, int]:
    """(rank, region, offset) of a virtual address."""
    return (addr >> _RANK_SHIFT) - 1, (addr >> _REGION_SHIFT) & 0xF, addr & _OFF_MASK


def virtual_call(call: CollectiveCall, rank: int) -> CollectiveCall:
    """``call`` with ``rank``'s virtual send/receive pointers (the signature is unchanged)."""
    return CollectiveCall(call.coll, _addr(rank, SEND), _addr(rank, RECV), call.count, call.dtype, call.op,
                          call.root, call.recv_count)


class Task(NamedTuple):
    """One recorded task: kind (copy, reduce, write, read, record, wait, trecord, twait, library), where and what."""

    kind: str
    rank: int
    thread: int
    step: int          # 1-based position in its thread's task list
    peer: int = -1     # the channel's peer, or the target thread of a thread record
    idx: int = -1      # notify index
    nbytes: int = 0
    dst: int = 0
    src: int = 0

    def describe(self) -> str:
        """'rank 1, thread 0, step 4 (wait notify 1 from rank 2)'."""
        what = {"record": f"record notify {self.idx} to rank {self.peer}",
                "wait": f"wait notify {self.idx} from rank {self.peer}",
                "trecord": f"record notify {self.idx} of thread {self.peer}",
                "twait": f"wait its notify {self.idx}",
                "write": f"write {self.nbytes} bytes to rank {self.peer}",
                "read": f"read {self.nbytes} bytes from rank {self.peer}"}.get(self.kind, f"{self.kind} {self.nbytes} bytes")
        return f"rank {self.rank}, thread {self.thread}, step {self.step} ({what})"


class _Channels(dict):
    """peer -> virtual channel handle (the peer itself), created on first use unless channels are declared."""

    def __init__(self, rank: int, size: int, declared: Optional[Set[int]]) -> None:
        super().__init__()
        self.rank, self.size, self.declared = rank, size, declared

    def __missing__(self, peer: Any) -> int:
        if isinstance(peer, bool) or not isinstance(peer, int) or not 0 <= peer < self.size:
            raise ScheduleError(f"rank {self.rank} addresses peer {peer!r}, which is not a rank of this "
                                f"{self.size}-rank communicator")
        if peer == self.rank:
            raise ScheduleError(f"rank {self.rank} addresses a channel to itself; use local copies")
        if self.declared is not None and peer not in self.declared:
            raise ScheduleError(f"write to a peer with no channel: rank {self.rank} addresses rank {peer}, but its "
                                f"plan acquires channels only to ranks {sorted(self.declared)}")
        self[peer] = peer
        return peer


class _PeerBuffers(dict):
    """peer -> (virtual address, bytes) of its HCCL buffer."""

    def __init__(self, channels: _Channels, nbytes: int) -> None:
        super().__init__()
        self.channels, self.nbytes = channels, nbytes

    def __missing__(self, peer: Any) -> Tuple[int, int]:
        self.channels[peer]  # validates the peer
        value = self[peer] = (_addr(peer, HCCL), self.nbytes)
        return value


class _VirtualResources:
    """What :class:`IssueContext` reads of acquired resources, for one rank of a dry run."""

    def __init__(self, rank: int, size: int, buffer_bytes: int, threads: int, peers: Optional[Set[int]]) -> None:
        self.threads = range(threads)
        self.main = 0
        self.channels = _Channels(rank, size, peers)
        self.peer_buffers = _PeerBuffers(self.channels, buffer_bytes)
        self.local_buffer = _addr(rank, HCCL)
        self.local_size = self.smallest_buffer = buffer_bytes


class _Recorder:
    """The dry run's :class:`~hcomm_cffi.algorithms.tasks.TaskSink` for one rank: checks and records tasks."""

    def __init__(self, rank: int, res: _VirtualResources, buffer_bytes: int, dtype: DataType) -> None:
        self.rank, self.res, self.buffer_bytes, self.esz = rank, res, buffer_bytes, dtype.itemsize
        self.queues: Dict[int, List[Task]] = {}
        self.touched: Dict[int, int] = {}        # rank -> highest HCCL buffer byte touched by this rank's tasks
        self.library_calls: List[str] = []

    def _task(self, kind: str, thread: int, **kw: Any) -> Task:
        if not isinstance(thread, int) or isinstance(thread, bool) or thread not in self.res.threads:
            raise ScheduleError(f"rank {self.rank} issues a {kind} on thread {thread!r}, but it has "
                                f"{len(self.res.threads)} threads (indices of ctx.threads)")
        q = self.queues.setdefault(thread, [])
        t = Task(kind, self.rank, thread, len(q) + 1, **kw)
        q.append(t)
        return t

    def _bounds(self, t: Task, addr: int, nbytes: int, owner: Optional[int], role: str) -> None:
        rank, region, off = _where(addr)
        if owner is not None and (rank != owner or region != HCCL):
            where = f"rank {rank}'s {REGION_NAMES.get(region, 'memory')}" if rank >= 0 else "an unknown address"
            raise ScheduleError(f"{t.describe()}: the {role} is {where}, not rank {owner}'s HCCL buffer")
        if region == HCCL:
            if off + nbytes > self.buffer_bytes:
                raise ScheduleError(f"{t.describe()}: the {role} [{off}, {off + nbytes}) is past the end of rank "
                                    f"{rank}'s HCCL buffer of {self.buffer_bytes} bytes; raise HCCL_BUFFSIZE or "
                                    "cut the message into pieces")
            self.touched[rank] = max(self.touched.get(rank, 0), off + nbytes)

    def local_copy(self, thread: int, dst: int, src: int, nbytes: int) -> None:
        t = self._task("copy", thread, nbytes=nbytes, dst=dst, src=src)
        self._bounds(t, dst, nbytes, None, "destination")
        self._bounds(t, src, nbytes, None, "source")

    def local_reduce(self, thread: int, dst: int, src: int, count: int, dtype: int, op: int) -> None:
        nbytes = count * DataType(dtype).itemsize
        t = self._task("reduce", thread, nbytes=nbytes, dst=dst, src=src)
        self._bounds(t, dst, nbytes, None, "destination")
        self._bounds(t, src, nbytes, None, "source")

    def write(self, thread: int, channel: int, dst: int, src: int, nbytes: int) -> None:
        t = self._task("write", thread, peer=channel, nbytes=nbytes, dst=dst, src=src)
        self._bounds(t, dst, nbytes, channel, "destination")
        self._bounds(t, src, nbytes, None, "source")

    def read(self, thread: int, channel: int, dst: int, src: int, nbytes: int) -> None:
        t = self._task("read", thread, peer=channel, nbytes=nbytes, dst=dst, src=src)
        self._bounds(t, src, nbytes, channel, "source")
        self._bounds(t, dst, nbytes, None, "destination")

    def channel_notify_record(self, thread: int, channel: int, idx: int) -> None:
        self._task("record", thread, peer=channel, idx=self._notify(idx, thread, "record"))

    def channel_notify_wait(self, thread: int, channel: int, idx: int, timeout_s: int) -> None:
        self._task("wait", thread, peer=channel, idx=self._notify(idx, thread, "wait"))

    def thread_notify_record(self, thread: int, dst_thread: int, idx: int) -> None:
        if dst_thread not in self.res.threads:
            raise ScheduleError(f"rank {self.rank}, thread {thread}: records a notify of thread {dst_thread!r}, "
                                f"but it has {len(self.res.threads)} threads")
        self._task("trecord", thread, peer=dst_thread, idx=idx)

    def thread_notify_wait(self, thread: int, idx: int, timeout_s: int) -> None:
        self._task("twait", thread, idx=idx)

    def library_call(self, name: str, *args: Any) -> None:
        self.library_calls.append(name)

    def _notify(self, idx: int, thread: int, what: str) -> int:
        if not 0 <= idx < MAX_ALGORITHM_NOTIFIES:
            raise ScheduleError(f"rank {self.rank}, thread {thread}: {what} of channel notify {idx}; algorithms "
                                f"may use notifies 0..{MAX_ALGORITHM_NOTIFIES - 1} of their channels (the signature "
                                "handshake and point-to-point have the communicator's own channel)")
        return idx


@dataclass(frozen=True)
class RankSchedule:
    """What one rank's schedule uses."""

    rank: int
    thread_notifies: Tuple[int, ...]         # per thread (main first): notifies used (highest index + 1)
    channels: Tuple[Tuple[int, int], ...]    # (peer, channel notifies used), by peer
    buffer_bytes: int                        # bytes of this rank's HCCL buffer touched (highest offset)
    tasks: int

    @property
    def threads(self) -> int:
        """Threads used (the highest thread index + 1)."""
        return len(self.thread_notifies)

    @property
    def channel_notifies(self) -> int:
        """Notifies used over all channels."""
        return sum(n for _, n in self.channels)


@dataclass(frozen=True)
class DryRun:
    """The checked schedule of one call on every rank, and what it uses."""

    algorithm: str
    call: CollectiveCall
    topology: Topology
    ranks: Tuple[RankSchedule, ...]
    steps: int                                      # dependent transfer rounds (longest chain of writes)
    tasks: Tuple[Tuple[Task, ...], ...]             # per rank, in issue order per thread
    library_calls: Tuple[str, ...] = ()

    def resources_for(self, rank: int) -> RankResources:
        """The resources ``rank`` acquires for this schedule: its threads and channels, each channel with the
        notifies the schedule uses on its busiest channel (both ends of a channel must ask the same)."""
        r = self.ranks[rank]
        npc = self.notifies_per_channel
        chans = tuple(ChannelSpec(p, self.topology.link(rank, p), npc) for p, _ in r.channels)
        return rank_resources(rank, "derived", r.thread_notifies, chans)

    @property
    def notifies_per_channel(self) -> int:
        """Notifies every channel of this schedule gets: the class (resources.CHANNEL_CLASSES) of the highest
        index used on any channel + 1 -- 2 for an ACK/DATA schedule -- so algorithms can share channels."""
        used = [n for r in self.ranks for _, n in r.channels]
        return channel_class(max(used, default=0))[0]

    def summary(self) -> Dict[str, Any]:
        """The maxima over ranks: threads, notifies (channel notifies used), channels, and more."""
        return {"threads": max(r.threads for r in self.ranks),
                "notifies": max(len(r.channels) for r in self.ranks) * self.notifies_per_channel,
                "notifies_per_channel": self.notifies_per_channel,
                "channels": max(len(r.channels) for r in self.ranks),
                "thread_notifies": max(sum(r.thread_notifies) for r in self.ranks),
                "buffer_bytes": max(r.buffer_bytes for r in self.ranks),
                "steps": self.steps, "tasks": sum(r.tasks for r in self.ranks),
                "library_calls": sorted(set(self.library_calls))}


def dry_run(algorithm: Algorithm, topology: Topology, call: CollectiveCall, buffer_bytes: int, *,
            declared: bool = True) -> DryRun:
    """Issue ``call`` (its pointers are ignored) for every rank, check the schedule and measure it.

    ``declared``: when the algorithm declares its resources, issue within exactly those (threads,
    channel peers) — what a real run gets; False issues with unbounded threads and channels, which
    is how a plan is derived.  The schedule is checked once as one call and once followed by
    itself (the steady state of repeated calls and pieces: a landing slot reused without a
    handshake shows only there).  Raises :class:`ScheduleError` naming rank, thread, step and peer.
    """
    for what, elems in (("count", call.count), ("recv_count", call.recv_count or 0)):
        span = elems * call.dtype.itemsize * max(1, topology.n_ranks)
        if span >= 1 << _REGION_SHIFT:
            raise ValueError(f"{what}={elems} {call.dtype.name} elements on {topology.n_ranks} ranks: a buffer of "
                             f"{span} bytes exceeds the {1 << _REGION_SHIFT >> 30} GiB per buffer a dry run addresses "
                             "(no device has that much memory); expected a smaller message")
    recorders = _issue(algorithm, topology, call, buffer_bytes, declared, 1)
    _check_channels(recorders)
    steps = _execute(recorders)
    _execute(_issue(algorithm, topology, call, buffer_bytes, declared, 2), steady=True)
    ranks = tuple(_summarise(rec, recorders) for rec in recorders)
    tasks = tuple(tuple(t for th in sorted(rec.queues) for t in rec.queues[th]) for rec in recorders)
    libs = tuple(name for rec in recorders for name in rec.library_calls)
    return DryRun(algorithm.name, call, topology, ranks, steps, tasks, libs)


def _issue(algorithm: Algorithm, topology: Topology, call: CollectiveCall, buffer_bytes: int, declared: bool,
           times: int) -> List[_Recorder]:
    """Every rank's recorder after issuing ``call`` ``times`` times back to back (the same virtual buffers)."""
    n = topology.n_ranks
    recorders = []
    for rank in range(n):
        vcall = virtual_call(call, rank)
        spec = algorithm.resources(topology, vcall, rank) if declared else None
        threads = spec.threads if spec is not None else MAX_THREADS_PER_COMM
        peers = {c.peer for c in spec.channels} if spec is not None else None
        res = _VirtualResources(rank, n, buffer_bytes, threads, peers)
        rec = _Recorder(rank, res, buffer_bytes, call.dtype)
        ctx = IssueContext(rec, res, rank=rank, size=n, topology=topology, timeout_s=1, dtype=call.dtype,
                           op=call.op, scratch=_scratch_of(rank))
        for _ in range(times):
            try:
                algorithm.issue(ctx, vcall)
            except ScheduleError:
                raise
            except UnsupportedError as exc:
                raise type(exc)(f"algorithm={algorithm.name!r} on rank {rank}: {exc}") from None
        recorders.append(rec)
    return recorders


def _channel_use(rec: _Recorder) -> Dict[int, Task]:
    """peer -> first task of ``rec``'s rank on its channel to that peer."""
    out: Dict[int, Task] = {}
    for q in rec.queues.values():
        for t in q:
            if t.kind in ("write", "read", "record", "wait") and t.peer not in out:
                out[t.peer] = t
    return out


def _check_channels(recorders: Sequence[_Recorder]) -> None:
    use = [_channel_use(rec) for rec in recorders]
    for rank, peers in enumerate(use):
        for peer, task in sorted(peers.items()):
            if rank not in use[peer]:
                raise ScheduleError(
                    f"write to a peer with no channel: {task.describe()}, but rank {peer} never uses a channel to "
                    f"rank {rank} (no record, wait, write or read toward it), so that channel would not be "
                    "acquired at its end; every channel needs both ranks")


def notify_key(t: Task) -> Tuple[Any, ...]:
    """The notify a record sets or a wait consumes: ("c", recorder rank, waiter rank, idx) or ("t", rank, thread, idx)."""
    if t.kind == "record":
        return ("c", t.rank, t.peer, t.idx)
    if t.kind == "wait":
        return ("c", t.peer, t.rank, t.idx)
    if t.kind == "trecord":
        return ("t", t.rank, t.peer, t.idx)
    return ("t", t.rank, t.thread, t.idx)


def walk(queues: Sequence[Sequence[Task]], step: Callable[[int, Task, Any], Any],
         fair: bool = False) -> Dict[Tuple[Any, ...], Any]:
    """Execute FIFO task queues with binary notifies, calling ``step(queue, task, released)`` for each task.

    Tasks run in an order every notify allows: a wait runs only after the record it consumes, and
    gets (as ``released``) what ``step`` returned for that record.  Raises ScheduleError for a lost
    signal (a record on a notify still set) and for waits that can never run (naming the first and
    why).  Returns the notifies still set at the end: ``{key: (record task, payload)}``.
    ``fair`` runs one task of a thread at a time, in turn (threads interleave, as on hardware),
    instead of each thread as far as it can.  A thread blocked on a wait sleeps until its record.
    """
    pos = [0] * len(queues)
    flags: Dict[Tuple[Any, ...], Tuple[Task, Any]] = {}
    runnable = deque(range(len(queues)))          # queues that may progress, in turn
    parked: Dict[Tuple[Any, ...], List[int]] = {} # notify -> queues blocked waiting for it
    while runnable:
        qi = runnable.popleft()
        q = queues[qi]
        while pos[qi] < len(q):
            t = q[pos[qi]]
            kind = t.kind
            if kind == "wait" or kind == "twait":
                key = notify_key(t)
                got = flags.pop(key, None)
                if got is None:
                    parked.setdefault(key, []).append(qi)
                    break
                step(qi, t, got[1])
            elif kind == "record" or kind == "trecord":
                key = notify_key(t)
                if key in flags:
                    raise ScheduleError(f"lost signal: {t.describe()} while that notify is still set by "
                                        f"{flags[key][0].describe()}, which nobody waited for; notifies are "
                                        "binary, so the second record is lost and a wait would hang")
                flags[key] = (t, step(qi, t, None))
                runnable.extend(parked.pop(key, ()))
            else:
                step(qi, t, None)
            pos[qi] += 1
            if fair:
                if pos[qi] < len(q):
                    runnable.append(qi)
                break
    stuck = [(qi, q[pos[qi]]) for qi, q in enumerate(queues) if pos[qi] < len(q)]
    if stuck:
        raise ScheduleError(_explain_stuck(stuck, queues, pos))
    return flags


_STEADY = "in the steady state (this call followed by itself, as the next call or piece runs): "


def _accesses(t: Task) -> Tuple[Tuple[Tuple[int, int], ...], Tuple[Tuple[int, int], ...]]:
    """(reads, writes) of ``t`` as (virtual address, bytes); a reduce also reads its destination."""
    k = t.kind
    if k in ("write", "read", "copy"):
        return ((t.src, t.nbytes),), ((t.dst, t.nbytes),)
    if k == "reduce":
        return ((t.src, t.nbytes), (t.dst, t.nbytes)), ((t.dst, t.nbytes),)
    return (), ()


def _execute(recorders: Sequence[_Recorder], steady: bool = False) -> int:
    """Run every thread of every rank symbolically; returns the steps (dependent transfer rounds).

    Every access to an HCCL buffer is checked to be ordered after the accesses it conflicts with
    (:mod:`.races`); ``steady`` says the queues hold the call followed by itself, for the message.
    """
    queues = [q for rec in recorders for _, q in sorted(rec.queues.items())]
    base = [0] * len(queues)     # transfer rounds known through waits
    known = [0] * len(queues)    # rounds known, own writes included
    steps = [0]
    races = RaceChecker(len(queues), HCCL, _where)

    def step(qi: int, t: Task, released: Any) -> Any:
        if released is not None:                 # a wait: learn what the recorder knew
            rounds, clock = released
            base[qi] = max(base[qi], rounds)
            known[qi] = max(known[qi], rounds)
            races.merge(qi, clock)
        elif t.kind in ("write", "read"):
            rnd = base[qi] + 1
            known[qi] = max(known[qi], rnd)
            steps[0] = max(steps[0], rnd)
        reads, writes = _accesses(t)
        race = races.task(qi, t, reads, writes)
        if race:
            raise ScheduleError(race)
        if t.kind == "record" or t.kind == "trecord":
            return known[qi], races.snapshot(qi)  # what a record carries
        return None

    try:
        flags = walk(queues, step, fair=steady)
    except ScheduleError as exc:
        if steady:
            raise ScheduleError(f"{_STEADY}{exc}") from None
        raise
    if flags:
        key, (t, _) = sorted(flags.items(), key=lambda kv: (kv[1][0].rank, kv[1][0].thread, kv[1][0].step))[0]
        if key[0] == "c":
            raise ScheduleError(f"{_STEADY if steady else ''}record never waited: {t.describe()}, but rank {t.peer} never waits for notify "
                                f"{t.idx} from rank {t.rank}; the notify stays set into the next operation")
        raise ScheduleError(f"{_STEADY if steady else ''}record never waited: {t.describe()}, but thread {t.peer} of rank {t.rank} never waits "
                            f"for its notify {t.idx}")
    return steps[0]


def _explain_stuck(stuck: List[Tuple[int, Task]], queues: Sequence[Sequence[Task]], pos: List[int]) -> str:
    pending = {notify_key(t) for qi, q in enumerate(queues) for t in q[pos[qi]:] if t.kind in ("record", "trecord")}
    for _, t in stuck:
        if notify_key(t) not in pending:
            who = f"rank {t.peer} never records it" if t.kind == "wait" else \
                f"no thread of rank {t.rank} records it"
            more = f" ({len(stuck) - 1} other thread(s) blocked behind it)" if len(stuck) > 1 else ""
            return f"wait never recorded: {t.describe()}: {who}{more}"
    first = stuck[0][1]
    chain = "; ".join(t.describe() for _, t in stuck[:6])
    return (f"deadlock: every remaining thread waits for a notify that is recorded only after another wait: "
            f"{first.describe()} is blocked, as are: {chain}")


def _summarise(rec: _Recorder, recorders: Sequence[_Recorder]) -> RankSchedule:
    threads = max(list(rec.queues) + [t.peer for q in rec.queues.values() for t in q if t.kind == "trecord"],
                  default=-1) + 1
    tn = [0] * threads
    ch: Dict[int, int] = {}
    for q in rec.queues.values():
        for t in q:
            if t.kind == "twait":
                tn[t.thread] = max(tn[t.thread], t.idx + 1)
            elif t.kind == "trecord":
                tn[t.peer] = max(tn[t.peer], t.idx + 1)
            elif t.kind in ("record", "wait"):
                ch[t.peer] = max(ch.get(t.peer, 0), t.idx + 1)
            elif t.kind in ("write", "read"):
                ch.setdefault(t.peer, 0)
    touched = max((r.touched.get(rec.rank, 0) for r in recorders), default=0)
    return RankSchedule(rec.rank, tuple(tn), tuple(sorted(ch.items())), touched,
                        sum(len(q) for q in rec.queues.values()))
