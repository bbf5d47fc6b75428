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

import math
import warnings
import zlib
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from ..algorithms import registry
from ..algorithms.context import NOTIFIES_PER_CHANNEL, IssueContext
from ..algorithms.dryrun import dry_run
from ..algorithms.interface import Algorithm, CollectiveCall
from ..algorithms.replay import Schedule, capture
from ..algorithms.tasks import TaskBatch
from .._ffi import ffi
from ..binding import Binding
from .. import flight, settings
from ..enums import DataType, ReduceOp, parse_reduce_op
from ..errors import HcclError
from ..initializers import make_channel_descs, make_comm_config
from ..plan import MIB, Topology
from ..resources import ENGINE, Resources
from . import consistency, live, membership, observe
from .buffers import NO_STAGING, Buffer, Staging, as_buffer, new_like, overlaps
from .errors import CommError, NotMemberError, wrap_failure
from .fastcalls import FastCall, FastCalls, key_of
from .nonblocking import Pending, request_for
from .point_to_point import DRAIN_TIMEOUT_S, PointToPoint
from .request import Request
from .streams import StreamTargets, Target, sync_stream

__all__ = ["Comm", "DEFAULT_EAGER_LIMIT"]

DEFAULT_EAGER_LIMIT = 64 << 10
#: Communicators up to this size connect every peer at creation so point-to-point never waits on setup.
P2P_PRECONNECT_MAX = 256
#: Replayed schedules kept bound to their buffers (emulator: prepared task lists) before the cache starts over.
PREPARED_MAX = 256
TopologyArg = Union[None, Topology, Tuple[int, int]]


def _exec_timeout(value: Optional[float]) -> int:
    """Seconds each notify wait may take (HCCL_EXEC_TIMEOUT by default); 0 means never, as for the vendor."""
    if value is None:
        value = settings.value("HCCL_EXEC_TIMEOUT")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
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
    if value is None:
        value = settings.value("HCOMM_TOPOLOGY")
    if value is None:
        return Topology.single_server(size)
    if isinstance(value, Topology):
        topo = value
    elif isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, int) and v > 0 for v in value):
        topo = Topology.from_shape(*value)
    else:
        raise ValueError(f"topology={value!r}; expected (servers, devices_per_server) or a plan.Topology")
    if topo.n_ranks != size:
        raise ValueError(f"topology has {topo.n_ranks} ranks but the communicator has {size}; "
                         "servers x devices_per_server must equal the communicator size")
    return topo


_OPS = {"sum": ReduceOp.SUM, "prod": ReduceOp.PROD, "max": ReduceOp.MAX, "min": ReduceOp.MIN}


def _op(op: Any) -> ReduceOp:
    fast = _OPS.get(op) if isinstance(op, str) else None  # the common spellings, without parsing
    if fast is not None:
        return fast
    try:
        return parse_reduce_op(op)
    except ValueError as exc:
        raise ValueError(str(exc)) from None


