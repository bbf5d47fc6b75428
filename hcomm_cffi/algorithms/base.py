"""Shared vocabulary of the algorithms: the per-call context, notify indices, handshakes, fork/join.

Conventions (every algorithm, every rank, every channel):

* Channel notify indices: ``ACK = 0`` ("my landing zone for you is free"), ``DATA = 1`` ("what
  I wrote to you is complete"), used by the collectives; ``P2P_DATA = 2`` and ``P2P_CREDIT = 3``
  are reserved for point-to-point lanes so they can run concurrently with a collective on the
  same channel.  Every channel is acquired with ``NOTIFIES_PER_CHANNEL = 4``.
* A transfer to a peer is always ``wait(ACK) -> write -> record(DATA)`` and the matching receive
  ``record(ACK) -> wait(DATA)``; so each notify is recorded once and waited once per step and no
  write lands in memory the peer has not released (HCOMM_SEMANTICS.md §3.3).
* HCCL buffer layout: collectives use the first half ``[0, H)``; P2P lanes the second half.
* Thread notify indices: slave ``t`` (1-based) waits its notify 0 (fork) and records main's
  notify ``t - 1`` (join); the main thread's last notify is the unused host-sync one.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Sequence, Tuple

from ..binding import Binding
from ..enums import HOST_REDUCE_DTYPES, HOST_REDUCE_OPS, DataType, ReduceOp
from ..resources import Resources

__all__ = ["ACK", "DATA", "P2P_DATA", "P2P_CREDIT", "NOTIFIES_PER_CHANNEL", "ALIGN", "Ctx", "OpArgs",
           "UnsupportedError", "split_even", "check_reducible"]

ACK, DATA, P2P_DATA, P2P_CREDIT = 0, 1, 2, 3
NOTIFIES_PER_CHANNEL = 4
ALIGN = 128            # byte alignment of slots inside the HCCL buffer

CData = Any


class UnsupportedError(ValueError):
    """This collective/algorithm/dtype/op combination cannot run; the message names the alternatives."""


@dataclass
class OpArgs:
    """One collective call: pointers (``char *``), element count, type, op, root (comm rank).

    ``count`` is the vector length for allreduce/broadcast/reduce, the per-rank block for
    allgather/reduce_scatter (output block) and the per-destination block for alltoall.
    """

    coll: str
    send: CData
    recv: CData
    count: int
    dtype: DataType
    op: ReduceOp = ReduceOp.SUM
    root: int = 0


def split_even(total: int, parts: int) -> List[Tuple[int, int]]:
    """(offset, length) of ``parts`` near-equal consecutive pieces of ``total`` elements."""
    base, extra = divmod(total, parts)
    out, off = [], 0
    for j in range(parts):
        n = base + (1 if j < extra else 0)
        out.append((off, n))
        off += n
    return out


def check_reducible(algorithm: str, dtype: DataType, op: ReduceOp) -> None:
    """Raise UnsupportedError when the data-plane reduce cannot do ``op`` on ``dtype``."""
    if dtype in HOST_REDUCE_DTYPES and op in HOST_REDUCE_OPS:
        return
    why = []
    if op not in HOST_REDUCE_OPS:
        why.append(f"op={op.name.lower()}")
    if dtype not in HOST_REDUCE_DTYPES:
        why.append(f"dtype={dtype.name.lower()}")
    raise UnsupportedError(
        f"algorithm={algorithm!r} cannot reduce with {' and '.join(why)}: the data-plane reduce supports "
        "dtypes int8/int16/int32/fp16/fp32/bf16 with ops sum/max/min; use algorithm='native' "
        "(or 'auto', which picks it) for prod and for int64/uint*/fp64")


class Ctx:
    """Issues one rank's tasks for one collective over acquired :class:`Resources`."""

    def __init__(self, binding: Binding, res: Resources, rank: int, timeout_s: int, dtype: DataType,
                 op: ReduceOp = ReduceOp.SUM, scratch: Optional[Callable[[int], CData]] = None) -> None:
        self.b = binding
        self.res = res
        self.rank = rank
        self.timeout = timeout_s
        self.dtype = dtype
        self.op = op
        self.esz = dtype.itemsize
        self.base = res.local_buffer
        half = res.__dict__.get("_half")
        if half is None:
            sizes = [res.local_size] + [s for _, s in res.peer_buffers.values()]
            half = res.__dict__["_half"] = (min(sizes) // 2) // ALIGN * ALIGN
        self.half = half   # collectives live in [0, half)
        self._scratch = scratch
        self.threads = res.threads

    # ---------------------------------------------------------------- addresses
    def mine(self, off: int) -> CData:
        """Address of byte ``off`` of my HCCL buffer."""
        return self.base + off

    def theirs(self, peer: int, off: int) -> CData:
        """Address of byte ``off`` of ``peer``'s HCCL buffer (valid on our channel to it)."""
        return self.res.peer_buffers[peer][0] + off

    def slot_elems(self, nslots: int) -> int:
        """Elements that fit in one of ``nslots`` equal aligned slots of the collective region."""
        per = (self.half // max(1, nslots)) // ALIGN * ALIGN
        n = per // self.esz
        if n < 1:
            raise UnsupportedError(f"HCCL buffer half of {self.half} bytes cannot hold {nslots} slots of one "
                                   f"{self.dtype.name} element; raise HCCL_BUFFSIZE")
        return n

    def scratch(self, nbytes: int) -> CData:
        """Device scratch memory of at least ``nbytes`` (owned by the communicator)."""
        if self._scratch is None:
            raise UnsupportedError("this algorithm needs scratch memory but none was provided")
        return self._scratch(nbytes)

    # ---------------------------------------------------------------- primitives
    def copy(self, th: int, dst: CData, src: CData, nbytes: int) -> None:
        """Local copy (skipped when empty or in place)."""
        if nbytes > 0 and dst != src:
            self.b.local_copy(th, dst, src, nbytes)

    def reduce(self, th: int, dst: CData, src: CData, count: int) -> None:
        """``dst = op(dst, src)`` over ``count`` elements."""
        if count > 0:
            self.b.local_reduce(th, dst, src, count, int(self.dtype), int(self.op))

    def put(self, th: int, peer: int, off: int, src: CData, nbytes: int) -> None:
        """Write ``nbytes`` from local ``src`` to byte ``off`` of ``peer``'s HCCL buffer."""
        if nbytes > 0:
            self.b.write(th, self.res.channels[peer], self.res.peer_buffers[peer][0] + off, src, nbytes)

    def record(self, th: int, peer: int, idx: int) -> None:
        """Set notify ``idx`` at ``peer``'s end of our channel."""
        self.b.channel_notify_record(th, self.res.channels[peer], idx)

    def wait(self, th: int, peer: int, idx: int) -> None:
        """Wait for (and clear) notify ``idx`` at our end of the channel to ``peer``."""
        self.b.channel_notify_wait(th, self.res.channels[peer], idx, self.timeout)

    # ---------------------------------------------------------------- handshakes
    def send(self, th: int, peer: int, writes: Sequence[Tuple[int, CData, int]]) -> None:
        """Sender half of a transfer: wait ACK, write each (offset, src, nbytes), record DATA."""
        self.wait(th, peer, ACK)
        for off, src, n in writes:
            self.put(th, peer, off, src, n)
        self.record(th, peer, DATA)

    def exchange(self, th: int, peer: int, writes: Sequence[Tuple[int, CData, int]]) -> None:
        """Both halves with one peer: release my zone, send, then wait for the peer's data."""
        self.record(th, peer, ACK)
        self.send(th, peer, writes)
        self.wait(th, peer, DATA)

    def fork(self, used: int) -> None:
        """Main thread releases slaves 1..used-1 (each waits its notify 0)."""
        main = self.threads[0]
        for t in range(1, used):
            self.b.thread_notify_record(main, self.threads[t], 0)
            self.b.thread_notify_wait(self.threads[t], 0, self.timeout)

    def join(self, used: int) -> None:
        """Slaves 1..used-1 signal main's notify t-1, and main waits for all of them."""
        main = self.threads[0]
        for t in range(1, used):
            self.b.thread_notify_record(self.threads[t], main, t - 1)
        for t in range(1, used):
            self.b.thread_notify_wait(main, t - 1, self.timeout)
