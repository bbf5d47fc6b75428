"""The vendor collectives of libhccl.so (HcclAllReduce, HcclSend, ...) on the emulator.

Each call is expanded, on the host, into ordinary tasks on the stream's queue: copies into this
rank's HCCL buffer, channel notifies to the peers, and reads or reductions straight out of the
peers' buffers (a one-shot mesh; deterministic: every rank reduces in rank order, so all ranks
produce the same bytes).  Large messages go in buffer-sized chunks.

Two protocols keep binary notifies and buffer reuse safe:

* symmetric ops (allreduce, allgather, reduce-scatter, broadcast, barrier) exchange one "ready"
  notify per chunk and alternate between two notify indices and two buffer regions by chunk parity: a rank can only
  reach chunk k+2 (same parity) after every peer signalled chunk k+1, which each peer does after it
  finished chunk k, so the region and the notify of chunk k are free again: one round trip per chunk;
* the others use a two-phase handshake per chunk (notify 0 "my data is in my buffer", notify 1
  "I am done reading yours").

They work in each rank's native scratch segment (the size of the HCCL buffer, never the HCCL
buffer itself, so algorithms over the HCCL buffer and these collectives cannot overwrite each
other).  Layout (H = half of it): [0, H) two-phase ops and direct calls; [H, 1.5H) send/recv, one slice per peer
(notifies 2 and 3); [1.5H, 2H) four parity regions: staging and result for each parity (notifies
4/5: "staged", 6/7: "result ready", by parity).  Allreduce on 3 or more ranks above
``TWO_SHOT_ABOVE`` bytes is two-shot: every rank reduces one block of the chunk into its result
region, then everyone copies all blocks out (n times less reduction work per rank than one-shot).

Broadcast, allgather and reduce-scatter run the parity protocol over
cache-sized pieces (``PIECE_BYTES``, not whole regions): a piece staged by one rank is still in the
shared cache when its peers read it, and with two parities a rank stages piece k+1 while its peers
drain piece k (the root of a broadcast fills the other region while the others copy out, across
consecutive calls too).  When the communicator has more ranks than the host has cores, the ranks cannot
run at once and nothing overlaps: the pieces are then as large as a region (``SHARED_PIECE_BYTES``), each
piece's handshake round being the cost.  Broadcast is symmetric in its notifies (every rank signals every rank per
piece) so that the parity invariant holds whatever the root of the calls before and after it.  A
rank's own allgather block goes straight from its send buffer to its receive buffer, and a
reduce-scatter reads its own operand straight from its send buffer (neither is staged).

From ``DIRECT_FROM`` bytes the four symmetric collectives are direct (``_Plan.direct``): no staging, one pass.
Each rank publishes at the start of its scratch where its operands are (a memfd block of its device memory, which
the peers map, sim/peer_memory.py; or, for memory they cannot map, a staging copy in its scratch [DESC_BYTES, H)),
then once the ranks whose operands it uses signalled READY (signed) moves its share in one host task, signals them
DONE and waits for DONE from the ranks that used its own operands (all of them, or a broadcast's root and its
receivers): allreduce reduces its 1/n of the elements from every rank's send buffer in rank order and writes
the result into every rank's receive buffer (cache-sized pieces, ``kernels.reduce_spread``), reduce-scatter
reduces its block, allgather and broadcast copy the blocks they receive.  Like the two-phase ops it ends with
every peer done with its memory, so the [0, H) area and the parity protocol are left as they were.
"""
from __future__ import annotations

import os
import struct
import zlib
from typing import Any, Callable, Deque, Dict, Iterator, List, Optional, Sequence, Tuple

from .._ffi import ffi
from ..enums import DataType, ReduceOp
from ..errors import COLLECTIVE_MISMATCH
from .announce import ENTRIES as ANNOUNCED, LIBRARY, entry
from .comm import SimChannel, SimComm
from .errors import ACL_ERROR_RT_INTERNAL_ERROR, HcclResult, SimError
from . import compiled, kernels, peer_memory
from .group import collective
from .part import Part, check_out
from .queues import SimThread
from .runtime import EXECUTOR, TaskFailure, shares_cores
from .tasks import ChannelRecord, ChannelWait, HostCall, LocalCopy, LocalReduce, Reduce3, Task, UfuncReduce
from .peer_memory import PeerMapError
from .state import SimState

NATIVE_ENGINE = 1            # COMM_ENGINE_CPU_TS
NATIVE_PROTOCOL = 0x4E41     # private protocol id: never matches a user channel
NATIVE_NOTIFIES = 8          # 0 ready, 1 done (two-phase); 2 data, 3 done (send/recv); 4-7 parity
READY, DONE, SENDRECV_STAGED, SENDRECV_TAKEN, PARITY, PARITY_RESULT = 0, 1, 2, 3, 4, 6
TWO_SHOT_ABOVE = 256 << 10   # allreduce on 3+ ranks: two-shot above this many bytes
CALL_CACHE_MAX = 64          # HcclAllReduce fast-path entries (argument tuples) kept per process
# The collective signatures (whatever HCOMM_SIM_CHECK says: the backend contract promises the in-band check,
# lib/contract.py): every data-ready record of a call (the parity notifies, the two-phase READY) writes the
# call's signature value into the peer's notify word instead of 1, and the matching wait fails unless the word
# holds its own call's value -- no task is added, and ranks in different collectives (an allreduce against a
# broadcast whose handshakes pair up) fail at once instead of mixing their data.  The value is 31 bits of a
# CRC of the signature (a different call is missed with probability 2**-31); to name the peer's call in the
# message each rank also keeps the signature itself in a table at the end of its scratch, written when the
# call is planned (read only to explain a mismatch).
SIG_BYTES = 64
SIG_MAGIC = 0x5349474E       # "SIGN": a table entry holds a signature
SIG_TABLE = 256              # signature table entries per rank (indexed by value % SIG_TABLE)
_SIGNED = frozenset((READY, PARITY, PARITY + 1))
_SIG_KINDS = ("allreduce", "reduce", "broadcast", "allgather", "reduce_scatter", "alltoall", "scatter",
              "allgatherv", "reduce_scatterv", "alltoallvc", "barrier")
_SIG_FIELDS = struct.Struct("<6q")
PIECE_BYTES = 512 << 10      # bytes one rank stages per piece of the pipelined symmetric ops (L2/L3-sized)
# ... when the ranks share cores (more ranks than the host has cores): they cannot run at once, so nothing overlaps
# across ranks and every piece costs one handshake round, a few context switches; pieces as large as a parity
# region (4 ranks on 2 cores, loaded machine: broadcast 4 MiB 5.5-9.2 -> 2.8-3.0 ms, 64 MiB 108-117 -> 36 ms,
# reduce_scatter 4 MiB 5.6 -> 1.4 ms, 64 MiB 71 -> 32 ms; benchmarks/compare_allreduce.py's worker)
SHARED_PIECE_BYTES = 16 << 20
STAMP_BYTES = 64             # the end of each parity region: the number of the chunk staged there (_Plan.stamp)
# Direct calls (_Plan.direct): a message of at least DIRECT_FROM bytes whose operands fit the staging area is
# moved where its operands are -- every rank reduces or copies its share reading the peers' operands in their
# device memory (sim/peer_memory.py) and writing the results into the peers' receive buffers -- between a READY
# and a DONE handshake; an operand the peers cannot map is staged in its rank's scratch at [DESC_BYTES, H).
# Below it the staged schedules, kept and repeated from the replay ring, are faster: at 256 and 512 KiB on 4 ranks
# allgather took 48-76 us against 293-629 direct, reduce-scatter 57-92 against 418-770; on 2 ranks allreduce 46-86
# against 108-120 (_compare_workers.py, 2 cores, the two alternated).
DIRECT_FROM = 1 << 20
# Symmetric calls up to this many bytes (those below the direct schedules) keep their task list for repeats (_keep):
# repeated from the replay ring in C, a 128 KiB allreduce took 21-31 us on 2 ranks and 73-89 on 4, against 60-127
# and 228-240 launched anew from Python each time (_compare_workers.py, 2 cores)
SMALL_CACHED = DIRECT_FROM
DESC_BYTES = 4096            # [0, DESC_BYTES) of the scratch: where this rank's operands of a direct call are
_DESC_WORDS = 8              # int64 per published operand: kind, pid, address, fd, inode, block size, offset, freed
_BLOCK, _STAGED = 1, 2       # kind: in a memfd block (map it), or staged at the offset of the owner's scratch

