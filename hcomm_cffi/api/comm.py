"""Comm: a communicator with collectives (in place or ``out=``), point-to-point and sub-communicators.

``Comm(name, ranks=[...])`` is a sub-communicator of the world (HcclCreateSubCommConfig): every
listed rank must call it with the same name and the same list in the same order, in the same order
as its other sub-communicator creations (the members compare their lists first: a difference
raises :class:`~hcomm_cffi.api.membership.MembershipError` on the members, see membership.py).  A rank that
is not listed gets a *null communicator*: ``bool(comm)`` is False, ``get_rank()`` is -1, and every
operation raises :class:`NotMemberError` — so ``comm = Comm("pp", ranks=[0, 1])`` can run on all
ranks unchanged.  Arguments are validated before any library call.
"""
from __future__ import annotations

import warnings
import zlib
from operator import attrgetter
from typing import Any, Dict, List, Literal, Optional, Sequence, Tuple, TypeVar, Union, cast, overload

import numpy as np

from ..algorithms.interface import AlgorithmArg
from ..binding import Binding
from .. import flight, settings
from ..errors import HcclError
from ..initializers import make_comm_config
from ..plan import Topology
from .. import resources
from ..resources import Holding
from ..settings import DEFAULT_EAGER_LIMIT   # (the Comm API's name for it too)
from ..types import BufferLike, ReduceOpLike, StreamLike
from . import average, live, membership, observe
from .op import OPS, algorithm_call, collective, held, lane_call, stream_call, validate
from .errors import CommError
from .engine import Engine
from .persistent import Persistent
from .point_to_point import DRAIN_TIMEOUT_S, AnySourceRequest, PointToPoint
from .requests import Request, is_seconds, timeout_arg
from .state import CommState, abandon_queued

__all__ = ["Comm", "get_world", "current_world", "DEFAULT_EAGER_LIMIT"]

#: the buffer a call returns (``x`` in place, else ``out``): the caller's own type
B = TypeVar("B", bound=BufferLike)
O = TypeVar("O", bound=BufferLike)

#: Communicators up to this size connect every peer at creation so point-to-point never waits on setup.
P2P_PRECONNECT_MAX = 256
TopologyArg = Union[None, Topology, Tuple[int, int]]


def _exec_timeout(value: Optional[float]) -> int:
    """Seconds each notify wait may take (HCCL_EXEC_TIMEOUT by default); 0 means never, as for the vendor."""
    if value is None:
        value = settings.value("HCCL_EXEC_TIMEOUT")
    if not is_seconds(value):
        raise ValueError(f"timeout={value!r}; expected a finite number of seconds >= 0 (0 = never, as "
                         "HCCL_EXEC_TIMEOUT=0)")
    return 0 if value == 0 else max(1, int(round(value)))


def _eager(value: Optional[int]) -> int:
    """Bytes up to which point-to-point sends are eager (HCOMM_EAGER_LIMIT by default)."""
    if value is None:
        return int(settings.value("HCOMM_EAGER_LIMIT"))
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"eager_limit={value!r}; expected bytes >= 0")
    return value


def _topology(value: TopologyArg, size: int) -> Topology:
    """The communicator's topology: the argument, else HCOMM_TOPOLOGY, else one server of ``size`` ranks."""
    given = "topology"
    if value is None:
        shape = settings.value("HCOMM_TOPOLOGY")
        value = shape
        given = "HCOMM_TOPOLOGY=" + "x".join(str(v) for v in shape or ()) + " (from the environment)"
    if value is None:
        return Topology.single_server(size)
    if isinstance(value, Topology):
        topo = value
    elif isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, int) and v > 0 for v in value):
        topo = Topology.from_shape(*value)
    else:
        raise ValueError(f"topology={value!r}; expected (servers, devices_per_server) or a plan.Topology")
    if topo.n_ranks != size:
        raise ValueError(f"{given} has {topo.n_ranks} ranks but the communicator has {size}; "
                         "servers x devices_per_server must equal the communicator size")
    return topo


def _read(field: str, doc: str) -> Any:
    """A read-only property of the Comm: its state's ``field`` (a C getter, as cheap as a hand-written property)."""
    return property(attrgetter("_state." + field), doc=doc)


def get_world() -> "Comm":
    """The world communicator made by init() (raises NotInitializedError before it / after finalize())."""
    return cast(Comm, live.get_world())


def current_world() -> Optional["Comm"]:
    """The world communicator, or None before init() / after finalize()."""
    return cast(Optional[Comm], live.current_world())


