"""The one algorithm interface: what an algorithm supports, the resources it needs, the schedule it issues.

Every algorithm — ``ring``, ``mesh``, ``tree``, ``hierarchical``, ``native`` and a user's — is an
:class:`Algorithm`.  ``Comm`` only ever calls :meth:`Algorithm.unsupported`, :meth:`Algorithm.resources`
and :meth:`Algorithm.issue`; it never branches on a name.  An algorithm that does not declare its
resources gets them derived from a dry run of :meth:`~Algorithm.issue` (``algorithms.dryrun``).

Write one with the decorator::

    @hcomm_cffi.algorithm("pairwise", collectives=("alltoall",))
    def pairwise(ctx: IssueContext, call: CollectiveCall) -> None:
        ...   # ctx.put / ctx.record / ctx.wait / ctx.copy / ctx.reduce on ctx.threads

or subclass :class:`Algorithm` and override :meth:`~Algorithm.issue`.

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

from typing import Any, Callable, FrozenSet, Iterable, List, Literal, NamedTuple, NewType, Optional, Sequence, Tuple, Union

from ..enums import HOST_REDUCE_DTYPES, HOST_REDUCE_OPS, DataType, ReduceOp
from ..plan import RankResources, Topology
from ..resources import (ALGORITHM_ENGINE, ALGORITHM_NOTIFIES, CAPTURED, CHANNEL_CLASSES, COMM_ENGINE, COMM_NOTIFIES,
                         P2P_CREDIT, P2P_DATA, SIG_NOTIFIES, SIG_RELEASE)
from .tasks import TaskSink

__all__ = ["COLLECTIVES", "REDUCING", "ROOTED", "CollectiveCall", "Algorithm", "FunctionAlgorithm",
           "UnsupportedError", "reduce_unsupported", "define", "ResourcesFn", "UnsupportedFn", "AlgorithmLike",
           "AlgorithmName", "AlgorithmRef", "AlgorithmArg",
           "ACK", "DATA", "P2P_DATA", "P2P_CREDIT", "SIG_NOTIFIES", "SIG_RELEASE", "CAPTURED", "SIG_SLOT_BYTES",
           "ALGORITHM_NOTIFIES", "MAX_ALGORITHM_NOTIFIES", "COMM_NOTIFIES", "ALGORITHM_ENGINE", "COMM_ENGINE", "ALIGN",
           "IssueContext", "split_even", "region_bytes", "signature_area"]

#: The collectives the Comm API names; a user algorithm may implement others (``Comm.run_algorithm``).
COLLECTIVES = ("allreduce", "broadcast", "allgather", "reduce_scatter", "reduce", "alltoall", "barrier")
#: Collectives that reduce (they need the data-plane reduce to support the dtype and op).
REDUCING = frozenset({"allreduce", "reduce_scatter", "reduce"})
#: Collectives whose resources depend on the root.
ROOTED = frozenset({"broadcast", "reduce"})

CData = Any
#: ``resources(topology, call, rank)``: declared resources, or None to derive them from a dry run
ResourcesFn = Callable[[Topology, "CollectiveCall", int], Optional[RankResources]]
#: ``unsupported(coll, dtype, op, topology)``: why an algorithm cannot run a call, or None
UnsupportedFn = Callable[[str, DataType, Optional[ReduceOp], Topology], Optional[str]]


class UnsupportedError(ValueError):
    """This collective/algorithm/dtype/op combination cannot run; the message names the alternatives."""


class CollectiveCall(NamedTuple):
    """One call of a collective on one rank: pointers (``char *``), element count, type, op, root.

    ``count`` is the vector length for allreduce/broadcast/reduce, the per-rank block for
    allgather/reduce_scatter (output block) and the per-destination block for alltoall; for a user
    collective, the elements of ``send``.  ``recv_count`` is the elements of ``recv`` (user
    collectives whose output differs in size from their input; None for the named collectives).
    """

    coll: str
    send: CData
    recv: CData
    count: int  # type: ignore[assignment]  # named as the C argument; shadows tuple.count on purpose
    dtype: DataType
    op: ReduceOp = ReduceOp.SUM
    root: int = 0
    recv_count: Optional[int] = None

    @property
    def signature(self) -> Tuple[str, int, DataType, ReduceOp, int, Optional[int]]:
        """What must agree across ranks and what a schedule depends on (everything but the pointers)."""
        return (self.coll, self.count, self.dtype, self.op, self.root, self.recv_count)


def reduce_unsupported(name: str, dtype: DataType, op: ReduceOp) -> Optional[str]:
    """Why the data-plane reduce cannot do ``op`` on ``dtype`` (None when it can)."""
    if dtype in HOST_REDUCE_DTYPES and op in HOST_REDUCE_OPS:
        return None
    why = []
    if op not in HOST_REDUCE_OPS:
        why.append(f"op={op.name.lower()}")
    if dtype not in HOST_REDUCE_DTYPES:
        why.append(f"dtype={dtype.name.lower()}")
    return (f"algorithm={name!r} cannot reduce with {' and '.join(why)}: the data-plane reduce supports dtypes "
            "int8/int16/int32/fp16/fp32/bf16 with ops sum/max/min; use algorithm='native' (or 'auto', which "
            "picks it) for prod and for int64/uint*/fp64")


class Algorithm:
    """A communication algorithm: override :meth:`issue` (and optionally :meth:`resources`, :meth:`unsupported`).

    ``collectives`` lists what it implements (None: any collective name, for user patterns run with
    ``Comm.run_algorithm``); ``reduces_on_data_plane`` says its reductions use the data-plane reduce,
    whose dtype/op limits then apply; ``replayable`` lets ``Comm`` replay its recorded schedule.
    """

    name: str = ""
    collectives: Optional[FrozenSet[str]] = frozenset(COLLECTIVES)
    reduces_on_data_plane: bool = True
    #: the schedule depends only on the call's signature and whether it runs in place, so a recorded
    #: task list can be replayed with new buffer addresses (``algorithms/replay.py``)
    replayable: bool = True
    #: the planner profile its declared resources follow (``doc``, ``a2``, ...), None when undeclared
    profile: Optional[str] = None

    # -- what it supports ---------------------------------------------------------------
    def unsupported(self, coll: str, dtype: DataType, op: Optional[ReduceOp], topology: Topology) -> Optional[str]:
        """None when this algorithm can run ``coll`` here, else the reason (a sentence naming alternatives)."""
        if self.collectives is not None and coll not in self.collectives:
            return (f"algorithm={self.name!r} does not implement {coll}; it implements "
                    f"{', '.join(sorted(self.collectives)) or 'nothing'}")
        if self.reduces_on_data_plane and coll in REDUCING and op is not None:
            return reduce_unsupported(self.name, dtype, op)
        return None

    # -- what it needs ------------------------------------------------------------------
    def resources(self, topology: Topology, call: CollectiveCall, rank: int) -> Optional[RankResources]:
        """The threads / notifies / channels ``rank`` acquires, or None to derive them from a dry run."""
        return None

    # -- what it does -------------------------------------------------------------------
    def issue(self, ctx: "IssueContext", call: CollectiveCall) -> None:
        """Issue this rank's tasks for ``call`` through ``ctx`` (record-then-launch is the caller's job)."""
        raise NotImplementedError(f"algorithm {self.name!r} does not define issue()")

    def __repr__(self) -> str:
        return f"<Algorithm {self.name!r}>"


#: what ``algorithm=`` takes at run time: a registered name ('ring', ..., 'auto'), a reference
#: 'package.module:attr' or 'path/file.py:attr', or an :class:`Algorithm` (checked by ``registry.check_algorithm``)
AlgorithmLike = Union[str, Algorithm]
#: the names ``auto`` and the built-ins answer to (``registry.BUILTINS``; a test keeps the two equal), so that a
#: misspelt ``algorithm="rnig"`` fails type-checking
AlgorithmName = Literal["auto", "ring", "mesh", "tree", "hierarchical", "native", "nb", "alltoall_pairwise",
                        "double_ring"]
#: a user-registered name or a 'module:attr' reference, marked for type checkers: ``algorithm=AlgorithmRef("mine")``
AlgorithmRef = NewType("AlgorithmRef", str)
#: what the Comm API's ``algorithm=`` is annotated with
AlgorithmArg = Union[AlgorithmName, AlgorithmRef, Algorithm]


class FunctionAlgorithm(Algorithm):
    """An :class:`Algorithm` whose :meth:`issue` is a plain function (what the ``@algorithm`` decorator makes)."""

    def __init__(self, fn: Callable[["IssueContext", CollectiveCall], None], name: str,
                 collectives: Optional[Iterable[str]], reduces_on_data_plane: bool = True,
                 resources: Optional[ResourcesFn] = None, unsupported: Optional[UnsupportedFn] = None) -> None:
        if not callable(fn):
            raise TypeError(f"algorithm {name!r}: {fn!r} is not callable; expected issue(ctx, call)")
        self.fn = fn
        self.name = name
        self.collectives = None if collectives is None else frozenset(collectives)
        self.reduces_on_data_plane = reduces_on_data_plane
        self._resources = resources
        self.profile = getattr(resources, "profile", None)
        self._unsupported = unsupported
        self.__doc__ = fn.__doc__
        self.origin = f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', name)}"

    def unsupported(self, coll: str, dtype: DataType, op: Optional[ReduceOp], topology: Topology) -> Optional[str]:
        """The declared collectives and reduce limits, then the function given as ``unsupported=``."""
        reason = super().unsupported(coll, dtype, op, topology)
        if reason is None and self._unsupported is not None:
            reason = self._unsupported(coll, dtype, op, topology)
        return reason

    def resources(self, topology: Topology, call: CollectiveCall, rank: int) -> Optional[RankResources]:
        """The function given as ``resources=`` (None: derive from a dry run)."""
        return None if self._resources is None else self._resources(topology, call, rank)

    def issue(self, ctx: "IssueContext", call: CollectiveCall) -> None:
        """Call the wrapped function."""
        self.fn(ctx, call)


def define(name: Optional[str] = None, *, collectives: Optional[Iterable[str]] = COLLECTIVES,
           reduces_on_data_plane: bool = True, resources: Optional[ResourcesFn] = None,
           unsupported: Optional[UnsupportedFn] = None) -> Callable[[Callable[..., None]], Algorithm]:
    """Decorator: ``issue(ctx, call)`` becomes an :class:`Algorithm` named ``name`` (default: its name), unregistered.

    The built-ins are made this way and listed by ``registry.py``; ``registry.algorithm`` is this
    plus :func:`registry.register`.  The keywords are those of :class:`FunctionAlgorithm`.
    """
    def wrap(fn: Callable[..., None]) -> Algorithm:
        fn_name: str = getattr(fn, "__name__", "")
        return FunctionAlgorithm(fn, name or fn_name, collectives, reduces_on_data_plane, resources, unsupported)
    return wrap


#: Most notifies a schedule may use on one of its channels (indices 0 .. MAX_ALGORITHM_NOTIFIES - 1).
MAX_ALGORITHM_NOTIFIES = CHANNEL_CLASSES[-1][0]
ACK, DATA = 0, 1
SIG_SLOT_BYTES = 64    # one rank's call signature (8 int64)
ALIGN = 128            # byte alignment of slots inside the HCCL buffer



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