_SUPPORTED = {DataType.INT8, DataType.INT16, DataType.INT32, DataType.FP16, DataType.FP32, DataType.INT64,
              DataType.UINT64, DataType.UINT8, DataType.UINT16, DataType.UINT32, DataType.FP64, DataType.BFP16}

__all__ = ["NativeCollectives"]

_PLAIN = type(ffi.NULL)      # the type of a non-owning cdata (ffi.cast); ffi.new/from_buffer results own memory


_DTYPE_BY_VALUE = {int(d): d for d in _SUPPORTED}
_OP_BY_VALUE = {int(o): o for o in ReduceOp if o != ReduceOp.RESERVED}


def _dtype(value: int) -> DataType:
    dt = _DTYPE_BY_VALUE.get(value)
    if dt is None:
        try:
            name = DataType(value).name
        except ValueError:
            raise SimError(HcclResult.E_PARA, f"dataType={value} is not an HcclDataType") from None
        raise SimError(HcclResult.E_NOT_SUPPORT, f"dataType {name} is not supported by the collectives")
    return dt


def _op(value: int) -> ReduceOp:
    op = _OP_BY_VALUE.get(value)
    if op is None:
        raise SimError(HcclResult.E_PARA, f"op={value} is not an HcclReduceOp (sum 0, prod 1, max 2, min 3)")
    return op


def _ptr(p: Any, name: str, needed: bool) -> Any:
    if needed and (p is None or p == ffi.NULL):
        raise SimError(HcclResult.E_PTR, f"{name} is NULL")
    return ffi.cast("char *", p) if p is not None else ffi.NULL


def _u64s(ptr: Any, n: int, name: str) -> List[int]:
    """``n`` uint64 values of a host array argument (counts, displacements, count matrices)."""
    check_out(ptr, name)
    arr = ffi.cast("uint64_t *", ptr)
    return [int(arr[i]) for i in range(n)]


def _overlap(a: Any, b: Any, nbytes: int) -> bool:
    """Whether [a, a+nbytes) and [b, b+nbytes) share a byte."""
    lo, hi = int(ffi.cast("uintptr_t", a)), int(ffi.cast("uintptr_t", b))
    return nbytes > 0 and abs(lo - hi) < nbytes


def _describe(fields: Optional[Sequence[int]]) -> str:
    """'allreduce of 1024 x fp32, op sum' from a signature's fields (magic, kind, count, dtype, op, root)."""
    if fields is None or fields[0] != SIG_MAGIC or not 0 <= fields[1] < len(_SIG_KINDS):
        return "a call whose signature is not known here"
    _, kind, count, dtype, op, root = fields[:6]
    try:
        dname = DataType(dtype).name.lower()
    except ValueError:
        dname = f"dtype {dtype}"
    text = f"{_SIG_KINDS[kind]} of {count} x {dname}"
    if op >= 0:
        text += f", op {ReduceOp(op).name.lower()}"
    return text + (f", root {root}" if root >= 0 else "")


def _table_at(comm: SimComm, value: int) -> int:
    """Offset in a rank's scratch of the signature table entry of ``value``."""
    return comm.buffer_bytes - (SIG_TABLE - value % SIG_TABLE) * SIG_BYTES


def _part(count: int, lo: int, cap: int) -> int:
    """Elements of a block of ``count`` that fall in the round starting at ``lo`` (rounds of ``cap``)."""
    return max(0, min(cap, count - lo))


class NativeState:
    """Per-communicator state of the native collectives: their channels, chunk parity and signatures."""

    def __init__(self) -> None:
        self.channels: Dict[int, SimChannel] = {}
        self.counter = ffi.new("int64_t[1]")   # seq, in C memory: engine.c's hce_enter advances it (compiled.Repeat)
        self.signatures: Dict[int, Tuple[int, ...]] = {}   # value -> fields, of this rank's calls (bounded)
        self.mapped = peer_memory.PeerMappings()          # the peers' device memory direct calls mapped here

    @property
    def seq(self) -> int:
        """Symmetric chunks issued so far (a call's parity: its first chunk's low bit)."""
        return int(self.counter[0])

    @seq.setter
    def seq(self, value: int) -> None:
        self.counter[0] = value

    def sign(self, comm: SimComm, fields: Tuple[int, ...]) -> int:
        """The notify value of a call with signature ``fields``; publishes the fields in this rank's table."""
        value = 0x80000000 | (zlib.crc32(_SIG_FIELDS.pack(*fields)) & 0x7FFFFFFF)
        if value not in self.signatures:
            if len(self.signatures) >= 4 * SIG_TABLE:
                self.signatures.clear()
            self.signatures[value] = fields
        entry = ffi.cast("int64_t *", comm.peer_scratch[comm.rank].ptr + _table_at(comm, value))
        entry[6] = 0                           # being rewritten: a reader sees no value, not a torn entry
        for i, f in enumerate(fields):
            entry[i] = f
        entry[6] = value
        return value

    def mismatch(self, comm: SimComm, peer: int, got: int, want: int) -> str:
        """The message of a wait whose record carried ``got`` where this rank's call has ``want`` (runtime.py)."""
        entry = ffi.cast("int64_t *", comm.peer_scratch[peer].ptr + _table_at(comm, got))
        theirs = [int(entry[i]) for i in range(7)]
        peer_call = _describe(theirs[:6]) if theirs[6] == got else (
            "a call without a signature" if got == 1 else f"another call (signature 0x{got:08x})")
        return (f"checker: {COLLECTIVE_MISMATCH}: rank {comm.rank} of communicator {comm.name} is in "
                f"{_describe(self.signatures.get(want))} but rank {peer} is in {peer_call} (every rank must call "
                "the same collectives in the same order)")


class _StampWrite:
    """Host task of a chunk's handshake (_Plan.stamp): this rank's stamp = its queue's next chunk number + 1 (a region
    never staged reads 0).  ``stamp_word`` is what sim/compiled.py writes instead."""

    __slots__ = ("stamp_word", "fifo")

    def __init__(self, stamp_word: Any, fifo: Deque[int]) -> None:
        self.stamp_word = stamp_word
        self.fifo = fifo

    def __call__(self) -> None:
        self.stamp_word[0] = self.fifo[0] + 1


class _StampCheck:
    """Host task after a chunk's handshake (_Plan.stamp): every peer's stamp holds this rank's chunk (popped from the
    queue's FIFO).  ``stamp_peers`` is what sim/compiled.py compares instead (a mismatch it leaves to this)."""

    __slots__ = ("comm", "theirs", "stamp_peers", "fifo")

    def __init__(self, comm: SimComm, theirs: List[Tuple[int, Any]], fifo: Deque[int]) -> None:
        self.comm = comm
        self.theirs = theirs
        self.stamp_peers = [word for _, word in theirs]
        self.fifo = fifo

    def __call__(self) -> None:
        c = self.comm
        want = self.fifo.popleft() + 1
        for p, word in self.theirs:
            got = int(word[0])
            if got != want:
                held = f"chunk #{got - 1}" if got else "no chunk yet"
                raise TaskFailure(HcclResult.E_INTERNAL, ACL_ERROR_RT_INTERNAL_ERROR,
                                  f"rank {c.rank} of communicator {c.name}: rank {p}'s staging holds {held} of "
                                  f"the library's collectives where this rank is at chunk #{want - 1}: the "
                                  "ranks' handshakes fell out of step; nothing was reduced from it (it would "
                                  "have been another call's data)")


