"""Acquire exactly what a plan names: threads, channels and HCCL buffers, cached per communicator, and
account for every acquisition (:func:`held_by`, ``Comm.resources()``; ``HCOMM_DEBUG=INFO`` logs each).

A2/A3 create NEW threads on every ``HcclThreadAcquire`` (quota: 200 per communicator), so a
:class:`ResourceCache` keeps one :class:`Resources` per resource shape (algorithm, thread counts,
channel list) and hands it out again.  The main thread wraps the communicator's stream
(``HcclThreadAcquireWithStream``), so synchronising the stream waits for the algorithm; the
other T-1 threads come from one ``HcclThreadAcquire`` call.

Two kinds of channel go to a peer: an algorithm's (``ALGORITHM_ENGINE``, the notifies its schedule uses)
and the communicator's own (``COMM_ENGINE``: the signature handshake and point-to-point).  The library
keys a channel by (tag, engine, remote rank, protocol) and hands an existing one back
(hcomm @ 8958adb src/coll_communicator_mgr/resource_mgr/remote/rank_pairs/channel_manager.cc:111-123
BuildChannelKey), so different engines make different channels, and a channel asked for again is the
one already held: the accounting records only what is new, as the emulator's ledger does.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from . import log, trace
from ._ffi import ffi
from .binding import Binding
from .enums import Engine, Protocol
from .initializers import make_channel_descs, make_comm_config
from .plan import ALGORITHM_NOTIFIES, Plan, RankResources
from .sim import ledger

__all__ = ["Resources", "ResourceCache", "ENGINE", "ALGORITHM_ENGINE", "ALGORITHM_NOTIFIES", "CHANNEL_CLASSES",
           "channel_class", "COMM_ENGINE", "Holding", "CommHoldings",
           "COMM_NOTIFIES", "SIG_NOTIFIES", "SIG_RELEASE", "P2P_DATA", "P2P_CREDIT", "CAPTURED", "held_by", "holdings", "forget", "acquire_comm_channels", "shape_key", "comm_config_for"]

#: Engine of the host-driven data plane's threads.  HcclThreadAcquireWithStream accepts CPU, CPU_TS and CCU (CPU_TS
#: becomes CPU; AICPU, AICPU_TS and AIV are rejected): hcomm @ 8958adb thread_c_adpt.cc:311, thread.cc:63.
ENGINE = Engine.CPU_TS
#: Engine of an algorithm's channels of ALGORITHM_NOTIFIES (ACK, DATA: every built-in but double_ring).
ALGORITHM_ENGINE = Engine.CPU
#: An algorithm's channels come in fixed classes (notifies, engine): a channel held is handed back whatever
#: notifies are asked (channel_manager.cc:111-123 keys by engine, not notifies), so every algorithm sharing a
#: channel must want the same count; a schedule using more than 2 indices (up to 8) gets the 8-notify class,
#: a channel of its own to the same peer on another engine.
CHANNEL_CLASSES: Tuple[Tuple[int, Engine], ...] = ((ALGORITHM_NOTIFIES, ALGORITHM_ENGINE), (8, Engine.AICPU_TS))
#: Engine of the communicator's own channel to each peer (signature handshake, point-to-point).
COMM_ENGINE = Engine.CPU_TS
#: Notifies on the communicator's own channel, laid out below: the signature handshake's four (one per form, the
#: captured form's release round: api/signatures.py) and point-to-point's two.
COMM_NOTIFIES = 6
#: The signature handshake's notify by its form: parity 0, parity 1, CAPTURED.
SIG_NOTIFIES = (0, 1, 4)
#: The captured form's release round.
SIG_RELEASE = 5
#: Point-to-point's data and credit notifies, so point-to-point runs concurrently with a collective.
P2P_DATA, P2P_CREDIT = 2, 3
#: The handshake form of a call captured into an ACL graph (its index in SIG_NOTIFIES and in the slot rows): a
#: replay repeats it, so it cannot alternate by parity as the eager forms do (api/signatures.py).
CAPTURED = 2

_LOG = log.get("resources")

CData = Any


def comm_config_for(plan: Plan, max_mb: int = 200, **fields: Any) -> CData:
    """An ``HcclCommConfig`` whose HCCL buffer fits one piece of ``plan`` (``hcclBufferSize``, MiB per half).

    Extra keyword arguments go to :func:`make_comm_config` (comm_name, deterministic, ...).
    """
    return make_comm_config(buffer_size_mb=plan.comm_config_buffer_mb(max_mb), **fields)


@dataclass
class Resources:
    """One rank's acquired resources for one plan shape: main + slave threads, channels, buffers."""

    spec: RankResources
    main: int
    slaves: List[int]
    channels: Dict[int, int]               # peer rank -> channel handle
    peer_buffers: Dict[int, Tuple[CData, int]]  # peer rank -> (char * of its HCCL buffer, size)
    local_buffer: CData
    local_size: int
    acquired: List[Tuple[str, tuple]] = field(default_factory=list)  # the acquisition calls made
    smallest_buffer: int = 0                    # bytes of the smallest HCCL buffer involved (set below)

    def __post_init__(self) -> None:
        self.smallest_buffer = min([self.local_size] + [s for _, s in self.peer_buffers.values()])

    @property
    def threads(self) -> List[int]:
        """Main thread first, then the slaves (thread index t drives the t-th peer/direction)."""
        return [self.main] + self.slaves

    def channel(self, peer: int) -> int:
        """Channel handle to ``peer`` (KeyError names the missing peer)."""
        try:
            return self.channels[peer]
        except KeyError:
            raise KeyError(f"no channel to rank {peer} in this plan (peers: {sorted(self.channels)})") from None

    def peer_base(self, peer: int) -> CData:
        """Start of ``peer``'s HCCL buffer as addressed through our channel to it."""
        return self.peer_buffers[peer][0]


