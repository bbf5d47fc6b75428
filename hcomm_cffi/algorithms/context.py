"""How an algorithm issues one rank's tasks: :class:`IssueContext` (peers, buffers, threads, handshakes).

Conventions (every built-in algorithm, every rank, every channel; a user's algorithm may choose others):

* Two kinds of channel per peer, apart because the library keys a channel by (engine, peer, protocol)
  (hcomm @ 8958adb channel_manager.cc:111-123 BuildChannelKey): an algorithm's channels, on
  ``ALGORITHM_ENGINE``, carry ``ALGORITHM_NOTIFIES`` = 2: ``ACK = 0`` ("my landing zone for you is
  free") and ``DATA = 1`` ("what I wrote to you is complete") -- the model's 2 per channel (an
  algorithm whose schedule uses more indices, up to ``MAX_ALGORITHM_NOTIFIES``, gets channels of that many
  on another engine: resources.CHANNEL_CLASSES); the
  communicator's own channel, on ``COMM_ENGINE``, carries ``COMM_NOTIFIES`` = 6: ``SIG_NOTIFIES`` (the
  signature handshake the Comm API issues ahead of every call, api/signatures.py: one per parity, one for
  calls captured into an ACL graph) and ``SIG_RELEASE`` (the captured form's second round), and
  ``P2P_DATA`` / ``P2P_CREDIT`` (point-to-point, which so runs concurrently with a collective).
* A transfer to a peer is always ``wait(ACK) -> write -> record(DATA)`` and the matching receive
  ``record(ACK) -> wait(DATA)``; so each notify is recorded once and waited once per step and no
  write lands in memory the peer has not released (docs/design/plan-model.md#synchronisation-patterns).
* HCCL buffer layout: collectives use the first half ``[0, region_bytes)``; point-to-point the second,
  except its last :func:`signature_area` bytes (the signature slots).
* Thread notify indices: thread ``t`` (1-based) waits its notify 0 (fork) and records main's
  notify ``t - 1`` (join).
"""
from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence, Tuple

from ..enums import DataType, ReduceOp
from ..plan import Topology
from ..resources import ALGORITHM_ENGINE, ALGORITHM_NOTIFIES, CHANNEL_CLASSES, COMM_ENGINE, COMM_NOTIFIES
from .tasks import TaskSink

__all__ = ["ACK", "DATA", "P2P_DATA", "P2P_CREDIT", "SIG_NOTIFIES", "SIG_RELEASE", "CAPTURED", "SIG_SLOT_BYTES",
           "NOTIFIES_PER_CHANNEL", "ALGORITHM_NOTIFIES", "MAX_ALGORITHM_NOTIFIES", "COMM_NOTIFIES", "ALGORITHM_ENGINE",
           "COMM_ENGINE", "ALIGN", "IssueContext", "UnsupportedError", "split_even", "region_bytes", "signature_area"]


class UnsupportedError(ValueError):
    """This collective/algorithm/dtype/op combination cannot run; the message names the alternatives."""


#: ALGORITHM_NOTIFIES (resources.py): on each channel of an algorithm whose schedule uses ACK and DATA.
#: The old name: what an algorithm's channel carries.
NOTIFIES_PER_CHANNEL = ALGORITHM_NOTIFIES
#: Most notifies a schedule may use on one of its channels (indices 0 .. MAX_ALGORITHM_NOTIFIES - 1).
MAX_ALGORITHM_NOTIFIES = CHANNEL_CLASSES[-1][0]
ACK, DATA = 0, 1
#: COMM_NOTIFIES (resources.py) on the communicator's own channel to a peer: the signature handshake's, by its
#: form (parity 0, parity 1, CAPTURED), the captured form's release round, and point-to-point's two.
SIG_NOTIFIES = (0, 1, 4)
SIG_RELEASE = 5
P2P_DATA, P2P_CREDIT = 2, 3
#: the handshake form of a call captured into an ACL graph (its index in SIG_NOTIFIES and in the slot rows): a
#: replay repeats it, so it cannot alternate by parity as the eager forms do (api/signatures.py)
CAPTURED = 2
# ALGORITHM_ENGINE, COMM_ENGINE: the engines of the two kinds of channel (resources.py)
SIG_SLOT_BYTES = 64    # one rank's call signature (8 int64)
ALIGN = 128            # byte alignment of slots inside the HCCL buffer

