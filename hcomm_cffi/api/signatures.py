"""The signature handshake: every collective's signature travels to every peer in stream order, ahead of its data.

Before the tasks of a call, each rank writes the call's signature (``SIG_WORDS`` int64:
collective, count, dtype, op, root, algorithm, output count; :mod:`.consistency`) into its slot
of every peer's HCCL buffer and records a channel notify; it then waits for every peer's notify
and compares the slots with its own.  Ranks in different calls -- another count, dtype, op, root,
algorithm, collective, alltoall block -- all fail there, naming the ranks and both values, before
any data of the call moves: the comparison runs in stream order between the waits and the data
(a host task, on a backend that has them) or, where the backend cannot run host code in stream
order (CANN), right after the stream completes and before the call returns its result.

Slots and notifies alternate by the parity of the handshake count, which every rank advances
identically: a rank can only reach handshake k+2 after every peer recorded handshake k+1, which
each peer does after comparing handshake k, so a slot and a notify are never reused early.  A call
captured into an ACL graph cannot alternate: each replay repeats its handshake as recorded, and one
replay may follow another (or eager calls of either parity) directly.  Its handshake has a form of its
own (``CAPTURED``: a slot row and a notify apart from the parities') and a second round, the release:
after comparing, every rank records ``SIG_RELEASE`` to every peer and waits for theirs, so a rank
reaches the next captured handshake only when every peer has consumed its record and compared its
slot of this one.  The slots are the last :func:`~hcomm_cffi.algorithms.interface.signature_area` bytes
of the HCCL buffer's second half (point-to-point inboxes stop short of them).  Communicators of up to
``ALL_PEERS_MAX`` ranks exchange with every rank (each rank sees every call); larger ones with the peers
the algorithm talks to.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Dict, Iterable, Optional, Sequence, Tuple

import numpy as np

from .._ffi import ffi
from ..algorithms.interface import (CAPTURED, COMM_ENGINE, COMM_NOTIFIES, SIG_NOTIFIES, SIG_RELEASE, SIG_SLOT_BYTES,
                                  region_bytes, signature_area)
from ..algorithms.tasks import TaskBatch
from ..enums import MemcpyKind
from ..errors import COLLECTIVE_MISMATCH, HcclError
from ..plan import ChannelSpec
from ..plan.planner import rank_resources
from ..resources import ResourceCache, Resources
from . import consistency, observe
from .buffers import DeviceBlock
from .state import CommState
from .streams import sync_stream

__all__ = ["ALL_PEERS_MAX", "TABLE_SLOTS", "Exchange", "Signer", "CollectiveMismatchError"]

#: communicators up to this size exchange signatures with every rank (as they preconnect every peer)
ALL_PEERS_MAX = 256
#: distinct call signatures whose words stay in device memory before the table starts over
TABLE_SLOTS = 256
CollectiveMismatchError = consistency.CollectiveMismatchError


@dataclass
class Exchange:
    """One handshake as issued: where the peers' slots land here, and the words this rank sent."""

    local: Any                  # char * of this rank's slot row of this parity (one slot per sender rank)
    peers: Tuple[int, ...]
    words: np.ndarray           # this rank's signature (SIG_WORDS int64)
    mine: bytes                 # the same, as the bytes every peer's slot must hold
    graph: Optional[str] = None  # the ACL graph whose replays repeat it (the captured form): a mismatch names it