@dataclass(frozen=True)
class Holding:
    """One acquisition the package made, as the library sees it: only what was new (a channel or a stream's
    thread asked for again is the one held).  The fields mirror the emulator ledger's ``Acquisition``.

    ``kind``: "thread" (``notifies`` per thread), "notify" (``count`` notifies added to the stream's thread),
    "channel" (``notifies`` per channel, ``peers`` their remote ranks) or "buffer" (``count`` bytes).
    ``purpose``: "algorithm:<name>", "comm:channels" (init's), "comm:signature", "comm:p2p", "comm:buffer".
    """

    purpose: str
    kind: str
    engine: str
    count: int
    notifies: int
    peers: Tuple[int, ...] = ()

    def describe(self) -> str:
        """One line: what was acquired, with its engine and notifies."""
        if self.kind == "buffer":
            return f"{self.purpose}: HCCL buffer of {self.count} bytes"
        if self.kind == "notify":
            return f"{self.purpose}: {self.count} more notifies on the stream's thread (engine {self.engine})"
        what = "thread(s)" if self.kind == "thread" else f"channel(s) to {list(self.peers)}"
        return f"{self.purpose}: {self.count} {what} x {self.notifies} notifies, engine {self.engine}"


@dataclass
class CommHoldings:
    """What one communicator holds: every :class:`Holding` in order, and what is held per key (for reuse)."""

    records: List[Holding] = field(default_factory=list)
    stream_threads: Dict[int, int] = field(default_factory=dict)          # stream -> notifies of its thread
    channels: Dict[Tuple[int, int, int], Tuple[int, str]] = field(default_factory=dict)  # key -> (notifies, purpose)

    def add(self, holding: Holding) -> None:
        self.records.append(holding)
        _LOG.info("acquired %s", holding.describe())

    def by_purpose(self) -> Dict[str, List[Holding]]:
        """The records grouped by purpose, in the order first seen."""
        out: Dict[str, List[Holding]] = {}
        for h in self.records:
            out.setdefault(h.purpose, []).append(h)
        return out

    def describe(self) -> str:
        """One line per purpose: threads (notifies each), channels (engine, notifies each), buffer."""
        lines = []
        for purpose, items in self.by_purpose().items():
            parts = []
            for h in items:
                parts.append(h.describe().split(": ", 1)[1])
            lines.append(f"{purpose}: " + "; ".join(parts))
        return "\n".join(lines)