CData = Any


def split_even(total: int, parts: int) -> List[Tuple[int, int]]:
    """(offset, length) of ``parts`` near-equal consecutive pieces of ``total`` elements."""
    base, extra = divmod(total, parts)
    out, off = [], 0
    for j in range(parts):
        n = base + (1 if j < extra else 0)
        out.append((off, n))
        off += n
    return out


def region_bytes(smallest_buffer: int) -> int:
    """Bytes of the collective region: half the smallest HCCL buffer of the ranks involved, aligned."""
    return (smallest_buffer // 2) // ALIGN * ALIGN


def signature_area(n_ranks: int) -> int:
    """Bytes at the end of the HCCL buffer's second half kept for signature slots (3 forms x n_ranks)."""
    return -(-len(SIG_NOTIFIES) * n_ranks * SIG_SLOT_BYTES // ALIGN) * ALIGN


class IssueContext:
    """One rank's view while issuing one call: its threads, its peers' buffers, and the handshakes.

    ``res`` holds the acquired (or, in a dry run, virtual) resources: ``threads`` (main first),
    ``channels`` (peer -> handle), ``peer_buffers`` (peer -> (address, bytes)), ``local_buffer``,
    ``local_size`` and ``smallest_buffer``.  ``comm`` and ``stream`` are for library collectives.
    ``step_bytes`` caps one landing slot (:meth:`slot_elems`): the backend's preferred transfer per step
    (None: as large as the region allows).
    """

    def __init__(self, sink: TaskSink, res: Any, *, rank: int, size: int, topology: Topology, timeout_s: int,
                 dtype: DataType, op: ReduceOp = ReduceOp.SUM, comm: CData = None, stream: CData = None,
                 scratch: Optional[Callable[[int], CData]] = None, group: Optional[Sequence[int]] = None,
                 step_bytes: Optional[int] = None) -> None:
        self.sink = sink
        self.res = res
        self.rank = rank
        self.size = size
        self.topology = topology
        self.group: Sequence[int] = group if group is not None else range(size)
        self.timeout = timeout_s
        self.dtype = dtype
        self.op = op
        self.esz = dtype.itemsize
        self.base = res.local_buffer
        self.region_bytes = region_bytes(res.smallest_buffer)   # collectives live in [0, region_bytes)
        self.step_bytes = step_bytes
        self.threads: Sequence[int] = res.threads
        self.comm = comm
        self.stream = stream
        self._scratch = scratch

    # ---------------------------------------------------------------- addresses
    def mine(self, off: int) -> CData:
        """Address of byte ``off`` of my HCCL buffer."""
        return self.base + off

    def theirs(self, peer: int, off: int) -> CData:
        """Address of byte ``off`` of ``peer``'s HCCL buffer (valid on our channel to it)."""
        return self.res.peer_buffers[peer][0] + off

    def slot_elems(self, nslots: int) -> int:
        """Elements that fit in one of ``nslots`` equal aligned slots of the collective region, each at most
        ``step_bytes``: larger messages go in more, smaller steps (on the emulator a cache-sized step is
        still in cache when the peer reads it; HCOMM_STEP_BYTES)."""
        per = (self.region_bytes // max(1, nslots)) // ALIGN * ALIGN
        if self.step_bytes:
            per = min(per, self.step_bytes // ALIGN * ALIGN)
        n = per // self.esz
        if n < 1:
            raise UnsupportedError(f"HCCL buffer half of {self.region_bytes} bytes cannot hold {nslots} slots of one "
                                   f"{self.dtype.name} element; raise HCCL_BUFFSIZE")
        return n

    def slot_bytes(self, elems: int) -> int:
        """Bytes a landing slot of ``elems`` elements takes in the region (rounded up to ALIGN)."""
        return -(-elems * self.esz // ALIGN) * ALIGN

    def scratch(self, nbytes: int) -> CData:
        """Device scratch memory of at least ``nbytes`` (owned by the communicator)."""
        if self._scratch is None:
            raise UnsupportedError("this algorithm needs scratch memory but none was provided")
        return self._scratch(nbytes)

    # ---------------------------------------------------------------- primitives
    def copy(self, th: int, dst: CData, src: CData, nbytes: int) -> None:
        """Local copy (skipped when empty or in place)."""
        if nbytes > 0 and dst != src:
            self.sink.local_copy(th, dst, src, nbytes)

    def reduce(self, th: int, dst: CData, src: CData, count: int) -> None:
        """``dst = op(dst, src)`` over ``count`` elements."""
        if count > 0:
            self.sink.local_reduce(th, dst, src, count, int(self.dtype), int(self.op))

    def put(self, th: int, peer: int, off: int, src: CData, nbytes: int) -> None:
        """Write ``nbytes`` from local ``src`` to byte ``off`` of ``peer``'s HCCL buffer."""
        if nbytes > 0:
            self.sink.write(th, self.res.channels[peer], self.res.peer_buffers[peer][0] + off, src, nbytes)

    def record(self, th: int, peer: int, idx: int) -> None:
        """Set notify ``idx`` at ``peer``'s end of our channel."""
        self.sink.channel_notify_record(th, self.res.channels[peer], idx)

    def wait(self, th: int, peer: int, idx: int) -> None:
        """Wait for (and clear) notify ``idx`` at our end of the channel to ``peer``."""
        self.sink.channel_notify_wait(th, self.res.channels[peer], idx, self.timeout)

    def library_call(self, name: str, *args: Any) -> None:
        """Enqueue a library collective (``Binding.<name>``) on this communicator's stream."""
        self.sink.library_call(name, *args, self.comm, self.stream)

    # ---------------------------------------------------------------- handshakes
    def send(self, th: int, peer: int, writes: Sequence[Tuple[int, CData, int]], ack: int = ACK,
             data: int = DATA) -> None:
        """Sender half of a transfer: wait ACK, write each (offset, src, nbytes), record DATA.

        ``ack``/``data``: the notify pair, when several lanes share a channel (each its own pair).
        """
        self.wait(th, peer, ack)
        for off, src, n in writes:
            self.put(th, peer, off, src, n)
        self.record(th, peer, data)

    def shift(self, th: int, to: int, frm: int, writes: Sequence[Tuple[int, CData, int]], ack: int = ACK,
              data: int = DATA) -> None:
        """One step of a shift: release my zone to ``frm``, send ``writes`` to ``to``, wait for ``frm``'s data."""
        self.record(th, frm, ack)
        self.send(th, to, writes, ack, data)
        self.wait(th, frm, data)

    def exchange(self, th: int, peer: int, writes: Sequence[Tuple[int, CData, int]]) -> None:
        """Both halves with one peer: release my zone, send, then wait for the peer's data."""
        self.shift(th, peer, peer, writes)

    def fork(self, used: int) -> None:
        """Main thread releases slaves 1..used-1 (each waits its notify 0)."""
        main = self.threads[0]
        for t in range(1, used):
            self.sink.thread_notify_record(main, self.threads[t], 0)
            self.sink.thread_notify_wait(self.threads[t], 0, self.timeout)

    def join(self, used: int) -> None:
        """Slaves 1..used-1 signal main's notify t-1, and main waits for all of them."""
        main = self.threads[0]
        for t in range(1, used):
            self.sink.thread_notify_record(self.threads[t], main, t - 1)
        for t in range(1, used):
            self.sink.thread_notify_wait(main, t - 1, self.timeout)