#: an operand of a direct call: (this rank's pointer, bytes, whether the peers read or write it, whether the call
#: reads it, whether the call writes it, the byte range [lo, hi) of it only this rank touches); the same slots on
#: every rank (a slot of 0 bytes: none on this rank)
_Operand = Tuple[Any, int, bool, bool, bool, Tuple[int, int]]


class _Plan:
    """Task list under construction for one native call on one rank."""

    def __init__(self, comm: SimComm, th: SimThread, channels: Dict[int, SimChannel]) -> None:
        self.comm = comm
        self.th = th
        self.ch = channels
        self.tasks: List[Task] = []
        self.half = comm.buffer_bytes // 2
        self.signature = 0                   # the notify value every peer's call must match (sign()); 0: none
        self.seq0 = comm.native.seq          # symmetric chunks issued before this call (its first parity)
        self.stamped: List[int] = []         # the numbers of this call's stamped chunks (pushed at launch)

    def sign(self, kind: str, count: int, dt: DataType, op: int = -1, root: int = -1) -> None:
        """What every rank's call must agree on, carried by each data-ready record (the module's comment)."""
        self.signature = self.comm.native.sign(self.comm, (SIG_MAGIC, _SIG_KINDS.index(kind), count, int(dt), int(op),
                                                           root))

    def _owner(self, dst: Any, src: Any, n: int) -> Optional[SimThread]:
        """The thread a data task carries: this plan's when it touches the rank's HCCL buffer (the race checker
        logs that access), else None -- the native scratch and user buffers are no checker business, so the
        task then skips the checker's bookkeeping on every run (the cached small calls run their lists often)."""
        if self.comm.race is None:
            return self.th
        lo = self.comm.buf.addr
        hi = lo + self.comm.buffer_bytes
        for p in (dst, src):
            at = int(ffi.cast("uintptr_t", p))
            if at < hi and at + n > lo:
                return self.th
        return None

    def copy(self, dst: Any, src: Any, n: int) -> None:
        if n:
            self.tasks.append(LocalCopy(self._owner(dst, src, n), dst, src, n))

    def reduce(self, dst: Any, src: Any, count: int, dt: DataType, op: ReduceOp) -> None:
        if count:
            self.tasks.append(LocalReduce(self._owner(dst, src, count * dt.itemsize), dst, src, count, dt, op))

    def stamp(self, region: int, peers: Sequence[int]) -> Task:
        """Tasks around the handshake of the chunk whose parity region was just taken (``parity_region``):
        this rank's stamp, written after its data is staged (added now), and the check that the staging of
        every peer in ``peers`` (those whose staged data this rank reads) holds the same chunk (returned, to
        add after the wait).

        The chunk numbers are symmetric (every rank counts the same chunks), so a peer whose staging holds
        another chunk's data -- one rank's waits and the other's records out of step, however that came about --
        fails the call naming both numbers instead of reducing the peer's earlier data.  The numbers come from
        the queue's FIFO (``Queue.stamps``) filled at launch, so the cached task lists of repeated calls stamp
        correctly.
        """
        c = self.comm
        fifo = self.th.queue.stamps
        at = region + self.region_bytes()
        mine = ffi.cast("int64_t *", self.ccl(c.rank) + at)
        theirs = [(p, ffi.cast("int64_t *", self.ccl(p) + at)) for p in peers]
        self.stamped.append(c.native.seq - 1)

        self.tasks.append(HostCall(_StampWrite(mine, fifo)))
        return HostCall(_StampCheck(c, theirs, fifo))

    def handshake(self, peers: Sequence[int], idx: int, record: bool = True, wait: bool = True) -> None:
        signed = self.signature if idx in _SIGNED else 0
        if record:
            for p in peers:
                self.tasks.append(ChannelRecord(self.th, self.ch[p], idx, signed or 1))
        if wait:
            for p in peers:
                self.tasks.append(ChannelWait(self.th, self.ch[p], idx, 0.0, signed))

    def reduce_all(self, dst: Any, offset: int, n: int, dt: DataType, op: ReduceOp, own: Any = None) -> None:
        """``dst`` = the ``op``-reduction, in rank order, of ``n`` elements at ``offset`` of every rank's scratch.

        ``own``: this rank's operand is read from there instead of its scratch (it was not staged).
        """
        nranks = self.comm.nranks
        srcs = [self.ccl(r) + offset for r in range(nranks)]
        if own is not None:
            srcs[self.comm.rank] = own
        if nranks == 1:
            self.copy(dst, srcs[0], n * dt.itemsize)
            return
        if not n:
            return
        if dt == DataType.BFP16:  # reduced through float32 by the kernels
            self.tasks.append(Reduce3(self.th, dst, srcs[0], srcs[1], n, dt, op))
            for r in range(2, nranks):
                self.reduce(dst, srcs[r], n, dt, op)
            return
        # views made now, once: executing the task is then a bare ufunc call
        ufunc = kernels.ufunc_of(op)
        out = kernels.view(dst, n, dt)
        self.tasks.append(UfuncReduce(self.th, ufunc, out, kernels.view(srcs[0], n, dt), kernels.view(srcs[1], n, dt)))
        for r in range(2, nranks):
            self.tasks.append(UfuncReduce(self.th, ufunc, out, out, kernels.view(srcs[r], n, dt)))

    def stage_blocks(self, send: Any, block_count: int, off: int, n: int, esz: int, at: int = 0,
                     skip: int = -1) -> None:
        """Copy elements [off, off+n) of each of the nranks blocks of ``send`` to offset ``at`` of my scratch,
        packed (block ``skip``'s place is left as it is)."""
        base = self.ccl(self.comm.rank) + at
        for q in range(self.comm.nranks):
            if q != skip:
                self.copy(base + q * n * esz, send + (q * block_count + off) * esz, n * esz)

    def staged_pieces(self, src: Any, count: int, esz: int) -> Iterator[Tuple[int, int, int, int]]:
        """The pieces of ``count`` elements of ``esz`` bytes at ``src``, each copied into the staging of the next
        parity region of this rank: per piece (first element, elements, notify index, staging offset)."""
        chunk = self.piece(esz)
        own = self.ccl(self.comm.rank)
        for off in range(0, count, chunk):
            n = min(chunk, count - off)
            idx, region, _ = self.parity_region()
            self.copy(own + region, src + off * esz, n * esz)
            yield off, n, idx, region

    def parity_region(self) -> Tuple[int, int, int]:
        """(notify index, staging offset, region bytes) of the next symmetric chunk; advances parity."""
        p, staging, _, size = self.parity_regions()
        return PARITY + p, staging, size

    def parity_regions(self) -> Tuple[int, int, int, int]:
        """(parity, staging offset, result offset, region bytes) of the next symmetric chunk."""
        state = self.comm.native
        p = state.seq & 1
        state.seq += 1
        span = self.region_span()
        base = self.half + self.half // 2
        return p, base + p * span, base + (2 + p) * span, span - STAMP_BYTES

    def piece(self, esz: int, blocks: int = 1) -> int:
        """Elements per block of one pipelined piece: ``blocks`` blocks fill at most ``PIECE_BYTES`` (ranks sharing
        cores: ``SHARED_PIECE_BYTES``) and a region; every rank of the communicator computes the same."""
        piece = SHARED_PIECE_BYTES if shares_cores(self.comm.nranks) else PIECE_BYTES
        return max(1, min(self.region_bytes(), piece) // (esz * blocks))

    def region_bytes(self) -> int:
        """Data bytes of each of the four parity regions (staging and result, for parities 0 and 1); each ends
        with its chunk stamp (STAMP_BYTES)."""
        return self.region_span() - STAMP_BYTES

    def region_span(self) -> int:
        """Size of each of the four parity regions, stamp included (the signature table follows them)."""
        return (self.half // 8 - SIG_TABLE * SIG_BYTES // 4) // 64 * 64

    def ccl(self, rank: int) -> Any:
        """Start of ``rank``'s native scratch memory as mapped here."""
        return self.comm.peer_scratch[rank].ptr

    def direct_fits(self, staged_bytes: int) -> bool:
        """Whether a direct call whose two operands, all staged, take ``staged_bytes`` fits the staging area (each
        starts 64-byte aligned); the same answer on every rank: it decides the schedule."""
        return DESC_BYTES + staged_bytes + 2 * 64 <= self.half

    def direct(self, operands: Sequence[_Operand], readers: Sequence[int], used: Sequence[Sequence[int]],
               work: Callable[[List[List[int]]], None]) -> None:
        """Tasks of a direct call: publish where this rank's ``operands`` are, READY to the ``readers`` (the peers
        that use them) and from the peers whose operands this rank uses (``used``, per slot), ``work``, then DONE to
        those peers and from the readers: a rank hands its memory back once every reader is done with it, and waits
        for no one else (a broadcast's receivers wait for the root only).

        ``work`` gets, per operand slot, the address here of this rank's operand and of the operands of the peers
        ``used`` names for that slot (the others are 0); it runs as one host task.  An operand the peers share that
        is not in a memfd block is staged in this rank's scratch (but for the bytes only this rank touches, its
        ``own`` range, which it reaches where they are); an operand in this rank's HCCL buffer is staged whole (the
        race checker logs those accesses: they go through the copies below, never through ``work``).  Staging copies
        in before READY what the call reads, and copies out after DONE what it writes.
        """
        c, me = self.comm, self.comm.rank
        lo, hi = c.buf.addr, c.buf.addr + c.buffer_bytes
        desc = ffi.new("int64_t[]", _DESC_WORDS * len(operands))
        mine: List[int] = []
        out: List[Tuple[Any, Any, int]] = []
        at = DESC_BYTES
        for k, (ptr, nbytes, shared, read, written, own) in enumerate(operands):
            addr = int(ffi.cast("uintptr_t", ptr)) if nbytes else 0
            block = peer_memory.locate(addr, nbytes) if nbytes and shared else None
            in_buffer = nbytes > 0 and addr < hi and addr + nbytes > lo
            w = k * _DESC_WORDS
            if nbytes and (in_buffer or (shared and block is None)):
                stage = self.ccl(me) + at
                parts = [(0, nbytes)] if in_buffer else [(0, own[0]), (own[1], nbytes)]
                for a, b in parts:
                    if b > a and read:
                        self.copy(stage + a, ptr + a, b - a)
                    if b > a and written:
                        out.append((ptr + a, stage + a, b - a))
                desc[w], desc[w + 6] = _STAGED, at
                mine.append(int(ffi.cast("uintptr_t", stage)) if in_buffer else addr)
                at += -(-nbytes // 64) * 64
            else:
                if block is not None:
                    desc[w], desc[w + 1], desc[w + 2] = _BLOCK, block[0], addr
                    desc[w + 3], desc[w + 4], desc[w + 5], desc[w + 6] = block[1], block[2], block[3], block[4]
                mine.append(addr)
        shared_slots = [k for k, o in enumerate(operands) if o[2]]
        words = len(operands) * _DESC_WORDS
        published = ffi.cast("int64_t *", self.ccl(me))
        mapped = c.native.mapped
        pid = os.getpid()

        def publish() -> None:
            ffi.memmove(published, desc, words * 8)
            for k in shared_slots:
                published[k * _DESC_WORDS + 7] = peer_memory.released()

        def run() -> None:
            where = [[0] * c.nranks for _ in operands]
            for k, addr in enumerate(mine):
                where[k][me] = addr
            for k in shared_slots:
                w = k * _DESC_WORDS
                for q in used[k]:
                    theirs = ffi.cast("int64_t *", self.ccl(q))
                    kind = int(theirs[w])
                    if kind == _STAGED:
                        where[k][q] = int(ffi.cast("uintptr_t", self.ccl(q))) + int(theirs[w + 6])
                    elif kind == _BLOCK and int(theirs[w + 1]) == pid:
                        where[k][q] = int(theirs[w + 2])
                    elif kind == _BLOCK:
                        try:
                            base = mapped.address(int(theirs[w + 1]), int(theirs[w + 3]), int(theirs[w + 4]),
                                                  int(theirs[w + 5]), int(theirs[w + 7]))
                        except PeerMapError as exc:
                            raise TaskFailure(exc.code, exc.acl_code, f"rank {me} of communicator {c.name}: "
                                                                      f"rank {q}'s operand: {exc.message}") from None
                        where[k][q] = base + int(theirs[w + 6])
                    else:
                        raise TaskFailure(HcclResult.E_INTERNAL, ACL_ERROR_RT_INTERNAL_ERROR,
                                          f"rank {me} of communicator {c.name}: rank {q} published no operand "
                                          f"{k} for this call (kind {kind}): the ranks are in different calls")
            work(where)

        sources = sorted({q for ranks in used for q in ranks})
        self.tasks.append(HostCall(publish))
        self.handshake(readers, READY, wait=False)
        self.handshake(sources, READY, record=False)
        self.tasks.append(HostCall(run))
        self.handshake(sources, DONE, wait=False)
        self.handshake(readers, DONE, record=False)
        for ptr, stage, nbytes in out:
            self.copy(ptr, stage, nbytes)


class _Repeated:
    """What a small native call keeps for its repeats (NativeCollectives._keep): per starting parity its task list and
    their compiled form, and -- with the compiled engine, for whole lists -- the engine.c launch of the call
    (compiled.Repeat), counting in its communicator's C counters."""

    __slots__ = ("args", "comm", "native", "queue", "advance", "value", "stamped", "lists", "call", "forgotten")

    def __init__(self, args: tuple, comm: SimComm, nat: NativeState, queue: Any, advance: int, value: int,
                 stamped: bool) -> None:
        self.args = args                          # the call's arguments (plain: they keep no buffer alive)
        self.comm, self.native, self.queue = comm, nat, queue
        self.advance, self.value, self.stamped = advance, value, stamped   # chunks per call, signature, stamped
        self.lists: List[Optional[Tuple[Tuple[Task, ...], Optional[compiled.Program]]]] = [None, None]
        self.call: Optional[compiled.Repeat] = None
        self.forgotten = False        # dropped from the cache (forget)

    def keep(self, parity: int, tasks: Tuple[Task, ...]) -> None:
        program = compiled.compile_tasks(tasks)   # None without a compiled engine
        self.lists[parity] = (tasks, program)
        if self.call is None and program is not None and program.whole:
            q, announced = self.queue, self.comm.announced
            if q.ring is None:
                q.ring = compiled.Ring()
            base = entry(LIBRARY, 0)[0]
            self.call = compiled.Repeat(q.ring, self.native.counter, announced.counts + LIBRARY, announced.words,
                                        base, ANNOUNCED, self.value, self.advance, self.stamped)
        if self.call is not None:
            self.call.keep(parity, program)       # (a list that is not whole stays with Python)

    def forget(self) -> None:
        """Dropped from the cache: the ring lets go of its programs once it holds none of them."""
        self.forgotten = True
        if self.call is not None:
            self.call.forgotten = True


def repeatable(count_at: Optional[int]) -> Callable[[Callable[..., int]], Callable[..., int]]:
    """Declare a library collective whose repeats of a small call launch the task list its first call kept
    (NativeCollectives.repeat, tried after the group diversion); ``count_at``: where its
    element count is among the arguments."""
    def declare(func: Callable[..., int]) -> Callable[..., int]:
        return collective(func, repeats=True, count_at=count_at)
    return declare


class NativeCollectives(Part):
    """HcclAllReduce and friends: hccl/hccl.h, and HcclBarrier of hccl/hccl_comm.h (each entry: group.collective)."""

    HEADERS = ("hccl/hccl.h", "hccl/hccl_comm.h")

    def __init__(self, state: SimState) -> None:
        super().__init__(state)
        #: per collective, what the cache keeps for its last repeated call: a repeat of the same arguments finds it
        #: without hashing them
        self.last: Dict[str, _Repeated] = {}

    def _prepare(self, comm: Any, stream: Any, peers: Sequence[int]) -> _Plan:
        c = self.state.comm(comm)
        q = self.state.stream(stream)
        th = c.stream_threads.get(id(q))
        if th is None or c.native is None:
            th = self._stream_thread(c, q)
        channels = c.native.channels
        missing = [p for p in peers if p not in channels]
        if missing:
            made = c.connect_channels([(p, NATIVE_ENGINE, NATIVE_PROTOCOL, NATIVE_NOTIFIES) for p in missing],
                                      self.state.new_channel_handle)
            for p, ch in zip(missing, made):
                channels[p] = ch
        return _Plan(c, th, channels)

    def _stream_thread(self, c: SimComm, q: Any) -> SimThread:
        """The communicator's thread on stream ``q`` (shared with HcclThreadAcquireWithStream)."""
        with self.state.lock:
            th = c.stream_threads.get(id(q))
            if th is None:
                th = SimThread(self.state.new_thread_handle(), c, NATIVE_ENGINE, 0, q, main=True)
                c.stream_threads[id(q)] = th
                self.state.threads[th.handle] = th
            if q.comm is None:
                q.comm = c
            if c.native is None:
                c.native = NativeState()
        return th

    @staticmethod
    def _launch(plan: _Plan) -> int:
        if plan.signature:           # the call's place in this rank's order (sim/announce.py)
            announced = plan.comm.announced
            announced.announce(LIBRARY, announced.counts[LIBRARY], plan.signature, "" if announced.described(
                               plan.signature) else _describe(plan.comm.native.signatures.get(plan.signature)))
        if plan.stamped:
            plan.th.queue.stamps.extend(plan.stamped)
        EXECUTOR.launch(plan.th.queue, plan.tasks)
        return 0

    def _open(self, kind: str, sendBuf: Any, recvBuf: Any, count: int, dt: DataType, op: int, comm: Any,
              stream: Any) -> Tuple[_Plan, List[int], Any, Any]:
        """The prologue of AllReduce, AllGather and ReduceScatter after their type checks: both buffers (NULL
        only with ``count`` 0), the peers, and the plan on ``stream`` signed as ``kind`` (``op`` -1: none)."""
        send, recv = _ptr(sendBuf, "sendBuf", count > 0), _ptr(recvBuf, "recvBuf", count > 0)
        c, peers = self._others(comm)
        plan = self._prepare(comm, stream, peers)
        plan.sign(kind, count, dt, op)
        return plan, peers, send, recv

    def _others(self, comm: Any) -> Tuple[SimComm, List[int]]:
        c = self.state.comm(comm)
        return c, [r for r in range(c.nranks) if r != c.rank]

    # ------------------------------------------------------------------ collectives
    def repeat(self, name: str, args: tuple, count_at: Optional[int]) -> Optional[int]:
        """Launch the task list kept for a repeat of the small call ``name(*args)``; None when there is none, or
        its stream captures (the call then takes its full path).

        The full path keeps it (:meth:`_keep`) per starting parity.  Before reuse this checks what
        could have changed since: the communicator (destroyed, or its native state replaced); a
        destroyed stream empties the whole cache (SimState.forget_stream).  A whole compiled list goes to the
        stream's replay ring (``EXECUTOR.enter``), else the tasks run through the executor's launch; stream order
        and the checkers are the same either way.
        """
        hit = self.last.get(name)
        if hit is None or hit.args != args or hit.forgotten:   # (the same call again: no key to hash)
            try:
                hit = self.state.call_cache.get((name,) + args)
            except TypeError:       # an unhashable argument: the full path names it
                return None
            if hit is None:
                return None
            self.last[name] = hit
        if count_at is not None and type(args[count_at]) is not int:   # a float count equal to an int one
            return None
        c, nat, q = hit.comm, hit.native, hit.queue
        if c.destroyed or c.native is not nat or q.capture is not None:
            return None
        call = hit.call
        if call is not None and EXECUTOR.enter(q, call):   # (engine.c looks for this parity's list itself)
            return 0
        seq = nat.seq
        kept = hit.lists[seq & 1]
        if kept is None:
            return None
        nat.seq = seq + hit.advance
        announced = c.announced
        announced.announce(LIBRARY, announced.counts[LIBRARY], hit.value, "")
        if hit.stamped:
            q.stamps.extend(range(seq, seq + hit.advance))
        EXECUTOR.launch(q, kept[0], program=kept[1])
        return 0

    def _keep(self, plan: _Plan, name: str, args: tuple, tasks: Sequence[Task]) -> None:
        """Keep the task list of small call ``name(*args)`` for its repeats, under its first parity.

        Only arguments that are safe and exact as dictionary keys qualify: plain (non-owning) cdata
        pointers, which hash and compare by address and keep no buffer alive, plain ints and None.
        """
        if not all(a is None or type(a) is _PLAIN or type(a) is int for a in args):
            return
        c, nat, q = plan.comm, plan.comm.native, plan.th.queue
        key = (name,) + args
        cache = self.state.call_cache
        hit = cache.get(key)
        if hit is None or hit.comm is not c or hit.native is not nat or hit.queue is not q:
            if hit is not None:
                hit.forget()
            if len(cache) >= CALL_CACHE_MAX:
                self.state.forget_calls()
            hit = cache[key] = _Repeated(args, c, nat, q, nat.seq - plan.seq0, plan.signature, bool(plan.stamped))
        hit.keep(plan.seq0 & 1, tuple(tasks))

    def _launch_small(self, plan: _Plan, name: str, args: tuple, nbytes: int) -> int:
        """Launch ``plan``; a call of at most SMALL_CACHED bytes keeps its task list for its repeats."""
        if nbytes <= SMALL_CACHED:
            self._keep(plan, name, args, plan.tasks)
        return self._launch(plan)

    @repeatable(count_at=2)
    def HcclAllReduce(self, sendBuf: Any, recvBuf: Any, count: int, dataType: int, op: int, comm: Any,
                      stream: Any) -> int:
        dt, rop = _dtype(dataType), _op(op)
        plan, peers, send, recv = self._open("allreduce", sendBuf, recvBuf, count, dt, rop, comm, stream)
        c = plan.comm
        esz = dt.itemsize
        if c.nranks > 1 and count * esz >= DIRECT_FROM and plan.direct_fits(2 * count * esz):
            return self._direct_allreduce(plan, peers, send, recv, count, dt, rop)
        if c.nranks >= 3 and count * esz > TWO_SHOT_ABOVE:
            self._two_shot_allreduce(plan, peers, send, recv, count, dt, rop)
        else:
            for off, n, idx, region in plan.staged_pieces(send, count, esz):
                check = plan.stamp(region, peers)
                plan.handshake(peers, idx)
                plan.tasks.append(check)
                plan.reduce_all(recv + off * esz, region, n, dt, rop)
        return self._launch_small(plan, "HcclAllReduce", (sendBuf, recvBuf, count, dataType, op, comm, stream),
                                  count * esz)

    def _direct_allreduce(self, plan: _Plan, peers: List[int], send: Any, recv: Any, count: int, dt: DataType,
                          rop: ReduceOp) -> int:
        """Each rank reduces its 1/n of the elements reading every rank's send buffer, in rank order, and writes
        the result into every rank's receive buffer (_Plan.direct): one pass, no staging."""
        me, n, esz = plan.comm.rank, plan.comm.nranks, dt.itemsize
        blk = -(-count // n)
        lo = min(me * blk, count)
        m = min(blk, count - lo)
        at = lo * esz

        def work(where: List[List[int]]) -> None:
            sends, recvs = where
            srcs = [kernels.array(a + at, m, dt) for a in sends]
            copies = [kernels.array(recvs[q] + at, m, dt) for q in peers]
            kernels.reduce_spread(kernels.array(recvs[me] + at, m, dt), srcs, dt, rop, copies)

        nbytes, own = count * esz, (at, at + m * esz)
        plan.direct([(send, nbytes, True, True, False, own), (recv, nbytes, True, False, True, own)], peers,
                    [peers, peers], work)
        return self._launch(plan)

    @staticmethod
    def _two_shot_allreduce(plan: _Plan, peers: List[int], send: Any, recv: Any, count: int, dt: DataType,
                            rop: ReduceOp) -> None:
        """The tasks of a reduce-scatter then allgather through the parity regions (each rank reduces 1/n of a
        chunk)."""
        c = plan.comm
        nranks, esz = c.nranks, dt.itemsize
        chunk = max(nranks, plan.region_bytes() // esz)
        for off in range(0, count, chunk):
            n = min(chunk, count - off)
            blk = -(-n // nranks)                                # ceil: the last block may be short
            p, staging, result, _ = plan.parity_regions()
            plan.copy(plan.ccl(c.rank) + staging, send + off * esz, n * esz)
            plan.handshake(peers, PARITY + p)                    # every rank's chunk is staged
            lo = min(c.rank * blk, n)
            mine = min(blk, n - lo)
            plan.reduce_all(plan.ccl(c.rank) + result, staging + lo * esz, mine, dt, rop)
            plan.handshake(peers, PARITY_RESULT + p)             # every block is reduced
            for r in range(nranks):
                r_lo = min(r * blk, n)
                plan.copy(recv + (off + r_lo) * esz, plan.ccl(r) + result, min(blk, n - r_lo) * esz)

    @collective
    def HcclReduce(self, sendBuf: Any, recvBuf: Any, count: int, dataType: int, op: int, root: int, comm: Any,
                   stream: Any) -> int:
        dt, rop = _dtype(dataType), _op(op)
        c, peers = self._others(comm)
        self._check_root(c, root)
        send = _ptr(sendBuf, "sendBuf", count > 0)
        recv = _ptr(recvBuf, "recvBuf", count > 0 and c.rank == root)
        plan = self._prepare(comm, stream, peers if c.rank == root else [root])
        plan.sign("reduce", count, dt, rop, root)
        esz = dt.itemsize
        chunk = max(1, plan.half // esz)
        for off in range(0, count, chunk):
            n = min(chunk, count - off)
            b = off * esz
            plan.copy(plan.ccl(c.rank), send + b, n * esz)
            if c.rank == root:
                plan.handshake(peers, READY, record=False)
                plan.reduce_all(recv + b, 0, n, dt, rop)
                plan.handshake(peers, DONE, wait=False)
            else:
                plan.handshake([root], READY, wait=False)
                plan.handshake([root], DONE, record=False)
        return self._launch(plan)

    @repeatable(count_at=1)
    def HcclBroadcast(self, buf: Any, count: int, dataType: int, root: int, comm: Any, stream: Any) -> int:
        dt = _dtype(dataType)
        data = _ptr(buf, "buf", count > 0)
        c, peers = self._others(comm)
        self._check_root(c, root)
        plan = self._prepare(comm, stream, peers)
        plan.sign("broadcast", count, dt, root=root)
        esz = dt.itemsize
        nbytes = count * esz
        if c.nranks > 1 and nbytes >= DIRECT_FROM and plan.direct_fits(2 * nbytes):
            def pull(where: List[List[int]]) -> None:       # every rank but the root copies the root's buffer
                if c.rank != root:
                    kernels.copy(ffi.cast("char *", where[1][c.rank]), ffi.cast("char *", where[0][root]), nbytes)
            is_root = c.rank == root
            plan.direct([(data, nbytes if is_root else 0, True, True, False, (0, 0)),
                         (data, 0 if is_root else nbytes, False, False, True, (0, 0))], peers if is_root else [],
                        [[] if is_root else [root], []], pull)
            return self._launch(plan)
        chunk = plan.piece(esz)
        for off in range(0, count, chunk):
            n = min(chunk, count - off)
            b = off * esz
            idx, region, _ = plan.parity_region()
            if c.rank == root:
                plan.copy(plan.ccl(root) + region, data + b, n * esz)
            check = plan.stamp(region, [root] if c.rank != root else [])
            plan.handshake(peers, idx)       # every rank: the root's piece is staged, or I finished the last one
            plan.tasks.append(check)
            if c.rank != root:
                plan.copy(data + b, plan.ccl(root) + region, n * esz)
        return self._launch_small(plan, "HcclBroadcast", (buf, count, dataType, root, comm, stream), count * esz)

    @repeatable(count_at=2)
    def HcclAllGather(self, sendBuf: Any, recvBuf: Any, sendCount: int, dataType: int, comm: Any,
                      stream: Any) -> int:
        dt = _dtype(dataType)
        plan, peers, send, recv = self._open("allgather", sendBuf, recvBuf, sendCount, dt, -1, comm, stream)
        c = plan.comm
        esz = dt.itemsize
        block = sendCount * esz
        if c.nranks > 1 and block * c.nranks >= DIRECT_FROM and plan.direct_fits(block * (c.nranks + 1)):
            def gather(where: List[List[int]]) -> None:     # every rank copies every rank's block where it goes
                sends, dst = where[0], where[1][c.rank]
                for q in range(c.nranks):
                    if sends[q] != dst + q * block:
                        kernels.copy(ffi.cast("char *", dst + q * block), ffi.cast("char *", sends[q]), block)
            plan.direct([(send, block, True, True, False, (0, 0)),
                         (recv, block * c.nranks, False, False, True, (0, 0))], peers, [peers, []], gather)
            return self._launch(plan)
        own = recv + c.rank * sendCount * esz
        in_place = own == send
        for off, n, idx, region in plan.staged_pieces(send, sendCount, esz):
            b = off * esz
            check = plan.stamp(region, peers)
            plan.handshake(peers, idx, wait=False)
            if not in_place:                 # my block: straight across, while the peers stage theirs
                plan.copy(own + b, send + b, n * esz)
            plan.handshake(peers, idx, record=False)
            plan.tasks.append(check)
            for r in peers:
                plan.copy(recv + (r * sendCount + off) * esz, plan.ccl(r) + region, n * esz)
        return self._launch_small(plan, "HcclAllGather", (sendBuf, recvBuf, sendCount, dataType, comm, stream), sendCount * esz * c.nranks)

    @repeatable(count_at=2)
    def HcclReduceScatter(self, sendBuf: Any, recvBuf: Any, recvCount: int, dataType: int, op: int, comm: Any,
                          stream: Any) -> int:
        dt, rop = _dtype(dataType), _op(op)
        plan, peers, send, recv = self._open("reduce_scatter", sendBuf, recvBuf, recvCount, dt, rop, comm, stream)
        c = plan.comm
        esz = dt.itemsize
        block = recvCount * esz
        if c.nranks > 1 and block * c.nranks >= DIRECT_FROM and plan.direct_fits(block * (c.nranks + 1)):
            at = c.rank * block

            def reduce_mine(where: List[List[int]]) -> None:  # my block of every rank's send buffer, in rank order
                srcs = [kernels.array(a + at, recvCount, dt) for a in where[0]]
                kernels.reduce_spread(kernels.array(where[1][c.rank], recvCount, dt), srcs, dt, rop, ())
            plan.direct([(send, block * c.nranks, True, True, False, (at, at + block)),
                         (recv, block, False, False, True, (0, 0))], peers, [peers, []],
                        reduce_mine)
            return self._launch(plan)
        chunk = plan.piece(esz, c.nranks)
        mine = send + c.rank * recvCount * esz
        # my block is read where it is, unless the result overwrites it while it is still an operand
        direct = not _overlap(mine, recv, recvCount * esz)
        for off in range(0, recvCount, chunk):
            n = min(chunk, recvCount - off)
            idx, region, _ = plan.parity_region()
            plan.stage_blocks(send, recvCount, off, n, esz, at=region, skip=c.rank if direct else -1)
            check = plan.stamp(region, peers)
            plan.handshake(peers, idx)
            plan.tasks.append(check)
            plan.reduce_all(recv + off * esz, region + c.rank * n * esz, n, dt, rop,
                            own=mine + off * esz if direct else None)
        return self._launch_small(plan, "HcclReduceScatter", (sendBuf, recvBuf, recvCount, dataType, op, comm, stream), recvCount * esz * c.nranks)

    @collective
    def HcclAlltoAll(self, sendBuf: Any, sendCount: int, sendType: int, recvBuf: Any, recvCount: int,
                     recvType: int, comm: Any, stream: Any) -> int:
        dt = _dtype(sendType)
        if recvType != sendType or recvCount != sendCount:
            raise SimError(HcclResult.E_PARA, f"sendCount/sendType ({sendCount}, {sendType}) must equal "
                                              f"recvCount/recvType ({recvCount}, {recvType})")
        send, recv = _ptr(sendBuf, "sendBuf", sendCount > 0), _ptr(recvBuf, "recvBuf", sendCount > 0)
        c, peers = self._others(comm)
        plan = self._prepare(comm, stream, peers)
        plan.sign("alltoall", sendCount, dt)
        esz = dt.itemsize
        chunk = max(1, plan.half // (esz * c.nranks))
        for off in range(0, sendCount, chunk):
            n = min(chunk, sendCount - off)
            plan.stage_blocks(send, sendCount, off, n, esz)
            plan.handshake(peers, READY)
            for r in range(c.nranks):
                plan.copy(recv + (r * sendCount + off) * esz, plan.ccl(r) + c.rank * n * esz, n * esz)
            plan.handshake(peers, DONE)
        return self._launch(plan)

    # ------------------------------------------------------------------ scatter and the V variants
    @collective
    def HcclScatter(self, sendBuf: Any, recvBuf: Any, recvCount: int, dataType: int, root: int, comm: Any,
                    stream: Any) -> int:
        dt = _dtype(dataType)
        c, peers = self._others(comm)
        self._check_root(c, root)
        send = _ptr(sendBuf, "sendBuf", recvCount > 0 and c.rank == root)
        recv = _ptr(recvBuf, "recvBuf", recvCount > 0)
        plan = self._prepare(comm, stream, peers if c.rank == root else [root])
        plan.sign("scatter", recvCount, dt, root=root)
        esz = dt.itemsize
        chunk = max(1, plan.half // (esz * c.nranks))
        for off in range(0, recvCount, chunk):
            n = min(chunk, recvCount - off)
            if c.rank == root:
                plan.stage_blocks(send, recvCount, off, n, esz)
                plan.handshake(peers, READY, wait=False)
                plan.copy(recv + off * esz, plan.ccl(root) + root * n * esz, n * esz)
                plan.handshake(peers, DONE, record=False)
            else:
                plan.handshake([root], READY, record=False)
                plan.copy(recv + off * esz, plan.ccl(root) + c.rank * n * esz, n * esz)
                plan.handshake([root], DONE, wait=False)
        return self._launch(plan)

    @collective
    def HcclAllGatherV(self, sendBuf: Any, sendCount: int, recvBuf: Any, recvCounts: Any, recvDispls: Any,
                       dataType: int, comm: Any, stream: Any) -> int:
        dt = _dtype(dataType)
        c, peers = self._others(comm)
        counts = _u64s(recvCounts, c.nranks, "recvCounts")
        displs = _u64s(recvDispls, c.nranks, "recvDispls")
        if counts[c.rank] != sendCount:
            raise SimError(HcclResult.E_PARA, f"sendCount={sendCount} but recvCounts[{c.rank}]={counts[c.rank]}")
        send = _ptr(sendBuf, "sendBuf", sendCount > 0)
        recv = _ptr(recvBuf, "recvBuf", sum(counts) > 0)
        plan = self._prepare(comm, stream, peers)
        plan.sign("allgatherv", sum(counts), dt)
        esz = dt.itemsize
        cap = max(1, plan.half // esz)
        for lo in range(0, max(counts), cap):
            plan.copy(plan.ccl(c.rank), send + lo * esz, _part(sendCount, lo, cap) * esz)
            plan.handshake(peers, READY)
            for r in range(c.nranks):
                plan.copy(recv + (displs[r] + lo) * esz, plan.ccl(r), _part(counts[r], lo, cap) * esz)
            plan.handshake(peers, DONE)
        return self._launch(plan)

    @collective
    def HcclReduceScatterV(self, sendBuf: Any, sendCounts: Any, sendDispls: Any, recvBuf: Any, recvCount: int,
                           dataType: int, op: int, comm: Any, stream: Any) -> int:
        dt, rop = _dtype(dataType), _op(op)
        c, peers = self._others(comm)
        counts = _u64s(sendCounts, c.nranks, "sendCounts")
        displs = _u64s(sendDispls, c.nranks, "sendDispls")
        if counts[c.rank] != recvCount:
            raise SimError(HcclResult.E_PARA, f"recvCount={recvCount} but sendCounts[{c.rank}]={counts[c.rank]}")
        send = _ptr(sendBuf, "sendBuf", sum(counts) > 0)
        recv = _ptr(recvBuf, "recvBuf", recvCount > 0)
        plan = self._prepare(comm, stream, peers)
        plan.sign("reduce_scatterv", sum(counts), dt, rop)
        esz = dt.itemsize
        cap = max(1, plan.half // (esz * c.nranks))
        for lo in range(0, max(counts), cap):
            for q in range(c.nranks):
                plan.copy(plan.ccl(c.rank) + q * cap * esz, send + (displs[q] + lo) * esz,
                          _part(counts[q], lo, cap) * esz)
            plan.handshake(peers, READY)
            plan.reduce_all(recv + lo * esz, c.rank * cap * esz, _part(recvCount, lo, cap), dt, rop)
            plan.handshake(peers, DONE)
        return self._launch(plan)

    @collective
    def HcclAlltoAllVC(self, sendBuf: Any, sendCountMatrix: Any, sendType: int, recvBuf: Any, recvType: int,
                       comm: Any, stream: Any) -> int:
        dt = _dtype(sendType)
        if recvType != sendType:
            raise SimError(HcclResult.E_PARA, f"sendType={sendType} and recvType={recvType} must be equal")
        c, peers = self._others(comm)
        n = c.nranks
        flat = _u64s(sendCountMatrix, n * n, "sendCountMatrix")
        matrix = [flat[i * n:(i + 1) * n] for i in range(n)]      # matrix[i][j]: elements rank i sends to j
        mine = matrix[c.rank]
        incoming = [matrix[i][c.rank] for i in range(n)]
        sdispl = [sum(mine[:j]) for j in range(n)]
        rdispl = [sum(incoming[:i]) for i in range(n)]
        send = _ptr(sendBuf, "sendBuf", sum(mine) > 0)
        recv = _ptr(recvBuf, "recvBuf", sum(incoming) > 0)
        plan = self._prepare(comm, stream, peers)
        plan.sign("alltoallvc", sum(flat), dt)
        esz = dt.itemsize
        cap = max(1, plan.half // (esz * n))
        for lo in range(0, max(flat) if flat else 0, cap):
            for j in range(n):
                plan.copy(plan.ccl(c.rank) + j * cap * esz, send + (sdispl[j] + lo) * esz, _part(mine[j], lo, cap) * esz)
            plan.handshake(peers, READY)
            for i in range(n):
                plan.copy(recv + (rdispl[i] + lo) * esz, plan.ccl(i) + c.rank * cap * esz,
                          _part(incoming[i], lo, cap) * esz)
            plan.handshake(peers, DONE)
        return self._launch(plan)

    @collective
    def HcclAlltoAllV(self, sendBuf: Any, sendCounts: Any, sdispls: Any, sendType: int, recvBuf: Any,
                      recvCounts: Any, rdispls: Any, recvType: int, comm: Any, stream: Any) -> int:
        """Pairwise: each rank knows what it sends to and receives from every peer, so the pieces of
        every pair are agreed without a global count exchange (send/recv machinery, one batch)."""
        dt = _dtype(sendType)
        if recvType != sendType:
            raise SimError(HcclResult.E_PARA, f"sendType={sendType} and recvType={recvType} must be equal")
        c = self.state.comm(comm)
        n, me, esz = c.nranks, c.rank, dt.itemsize
        sc, sd = _u64s(sendCounts, n, "sendCounts"), _u64s(sdispls, n, "sdispls")
        rc, rd = _u64s(recvCounts, n, "recvCounts"), _u64s(rdispls, n, "rdispls")
        if sc[me] != rc[me]:
            raise SimError(HcclResult.E_PARA, f"sendCounts[{me}]={sc[me]} but recvCounts[{me}]={rc[me]} "
                                              "(what this rank sends to itself)")
        send = _ptr(sendBuf, "sendBuf", sum(sc) > 0)
        recv = _ptr(recvBuf, "recvBuf", sum(rc) > 0)
        items = [(0, send + sd[j] * esz, sc[j], int(dt), j) for j in range(n) if j != me]
        items += [(1, recv + rd[i] * esz, rc[i], int(dt), i) for i in range(n) if i != me]
        if sc[me]:
            q = self.state.stream(stream)
            EXECUTOR.submit(q, [LocalCopy(None, recv + rd[me] * esz, send + sd[me] * esz, sc[me] * esz)])
        return self._p2p(items, comm, stream) if items else 0

    @repeatable(count_at=None)
    def HcclBarrier(self, comm: Any, stream: Any) -> int:
        c, peers = self._others(comm)
        plan = self._prepare(comm, stream, peers)
        plan.sign("barrier", 0, DataType.INT8)
        idx, _, _ = plan.parity_region()
        plan.handshake(peers, idx)
        return self._launch_small(plan, "HcclBarrier", (comm, stream), 0)

    # ------------------------------------------------------------------ point to point
    @collective
    def HcclSend(self, sendBuf: Any, count: int, dataType: int, destRank: int, comm: Any, stream: Any) -> int:
        return self._p2p([(0, sendBuf, count, dataType, destRank)], comm, stream)

    @collective
    def HcclRecv(self, recvBuf: Any, count: int, dataType: int, srcRank: int, comm: Any, stream: Any) -> int:
        return self._p2p([(1, recvBuf, count, dataType, srcRank)], comm, stream)

    @collective
    def HcclBatchSendRecv(self, sendRecvInfo: Any, itemNum: int, comm: Any, stream: Any) -> int:
        items_c = ffi.cast("HcclSendRecvItem *", _ptr(sendRecvInfo, "sendRecvInfo", itemNum > 0))
        items = []
        for i in range(itemNum):
            it = items_c[i]
            if it.sendRecvType not in (0, 1):
                raise SimError(HcclResult.E_PARA, f"sendRecvInfo[{i}].sendRecvType={it.sendRecvType}; "
                                                  "expected HCCL_SEND or HCCL_RECV")
            items.append((int(it.sendRecvType), it.buf, int(it.count), int(it.dataType), int(it.remoteRank)))
        return self._p2p(items, comm, stream)

    def _p2p(self, items: List[tuple], comm: Any, stream: Any) -> int:
        c = self.state.comm(comm)
        checked = []
        for kind, buf, count, dtype, peer in items:
            dt = _dtype(dtype)
            if not 0 <= peer < c.nranks or peer == c.rank:
                raise SimError(HcclResult.E_PARA, f"{'destRank' if kind == 0 else 'srcRank'}={peer}; expected "
                               f"another rank in [0, {c.nranks}) (this is rank {c.rank})")
            checked.append((kind, _ptr(buf, "buffer", count > 0), count, dt, peer))
        plan = self._prepare(comm, stream, sorted({it[4] for it in checked}))
        slice_bytes = (plan.half // 2) // c.nranks
        # rounds: at most one send and one recv per peer, so send slices are never shared
        pending = list(checked)
        while pending:
            round_items: List[tuple] = []
            rest: List[tuple] = []
            seen: set = set()
            for it in pending:
                key = (it[0], it[4])
                (rest if key in seen else round_items).append(it)
                seen.add(key)
            pending = rest
            self._p2p_round(plan, round_items, slice_bytes)
        return self._launch(plan)

    @staticmethod
    def _p2p_round(plan: _Plan, items: List[tuple], slice_bytes: int) -> None:
        comm = plan.comm
        chunks = []
        for kind, buf, count, dt, peer in items:
            step = max(1, slice_bytes // dt.itemsize)
            chunks.append([(kind, buf, off, min(step, count - off), dt, peer) for off in range(0, count, step)])
        depth = max((len(c) for c in chunks), default=0)
        for i in range(depth):
            layer = [c[i] for c in chunks if i < len(c)]
            for kind, buf, off, n, dt, peer in layer:  # senders stage and signal
                if kind == 0:
                    region = plan.ccl(comm.rank) + plan.half + peer * slice_bytes
                    plan.copy(region, buf + off * dt.itemsize, n * dt.itemsize)
                    plan.tasks.append(ChannelRecord(plan.th, plan.ch[peer], SENDRECV_STAGED))
            for kind, buf, off, n, dt, peer in layer:  # receivers pull and release
                if kind == 1:
                    plan.tasks.append(ChannelWait(plan.th, plan.ch[peer], SENDRECV_STAGED, 0.0))
                    region = plan.ccl(peer) + plan.half + comm.rank * slice_bytes
                    plan.copy(buf + off * dt.itemsize, region, n * dt.itemsize)
                    plan.tasks.append(ChannelRecord(plan.th, plan.ch[peer], SENDRECV_TAKEN))
            for kind, buf, off, n, dt, peer in layer:  # senders wait for the release
                if kind == 0:
                    plan.tasks.append(ChannelWait(plan.th, plan.ch[peer], SENDRECV_TAKEN, 0.0))

    @staticmethod
    def _check_root(c: SimComm, root: int) -> None:
        if not 0 <= root < c.nranks:
            raise SimError(HcclResult.E_PARA, f"root={root}; expected a rank in [0, {c.nranks})")