_HOLDINGS: Dict[int, CommHoldings] = {}


def _key(comm: CData) -> int:
    return int(ffi.cast("uintptr_t", comm))


def holdings(comm: CData) -> CommHoldings:
    """The accounting of communicator ``comm`` (created on first use)."""
    return _HOLDINGS.setdefault(_key(comm), CommHoldings())


def held_by(comm: CData) -> List[Holding]:
    """Everything the package acquired on communicator ``comm``, in order (what ``Comm.resources()`` returns)."""
    found = _HOLDINGS.get(_key(comm))
    return list(found.records) if found is not None else []


def forget(comm: CData) -> None:
    """The communicator is destroyed: its handles (and the accounting of them) are gone."""
    _HOLDINGS.pop(_key(comm), None)


def _start_log(binding: Binding, comm: CData) -> None:
    """HCOMM_DEBUG's handler before a communicator's first acquisitions (which come before it is announced)."""
    log.configure(binding.get_rank_id(comm))


def _channels(binding: Binding, comm: CData, engine: Engine, peers: List[int], protocol: int, notifies: int,
              purpose: str) -> List[int]:
    """``HcclChannelAcquire`` for ``peers``, accounted: new channels recorded, a held one with fewer notifies
    than asked refused (the library would hand it back as it is)."""
    held = holdings(comm)
    fresh = []
    for p in peers:
        have = held.channels.get((p, int(engine), protocol))
        if have is None:
            fresh.append(p)
        elif have[0] < notifies:
            raise ValueError(f"{purpose} needs {notifies} notifies on its channel to rank {p}, but {have[1]} "
                             f"acquired that channel (engine {engine.name}) with {have[0]}; the library keys channels "
                             "by (engine, peer, protocol) and hands the held one back (channel_manager.cc:111-123): "
                             "run the algorithm needing more notifies first, or on its own communicator")
    descs = make_channel_descs(peers, Protocol(protocol), notifies)
    with ledger.tagged(purpose):
        handles = binding.channel_acquire(comm, engine, descs, len(peers))
    for p in fresh:
        held.channels[(p, int(engine), protocol)] = (notifies, purpose)
    if fresh:
        held.add(Holding(purpose, "channel", engine.name, len(fresh), notifies, tuple(fresh)))
    return handles


def acquire_comm_channels(binding: Binding, comm: CData, peers_by_protocol: Dict[int, List[int]]) -> None:
    """The communicator's own channel to each peer (``COMM_ENGINE``, ``COMM_NOTIFIES``), opened at init (channel
    setup needs both ends: opened lazily at a first send, "everyone sends right first" would deadlock)."""
    _start_log(binding, comm)
    for proto, peers in sorted(peers_by_protocol.items()):
        _channels(binding, comm, COMM_ENGINE, peers, proto, COMM_NOTIFIES, "comm:channels")


def channel_class(used: int) -> Tuple[int, Engine]:
    """(notifies, engine) of the channels of a schedule that uses ``used`` notify indices on its busiest channel."""
    for notifies, engine in CHANNEL_CLASSES:
        if used <= notifies:
            return notifies, engine
    raise ValueError(f"a schedule using {used} notifies on a channel; expected at most {CHANNEL_CLASSES[-1][0]}")


def shape_key(algorithm: str, spec: RankResources) -> tuple:
    """Cache key: resources with the same shape are interchangeable across collectives."""
    chans = tuple((c.peer, int(c.protocol), c.notify_num) for c in spec.channels)
    return (algorithm, spec.threads, spec.thread_notify_counts, chans)


