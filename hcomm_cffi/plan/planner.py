"""The planner: (algorithm, collective, topology, size, engine, dtype) -> :class:`Plan`.

A plan is the single source of truth for resource acquisition: ``plan.resources_for(rank)`` says
how many threads (and notifies per thread) to acquire and which channels (peer, protocol,
notify_num) to open.  Notify accounting (docs/design/plan-model.md#notify-accounting):

* ``thread_notifies``: logical fork/join notifies, main T-1 + one per slave = 2(T-1)
  (NHR AllGather/Broadcast slaves need 2);
* ``host_sync_notifies``: +1 on the main thread for the host -> device start signal (vendor
  profiles: only AI CPU engines, and with the uniform ``HcclThreadAcquire`` on every thread);
* ``channel_notifies``: notify_num per channel (2 = ACK + DATA by default; CCU fixes 8), summed;
* ``total_notifies`` = the three above summed.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, Dict, List, Optional, Tuple, Union

from ..enums import (ELEMENT_SIZE, HCCL_COMM_DEFAULT_BUFFSIZE_MB, HOST_REDUCE_DTYPES,
                     MAX_CHANNEL_NOTIFIES, MAX_NOTIFIES_PER_COMM, MAX_THREAD_NOTIFIES,
                     MAX_THREADS_PER_COMM, DataType, Engine, Protocol, parse_dtype)
from .algos import (ALGORITHMS, AUTO_ALGORITHMS, INTER_ALGORITHMS, Collective, InvalidAlgorithm, Schedule,
                    build_schedule, parse_collective)
from .vendor import PLATFORM_NAMES, VENDOR_NOTIFIES_PER_CHANNEL, check_expansion, expansion_of, parse_platform
from .cost import DEFAULT_COST_MODEL, CostModel
from .topology import Topology

__all__ = ["ChannelSpec", "RankResources", "RoleSummary", "Plan", "Candidate", "make_plan",
           "compare_algorithms", "parse_size", "ALGORITHM_NOTIFIES", "parse_engine", "MIB", "REDUCING", "rank_resources"]

MIB = 1 << 20
#: Collectives that reduce (gamma term, reduce dtype checks).
REDUCING = frozenset({Collective.ALLREDUCE, Collective.REDUCE_SCATTER, Collective.REDUCE})
#: Notifies on an algorithm's channel: ACK and DATA, the planning model's 2 per channel.
ALGORITHM_NOTIFIES = 2
CCU_CHANNEL_NOTIFIES = 8
_SIZE_RE = re.compile(r"^\s*(\d+)\s*([kKmMgG]?)[iI]?[bB]?\s*$")


def parse_size(text: Union[str, int], name: str = "size") -> int:
    """'64M' -> 67108864; K/M/G are 2^10/2^20/2^30; plain digits are bytes (``name`` is used in errors)."""
    if isinstance(text, bool):
        raise ValueError(f"{name}={text!r} is not a size")
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"{name}={text} is negative; expected bytes >= 0")
        return text
    m = _SIZE_RE.match(str(text))
    if not m:
        raise ValueError(f"{name}={text!r} is not a size; expected bytes, optionally with K, M or G "
                         "(e.g. 8, 64K, 256M)")
    return int(m.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30}[m.group(2).lower()]


def parse_engine(value: Union[str, int, Engine]) -> Engine:
    """Accept an Engine, its value or name ('aicpu_ts', 'cpu-ts', 'AICPU')."""
    if isinstance(value, Engine):
        return value
    if isinstance(value, str):
        key = value.strip().upper().replace("-", "_")
        if key in Engine.__members__ and key != "RESERVED":
            return Engine[key]
    elif isinstance(value, int) and value in {e.value for e in Engine if e is not Engine.RESERVED}:
        return Engine(value)
    names = ", ".join(e.name.lower() for e in Engine if e is not Engine.RESERVED)
    raise ValueError(f"engine={value!r} is not known; expected one of {names}")


@dataclass(frozen=True)
class ChannelSpec:
    """One channel to acquire: ``HcclChannelDesc`` remoteRank / channelProtocol / notifyNum."""

    peer: int
    protocol: Protocol
    notify_num: int
    level: str = "flat"  # "flat", "intra", "inter" or "p2p": which level of the algorithm uses it

    def to_dict(self) -> Dict[str, Any]:
        """JSON-friendly form."""
        return {"peer": self.peer, "protocol": self.protocol.name, "notify_num": self.notify_num,
                "level": self.level}


@dataclass(frozen=True)
class RankResources:
    """What one rank acquires: ``threads`` threads with ``notifies_per_thread`` each, ``channels``.

    ``thread_notify_counts`` is the per-thread need (main first, host sync included) for
    ``HcclThreadAcquireWithConfig``; ``notifies_per_thread`` is its max, for the uniform
    ``HcclThreadAcquire``.  Totals: see the module docstring.
    """

    rank: int
    role: str
    threads: int
    notifies_per_thread: int
    thread_notify_counts: Tuple[int, ...]
    channels: Tuple[ChannelSpec, ...]
    thread_notifies: int
    host_sync_notifies: int
    channel_notifies: int
    total_notifies: int
    physical_thread_notifies: int  # threads x notifies_per_thread (what the uniform API allocates)

    def to_dict(self) -> Dict[str, Any]:
        """JSON-friendly form."""
        return {"rank": self.rank, "role": self.role, "threads": self.threads,
                "notifies_per_thread": self.notifies_per_thread,
                "thread_notify_counts": list(self.thread_notify_counts),
                "thread_notifies": self.thread_notifies, "host_sync_notifies": self.host_sync_notifies,
                "channel_notifies": self.channel_notifies, "total_notifies": self.total_notifies,
                "physical_thread_notifies": self.physical_thread_notifies,
                "channels": [c.to_dict() for c in self.channels]}


@dataclass(frozen=True)
class RoleSummary:
    """Counts shared by ``n_ranks`` ranks (``example_rank`` is one of them); no peer lists."""

    name: str
    n_ranks: int
    example_rank: int
    threads: int
    notifies_per_thread: int
    thread_notifies: int
    host_sync_notifies: int
    n_channels: int
    channel_notifies: int
    total_notifies: int
    channels_by_protocol: Tuple[Tuple[str, int], ...]

    def to_dict(self) -> Dict[str, Any]:
        """JSON-friendly form."""
        d = dict(self.__dict__)
        d["channels_by_protocol"] = dict(self.channels_by_protocol)
        return d


@dataclass(frozen=True)
class Plan:
    """Resources, steps, traffic, buffer and modelled time of one collective; see module docstring.

    Counts on the plan itself (``threads``, ``n_channels``, ...) are the max over roles; ask
    :meth:`resources_for` for one rank's exact resources.
    """

    algorithm: str
    collective: Collective
    size_bytes: int
    engine: Engine
    dtype: DataType
    root: int
    topology: Topology
    roles: Tuple[RoleSummary, ...]
    steps: int                       # sequential steps to move one piece
    pieces: int                      # pieces the message is cut into to fit one buffer half
    total_steps: int                 # steps x pieces
    phases: Tuple[Tuple[str, int, float], ...]   # (name, steps, modelled us incl. all pieces)
    bytes_per_link_class: Tuple[Tuple[str, int], ...]  # bytes the busiest rank sends per class
    buffer_bytes_needed: int         # per half, to process the message in one piece
    buffer_half_bytes: int           # the configured half (HCCL_BUFFSIZE MiB x 2^20)
    buffer_fits: bool
    modelled_time_us: float
    notifies_per_channel: int
    inter_algorithm: Optional[str] = None
    platform: str = "doc"            # the resource profile: a2, a3, 910a (vendor executors) or doc
    source: str = ""                 # where the resource figures come from (vendor repo@commit:file:line)
    warnings: Tuple[str, ...] = ()
    explanation: str = ""
    cost_model: CostModel = field(default=DEFAULT_COST_MODEL, repr=False, compare=False)
    _schedule: Optional[Schedule] = field(default=None, repr=False, compare=False)

    # -- per rank ---------------------------------------------------------------------
    def resources_for(self, rank: int) -> RankResources:
        """Exact resources of ``rank`` (computed on demand, O(its channels))."""
        if not 0 <= rank < self.topology.n_ranks:
            raise ValueError(f"rank={rank} is outside [0, {self.topology.n_ranks})")
        assert self._schedule is not None
        role = self._schedule.role_of(rank)
        chans = tuple(ChannelSpec(p, proto, self.notifies_per_channel, level)
                      for p, proto, level in self._schedule.channels(rank))
        return rank_resources(rank, role, self._schedule.thread_notifies(role), chans,
                              *_host_sync(self.platform, self.engine))

    def role_of(self, rank: int) -> str:
        """Role name of ``rank``."""
        assert self._schedule is not None
        return self._schedule.role_of(rank)

    def comm_config_buffer_mb(self, max_mb: int = HCCL_COMM_DEFAULT_BUFFSIZE_MB) -> int:
        """``HcclCommConfig.hcclBufferSize`` (MiB per half): enough for one piece, at most ``max_mb``."""
        return max(1, min(max_mb, -(-self.buffer_bytes_needed // MIB)))

    # -- maxima over roles ------------------------------------------------------------
    @property
    def threads(self) -> int:
        """Max threads any rank acquires."""
        return max(r.threads for r in self.roles)

    @property
    def notifies_per_thread(self) -> int:
        """Max uniform notifies per thread any rank asks for."""
        return max(r.notifies_per_thread for r in self.roles)

    @property
    def n_channels(self) -> int:
        """Max channels any rank opens."""
        return max(r.n_channels for r in self.roles)

    @property
    def channel_notifies(self) -> int:
        """Max channel notifies of any rank."""
        return max(r.channel_notifies for r in self.roles)

    @property
    def thread_notifies(self) -> int:
        """Max logical fork/join thread notifies of any rank (host sync excluded)."""
        return max(r.thread_notifies for r in self.roles)

    @property
    def total_notifies(self) -> int:
        """Max total notifies of any rank."""
        return max(r.total_notifies for r in self.roles)

    def to_dict(self) -> Dict[str, Any]:
        """JSON-serialisable form (roles, not per-rank lists)."""
        return {
            "algorithm": self.algorithm, "inter_algorithm": self.inter_algorithm,
            "collective": self.collective.value, "size_bytes": self.size_bytes,
            "engine": self.engine.name, "dtype": self.dtype.name, "root": self.root,
            "platform": self.platform, "platform_name": PLATFORM_NAMES[self.platform], "source": self.source,
            "topology": self.topology.summary(),
            "threads": self.threads, "notifies_per_thread": self.notifies_per_thread,
            "n_channels": self.n_channels, "thread_notifies": self.thread_notifies,
            "channel_notifies": self.channel_notifies, "total_notifies": self.total_notifies,
            "notifies_per_channel": self.notifies_per_channel,
            "roles": [r.to_dict() for r in self.roles],
            "steps": self.steps, "pieces": self.pieces, "total_steps": self.total_steps,
            "phases": [{"name": n, "steps": s, "time_us": t} for n, s, t in self.phases],
            "bytes_per_link_class": dict(self.bytes_per_link_class),
            "buffer_bytes_needed": self.buffer_bytes_needed, "buffer_half_bytes": self.buffer_half_bytes,
            "buffer_fits": self.buffer_fits, "comm_config_buffer_mb": self.comm_config_buffer_mb(),
            "modelled_time_us": self.modelled_time_us, "warnings": list(self.warnings),
            "explanation": self.explanation, "cost_model": self.cost_model.to_dict(),
        }


def rank_resources(rank: int, role: str, fork_join: Tuple[int, ...],
                   chans: Tuple[ChannelSpec, ...], host_sync: int = 1, uniform: bool = False) -> RankResources:
    """One rank's resources from its per-thread fork/join notifies (main first) and channels; adds host sync.

    ``host_sync``: notifies the main thread adds for the host -> device start; ``uniform``: the
    uniform ``HcclThreadAcquire`` asks max(fork/join) + host sync on every thread (vendor
    op_common.cc:1604-1606), so ``notifies_per_thread`` is that.
    """
    threads = len(fork_join)
    host = host_sync if threads else 0
    counts = ((fork_join[0] + host,) + fork_join[1:]) if threads else ()
    per_thread = (max(fork_join, default=0) + host) if uniform else max(counts, default=0)
    ch_notifies = sum(c.notify_num for c in chans)
    tn = sum(fork_join)
    return RankResources(rank, role, threads, per_thread, counts, chans, tn, host, ch_notifies,
                         tn + host + ch_notifies, threads * per_thread)


@dataclass(frozen=True)
class Candidate:
    """One algorithm considered by ``auto`` / ``--compare``: its plan, or why it is invalid."""

    algorithm: str
    plan: Optional[Plan]
    reason: Optional[str] = None


def _check_rank_arg(name: str, value: int, n: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < n:
        raise ValueError(f"{name}={value!r} is outside [0, {n}) for a {n}-rank topology")


def _host_sync(platform: str, engine: Engine) -> Tuple[int, bool]:
    """(host-sync notifies on the main thread, uniform per-thread request) of a profile and engine.

    Vendor: AI CPU engines add one (op_common.cc:1550, :1606); other engines wrap the caller's
    stream with no extra notify (op_common.cc:1630-1637).  The document model always adds one.
    """
    if platform == "doc":
        return 1, False
    return (1 if engine in (Engine.AICPU, Engine.AICPU_TS, Engine.CPU) else 0), True


def _summarise(schedule: Schedule, npc: int, platform: str, engine: Engine) -> Tuple[RoleSummary, ...]:
    out = []
    for shape in schedule.roles():
        peers = schedule.channels(shape.example)
        res = rank_resources(shape.example, shape.name, schedule.thread_notifies(shape.name), (),
                             *_host_sync(platform, engine))
        by_proto: Dict[str, int] = {}
        for _, proto, _ in peers:
            by_proto[proto.name] = by_proto.get(proto.name, 0) + 1
        ch = len(peers) * npc
        out.append(RoleSummary(shape.name, shape.count, shape.example, res.threads, res.notifies_per_thread,
                               res.thread_notifies, res.host_sync_notifies, len(peers), ch,
                               res.total_notifies + ch, tuple(sorted(by_proto.items()))))
    return tuple(out)


def _warnings(roles: Tuple[RoleSummary, ...], coll: Collective, engine: Engine, dtype: DataType,
              npc: int) -> List[str]:
    out = []
    for r in roles:
        if r.threads > MAX_THREADS_PER_COMM:
            out.append(f"role {r.name}: {r.threads} threads exceed the quota of {MAX_THREADS_PER_COMM} "
                       f"per communicator (HcclThreadAcquire returns HCCL_E_UNAVAIL)")
        if r.threads * r.notifies_per_thread > MAX_NOTIFIES_PER_COMM:
            out.append(f"role {r.name}: {r.threads} threads x {r.notifies_per_thread} notifies = "
                       f"{r.threads * r.notifies_per_thread} thread notifies exceed the quota of "
                       f"{MAX_NOTIFIES_PER_COMM} per communicator")
        if r.notifies_per_thread > MAX_THREAD_NOTIFIES:
            out.append(f"role {r.name}: {r.notifies_per_thread} notifies per thread exceed "
                       f"{MAX_THREAD_NOTIFIES} (HCCL_E_PARA)")
    if npc > MAX_CHANNEL_NOTIFIES:
        out.append(f"{npc} notifies per channel exceed the maximum of {MAX_CHANNEL_NOTIFIES}")
    if coll in REDUCING and dtype not in HOST_REDUCE_DTYPES:
        out.append(f"dtype {dtype.name}: the A2/A3 reduce primitives accept only "
                   f"{', '.join(sorted(d.name for d in HOST_REDUCE_DTYPES))}")
    if engine is Engine.AIV:
        out.append("engine AIV: threads are AIV core blocks; HcclThreadAcquire does not accept AIV")
    if engine is Engine.CCU:
        out.append(f"engine CCU: channels get exactly {CCU_CHANNEL_NOTIFIES} notifies each")
    return out


def _build(algorithm: str, coll: Collective, topo: Topology, size: int, engine: Engine,
           dtype: DataType, root: int, peer: Optional[int], cost: CostModel, npc: int,
           buffer_mb: int, inter_algorithm: str, platform: str) -> Plan:
    nbytes = 0 if coll is Collective.BARRIER else size
    schedule = build_schedule(algorithm, topo, coll, root, nbytes, peer, inter_algorithm, platform,
                              expansion_of(engine.name))
    roles = _summarise(schedule, npc, platform, engine)
    phases = schedule.phases()
    half = buffer_mb * MIB
    pieces = max(1, -(-nbytes // half)) if phases else 1
    steps = sum(p.steps for p in phases)
    timed = tuple((p.name, p.steps, cost.phase_us(p, engine, pieces)) for p in phases)
    sent: Dict[str, float] = {}
    for p in phases:
        for proto, _, frac in p.shares():
            sent[proto.name] = sent.get(proto.name, 0.0) + p.sent_bytes * frac
    return Plan(
        algorithm=algorithm, collective=coll, size_bytes=size, engine=engine, dtype=dtype, root=root,
        topology=topo, roles=roles, steps=steps, pieces=pieces, total_steps=steps * pieces,
        phases=timed, bytes_per_link_class=tuple((k, int(round(v))) for k, v in sorted(sent.items())),
        buffer_bytes_needed=nbytes, buffer_half_bytes=half, buffer_fits=nbytes <= half,
        modelled_time_us=sum(t for _, _, t in timed), notifies_per_channel=npc,
        inter_algorithm=inter_algorithm if algorithm == "hierarchical" else None, platform=platform,
        source=schedule.source, warnings=schedule.notes + tuple(_warnings(roles, coll, engine, dtype, npc)),
        cost_model=cost, _schedule=schedule)


def _normalise(collective: Union[str, Collective], topology: Topology, size: Union[int, str],
               engine: Union[str, int, Engine], dtype: Any, root: int, peer: Optional[int],
               notifies_per_channel: Optional[int], buffer_mb: int, inter_algorithm: str, platform: str
               ) -> Tuple[Collective, int, Engine, DataType, int, str]:
    coll = parse_collective(collective)
    nbytes = parse_size(size)
    eng = parse_engine(engine)
    dt = parse_dtype(dtype)
    if dt not in ELEMENT_SIZE:
        raise ValueError(f"dtype={dt.name} has no element size")
    if nbytes % ELEMENT_SIZE[dt]:
        raise ValueError(f"size={nbytes} bytes is not a multiple of the {dt.name} element size "
                         f"({ELEMENT_SIZE[dt]} bytes)")
    _check_rank_arg("root", root, topology.n_ranks)
    if peer is not None:
        _check_rank_arg("peer", peer, topology.n_ranks)
    plat = parse_platform(platform)
    refused = check_expansion(plat, eng.name)
    if refused is not None:
        raise ValueError(f"engine={eng.name.lower()} on platform {plat}: {refused}")
    if notifies_per_channel is None:      # the profile's: 3 per channel for the vendor, 2 in the document
        notifies_per_channel = ALGORITHM_NOTIFIES if plat == "doc" else VENDOR_NOTIFIES_PER_CHANNEL
    if isinstance(notifies_per_channel, bool) or not isinstance(notifies_per_channel, int) \
            or notifies_per_channel < 1:
        raise ValueError(f"notifies_per_channel={notifies_per_channel!r}: expected an integer >= 1")
    if isinstance(buffer_mb, bool) or not isinstance(buffer_mb, int) or buffer_mb < 1:
        raise ValueError(f"buffer_mb={buffer_mb!r}: expected an integer >= 1 (MiB per half)")
    if inter_algorithm not in INTER_ALGORITHMS:
        raise ValueError(f"inter_algorithm={inter_algorithm!r} is not known; expected one of "
                         f"{', '.join(INTER_ALGORITHMS)}")
    npc = CCU_CHANNEL_NOTIFIES if eng is Engine.CCU else notifies_per_channel
    return coll, nbytes, eng, dt, npc, plat


def compare_algorithms(collective: Union[str, Collective], topology: Topology, size: Union[int, str],
                       *, engine: Union[str, int, Engine] = Engine.AICPU, dtype: Any = DataType.FP32,
                       root: int = 0, peer: Optional[int] = None, cost: Optional[CostModel] = None,
                       notifies_per_channel: Optional[int] = None,
                       buffer_mb: int = HCCL_COMM_DEFAULT_BUFFSIZE_MB,
                       inter_algorithm: str = "nhr", platform: str = "doc",
                       algorithms: Tuple[str, ...] = AUTO_ALGORITHMS) -> Tuple[Candidate, ...]:
    """Plan each of ``algorithms`` (default: those ``auto`` chooses among); invalid ones carry their reason."""
    coll, nbytes, eng, dt, npc, plat = _normalise(collective, topology, size, engine, dtype, root, peer,
                                                  notifies_per_channel, buffer_mb, inter_algorithm, platform)
    out = []
    for algo in algorithms:
        try:
            out.append(Candidate(algo, _build(algo, coll, topology, nbytes, eng, dt, root, peer,
                                              cost or DEFAULT_COST_MODEL, npc, buffer_mb, inter_algorithm, plat)))
        except InvalidAlgorithm as exc:
            out.append(Candidate(algo, None, str(exc)))
    return tuple(out)


def _explain(cands: Tuple[Candidate, ...], winner: Candidate) -> str:
    parts = []
    for c in cands:
        if c.plan is None:
            parts.append(f"{c.algorithm}: invalid ({c.reason})")
        else:
            parts.append(f"{c.algorithm}: {c.plan.modelled_time_us:.1f} us")
    valid = sorted((c for c in cands if c.plan is not None), key=lambda c: c.plan.modelled_time_us)  # type: ignore[union-attr]
    assert winner.plan is not None
    why = f"{winner.algorithm} has the lowest modelled time ({winner.plan.modelled_time_us:.1f} us)"
    runner = next((c for c in valid if c is not winner), None)
    if runner is not None and runner.plan is not None:
        gap = runner.plan.modelled_time_us - winner.plan.modelled_time_us
        why += f", {gap:.1f} us ahead of {runner.algorithm}"
        if gap == 0:
            why += f" (tie broken by fewer channels, then by the order {', '.join(AUTO_ALGORITHMS)})"
    return f"auto: {why}. Candidates: " + "; ".join(parts) + "."


def make_plan(collective: Union[str, Collective], topology: Topology, size: Union[int, str],
              algorithm: str = "auto", *, engine: Union[str, int, Engine] = Engine.AICPU,
              dtype: Any = DataType.FP32, root: int = 0, peer: Optional[int] = None,
              cost: Optional[CostModel] = None,
              notifies_per_channel: Optional[int] = None,
              buffer_mb: int = HCCL_COMM_DEFAULT_BUFFSIZE_MB, inter_algorithm: str = "nhr",
              platform: str = "doc") -> Plan:
    """Plan ``collective`` of ``size`` bytes on ``topology`` with ``algorithm`` (or "auto").

    Raises ValueError for bad arguments and :class:`InvalidAlgorithm` when the named algorithm
    cannot run this collective on this topology.  ``root`` is the root of rooted ops and the
    sender of sendrecv (``peer`` the receiver, default root+1).  ``platform`` picks the resource
    profile (:mod:`.vendor`): a2, a3, 910a (what the vendor's executors acquire) or doc (the document
    model, which the emulator's built-ins implement; the library default here, the CLI's is a2).
    ``notifies_per_channel`` None: the profile's (3 vendor, 2 document).
    """
    if algorithm != "auto" and algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm={algorithm!r} is not known; expected auto or one of {', '.join(ALGORITHMS)}")
    if algorithm == "auto":
        cands = compare_algorithms(collective, topology, size, engine=engine, dtype=dtype, root=root,
                                   peer=peer, cost=cost, notifies_per_channel=notifies_per_channel,
                                   buffer_mb=buffer_mb, inter_algorithm=inter_algorithm, platform=platform)
        valid = [c for c in cands if c.plan is not None]
        if not valid:
            raise InvalidAlgorithm("no algorithm can run this: " +
                                   "; ".join(f"{c.algorithm}: {c.reason}" for c in cands))
        winner = min(valid, key=lambda c: (c.plan.modelled_time_us, c.plan.n_channels,  # type: ignore[union-attr]
                                           AUTO_ALGORITHMS.index(c.algorithm)))
        assert winner.plan is not None
        return replace(winner.plan, explanation=_explain(cands, winner))
    coll, nbytes, eng, dt, npc, plat = _normalise(collective, topology, size, engine, dtype, root, peer,
                                                  notifies_per_channel, buffer_mb, inter_algorithm, platform)
    return _build(algorithm, coll, topology, nbytes, eng, dt, root, peer, cost or DEFAULT_COST_MODEL,
                  npc, buffer_mb, inter_algorithm, plat)