class Comm:
    """A communicator (see the module docstring for membership rules).

    Threads: a Comm may be shared by threads, and each call is atomic on its rank.  A call holds the
    communicator's call lock while it changes the communicator and launches its work (a blocking
    collective until it returns), so calls of different threads never interleave their tasks or data.
    Collectives pair across ranks in the order each rank made them: as with torch's process groups,
    every rank must make them in the same order, which threads racing on one communicator do not
    guarantee.  Paired calls that differ (collective, count, dtype, op, root, algorithm) raise
    :class:`~hcomm_cffi.api.consistency.CollectiveMismatchError` naming both; alike ones pair as made.
    Give each thread its own communicator for independent streams of collectives.  Waits
    (``Request.wait``/``test``) do not hold the lock.

    Processes: a Comm belongs to the process that created it.  A child forked after it was made
    gets :class:`~hcomm_cffi.api.errors.ForeignProcessError` from every call, and its exit leaves
    the parent's communicator alone; a Comm cannot be pickled.  See docs/guide/reliability-threads.md.
    """

    # set in _blank/_setup, which __init__ calls; declared here so their types are known before them
    _state: CommState
    _engine: Engine

    def __init__(self, name: str, ranks: Optional[Sequence[int]] = None, *, parent: Optional["Comm"] = None,
                 topology: TopologyArg = None, eager_limit: Optional[int] = None,
                 timeout: Optional[float] = None, buffer_size_mb: Optional[int] = None) -> None:
        """Create a sub-communicator of ``parent`` (default: the world) over ``ranks`` (default: all).

        ``buffer_size_mb``: this communicator's HCCL buffer half size in MiB (the vendor's
        ``hcclBufferSize``; default ``HCCL_BUFFSIZE``, which is process-wide).
        """
        parent = parent if parent is not None else get_world()
        parent._check_usable("Comm()")
        if not isinstance(name, str) or not name or len(name.encode()) > 127 or not name.isascii():
            raise ValueError(f"name={name!r}; expected a non-empty ASCII string of at most 127 bytes")
        ids = list(range(parent.size)) if ranks is None else self._check_ranks(ranks, parent)
        if buffer_size_mb is not None:
            make_comm_config(buffer_size_mb=buffer_size_mb)  # validate on every rank, members or not
        self._blank(parent.binding, name, ids, parent.rank in ids)
        if parent.rank not in ids:
            return
        topo = _topology(topology, len(ids))  # validate everything before the collective library call
        eager, tmo = _eager(eager_limit), _exec_timeout(timeout if timeout is not None else parent.timeout)
        key = (name, tuple(ids))
        with parent._state.lock:    # a collective of the parent: its call lock throughout (api/state.py)
            parent._check_usable("Comm()")
            nth = parent._children.get(key, 0)
            membership.agree(parent._state, parent._p2p, name, nth, ids)  # members that disagree fail here
            parent._children[key] = nth + 1
            sub_id = zlib.crc32(f"{parent.name}/{name}/{ids}/{nth}".encode())
            cfg = make_comm_config(comm_name=name if nth == 0 else f"{name}#{nth}", buffer_size_mb=buffer_size_mb)
            handle = self.binding.create_sub_comm(parent.handle, ids, sub_id, ids.index(parent.rank), cfg)
        try:
            self._setup(handle, topo, eager, tmo)
        except BaseException:
            self.binding.comm_destroy(handle)
            self._state.handle = None
            raise
        live.register(self)

    # ------------------------------------------------------------------ construction
    @staticmethod
    def _check_ranks(ranks: Sequence[int], parent: "Comm") -> List[int]:
        if isinstance(ranks, (str, bytes)) or not hasattr(ranks, "__iter__"):
            raise TypeError(f"ranks={ranks!r}; expected a list of parent ranks")
        ids = list(ranks)
        if not ids:
            raise ValueError("ranks=[] is empty; expected at least one parent rank")
        for i, r in enumerate(ids):
            if isinstance(r, bool) or not isinstance(r, (int, np.integer)):
                raise TypeError(f"ranks[{i}]={r!r} is not an int rank")
            if not 0 <= r < parent.size:
                raise ValueError(f"ranks[{i}]={r} is out of range; the parent communicator {parent.name!r} has ranks "
                                 f"0..{parent.size - 1}")
        if len(set(ids)) != len(ids):
            dup = sorted({r for r in ids if ids.count(r) > 1})
            raise ValueError(f"ranks={ids} lists rank(s) {dup} more than once; expected distinct ranks")
        return [int(r) for r in ids]

    def _blank(self, binding: Binding, name: str, ranks: Sequence[int] = (), member: bool = True) -> None:
        """The parts every Comm has; ``member`` False: the null communicator a rank outside ``ranks`` holds."""
        # (name, ranks) -> sub-communicators made of it so far: one entry per distinct creation, what the user made
        self._children: Dict[Tuple[str, Tuple[int, ...]], int] = {}
        self._state = CommState(binding, name)  # its state: what every part of it reads and changes (api/state.py)
        self._state.parent_ranks = list(ranks)
        if not member:
            self._state.size = len(ranks)
            self._state.member = False
        self._p2p = PointToPoint(self._state)
        self._splits = 0                        # split() calls so far (collective: equal on every rank)

    @classmethod
    def from_handle(cls, binding: Binding, handle: Any, name: str, *, topology: TopologyArg = None,
                    eager_limit: Optional[int] = None, timeout: Optional[float] = None) -> "Comm":
        """A Comm over a communicator ``handle`` the library already made (the world, from HcclCommInitRootInfo)."""
        self = cls.__new__(cls)
        self._blank(binding, name)
        self._setup(handle, topology, eager_limit, timeout)
        self._state.parent_ranks = list(range(self.size))
        return self

    def _setup(self, handle: Any, topology: TopologyArg, eager_limit: Optional[int], timeout: Optional[float]) -> None:
        b, state = self.binding, self._state
        state.handle = handle
        state.rank = b.get_rank_id(handle)
        state.size = b.get_rank_size(handle)
        state.timeout = _exec_timeout(timeout)
        state.eager_limit = _eager(eager_limit)
        state.topology = _topology(topology, state.size)
        self._stream = b.create_stream()
        self._engine = self._p2p.engine = Engine(state, self._stream, self._p2p.pending)
        if self.size <= P2P_PRECONNECT_MAX:
            self._connect_peers()
        if self.size > 1:
            self._connect_library_collectives()
        state.flight = observe.created(state, self.size - 1 if self.size <= P2P_PRECONNECT_MAX else 0)

    def _connect_peers(self) -> None:
        """Open the channel to every peer now (communicator creation is collective, p2p is not).

        Channel setup needs both ends; doing it lazily at the first send would deadlock patterns
        such as "everyone sends right first".  Lanes later ask for their channel again (per their
        plan) and get this one back (channels are reused per peer/engine/protocol); the signature handshake
        uses it too (resources.COMM_ENGINE, COMM_NOTIFIES); an algorithm's channels are its own.
        """
        by_proto: Dict[int, List[int]] = {}
        for p in range(self.size):
            if p != self.rank:
                by_proto.setdefault(int(self.topology.link(self.rank, p)), []).append(p)
        resources.acquire_comm_channels(self.binding, self.handle, by_proto)

    def _connect_library_collectives(self) -> None:
        """Set up the library collectives' links now (one library barrier), while every rank is here.

        The library sets them up at a communicator's first library collective (algorithm=native) and
        blocks that call until every peer makes its own first one (up to HCCL_CONNECT_TIMEOUT): a
        started collective (``async_op``, torch's works) would block in its start, past the caller's
        timeout, and a rank that never calls one would be a link-setup timeout, not a wait naming it.
        """
        self.binding.barrier(self.handle, self._stream)
        self.binding.synchronize_stream(self._stream)

    # ------------------------------------------------------------------ basics
    def resources(self) -> List[Holding]:
        """Every thread, channel and buffer this communicator acquired, by purpose (``describe()`` of each says it)."""
        return resources.held_by(self.handle) if self.handle is not None else []

    def get_rank(self) -> int:
        """This process's rank in the communicator (-1 on a null communicator)."""
        return self.rank

    def get_size(self) -> int:
        """Number of ranks."""
        return self.size

    # ------------------------------------------------------------------ what it is (its state's, read-only)
    binding: Binding = _read("binding", "The Binding the communicator calls through.")
    name: str = _read("name", "Its name (as given to Comm() / init()).")
    rank: int = _read("rank", "This process's rank in it (-1 on a null communicator).")
    size: int = _read("size", "Its number of ranks.")
    parent_ranks: List[int] = _read("parent_ranks", "Its members' ranks in the parent communicator.")
    topology: Topology = _read("topology", "Its topology.")
    timeout: int = _read("timeout", "Seconds each notify wait may take (0: never).")
    is_member: bool = _read("member", "False for the null communicator handed to ranks outside ``ranks``.")
    broken: Optional[str] = _read("broken", "Why the communicator is unusable after a failure (None while it works).")
    handle: Any = _read("handle", "The ``HcclComm`` handle (for fused operators and direct library calls); None on a "
                                  "null communicator.")

    @property
    def eager_limit(self) -> int:
        """Messages up to this many bytes are sent eagerly (the send returns before the matching recv)."""
        return self._state.eager_limit

    @eager_limit.setter
    def eager_limit(self, value: int) -> None:
        self._state.eager_limit = _eager(value)

    @property
    def comm_name(self) -> str:
        """The library's name of this communicator (HcclGetCommName; as torch_npu's ``get_hccl_comm_name``)."""
        self._check_usable("comm_name")
        return self.binding.get_comm_name(self.handle)

    @property
    def buffer_bytes(self) -> int:
        """Size of this rank's HCCL buffer in bytes (2 x the buffer size in MiB)."""
        return self._engine.buffer_bytes

    def __bool__(self) -> bool:
        return self._state.member

    def __repr__(self) -> str:
        if not self._state.member:
            return f"<Comm {self.name!r} null: this rank is not in ranks {self.parent_ranks}>"
        state = "destroyed" if self._state.destroyed else ("broken" if self._state.broken else "live")
        return f"<Comm {self.name!r} rank {self.rank}/{self.size} {state}>"

    def __reduce__(self) -> Any:
        raise TypeError(f"communicator {self.name!r} cannot be pickled (sent to another process): it belongs to "
                        f"process {self._state.pid}, which created it; a process that must communicate calls "
                        "hcomm.init(rank=, world_size=, root_info=) itself as a rank of a job of its own")

    def __enter__(self) -> "Comm":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.destroy()

    def _check_usable(self, what: str) -> None:
        self._state.check_usable(what)

    def destroy(self) -> None:
        """Release the communicator (idempotent; also on context-manager exit and at hcomm.finalize()).

        It waits for another thread's call in progress on it (the call lock); a forked child may not destroy its
        parent's communicator (:class:`~hcomm_cffi.api.errors.ForeignProcessError`, nothing released).
        """
        state = self._state
        state.check_process("destroy")
        with state.lock:
            self._destroy(state)

    def _destroy(self, state: CommState) -> None:
        if state.destroyed or state.handle is None:
            state.destroyed = True
            return
        state.destroyed = True
        b = self.binding
        try:
            if not state.broken:
                self._engine.drain(min(DRAIN_TIMEOUT_S, self.timeout or DRAIN_TIMEOUT_S))
                self._p2p.drain()
        finally:
            live.unregister(self)
            handle, state.handle = state.handle, None
            self._engine.release()
            left = self._p2p.pending()
            if left:              # requests the caller never waited for: their queued work goes (they fail, destroyed)
                abandon_queued(b, handle, f"destroyed with {left} send/recv request(s) never waited for")
            try:
                b.comm_destroy(handle)
                failed: Optional[HcclError] = None
            except HcclError as exc:      # released anyway; say why after the rest is released too
                failed = exc
            self._p2p.close()
            b.destroy_stream(self._stream)
            resources.forget(handle)
            observe.destroyed(state)
            if failed is not None:
                if not state.broken:
                    raise failed
                # after a failure, notifies left set are its consequence (already reported), not a new error
                warnings.warn(f"rank {self.rank}: destroy of {self.name!r} after an earlier failure: {failed}",
                              RuntimeWarning, stacklevel=2)

    def dump_flight_recorder(self, directory: Optional[str] = None) -> str:
        """Write this process's flight recorders (every communicator) as JSON; returns the file's path.

        ``directory``: default HCOMM_FR_DIR, else the job directory under ``hcomm run``; read the
        dumps of all ranks with ``hcomm doctor DIR``.
        """
        self._check_usable("dump_flight_recorder")
        if self._state.flight is None:
            raise CommError("dump_flight_recorder: the flight recorder is off (HCOMM_FR_SIZE=0); expected "
                            "HCOMM_FR_SIZE >= 1 when the communicator was created")
        path = flight.dump_all("dump_flight_recorder()", directory)
        if path is None:
            raise ValueError("dump_flight_recorder: directory=None and neither HCOMM_FR_DIR nor an hcomm run job "
                             "directory is set; expected a directory to write to")
        return path

    # ------------------------------------------------------------------ collectives
    # Each builds its operation (api/op.py: the arguments validated, the fast key of a repeated blocking call) and
    # hands it to the engine; a persistent request (``*_init``) validates the same way once.
    @overload
    def allreduce(self, x: B, op: ReduceOpLike = ..., *, out: None = ..., algorithm: AlgorithmArg = ...,
                  async_op: Literal[False] = ..., stream: None = ...) -> B: ...
    @overload
    def allreduce(self, x: BufferLike, op: ReduceOpLike = ..., *, out: O, algorithm: AlgorithmArg = ...,
                  async_op: Literal[False] = ..., stream: None = ...) -> O: ...
    @overload
    def allreduce(self, x: BufferLike, op: ReduceOpLike = ..., *, out: Optional[BufferLike] = ...,
                  algorithm: AlgorithmArg = ..., async_op: bool = ...,
                  stream: Optional[StreamLike] = ...) -> Union[BufferLike, Request[Any]]: ...

    def allreduce(self, x: BufferLike, op: ReduceOpLike = "sum", *, out: Optional[BufferLike] = None,
                  algorithm: AlgorithmArg = "auto", async_op: bool = False,
                  stream: Optional[StreamLike] = None) -> Any:
        """Reduce ``x`` over all ranks; the result replaces ``x`` (or goes to ``out``), which is returned.

        ``async_op=True`` returns a :class:`Request` at once (wait() returns the result); ``stream=`` (an
        ACL stream) enqueues the collective after the work on that stream and returns a Request without
        synchronising (see :mod:`hcomm_cffi.api.streams`).  The same two keywords exist on every collective.
        """
        if isinstance(op, str) and op not in OPS and average.wanted(op):   # op='avg': the sum, divided by the size
            return average.run(self._state, "allreduce", x, lambda: self.allreduce(
                x, "sum", out=out, algorithm=algorithm, async_op=async_op), async_op, stream)
        c = collective(self._state, "allreduce", "allreduce", x, out, algorithm, async_op, stream, op=op)
        return self._engine.call(c)

    @overload
    def broadcast(self, x: B, root: int = ..., *, algorithm: AlgorithmArg = ..., async_op: Literal[False] = ...,
                  stream: None = ...) -> B: ...
    @overload
    def broadcast(self, x: B, root: int = ..., *, algorithm: AlgorithmArg = ..., async_op: bool = ...,
                  stream: Optional[StreamLike] = ...) -> Union[B, Request[B]]: ...

    def broadcast(self, x: B, root: int = 0, *, algorithm: AlgorithmArg = "auto", async_op: bool = False,
                  stream: Optional[StreamLike] = None) -> Any:
        """Copy ``x`` of rank ``root`` into ``x`` on every rank (in place); returns ``x``."""
        c = collective(self._state, "broadcast", "broadcast", x, None, algorithm, async_op, stream, root=root)
        return self._engine.call(c)

    @overload
    def allgather(self, x: B, *, out: None = ..., algorithm: AlgorithmArg = ..., async_op: Literal[False] = ...,
                  stream: None = ...) -> B: ...
    @overload
    def allgather(self, x: BufferLike, *, out: O, algorithm: AlgorithmArg = ..., async_op: Literal[False] = ...,
                  stream: None = ...) -> O: ...
    @overload
    def allgather(self, x: BufferLike, *, out: Optional[BufferLike] = ..., algorithm: AlgorithmArg = ...,
                  async_op: bool = ..., stream: Optional[StreamLike] = ...) -> Union[BufferLike, Request[Any]]: ...

    def allgather(self, x: BufferLike, *, out: Optional[BufferLike] = None, algorithm: AlgorithmArg = "auto",
                  async_op: bool = False, stream: Optional[StreamLike] = None) -> Any:
        """Every rank's ``x`` stacked in rank order: ``out`` (a new buffer of x's kind when None) has shape (size, *x.shape)."""
        c = collective(self._state, "allgather", "allgather", x, out, algorithm, async_op, stream)
        return self._engine.call(c)

    @overload
    def reduce_scatter(self, x: B, op: ReduceOpLike = ..., *, out: None = ..., algorithm: AlgorithmArg = ...,
                       async_op: Literal[False] = ..., stream: None = ...) -> B: ...
    @overload
    def reduce_scatter(self, x: BufferLike, op: ReduceOpLike = ..., *, out: O, algorithm: AlgorithmArg = ...,
                       async_op: Literal[False] = ..., stream: None = ...) -> O: ...
    @overload
    def reduce_scatter(self, x: BufferLike, op: ReduceOpLike = ..., *, out: Optional[BufferLike] = ...,
                       algorithm: AlgorithmArg = ..., async_op: bool = ...,
                       stream: Optional[StreamLike] = ...) -> Union[BufferLike, Request[Any]]: ...

    def reduce_scatter(self, x: BufferLike, op: ReduceOpLike = "sum", *, out: Optional[BufferLike] = None,
                       algorithm: AlgorithmArg = "auto", async_op: bool = False,
                       stream: Optional[StreamLike] = None) -> Any:
        """Reduce ``x`` (size equal blocks) over ranks; rank r receives block r in ``out``."""
        if isinstance(op, str) and op not in OPS and average.wanted(op):
            return average.run(self._state, "reduce_scatter", x, lambda: self.reduce_scatter(
                x, "sum", out=out, algorithm=algorithm, async_op=async_op), async_op, stream)
        c = collective(self._state, "reduce_scatter", "reduce_scatter", x, out, algorithm, async_op, stream, op=op)
        return self._engine.call(c)

    @overload
    def reduce(self, x: B, root: int = ..., op: ReduceOpLike = ..., *, out: None = ..., algorithm: AlgorithmArg = ...,
               async_op: Literal[False] = ..., stream: None = ...) -> Optional[B]: ...
    @overload
    def reduce(self, x: BufferLike, root: int = ..., op: ReduceOpLike = ..., *, out: O, algorithm: AlgorithmArg = ...,
               async_op: Literal[False] = ..., stream: None = ...) -> Optional[O]: ...
    @overload
    def reduce(self, x: BufferLike, root: int = ..., op: ReduceOpLike = ..., *, out: Optional[BufferLike] = ...,
               algorithm: AlgorithmArg = ..., async_op: bool = ...,
               stream: Optional[StreamLike] = ...) -> Union[None, BufferLike, Request[Any]]: ...

    def reduce(self, x: BufferLike, root: int = 0, op: ReduceOpLike = "sum", *, out: Optional[BufferLike] = None,
               algorithm: AlgorithmArg = "auto", async_op: bool = False,
               stream: Optional[StreamLike] = None) -> Any:
        """Reduce ``x`` onto ``root`` (into ``out``, or ``x`` in place there); returns the result on root, else None."""
        if isinstance(op, str) and op not in OPS and average.wanted(op):
            return average.run(self._state, "reduce", x, lambda: self.reduce(
                x, root, "sum", out=out, algorithm=algorithm, async_op=async_op), async_op, stream,
                self.rank == self._state.rank_arg("root", root))
        c = collective(self._state, "reduce", "reduce", x, out, algorithm, async_op, stream, op=op, root=root)
        return self._engine.call(c)

    @overload
    def alltoall(self, x: B, *, out: None = ..., algorithm: AlgorithmArg = ..., async_op: Literal[False] = ...,
                 stream: None = ...) -> B: ...
    @overload
    def alltoall(self, x: BufferLike, *, out: O, algorithm: AlgorithmArg = ..., async_op: Literal[False] = ...,
                 stream: None = ...) -> O: ...
    @overload
    def alltoall(self, x: BufferLike, *, out: Optional[BufferLike] = ..., algorithm: AlgorithmArg = ...,
                 async_op: bool = ..., stream: Optional[StreamLike] = ...) -> Union[BufferLike, Request[Any]]: ...

    def alltoall(self, x: BufferLike, *, out: Optional[BufferLike] = None, algorithm: AlgorithmArg = "auto",
                 async_op: bool = False, stream: Optional[StreamLike] = None) -> Any:
        """Block j of ``x`` goes to rank j; block i of ``out`` comes from rank i."""
        c = collective(self._state, "alltoall", "alltoall", x, out, algorithm, async_op, stream)
        return self._engine.call(c)

    @overload
    def barrier(self, *, algorithm: AlgorithmArg = ..., async_op: Literal[False] = ..., stream: None = ...) -> None: ...
    @overload
    def barrier(self, *, algorithm: AlgorithmArg = ..., async_op: bool = ...,
                stream: Optional[StreamLike] = ...) -> Optional[Request[None]]: ...

    def barrier(self, *, algorithm: AlgorithmArg = "auto", async_op: bool = False,
                stream: Optional[StreamLike] = None) -> Any:
        """Return once every rank has entered the barrier (None; a Request with ``async_op``/``stream``)."""
        c = collective(self._state, "barrier", "barrier", None, None, algorithm, async_op, stream)
        return self._engine.call(c)

    # ------------------------------------------------------------------ nonblocking (MPI names)
    def iallreduce(self, x: B, op: ReduceOpLike = "sum", *, out: Optional[BufferLike] = None,
                   algorithm: AlgorithmArg = "auto", stream: Optional[StreamLike] = None) -> Request[Any]:
        """Start an allreduce; wait() on the Request returns the result (``x`` or ``out``)."""
        return cast(Request[Any], self.allreduce(x, op, out=out, algorithm=algorithm, async_op=True, stream=stream))

    def ibroadcast(self, x: B, root: int = 0, *, algorithm: AlgorithmArg = "auto",
                   stream: Optional[StreamLike] = None) -> Request[B]:
        """Start a broadcast; wait() returns ``x``."""
        return cast(Request[Any], self.broadcast(x, root, algorithm=algorithm, async_op=True, stream=stream))

    def iallgather(self, x: BufferLike, *, out: Optional[BufferLike] = None, algorithm: AlgorithmArg = "auto",
                   stream: Optional[StreamLike] = None) -> Request[Any]:
        """Start an allgather; wait() returns ``out``."""
        return cast(Request[Any], self.allgather(x, out=out, algorithm=algorithm, async_op=True, stream=stream))

    def ireduce_scatter(self, x: BufferLike, op: ReduceOpLike = "sum", *, out: Optional[BufferLike] = None,
                        algorithm: AlgorithmArg = "auto", stream: Optional[StreamLike] = None) -> Request[Any]:
        """Start a reduce_scatter; wait() returns ``out``."""
        return cast(Request[Any], self.reduce_scatter(x, op, out=out, algorithm=algorithm, async_op=True, stream=stream))

    def ireduce(self, x: BufferLike, root: int = 0, op: ReduceOpLike = "sum", *, out: Optional[BufferLike] = None,
                algorithm: AlgorithmArg = "auto", stream: Optional[StreamLike] = None) -> Request[Any]:
        """Start a reduce; wait() returns the result on root, None elsewhere."""
        return cast(Request[Any], self.reduce(x, root, op, out=out, algorithm=algorithm, async_op=True, stream=stream))

    def ialltoall(self, x: BufferLike, *, out: Optional[BufferLike] = None, algorithm: AlgorithmArg = "auto",
                  stream: Optional[StreamLike] = None) -> Request[Any]:
        """Start an alltoall; wait() returns ``out``."""
        return cast(Request[Any], self.alltoall(x, out=out, algorithm=algorithm, async_op=True, stream=stream))

    def ibarrier(self, *, algorithm: AlgorithmArg = "auto", stream: Optional[StreamLike] = None) -> Request[None]:
        """Start a barrier; wait() returns None once every rank has entered it."""
        return cast(Request[Any], self.barrier(algorithm=algorithm, async_op=True, stream=stream))

    # ------------------------------------------------------------------ persistent (MPI-4 MPI_Allreduce_init & co)
    # Validated and bound once (api/persistent.py).
    def allreduce_init(self, x: B, op: ReduceOpLike = "sum", *, out: Optional[BufferLike] = None,
                       algorithm: AlgorithmArg = "auto") -> Persistent[Any]:
        """A persistent allreduce (``MPI_Allreduce_init``, mpi4py's ``Allreduce_init``); wait() returns x or out."""
        return self._persistent("allreduce", x, out, algorithm, op=op)

    def broadcast_init(self, x: B, root: int = 0, *, algorithm: AlgorithmArg = "auto") -> Persistent[B]:
        """A persistent broadcast (``MPI_Bcast_init``); wait() returns ``x``."""
        return self._persistent("broadcast", x, None, algorithm, root=root)

    def allgather_init(self, x: BufferLike, *, out: Optional[BufferLike] = None,
                       algorithm: AlgorithmArg = "auto") -> Persistent[Any]:
        """A persistent allgather (``MPI_Allgather_init``); wait() returns ``out`` (made once when None)."""
        return self._persistent("allgather", x, out, algorithm)

    def reduce_scatter_init(self, x: BufferLike, op: ReduceOpLike = "sum", *, out: Optional[BufferLike] = None,
                            algorithm: AlgorithmArg = "auto") -> Persistent[Any]:
        """A persistent reduce_scatter (``MPI_Reduce_scatter_block_init``); wait() returns ``out``."""
        return self._persistent("reduce_scatter", x, out, algorithm, op=op)

    def alltoall_init(self, x: BufferLike, *, out: Optional[BufferLike] = None,
                      algorithm: AlgorithmArg = "auto") -> Persistent[Any]:
        """A persistent alltoall (``MPI_Alltoall_init``); wait() returns ``out``."""
        return self._persistent("alltoall", x, out, algorithm)

    def reduce_init(self, x: BufferLike, root: int = 0, op: ReduceOpLike = "sum", *, out: Optional[BufferLike] = None,
                    algorithm: AlgorithmArg = "auto") -> Persistent[Any]:
        """A persistent reduce (``MPI_Reduce_init``); wait() returns the result on root, None elsewhere."""
        return self._persistent("reduce", x, out, algorithm, op=op, root=root)

    def _persistent(self, coll: str, x: Any, out: Any, algorithm: AlgorithmArg, **scalars: Any) -> Persistent[Any]:
        """The persistent request of collective ``coll`` (``scalars``: its op and root), its buffers validated once."""
        c = collective(self._state, coll, coll + "_init", x, out, algorithm, True, **scalars)
        validate(self._state, c)
        return Persistent(self._engine, c, f"rank {self.rank} of communicator {self.name!r}: {c.method}", held(c))

    # ------------------------------------------------------------------ any algorithm
    def run_algorithm(self, algorithm: AlgorithmArg, x: B, *, out: Optional[BufferLike] = None,
                      op: Optional[ReduceOpLike] = None, root: int = 0, collective: Optional[str] = None) -> Any:
        """Run ``algorithm`` (a name, ``"module:attr"`` or an Algorithm) on ``x`` into ``out`` (None: in place).

        For a user algorithm that implements a pattern the Comm API does not name (a neighbour
        exchange, a pipeline hand-off...): ``collective`` defaults to the one it declares; ``out``
        may differ from ``x`` in size; ``op`` and ``root`` are passed through.  Returns the output.
        """
        c = algorithm_call(self._state, algorithm, x, out, op, root, collective)
        return self._engine.call(c)

    # ------------------------------------------------------------------ split (MPI_Comm_split)
    def split(self, color: Optional[int], key: int = 0, *, name: Optional[str] = None,
              buffer_size_mb: Optional[int] = None, topology: TopologyArg = None) -> "Comm":
        """Collective over this communicator: ranks with the same ``color`` form a new communicator.

        Ranks are ordered by ``key``, then by their rank here, as MPI_Comm_split.  ``color`` None or
        negative (MPI_UNDEFINED) gives a null communicator.  Default name: ``split<n>.<color>``.
        """
        with self._state.lock:      # the colour exchange and the creation are one call of this communicator
            return self._split(color, key, name, buffer_size_mb, topology)

    def _split(self, color: Optional[int], key: int, name: Optional[str], buffer_size_mb: Optional[int],
               topology: TopologyArg) -> "Comm":
        self._check_usable("split")
        for arg, value in (("color", color), ("key", key)):
            if value is None and arg == "color":
                continue
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not -2**62 < value < 2**62:
                raise TypeError(f"split: {arg}={value!r}; expected an int" + (" (or None)" if arg == "color" else ""))
        mine = -1 if color is None or color < 0 else int(color)
        try:
            table = self.allgather(np.array([mine, int(key)], np.int64))
        except CommError as exc:   # name the user's call, not the allgather inside it
            raise type(exc)(f"rank {self.rank} of communicator {self.name!r}: split(color={color!r}, key={key!r}) "
                            f"could not exchange the colours: every rank of {self.name!r} must call split() at the "
                            f"same point (the same number of times); {exc}") from exc
        nth = self._splits
        self._splits += 1
        label = name if name is not None else f"split{nth}.{mine}"
        if mine < 0:                # the null communicator
            null = Comm.__new__(Comm)
            null._blank(self.binding, label, [], False)
            return null
        members = [r for _, r in sorted((int(k), r) for r, (c, k) in enumerate(table.tolist()) if c == mine)]
        return Comm(label, ranks=members, parent=self, topology=topology, buffer_size_mb=buffer_size_mb)

    # ------------------------------------------------------------------ point-to-point (lanes: api/point_to_point.py)
    def send(self, x: BufferLike, dst: int, *, timeout: Optional[float] = None,
             stream: Optional[StreamLike] = None) -> Optional[Request[Any]]:
        """Send ``x`` to ``dst``; returns once ``x`` may be reused (eager) or the peer has it (rendezvous).

        ``stream=``: the library's HcclSend enqueued on that stream; returns a Request without waiting (it may be
        captured into an ACL graph); sizes and dtypes must match the peer's call, as for HcclSend/HcclRecv.
        """
        if stream is not None:
            c = stream_call(self._state, True, x, dst, stream)
            return cast(Request[Any], self._engine.call(c))
        if timeout is not None:             # every argument is checked before anything is posted
            timeout = timeout_arg(timeout)
        self._p2p.blocking(lane_call(self._state, True, "isend", dst, x), timeout, "recv")
        return None

    @overload
    def recv(self, buf: B, src: int, *, timeout: Optional[float] = ..., stream: None = ...) -> B: ...
    @overload
    def recv(self, buf: BufferLike, src: int, *, timeout: Optional[float] = ..., stream: StreamLike) -> Request[Any]: ...

    def recv(self, buf: BufferLike, src: int, *, timeout: Optional[float] = None,
             stream: Optional[StreamLike] = None) -> Union[BufferLike, Request[Any]]:
        """Receive into ``buf`` from ``src`` (sizes and dtypes must match the send); returns ``buf``.

        ``stream=``: the library's HcclRecv enqueued on that stream; returns a Request (as ``send``).
        """
        if stream is not None:
            c = stream_call(self._state, False, buf, src, stream)
            return cast(Request[Any], self._engine.call(c))
        if timeout is not None:
            timeout = timeout_arg(timeout)
        self._p2p.blocking(lane_call(self._state, False, "irecv", src, buf), timeout, "send")
        return buf

    def isend(self, x: BufferLike, dst: int) -> Request[Any]:
        """Start sending ``x`` to ``dst``; do not modify ``x`` before the request completes."""
        return self._p2p.post(lane_call(self._state, True, "isend", dst, x))

    def irecv(self, buf: BufferLike, src: int) -> Request[Any]:
        """Start receiving into ``buf`` from ``src``; wait() returns ``buf``."""
        return self._p2p.post(lane_call(self._state, False, "irecv", src, buf))

    def irecv_any(self, buf: BufferLike) -> AnySourceRequest:
        """Start receiving into ``buf`` from whichever rank's next message arrives first (``MPI_ANY_SOURCE``);
        the request's ``source`` names the sender once it is done."""
        return self._p2p.irecv_any(buf)

    def send_multi(self, items: Sequence[BufferLike], dst: int, *, timeout: Optional[float] = None) -> None:
        """Send several buffers to ``dst`` as consecutive messages in one launch."""
        timeout = timeout_arg(timeout)
        self._p2p.blocking(lane_call(self._state, True, "send_multi", dst, items=items), timeout, "recv_multi")

    def recv_multi(self, items: Sequence[BufferLike], src: int, *,
                   timeout: Optional[float] = None) -> List[BufferLike]:
        """Receive consecutive messages from ``src`` into the given buffers; returns them."""
        timeout = timeout_arg(timeout)
        c = lane_call(self._state, False, "recv_multi", src, items=items)
        return cast(List[BufferLike], self._p2p.blocking(c, timeout, "send_multi"))