class Signer:
    """One communicator's signature handshakes: its table of signatures in device memory and its parity."""

    def __init__(self, state: CommState, invalidate: Callable[[], None]) -> None:
        self.state = state                           # its ``mismatch``: what the in-stream comparison found
        self.invalidate = invalidate                 # bound batches name the table: the engine's cache drops them
        self.b = state.binding
        self.rank: int = state.rank
        self.size: int = state.size
        self.launched = 0     # handshakes launched so far (parity = launched & 1; an interrupted call that moved it
        # leaves the ranks apart)
        self._seq = 0                                # the running collective's sequence number (messages only)
        self._table = DeviceBlock(self.b, state.inflight)   # TABLE_SLOTS signatures (a full one is replaced)
        self._rows: Dict[bytes, int] = {}            # signature words -> table slot

    # ------------------------------------------------------------------ parity
    @property
    def parity(self) -> int:
        """The parity of the next handshake (its slots and notifies)."""
        return self.launched & 1

    def advance(self, seq: int) -> int:
        """Collective #``seq`` launches the next handshake: its parity; the following one has the other."""
        parity = self.launched & 1
        self.launched += 1
        self._seq = seq
        return parity

    # ------------------------------------------------------------------ resources
    def resources(self, cache: ResourceCache, peers: Sequence[int], thread: bool) -> Resources:
        """The communicator's own channels to ``peers`` (and with ``thread``, the stream's thread) for the handshake."""
        channels = tuple(ChannelSpec(p, self.state.topology.link(self.rank, p), COMM_NOTIFIES) for p in peers)
        return cache.get("signature", rank_resources(self.rank, "signature", (0,) if thread else (), channels),
                         "comm:signature", COMM_ENGINE)

    def peers_for(self, algorithm_peers: Iterable[int]) -> Tuple[int, ...]:
        """Every other rank (communicators up to ALL_PEERS_MAX ranks), else the algorithm's peers."""
        if self.size <= ALL_PEERS_MAX:
            return tuple(p for p in range(self.size) if p != self.rank)
        return tuple(sorted(p for p in algorithm_peers if p != self.rank))

    def source(self, words: np.ndarray) -> Any:
        """Device address of ``words`` in the table (written once per distinct signature)."""
        key = words.tobytes()
        slot = self._rows.get(key)
        table = self._table
        if slot is None:
            if table.ptr is None or len(self._rows) >= TABLE_SLOTS:   # a fresh table: bound batches name the old one
                if table.ptr is not None:
                    self._rows.clear()
                    self.invalidate()
                table.replace(TABLE_SLOTS * SIG_SLOT_BYTES)
                table.free_old()                     # once nothing queued can read the old tables any more
            slot = self._rows[key] = len(self._rows)
            self.b.memcpy(table.ptr + slot * SIG_SLOT_BYTES, SIG_SLOT_BYTES, ffi.from_buffer(words), words.nbytes,
                          MemcpyKind.HOST_TO_DEVICE)
        return table.ptr + slot * SIG_SLOT_BYTES

    def release(self) -> None:
        """Free the table (the communicator is destroyed)."""
        self._table.release()
        self._rows.clear()

    # ------------------------------------------------------------------ one handshake
    def issue(self, sink: TaskBatch, links: Resources, thread: int, words: np.ndarray,
              host_task: Optional[Callable[[int, Callable[[], None]], Any]], parity: int,
              graph: Optional[str] = None) -> Optional[Exchange]:
        """Issue a handshake of ``parity`` (0 or 1; ``CAPTURED``: the form an ACL graph ``graph`` records, module
        docstring) into ``sink`` on ``thread``, with the peers of ``links``; the caller launches a parity's when
        :meth:`advance` gives it.  With ``host_task`` (the backend's maker of in-stream host tasks) the comparison
        runs after the waits (returns None); else the returned Exchange is compared by :meth:`check`."""
        peers = tuple(sorted(links.channels))
        row = self._area(links) + parity * self.size * SIG_SLOT_BYTES
        src = self.source(words)
        channels = links.channels
        for p in peers:
            ch = channels[p]
            sink.write(thread, ch, links.peer_buffers[p][0] + row + self.rank * SIG_SLOT_BYTES, src, SIG_SLOT_BYTES)
            sink.channel_notify_record(thread, ch, SIG_NOTIFIES[parity])
        for p in peers:
            sink.channel_notify_wait(thread, channels[p], SIG_NOTIFIES[parity], self.state.timeout)
        ex = Exchange(links.local_buffer + row, peers, words, words.tobytes(), graph)
        if host_task is not None:
            sink.calls.append(host_task(thread, lambda: self._compare_in_place(ex)))
        if parity == CAPTURED:
            for p in peers:
                sink.channel_notify_record(thread, channels[p], SIG_RELEASE)
            for p in peers:
                sink.channel_notify_wait(thread, channels[p], SIG_RELEASE, self.state.timeout)
        return ex if host_task is None else None

    def agree(self, cache: ResourceCache, stream: Any, call: Any, algorithm: str, host_task: Any) -> None:
        """Before an algorithm's channels are acquired: one handshake of its call on the communicator's own
        channels, waited for.  Channel setup needs both ends, so ranks in different calls (another root, another
        algorithm) would wait for each other's channels until HCCL_CONNECT_TIMEOUT; agreeing first makes them
        fail at once, naming both calls.  Every rank resolves the same calls in the same order, so every rank
        runs this handshake at the same point (its parity advances as any handshake's)."""
        peers = self.peers_for(())
        if not peers:
            return
        links = self.resources(cache, peers, True)
        sink = TaskBatch(self.b)
        ex = self.issue(sink, links, links.main, consistency.signature(call, algorithm), host_task, self.parity)
        self.advance(self._seq)
        announcer = self.state.announcer
        try:
            sink.launch()
            announcer.waiting(partial(sync_stream, self.b, stream), collective=announcer.current)
        except HcclError:             # the caller fails the communicator naming the call (a mismatch, if one was seen)
            self._raise_if_mismatch(ex)
            raise
        self._raise_if_mismatch(ex)

    def _raise_if_mismatch(self, ex: Optional[Exchange]) -> None:
        msg = None if ex is None else self.check(ex)
        if msg is not None:
            self.state.mark_broken(msg)
            raise CollectiveMismatchError(msg)

    def _area(self, res: Resources) -> int:
        """Byte offset of the signature slots in every rank's HCCL buffer (the end of its second half)."""
        return 2 * region_bytes(res.smallest_buffer) - signature_area(self.size)

    # ------------------------------------------------------------------ comparing
    def _rows_of(self, ex: Exchange, raw: bytes) -> np.ndarray:
        got = np.frombuffer(raw, np.int64).reshape(self.size, consistency.SIG_WORDS)
        rows = np.full((self.size, consistency.SIG_WORDS), consistency.NOT_ARRIVED, np.int64)
        for p in ex.peers:
            rows[p] = got[p]
        rows[self.rank] = ex.words
        return rows

    def _compare_in_place(self, ex: Exchange) -> None:
        """In stream order (host task): the slots are host-readable memory on a backend with host tasks."""
        raw = ffi.buffer(ex.local, self.size * SIG_SLOT_BYTES)[:]
        mine = ex.mine
        if all(raw[p * SIG_SLOT_BYTES:(p + 1) * SIG_SLOT_BYTES] == mine for p in ex.peers):
            return
        msg = consistency.compare(self._rows_of(ex, raw), self.rank, self.state.name, self._seq, ex.peers, ex.graph)
        if msg is not None:
            self.state.mismatch = msg
            raise CollectiveMismatchError(f"{COLLECTIVE_MISMATCH}: {msg}")

    def check(self, ex: Exchange) -> Optional[str]:
        """After the stream completed (backends without host tasks): the mismatch message, or None."""
        host = np.empty(self.size * consistency.SIG_WORDS, np.int64)
        try:
            self.b.memcpy(ffi.from_buffer(host), host.nbytes, ex.local, host.nbytes, MemcpyKind.DEVICE_TO_HOST)
        except HcclError:       # the device is gone with the failure being reported: nothing to add to it
            return None
        return consistency.compare(self._rows_of(ex, host.tobytes()), self.rank, self.state.name, self._seq, ex.peers,
                                   ex.graph)

    def check_completed(self, exchange: Optional[Exchange]) -> None:
        """Backends without host tasks: compare the handshake's slots now (its stream has passed them); raises
        :class:`CollectiveMismatchError` on a mismatch, which breaks the communicator (the call's data may have
        moved), as any failure does."""
        if exchange is None:
            return
        msg = self.check(exchange)
        if msg is not None:
            err = consistency.CollectiveMismatchError(msg)
            self.state.mark_broken(msg)
            observe.failed(self.state, None, err)
            raise err