class Comm:
    """A communicator (see the module docstring for membership rules)."""

    # set in _blank/_setup, which __init__ calls; declared here so their types are known before them
    size: int
    timeout: int
    _handle: Any

    def __init__(self, name: str, ranks: Optional[Sequence[int]] = None, *, parent: Optional["Comm"] = None,
                 topology: TopologyArg = None, eager_limit: Optional[int] = None,
                 timeout: Optional[float] = None, buffer_size_mb: Optional[int] = None) -> None:
        """Create a sub-communicator of ``parent`` (default: the world) over ``ranks`` (default: all).

        ``buffer_size_mb``: this communicator's HCCL buffer half size in MiB (the vendor's
        ``hcclBufferSize``; default ``HCCL_BUFFSIZE``, which is process-wide).
        """
        parent = parent if parent is not None else live.get_world()
        parent._check_usable("Comm()")
        if not isinstance(name, str) or not name or len(name.encode()) > 127 or not name.isascii():
            raise ValueError(f"name={name!r}; expected a non-empty ASCII string of at most 127 bytes")
        ids = list(range(parent.size)) if ranks is None else self._check_ranks(ranks, parent)
        if buffer_size_mb is not None:
            make_comm_config(buffer_size_mb=buffer_size_mb)  # validate on every rank, members or not
        self._blank(parent.binding, name)
        self.parent_ranks = ids
        if parent.rank not in ids:
            self.size = len(ids)
            self._member = False
            return
        topo = _topology(topology, len(ids))  # validate everything before the collective library call
        eager, tmo = _eager(eager_limit), _exec_timeout(timeout if timeout is not None else parent.timeout)
        key = (name, tuple(ids))
        nth = parent._children.get(key, 0)
        membership.agree(parent, name, nth, ids)  # members that disagree fail here, naming the difference
        parent._children[key] = nth + 1
        sub_id = zlib.crc32(f"{parent.name}/{name}/{ids}/{nth}".encode())
        cfg = make_comm_config(comm_name=name if nth == 0 else f"{name}#{nth}", buffer_size_mb=buffer_size_mb)
        handle = self.binding.create_sub_comm(parent._handle, ids, sub_id, ids.index(parent.rank), cfg)
        try:
            self._setup(handle, topo, eager, tmo)
        except BaseException:
            self.binding.comm_destroy(handle)
            self._handle = None
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

    def _blank(self, binding: Binding, name: str) -> None:
        self.binding = binding
        self.name = name
        self.rank = -1
        self.size = 0
        self._handle = None
        self._destroyed = False
        self._member = True
        self._broken: Optional[str] = None
        self._children: Dict[Tuple[str, tuple], int] = {}
        self.parent_ranks = []
        self._p2p = PointToPoint(self)
        self._seq = 0                      # collectives issued on this communicator (signature, flight recorder)
        self._check_signatures = False
        self._choices: Dict[tuple, Tuple[Algorithm, str]] = {}   # call signature -> (algorithm, description)
        self._scratch_ptr: Any = None
        self._scratch_size = 0
        self._retired: List[Any] = []          # scratch buffers a started collective may still use
        self._inflight: "set[Pending]" = set()  # started collectives not yet seen complete
        self._splits = 0                        # split() calls so far (collective: equal on every rank)
        self._flight: Any = None                # flight recorder ring (observe.created), None when off
        self._prepared: Dict[tuple, Any] = {}   # (schedule, buffers) -> its bound batch (emulator: prepared tasks)
        self._fast = FastCalls()                # blocking calls on NumPy buffers seen before -> their batch
        self._fast_ok = False                   # set in _setup: host buffers used in place (no staging)

    @classmethod
    def _from_handle(cls, binding: Binding, handle: Any, name: str, topology: TopologyArg = None,
                     eager_limit: Optional[int] = None, timeout: Optional[float] = None) -> "Comm":
        self = cls.__new__(cls)
        self._blank(binding, name)
        self._setup(handle, topology, eager_limit, timeout)
        self.parent_ranks = list(range(self.size))
        return self

    def _setup(self, handle: Any, topology: TopologyArg, eager_limit: Optional[int], timeout: Optional[float]) -> None:
        b = self.binding
        self._handle = handle
        self.rank = b.get_rank_id(handle)
        self.size = b.get_rank_size(handle)
        self.timeout = _exec_timeout(timeout)
        self._eager_limit = _eager(eager_limit)
        self.topology = _topology(topology, self.size)
        self._stream = b.create_stream()
        self._targets = StreamTargets(b, handle, self._stream, self.name)
        self._buffer_bytes = self._targets.own.cache.local_buffer()[1]
        self._staging = getattr(b.lib, "backend_name", "cann") != "sim"
        self._sim_lib = None if self._staging else getattr(b.lib, "raw", b.lib)    # the SimLibrary under an ABI check
        step = settings.value("HCOMM_STEP_BYTES")
        self._step_bytes = (getattr(self._sim_lib, "preferred_step_bytes", None) if step is None else step) or None
        self._on_device: Dict[Tuple[Any, int], int] = {}     # (char *, bytes) -> address, declared on the emulator
        check = settings.value("HCOMM_CHECK_COLLECTIVES")
        self._check_signatures = (not self._staging) if check is None else bool(check)
        self._fast_ok = not self._staging
        if self.size <= P2P_PRECONNECT_MAX:
            self._connect_peers()
        if self._check_signatures:
            # the signature allgather is a library collective: set up its links now, while every rank is
            # here, so a rank that later never calls a collective is a notify timeout naming it, not a hang
            b.barrier(handle, self._stream)
            b.synchronize_stream(self._stream)
        self._flight = observe.created(self, self.size - 1 if self.size <= P2P_PRECONNECT_MAX else 0)

    def _connect_peers(self) -> None:
        """Open the channel to every peer now (communicator creation is collective, p2p is not).

        Channel setup needs both ends; doing it lazily at the first send would deadlock patterns
        such as "everyone sends right first".  Lanes later ask for their channel again (per their
        plan) and get this one back (channels are reused per peer/engine/protocol).
        """
        by_proto: Dict[int, List[int]] = {}
        for p in range(self.size):
            if p != self.rank:
                by_proto.setdefault(int(self.topology.link(self.rank, p)), []).append(p)
        for proto, peers in sorted(by_proto.items()):
            descs = make_channel_descs(peers, proto, NOTIFIES_PER_CHANNEL)
            self.binding.channel_acquire(self._handle, ENGINE, descs, len(peers))

    # ------------------------------------------------------------------ basics
    def get_rank(self) -> int:
        """This process's rank in the communicator (-1 on a null communicator)."""
        return self.rank

    def get_size(self) -> int:
        """Number of ranks."""
        return self.size

    @property
    def is_member(self) -> bool:
        """False for the null communicator handed to ranks outside ``ranks``."""
        return self._member

    @property
    def eager_limit(self) -> int:
        """Messages up to this many bytes are sent eagerly (the send returns before the matching recv)."""
        return self._eager_limit

    @eager_limit.setter
    def eager_limit(self, value: int) -> None:
        self._eager_limit = _eager(value)

    @property
    def handle(self) -> Any:
        """The ``HcclComm`` handle (for fused operators and direct library calls); None on a null communicator."""
        return self._handle

    @property
    def comm_name(self) -> str:
        """The library's name of this communicator (HcclGetCommName; as torch_npu's ``get_hccl_comm_name``)."""
        self._check_usable("comm_name")
        return self.binding.get_comm_name(self._handle)

    @property
    def buffer_bytes(self) -> int:
        """Size of this rank's HCCL buffer in bytes (2 x the buffer size in MiB)."""
        return self._buffer_bytes

    def __bool__(self) -> bool:
        return self._member

    def __repr__(self) -> str:
        state = "destroyed" if self._destroyed else ("broken" if self._broken else "live")
        return f"<Comm {self.name!r} rank {self.rank}/{self.size} {state}>"

    def __enter__(self) -> "Comm":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.destroy()

    def _check_usable(self, what: str) -> None:
        if not self._member:
            raise NotMemberError(f"{what}: this rank is not a member of communicator {self.name!r} (ranks "
                                 f"{self.parent_ranks}); it holds a null communicator")
        if self._destroyed:
            raise CommError(f"{what}: communicator {self.name!r} was destroyed; create a new one")
        if self._broken:
            raise CommError(f"{what}: communicator {self.name!r} is unusable after an earlier failure "
                            f"({self._broken}); destroy it and create a new one")

    def destroy(self) -> None:
        """Release the communicator (idempotent; also on context-manager exit and at hcomm.finalize())."""
        if self._destroyed or self._handle is None:
            self._destroyed = True
            return
        self._destroyed = True
        b = self.binding
        try:
            if not self._broken:
                self._drain_inflight()
                self._p2p.drain()
        finally:
            live.unregister(self)
            handle, self._handle = self._handle, None
            for ptr in self._retired + ([self._scratch_ptr] if self._scratch_ptr is not None else []):
                b.free(ptr)
            self._retired.clear()
            self._scratch_ptr = None
            try:
                b.comm_destroy(handle)
                failed: Optional[HcclError] = None
            except HcclError as exc:      # released anyway; say why after the rest is released too
                failed = exc
            for lane in self._p2p.lanes.values():
                b.destroy_stream(lane.stream)
            self._p2p.lanes.clear()
            b.destroy_stream(self._stream)
            self._targets.clear()
            self._forget_prepared()
            observe.destroyed(self)
            if self._sim_lib is not None:
                self._forget_device_memory()
            if failed is not None:
                if not self._broken:
                    raise failed
                # after a failure, notifies left set are its consequence (already reported), not a new error
                warnings.warn(f"rank {self.rank}: destroy of {self.name!r} after an earlier failure: {failed}",
                              RuntimeWarning, stacklevel=2)

    def _declare_device_memory(self, buf: Optional[Buffer]) -> None:
        """Emulator: declare a host buffer device memory, as staging makes it on CANN (once per address range).

        The emulator rejects host memory as a local copy/reduce operand (sim/devmem.py); the Comm API
        hands NumPy buffers to it directly instead of copying them into aclrtMalloc memory, so it says
        so here.  A range already declared costs one dict lookup.
        """
        if buf is None or self._sim_lib is None or buf.device == "npu" or not buf.nbytes:
            return
        key = (buf.ptr, buf.nbytes)         # cffi pointers hash and compare by address
        if key in self._on_device:
            return
        if len(self._on_device) > 4096:        # many short-lived arrays: start over
            self._forget_device_memory()
        addr = int(ffi.cast("uintptr_t", buf.ptr))
        self._sim_lib.sim_register_device_memory(addr, buf.nbytes)
        self._on_device[key] = addr

    def _forget_device_memory(self) -> None:
        """Emulator: withdraw every range _declare_device_memory declared (prepared batches were validated on them)."""
        self._forget_prepared()
        if self._sim_lib is not None:          # only the emulator has ranges declared
            for addr in self._on_device.values():
                self._sim_lib.sim_unregister_device_memory(addr)
        self._on_device.clear()

    def _drain_inflight(self) -> None:
        """Let started collectives finish before their resources go (bounded: a failure is warned, not raised)."""
        for pending in list(self._inflight):
            try:
                if not pending.sync(min(DRAIN_TIMEOUT_S, self.timeout or DRAIN_TIMEOUT_S)):
                    warnings.warn(f"rank {self.rank}: destroy of {self.name!r}: {pending.what} never completed",
                                  RuntimeWarning, stacklevel=3)
            except CommError as exc:
                warnings.warn(f"rank {self.rank}: destroy of {self.name!r}: {exc}", RuntimeWarning, stacklevel=3)

    def dump_flight_recorder(self, directory: Optional[str] = None) -> str:
        """Write this process's flight recorders (every communicator) as JSON; returns the file's path.

        ``directory``: default HCOMM_FR_DIR, else the job directory under ``hcomm run``; read the
        dumps of all ranks with ``hcomm doctor DIR``.
        """
        self._check_usable("dump_flight_recorder")
        if self._flight is None:
            raise CommError("dump_flight_recorder: the flight recorder is off (HCOMM_FR_SIZE=0); expected "
                            "HCOMM_FR_SIZE >= 1 when the communicator was created")
        path = flight.dump_all("dump_flight_recorder()", directory)
        if path is None:
            raise ValueError("dump_flight_recorder: directory=None and neither HCOMM_FR_DIR nor an hcomm run job "
                             "directory is set; expected a directory to write to")
        return path

    # ------------------------------------------------------------------ machinery
    def _scratch(self, nbytes: int) -> Any:
        """Scratch memory of at least ``nbytes``; a smaller old one is retired (a started collective may use it)."""
        if nbytes > self._scratch_size:
            if self._scratch_ptr is not None:
                self._retired.append(self._scratch_ptr)
                self._scratch_ptr = None
            size = max(nbytes, 4096, 2 * self._scratch_size)  # doubling: retired buffers total < the live one
            self._forget_prepared()       # their batches address the retired scratch
            self._scratch_ptr = self.binding.malloc(size)
            self._scratch_size = size
        return self._scratch_ptr

    def _free_retired(self) -> None:
        """Free retired scratch once no started collective can still use it."""
        if self._retired and not self._inflight:
            for ptr in self._retired:
                self.binding.free(ptr)
            self._retired.clear()

    def _resources(self, alg: Algorithm, call: CollectiveCall, target: Target) -> Resources:
        """What ``alg`` declares for this call on ``target``'s stream, or what a dry run of its schedule derives."""
        key = (alg, call.signature)
        res = target.res.get(key)
        if res is None:
            spec = alg.resources(self.topology, call, self.rank)
            if spec is None:
                spec = dry_run(alg, self.topology, call, self._buffer_bytes, declared=False).resources_for(self.rank)
            if len(target.res) > 4096:
                target.forget_resources()
                self._forget_prepared()
            res = target.res[key] = target.cache.get(alg.name, spec)
        return res

    def _fail(self, exc: HcclError, where: str) -> CommError:
        err = wrap_failure(exc, f"rank {self.rank} of communicator {self.name!r}: {where}")
        self._broken = str(err)
        observe.failed(self, exc, err)
        return err

    def _rank_arg(self, name: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{name}={value!r} is not an int rank; expected 0..{self.size - 1}")
        if not 0 <= value < self.size:
            raise ValueError(f"{name}={value} is out of range for communicator {self.name!r} of {self.size} ranks; "
                             f"expected 0..{self.size - 1}")
        return int(value)

    def _run(self, coll: str, algorithm: Any, send: Optional[Buffer], recv: Optional[Buffer], count: int,
             dtype: DataType, op: Optional[ReduceOp] = None, root: int = 0, nbytes: int = 0,
             recv_count: Optional[int] = None, fast_key: Optional[tuple] = None) -> str:
        """Run ``coll`` and wait for it; returns the algorithm's name (the caller checked the communicator).

        The blocking path: no Pending, no in-flight bookkeeping, the stream synchronised directly.
        Everything derived from the call's signature (the algorithm, its resources, its recorded
        schedule) is cached; a replayed call with a ``fast_key`` (see :mod:`.fastcalls`) is stored
        whole, so the next identical call skips even the lookups (:meth:`_fast_call`).
        """
        alg, call, in_place, staging, what = self._prepare(coll, algorithm, send, recv, count, dtype, op, root,
                                                           nbytes, recv_count)
        target = self._targets.own
        recorded_root = observe.root_of(coll, root)
        slot = observe.issue(self, self._seq, coll, alg.name, count, nbytes, dtype, op, recorded_root)
        if self._check_signatures:
            self._compare_signatures(consistency.signature(self._seq, call, alg.name), what, target)
        try:
            batch, replayed = self._batch_for(alg, call, in_place, send, recv, target)
        except HcclError as exc:
            raise self._fail(exc, what) from exc
        self._launch_and_wait(batch, slot, coll, what)
        if staging is not NO_STAGING:
            staging.finish()
        elif replayed and fast_key is not None:
            self._fast.store(fast_key, FastCall(coll, alg.name, what, batch, count, nbytes, dtype, op, recorded_root,
                                                call))
        return alg.name

    def _fast_call(self, coll: str, x: Any, x_written: bool, out: Any, op: Any, algorithm: Any, root: int,
                   async_op: bool, stream: Any) -> Tuple[Optional[tuple], bool]:
        """(the fast-call key of a blocking call, whether a stored call ran it): the stored call's flight
        record, its signature check when on, and its batch -- nothing re-derived."""
        if async_op or stream is not None or not self._fast_ok:
            return None, False
        key = key_of(coll, x, x_written, out, op, algorithm, root)
        if key is None:
            return None, False
        try:
            fast = self._fast.entries.get(key)
        except TypeError:               # an unhashable op or algorithm object: the full path serves it
            return None, False
        if fast is None:
            return key, False
        self._seq += 1
        slot = observe.issue(self, self._seq, coll, fast.algorithm, fast.count, fast.nbytes, fast.dtype, fast.op,
                             fast.root)
        if self._check_signatures:
            self._compare_signatures(consistency.signature(self._seq, fast.call, fast.algorithm), fast.what,
                                     self._targets.own)
        self._launch_and_wait(fast.batch, slot, coll, fast.what)
        return key, True

    def _launch_and_wait(self, batch: Any, slot: int, coll: str, what: str) -> None:
        """Launch ``batch`` on the communicator's stream after the previous collective and wait for it."""
        target = self._targets.own
        try:
            self._targets.order(target)
            batch.launch()
            if slot >= 0:
                self._flight.running(slot)
            self.binding.synchronize_stream(target.stream)
        except HcclError as exc:
            raise self._fail(exc, what) from exc
        observe.done(self, slot, coll, self._seq)
        if self._retired:
            self._free_retired()

    def _start(self, coll: str, algorithm: Any, send: Optional[Buffer], recv: Optional[Buffer], count: int,
               dtype: DataType, op: Optional[ReduceOp] = None, root: int = 0, nbytes: int = 0,
               recv_count: Optional[int] = None, stream: Any = None) -> Pending:
        """Issue (or replay) ``coll`` into one batch and launch it on the stream; do not wait."""
        self._check_usable(coll)
        alg, call, in_place, staging, what = self._prepare(coll, algorithm, send, recv, count, dtype, op, root,
                                                           nbytes, recv_count)
        target = self._targets.get(stream)
        signatures = sig = None
        slot = observe.issue(self, self._seq, coll, alg.name, count, nbytes, dtype, op, observe.root_of(coll, root))
        try:
            batch, _ = self._batch_for(alg, call, in_place, send, recv, target)
            self._targets.order(target)
            if self._check_signatures:   # compared when the request completes: a started call must not block
                sig = consistency.signature(self._seq, call, alg.name)
                signatures = self._gather_signatures(sig, target)
            batch.launch()
            if slot >= 0:
                self._flight.running(slot)
        except HcclError as exc:
            raise self._fail(exc, what) from exc
        # ``sig`` is kept too: the queued allgather reads it when it runs (on the emulator: in place, no copy)
        pending = Pending(self, what, target.stream, staging, (send, recv, sig), alg.name, signatures, slot)
        self._inflight.add(pending)
        return pending

    def _prepare(self, coll: str, algorithm: Any, send: Optional[Buffer], recv: Optional[Buffer], count: int,
                 dtype: DataType, op: Optional[ReduceOp], root: int, nbytes: int, recv_count: Optional[int]
                 ) -> Tuple[Algorithm, CollectiveCall, bool, Staging, str]:
        """The algorithm (cached per signature), the call with device pointers, and the next sequence number."""
        key = (algorithm, coll, nbytes, dtype, op, root)
        choice = self._choices.get(key)
        if choice is None:
            if len(self._choices) > 4096:
                self._choices.clear()
            alg, why = registry.explain(algorithm, coll, self.topology, nbytes, dtype, op, root,
                                        max(1, self._buffer_bytes // 2 // MIB))
            what = f"{coll} (algorithm={alg.name}, {nbytes} bytes, {self.size} ranks)"
            choice = self._choices[key] = (alg, what)      # the description too: no formatting per call
            observe.chose(self, coll, nbytes, alg, why)
        alg, what = choice
        in_place = send is not None and recv is not None and recv.ptr == send.ptr
        staging: Staging = NO_STAGING
        if self._staging:
            staging = Staging(self.binding, True)
            sp = staging.device_ptr(send) if send is not None else None
            if in_place:
                rp = sp
                if recv.device != "npu":   # type: ignore[union-attr]
                    staging._back.append((recv.ptr, sp, recv.nbytes))   # type: ignore[union-attr]
            else:
                rp = staging.device_ptr(recv, copy_in=coll == "broadcast", copy_out=True) if recv else None
        else:
            sp = send.ptr if send is not None else None
            rp = recv.ptr if recv is not None else None
            self._declare_device_memory(send)
            if recv is not send:
                self._declare_device_memory(recv)
        call = CollectiveCall(coll, sp, rp, count, dtype, ReduceOp.SUM if op is None else op, root, recv_count)
        self._seq += 1
        return alg, call, in_place, staging, what

    def _call(self, coll: str, algorithm: Any, send: Optional[Buffer], recv: Optional[Buffer], count: int,
              dtype: DataType, op: Optional[ReduceOp], root: int, nbytes: int, result: Any, async_op: bool,
              stream: Any, fast_key: Optional[tuple] = None) -> Any:
        """Blocking: run and return ``result``; ``async_op`` or ``stream``: start and return a Request for it."""
        if not async_op and stream is None:
            self._run(coll, algorithm, send, recv, count, dtype, op, root, nbytes, None, fast_key)
            return result
        return request_for(self._start(coll, algorithm, send, recv, count, dtype, op, root, nbytes, None, stream),
                           result)

    def _batch_for(self, alg: Algorithm, call: CollectiveCall, in_place: bool, send: Optional[Buffer],
                   recv: Optional[Buffer], target: Target) -> Tuple[Any, bool]:
        """(the batch of ``call`` on ``target``, whether it replays a schedule): issued the first time only."""
        key = (alg, call.coll, call.count, call.dtype, call.op, call.root, call.recv_count, in_place)
        known = target.schedules.get(key)
        if known is not None:
            batch = self._prepared.get((known, call.send, call.recv, self._scratch_ptr))
            return (batch if batch is not None else self._bound(known, call, send, recv)), True
        bases = self._bases(call, send, recv)
        batch = TaskBatch(self.binding)
        ctx = IssueContext(batch, self._resources(alg, call, target), rank=self.rank, size=self.size,
                           topology=self.topology, timeout_s=self.timeout, dtype=call.dtype, op=call.op,
                           comm=self._handle, stream=target.stream, scratch=self._scratch,
                           step_bytes=self._step_bytes)
        alg.issue(ctx, call)
        if alg.replayable:
            if len(target.schedules) > 4096:
                target.schedules.clear()
                self._forget_prepared()
            # issue() may have allocated the scratch memory
            target.schedules[key] = capture(batch, self._bases(call, send, recv))
        return batch, False

    def _bases(self, call: CollectiveCall, send: Optional[Buffer], recv: Optional[Buffer]
               ) -> Tuple[Tuple[Any, int], ...]:
        """The buffers a schedule's addresses are relative to: (pointer, bytes) of send, receive and scratch."""
        return ((call.send, 0 if send is None else send.nbytes), (call.recv, 0 if recv is None else recv.nbytes),
                (self._scratch_ptr, self._scratch_size))

    def _bound(self, known: Schedule, call: CollectiveCall, send: Optional[Buffer], recv: Optional[Buffer]) -> Any:
        """A replay of ``known`` on this call's buffers, kept for the next call on the same buffers.

        On the emulator a schedule of data-plane calls becomes a prepared task list (sim_prepare_batch:
        validated once, then launched without the per-call entry points; issue 16); elsewhere the
        bound TaskBatch is kept (launch only reads it). Keyed by the schedule object, so a schedule
        dropped with its resources never matches again; bounded like the other per-signature caches.
        """
        bases = self._bases(call, send, recv)
        batch = known.bind(self.binding, bases)
        if self._sim_lib is not None and not known.unbatched:
            batch = self._sim_lib.sim_prepare_batch(self.binding, batch.calls)
        if len(self._prepared) >= PREPARED_MAX:
            self._forget_prepared()
        self._prepared[(known, call.send, call.recv, self._scratch_ptr)] = batch
        return batch

    def _forget_resources(self) -> None:
        """Drop every cached resource set and the schedules recorded on them (they name their handles)."""
        self._targets.forget_resources()
        self._forget_prepared()

    def _forget_prepared(self) -> None:
        """Drop every bound batch: the prepared ones and the fast calls holding them."""
        self._prepared.clear()
        self._fast.clear()

    def _gather_signatures(self, sig: np.ndarray, target: Target) -> Tuple[np.ndarray, Staging]:
        """Enqueue the allgather of every rank's signature of this call on ``target``'s stream."""
        rows = np.full((self.size, consistency.SIG_WORDS), -1, np.int64)
        if self._staging:
            staging = Staging(self.binding, True)
            sp = staging.device_ptr(as_buffer(sig, "signature"))
            rp = staging.device_ptr(as_buffer(rows, "signatures", writable=True), copy_in=False, copy_out=True)
        else:   # the emulator: our own two arrays, used in place (every collective pays for this call)
            staging = NO_STAGING
            sp, rp = ffi.cast("char *", ffi.from_buffer(sig)), ffi.cast("char *", ffi.from_buffer(rows))
        self.binding.all_gather(sp, rp, consistency.SIG_WORDS, int(DataType.INT64), self._handle, target.stream)
        return rows, staging

    def _check_signatures_of(self, rows: np.ndarray, staging: Staging, started: bool) -> None:
        """Raise CollectiveMismatchError when the gathered signatures differ (after the stream passed them).

        ``started``: the collective was launched behind the signatures (a nonblocking call), so its data
        may have moved: the communicator is then unusable, as after any failure.
        """
        staging.finish()
        msg = consistency.compare(rows, self.rank, self.name)
        if msg is not None:
            if started:
                self._broken = msg
            raise consistency.CollectiveMismatchError(msg)

    def _compare_signatures(self, sig: np.ndarray, what: str, target: Target) -> None:
        """Allgather every rank's signature and raise on all ranks if any differs, before anything is issued."""
        try:
            rows, staging = self._gather_signatures(sig, target)
            self.binding.synchronize_stream(target.stream)
        except HcclError as exc:
            raise self._fail(exc, f"{what}, comparing the signatures of collective #{self._seq}") from exc
        self._check_signatures_of(rows, staging, started=False)

    # ------------------------------------------------------------------ collectives
    def allreduce(self, x: Any, op: Any = "sum", *, out: Any = None, algorithm: str = "auto", async_op: bool = False,
                  stream: Any = None) -> Any:
        """Reduce ``x`` over all ranks; the result replaces ``x`` (or goes to ``out``), which is returned.

        ``async_op=True`` returns a :class:`Request` at once (wait() returns the result); ``stream=`` (an
        ACL stream) enqueues the collective after the work on that stream and returns a Request without
        synchronising (see :mod:`hcomm_cffi.api.streams`).  The same two keywords exist on every collective.
        """
        self._check_usable("allreduce")
        key, ran = self._fast_call("allreduce", x, out is None, out, op, algorithm, 0, async_op, stream)
        if ran:
            return x if out is None else out
        rop = _op(op)
        registry.check_algorithm(algorithm)
        xb = as_buffer(x, "x", writable=out is None)
        ob = xb if out is None else self._out(out, xb.count, xb, "allreduce")
        return self._call("allreduce", algorithm, xb, ob, xb.count, xb.dtype, rop, 0, xb.nbytes,
                           x if out is None else out, async_op, stream, key)

    def broadcast(self, x: Any, root: int = 0, *, algorithm: str = "auto", async_op: bool = False,
                  stream: Any = None) -> Any:
        """Copy ``x`` of rank ``root`` into ``x`` on every rank (in place); returns ``x``."""
        self._check_usable("broadcast")
        key, ran = self._fast_call("broadcast", x, self.rank != root, None, None, algorithm, root, async_op, stream)
        if ran:
            return x
        root = self._rank_arg("root", root)
        registry.check_algorithm(algorithm)
        xb = as_buffer(x, "x", writable=self.rank != root)
        return self._call("broadcast", algorithm, xb, xb, xb.count, xb.dtype, None, root, xb.nbytes, x, async_op,
                           stream, key)

    def allgather(self, x: Any, *, out: Any = None, algorithm: str = "auto", async_op: bool = False,
                  stream: Any = None) -> Any:
        """Every rank's ``x`` stacked in rank order: ``out`` has shape (size, *x.shape)."""
        self._check_usable("allgather")
        key, ran = self._fast_call("allgather", x, False, out, None, algorithm, 0, out is None or async_op, stream)
        if ran:
            return out
        registry.check_algorithm(algorithm)
        xb = as_buffer(x, "x")
        if out is None:
            out = new_like(x, (self.size,) + xb.shape, xb.dtype)
        ob = self._out(out, self.size * xb.count, xb, "allgather", exclusive=True)
        return self._call("allgather", algorithm, xb, ob, xb.count, xb.dtype, None, 0, ob.nbytes, out, async_op,
                           stream, key)

    def reduce_scatter(self, x: Any, op: Any = "sum", *, out: Any = None, algorithm: str = "auto",
                       async_op: bool = False, stream: Any = None) -> Any:
        """Reduce ``x`` (size equal blocks) over ranks; rank r receives block r in ``out``."""
        self._check_usable("reduce_scatter")
        key, ran = self._fast_call("reduce_scatter", x, False, out, op, algorithm, 0, out is None or async_op, stream)
        if ran:
            return out
        rop = _op(op)
        registry.check_algorithm(algorithm)
        xb = as_buffer(x, "x")
        block = self._blocks(xb, "reduce_scatter")
        if out is None:
            shape = ((xb.shape[0] // self.size,) + xb.shape[1:]) if xb.shape and xb.shape[0] % self.size == 0 \
                else (block,)
            out = new_like(x, shape, xb.dtype)
        ob = self._out(out, block, xb, "reduce_scatter", exclusive=True)
        return self._call("reduce_scatter", algorithm, xb, ob, block, xb.dtype, rop, 0, xb.nbytes, out, async_op,
                           stream, key)

    def reduce(self, x: Any, root: int = 0, op: Any = "sum", *, out: Any = None, algorithm: str = "auto",
               async_op: bool = False, stream: Any = None) -> Any:
        """Reduce ``x`` onto ``root`` (into ``out``, or ``x`` in place there); returns the result on root, else None."""
        self._check_usable("reduce")
        key, ran = self._fast_call("reduce", x, self.rank == root and out is None, out, op, algorithm, root, async_op,
                                   stream)
        if ran:
            return None if self.rank != root else (x if out is None else out)
        root = self._rank_arg("root", root)
        rop = _op(op)
        registry.check_algorithm(algorithm)
        is_root = self.rank == root
        xb = as_buffer(x, "x", writable=is_root and out is None)
        ob: Optional[Buffer] = None
        if is_root:
            ob = xb if out is None else self._out(out, xb.count, xb, "reduce")
        result = None if not is_root else (x if out is None else out)
        return self._call("reduce", algorithm, xb, ob, xb.count, xb.dtype, rop, root, xb.nbytes, result, async_op,
                           stream, key)

    def alltoall(self, x: Any, *, out: Any = None, algorithm: str = "auto", async_op: bool = False,
                 stream: Any = None) -> Any:
        """Block j of ``x`` goes to rank j; block i of ``out`` comes from rank i."""
        self._check_usable("alltoall")
        key, ran = self._fast_call("alltoall", x, False, out, None, algorithm, 0, out is None or async_op, stream)
        if ran:
            return out
        registry.check_algorithm(algorithm)
        xb = as_buffer(x, "x")
        block = self._blocks(xb, "alltoall")
        if out is None:
            out = new_like(x, xb.shape, xb.dtype)
        ob = self._out(out, xb.count, xb, "alltoall", exclusive=True)
        return self._call("alltoall", algorithm, xb, ob, block, xb.dtype, None, 0, xb.nbytes, out, async_op,
                           stream, key)

    def barrier(self, *, algorithm: str = "auto", async_op: bool = False, stream: Any = None) -> Any:
        """Return once every rank has entered the barrier (None; a Request with ``async_op``/``stream``)."""
        self._check_usable("barrier")
        registry.check_algorithm(algorithm)
        return self._call("barrier", algorithm, None, None, 0, DataType.INT8, None, 0, 0, None, async_op, stream)

    # ------------------------------------------------------------------ nonblocking (MPI names)
    def iallreduce(self, x: Any, op: Any = "sum", *, out: Any = None, algorithm: str = "auto",
                   stream: Any = None) -> Request:
        """Start an allreduce; wait() on the Request returns the result (``x`` or ``out``)."""
        return self.allreduce(x, op, out=out, algorithm=algorithm, async_op=True, stream=stream)

    def ibroadcast(self, x: Any, root: int = 0, *, algorithm: str = "auto", stream: Any = None) -> Request:
        """Start a broadcast; wait() returns ``x``."""
        return self.broadcast(x, root, algorithm=algorithm, async_op=True, stream=stream)

    def iallgather(self, x: Any, *, out: Any = None, algorithm: str = "auto", stream: Any = None) -> Request:
        """Start an allgather; wait() returns ``out``."""
        return self.allgather(x, out=out, algorithm=algorithm, async_op=True, stream=stream)

    def ireduce_scatter(self, x: Any, op: Any = "sum", *, out: Any = None, algorithm: str = "auto",
                        stream: Any = None) -> Request:
        """Start a reduce_scatter; wait() returns ``out``."""
        return self.reduce_scatter(x, op, out=out, algorithm=algorithm, async_op=True, stream=stream)

    def ireduce(self, x: Any, root: int = 0, op: Any = "sum", *, out: Any = None, algorithm: str = "auto",
                stream: Any = None) -> Request:
        """Start a reduce; wait() returns the result on root, None elsewhere."""
        return self.reduce(x, root, op, out=out, algorithm=algorithm, async_op=True, stream=stream)

    def ialltoall(self, x: Any, *, out: Any = None, algorithm: str = "auto", stream: Any = None) -> Request:
        """Start an alltoall; wait() returns ``out``."""
        return self.alltoall(x, out=out, algorithm=algorithm, async_op=True, stream=stream)

    def ibarrier(self, *, algorithm: str = "auto", stream: Any = None) -> Request:
        """Start a barrier; wait() returns None once every rank has entered it."""
        return self.barrier(algorithm=algorithm, async_op=True, stream=stream)

    def run_algorithm(self, algorithm: Any, x: Any, *, out: Any = None, op: Any = None, root: int = 0,
                      collective: Optional[str] = None) -> Any:
        """Run ``algorithm`` (a name, ``"module:attr"`` or an Algorithm) on ``x`` into ``out`` (None: in place).

        For a user algorithm that implements a pattern the Comm API does not name (a neighbour
        exchange, a pipeline hand-off...): ``collective`` defaults to the one it declares; ``out``
        may differ from ``x`` in size; ``op`` and ``root`` are passed through.  Returns the output.
        """
        self._check_usable("run_algorithm")
        alg = registry.resolve(algorithm)
        if collective is None:
            if alg.collectives is None or len(alg.collectives) != 1:
                declared = "any collective" if alg.collectives is None else ", ".join(sorted(alg.collectives))
                raise ValueError(f"run_algorithm: algorithm {alg.name!r} implements {declared}; pass collective= "
                                 "to say which to run")
            collective = next(iter(alg.collectives))
        root = self._rank_arg("root", root)
        rop = None if op is None else _op(op)
        xb = as_buffer(x, "x", writable=out is None)
        ob = xb if out is None else as_buffer(out, "out", writable=True)
        if ob.dtype != xb.dtype:
            raise ValueError(f"run_algorithm: out has dtype {ob.dtype.name.lower()} but x has "
                             f"{xb.dtype.name.lower()}; expected the same dtype")
        if ob is not xb and overlaps(ob, xb) and ob.ptr != xb.ptr:
            raise ValueError("run_algorithm: out overlaps x; expected separate buffers (or out=None for in place)")
        self._run(collective, alg, xb, ob, xb.count, xb.dtype, rop, root, xb.nbytes, ob.count)
        return x if out is None else out

    # ------------------------------------------------------------------ split (MPI_Comm_split)
    def split(self, color: Optional[int], key: int = 0, *, name: Optional[str] = None,
              buffer_size_mb: Optional[int] = None, topology: TopologyArg = None) -> "Comm":
        """Collective over this communicator: ranks with the same ``color`` form a new communicator.

        Ranks are ordered by ``key``, then by their rank here, as MPI_Comm_split.  ``color`` None or
        negative (MPI_UNDEFINED) gives a null communicator.  Default name: ``split<n>.<color>``.
        """
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
        if mine < 0:
            return Comm._null(self, label, [])
        members = [r for _, r in sorted((int(k), r) for r, (c, k) in enumerate(table.tolist()) if c == mine)]
        return Comm(label, ranks=members, parent=self, topology=topology, buffer_size_mb=buffer_size_mb)

    @classmethod
    def _null(cls, parent: "Comm", name: str, ranks: List[int]) -> "Comm":
        """The null communicator a rank outside ``ranks`` holds."""
        self = cls.__new__(cls)
        self._blank(parent.binding, name)
        self.parent_ranks = ranks
        self.size = len(ranks)
        self._member = False
        return self

    # ------------------------------------------------------------------ point-to-point (PointToPoint)
    def send(self, x: Any, dst: int, *, timeout: Optional[float] = None) -> None:
        """Send ``x`` to ``dst``; returns once ``x`` may be reused (eager) or the peer has it (rendezvous)."""
        self._p2p.send(x, dst, timeout=timeout)

    def recv(self, buf: Any, src: int, *, timeout: Optional[float] = None) -> Any:
        """Receive into ``buf`` from ``src`` (sizes and dtypes must match the send); returns ``buf``."""
        return self._p2p.recv(buf, src, timeout=timeout)

    def isend(self, x: Any, dst: int) -> Request:
        """Start sending ``x`` to ``dst``; do not modify ``x`` before the request completes."""
        return self._p2p.isend(x, dst)

    def irecv(self, buf: Any, src: int) -> Request:
        """Start receiving into ``buf`` from ``src``; wait() returns ``buf``."""
        return self._p2p.irecv(buf, src)

    def send_multi(self, items: Sequence[Any], dst: int, *, timeout: Optional[float] = None) -> None:
        """Send several buffers to ``dst`` as consecutive messages in one launch."""
        self._p2p.send_multi(items, dst, timeout=timeout)

    def recv_multi(self, items: Sequence[Any], src: int, *, timeout: Optional[float] = None) -> List[Any]:
        """Receive consecutive messages from ``src`` into the given buffers; returns them."""
        return self._p2p.recv_multi(items, src, timeout=timeout)

    # ------------------------------------------------------------------ validation helpers
    def _blocks(self, xb: Buffer, what: str) -> int:
        if xb.count % self.size:
            raise ValueError(f"{what}: x has {xb.count} elements, not divisible by the communicator size "
                             f"{self.size}; expected size equal blocks")
        return xb.count // self.size

    def _out(self, out: Any, count: int, xb: Buffer, what: str, exclusive: bool = False) -> Buffer:
        ob = as_buffer(out, "out", writable=True)
        if ob.dtype != xb.dtype:
            raise ValueError(f"{what}: out has dtype {ob.dtype.name.lower()} but x has {xb.dtype.name.lower()}; "
                             "expected the same dtype")
        if ob.count != count:
            raise ValueError(f"{what}: out has {ob.count} elements (shape {ob.shape}); expected {count}")
        if overlaps(ob, xb) and (exclusive or ob.ptr != xb.ptr):
            raise ValueError(f"{what}: out overlaps x; expected separate buffers"
                             + ("" if exclusive else " (or out=None for in place)"))
        return ob
