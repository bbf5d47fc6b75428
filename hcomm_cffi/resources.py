"""Acquire exactly what a plan names: threads, channels and HCCL buffers, cached per communicator.

A2/A3 create NEW threads on every ``HcclThreadAcquire`` (quota: 200 per communicator), so a
:class:`ResourceCache` keeps one :class:`Resources` per resource shape (algorithm, thread counts,
channel list) and hands it out again.  The main thread wraps the communicator's stream
(``HcclThreadAcquireWithStream``), so synchronising the stream waits for the algorithm; the
other T-1 threads come from one ``HcclThreadAcquire`` call.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from . import trace
from .binding import Binding
from .enums import Engine, Protocol
from .initializers import make_channel_descs, make_comm_config
from .plan import Plan, RankResources

__all__ = ["Resources", "ResourceCache", "ENGINE", "shape_key", "comm_config_for"]

#: Engine of the host-driven data plane.  HcclThreadAcquireWithStream accepts CPU, CPU_TS and CCU (CPU_TS
#: becomes CPU; AICPU, AICPU_TS and AIV are rejected): hcomm @ 8958adb thread_c_adpt.cc:311, thread.cc:63.
ENGINE = Engine.CPU_TS

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
        """This rank's HCCL buffer (char *, size), fetched once."""
        if self._local is None:
            self._local = self.binding.get_hccl_buffer(self.comm)
        return self._local

    def get(self, algorithm: str, spec: RankResources) -> Resources:
        """The resources of ``spec`` (acquired now if this shape was never seen)."""
        key = shape_key(algorithm, spec)
        res = self._cache.get(key)
        if res is None:
            res = self._acquire(spec)
            self._cache[key] = res
            if trace.ACTIVE:                      # name the trace lanes of these threads by their role
                for i, handle in enumerate(res.slaves, 1):
                    trace.name_thread(handle, f"{algorithm} thread {i}")
        return res

    def _acquire(self, spec: RankResources) -> Resources:
        b = self.binding
        calls: List[Tuple[str, tuple]] = []
        counts = spec.thread_notify_counts
        main = 0
        slaves: List[int] = []
        if spec.threads:
            main = b.thread_acquire_with_stream(self.comm, self.engine, self.stream, counts[0])
            calls.append(("thread_acquire_with_stream", (int(self.engine), counts[0])))
            if spec.threads > 1:
                per = max(counts[1:])
                slaves = b.thread_acquire(self.comm, self.engine, spec.threads - 1, per)
                calls.append(("thread_acquire", (int(self.engine), spec.threads - 1, per)))
        channels: Dict[int, int] = {}
        buffers: Dict[int, Tuple[CData, int]] = {}
        by_proto: Dict[Tuple[int, int], List[int]] = {}
        for c in spec.channels:
            by_proto.setdefault((int(c.protocol), c.notify_num), []).append(c.peer)
        for (proto, nn), peers in by_proto.items():
            descs = make_channel_descs(peers, Protocol(proto), nn)
            handles = b.channel_acquire(self.comm, self.engine, descs, len(peers))
            calls.append(("channel_acquire", (int(self.engine), tuple(peers), proto, nn)))
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