class ResourceCache:
    """Per-communicator cache of :class:`Resources`, acquired on first use of each shape."""

    def __init__(self, binding: Binding, comm: CData, stream: CData, engine: Engine = ENGINE) -> None:
        self.binding = binding
        self.comm = comm
        self.stream = stream
        self.engine = engine
        self._cache: Dict[tuple, Resources] = {}
        self._local: Optional[Tuple[CData, int]] = None
        self.log: List[Tuple[str, tuple]] = []   # every acquisition call, in order (tests read it)

    def local_buffer(self) -> Tuple[CData, int]:
        """This rank's HCCL buffer (char *, size), fetched once (accounted once per communicator: init made it)."""
        if self._local is None:
            self._local = self.binding.get_hccl_buffer(self.comm)
            held = holdings(self.comm)
            if self._local[1] and not any(h.kind == "buffer" for h in held.records):
                _start_log(self.binding, self.comm)
                held.add(Holding("comm:buffer", "buffer", "", self._local[1], 0))
        return self._local

    def get(self, algorithm: str, spec: RankResources, purpose: Optional[str] = None,
            channel_engine: Optional[Engine] = None) -> Resources:
        """The resources of ``spec`` (acquired now if this shape was never seen), accounted under ``purpose``
        (default ``"algorithm:<algorithm>"``), its channels on ``channel_engine`` (default: their class's)."""
        key = shape_key(algorithm, spec) + (channel_engine,)
        res = self._cache.get(key)
        if res is None:
            res = self._acquire(spec, purpose or f"algorithm:{algorithm}", channel_engine)
            self._cache[key] = res
            if trace.ACTIVE:                      # name the trace lanes of these threads by their role
                for i, handle in enumerate(res.slaves, 1):
                    trace.name_thread(handle, f"{algorithm} thread {i}")
        return res

    def _acquire(self, spec: RankResources, purpose: str, channel_engine: Optional[Engine]) -> Resources:
        b = self.binding
        held = holdings(self.comm)
        calls: List[Tuple[str, tuple]] = []
        counts = spec.thread_notify_counts
        main = 0
        slaves: List[int] = []
        if spec.threads:
            with ledger.tagged(purpose):
                main = b.thread_acquire_with_stream(self.comm, self.engine, self.stream, counts[0])
            calls.append(("thread_acquire_with_stream", (int(self.engine), counts[0])))
            stream = _key(self.stream)
            before = held.stream_threads.get(stream)
            if before is None:
                held.add(Holding(purpose, "thread", self.engine.name, 1, counts[0]))
            elif counts[0] > before:
                held.add(Holding(purpose, "notify", self.engine.name, counts[0] - before, 0))
            held.stream_threads[stream] = max(counts[0], before or 0)
            if spec.threads > 1:
                per = max(counts[1:])
                with ledger.tagged(purpose):
                    slaves = b.thread_acquire(self.comm, self.engine, spec.threads - 1, per)
                calls.append(("thread_acquire", (int(self.engine), spec.threads - 1, per)))
                held.add(Holding(purpose, "thread", self.engine.name, spec.threads - 1, per))
        channels: Dict[int, int] = {}
        buffers: Dict[int, Tuple[CData, int]] = {}
        by_proto: Dict[Tuple[int, int], List[int]] = {}
        for c in spec.channels:
            by_proto.setdefault((int(c.protocol), c.notify_num), []).append(c.peer)
        for (proto, nn), peers in sorted(by_proto.items()):   # every rank in the same order: a channel's ends meet
            engine = channel_engine if channel_engine is not None else channel_class(nn)[1]
            handles = _channels(b, self.comm, engine, peers, proto, nn, purpose)
            calls.append(("channel_acquire", (int(engine), tuple(peers), proto, nn)))
            for p, h in zip(peers, handles):
                channels[p] = h
                buffers[p] = b.channel_get_hccl_buffer(self.comm, h)
        local, size = self.local_buffer()
        self.log.extend(calls)
        return Resources(spec, main, slaves, channels, buffers, local, size, calls)

    def clear(self) -> None:
        """Forget every handle (after the communicator is destroyed they are invalid)."""
        self._cache.clear()
        self._local = None
