"""How a communicator's collectives become launched tasks: :class:`Issuer` (one per member Comm).

For each :class:`~hcomm_cffi.api.call.Call` it resolves the algorithm, stages or declares the
buffers, gets the resources (declared, or derived by a dry run), records the algorithm's schedule
the first time per signature and stream, binds it to the call's buffers behind the signature
handshake (:mod:`.signatures`; one bound batch per handshake parity, or one of its captured form) as an
:class:`~hcomm_cffi.api.call.Entry`, launches it, and waits (blocking) or hands back a
:class:`~hcomm_cffi.api.nonblocking.Pending`.  Every call of a replayable algorithm launches an
Entry, whichever way it came: the full path (which binds it, and keeps it for the blocking call's
key, :mod:`.fastcalls`), the fast path (:meth:`Issuer.fast`: the key's Entry) or a persistent
request (:mod:`.persistent`: the Entry it bound at init).  The Issuer owns what that needs -- the
streams, the caches, the scratch memory, the device-memory declarations, the sequence number --
and reaches the rest of the communicator through its :class:`~hcomm_cffi.api.port.CommPort`.
"""
from __future__ import annotations

import warnings
from functools import partial
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Set, Tuple

from .._ffi import ffi
from .. import settings
from ..algorithms import registry
from ..algorithms.interface import CAPTURED, CollectiveCall, IssueContext
from ..algorithms.dryrun import dry_run
from ..algorithms.replay import Schedule, capture
from ..algorithms.tasks import PreparedLaunch, TaskBatch
from ..binding import Binding
from ..enums import ReduceOp
from ..errors import HcclError
from ..lib.contract import Capabilities
from ..plan import MIB
from ..resources import Resources
from . import consistency, graphs, observe
from .buffers import NO_STAGING, Buffer, Staging
from .announce import Announcer
from .call import DEVICE_RANGES_MAX, RESOURCES_MAX, SCHEDULES_MAX, Bound, Call, CommCache, Entry
from .errors import CommError
from .fastcalls import key_of
from .interrupts import break_on_interrupted_wait, interrupted
from .nonblocking import Pending, request_for
from .request import Request
from .signatures import Exchange, Signer
from .streams import StreamTargets, Target, sync_stream

if TYPE_CHECKING:
    from .port import CommPort

__all__ = ["Issuer", "SCRATCH_MIN"]

#: The smallest scratch allocation (bytes); larger ones double.
SCRATCH_MIN = 4096
#: call signatures a communicator agrees on before acquiring their channels (later new ones are not agreed on)
AGREED_MAX = 4096


class Issuer:
    """One communicator's collective machinery (see the module docstring)."""

    def __init__(self, port: "CommPort", stream: Any) -> None:
        b: Binding = port.binding
        self.b = b
        self.port = port
        self.targets = StreamTargets(b, port.handle, stream, port.name)
        self.buffer_bytes: int = self.targets.own.cache.local_buffer()[1]
        caps: Capabilities = b.lib.capabilities           # the backend contract (lib/contract.py)
        self.caps = caps
        self.staging = not caps.host_memory_as_device
        step = settings.value("HCOMM_STEP_BYTES")
        self.step_bytes: Optional[int] = (caps.step_bytes if step is None else step) or None
        # library collectives: the backend's own in-band check, else (with the check on) the package's handshake
        self.check_native = bool(settings.value("HCOMM_CHECK_COLLECTIVES")) and not caps.checks_signatures_in_band
        self.fast_ok = not self.staging                   # host buffers used in place: bound calls may be kept
        self.on_device: Dict[Tuple[Any, int], int] = {}   # (char *, bytes) -> address, declared (emulator)
        self.cache = CommCache()                          # choices, bound calls, fast-call keys
        self.signer = Signer(port)
        self.announce = Announcer(b.lib, port.handle)    # launch order, for mismatches that never meet (api/announce.py)
        self.seq = 0                          # collectives issued (flight recorder, mismatch messages)
        self.scratch_ptr: Any = None
        self.scratch_size = 0
        self.retired: List[Any] = []          # scratch buffers a started collective may still use
        self.inflight: Set[Pending] = set()   # started collectives not yet seen complete
        self.agreed: Set[Tuple[Any, ...]] = set()   # call signatures agreed on before their channels (_first_use)

    # ------------------------------------------------------------------ lifetime
    def drain(self, timeout_s: float) -> None:
        """Let started collectives finish before their resources go (bounded: a failure is warned, not raised)."""
        port = self.port
        for pending in list(self.inflight):
            if (pending.graph is not None and pending.graph.stream_closed) or not self.targets.serves(pending.stream):
                pending.forget()       # it ran before its stream (or its graph's) was closed: Stream.close waits
                continue
            try:
                if not pending.sync(timeout_s):
                    warnings.warn(f"rank {port.rank}: destroy of {port.name!r}: {pending.what} never completed",
                                  RuntimeWarning, stacklevel=4)
            except CommError as exc:
                warnings.warn(f"rank {port.rank}: destroy of {port.name!r}: {exc}", RuntimeWarning, stacklevel=4)

    def release(self) -> None:
        """Free what the machinery holds (the communicator is destroyed; its handle is gone)."""
        for ptr in self.retired + ([self.scratch_ptr] if self.scratch_ptr is not None else []):
            self.b.free(ptr)
        self.retired.clear()
        self.scratch_ptr = None
        self.signer.release()
        self.targets.clear()
        self.forget_device_memory()
        self.cache.clear()

    def declare_device_memory(self, buf: Optional[Buffer]) -> None:
        """Declare a host buffer device memory where the backend takes host memory so (once per address range).

        The emulator rejects host memory as a local copy/reduce operand (sim/devmem.py); the Comm API
        hands NumPy buffers to it directly instead of copying them into aclrtMalloc memory, so it says
        so here.  A range already declared costs one dict lookup.
        """
        if buf is None or self.staging or buf.device == "npu" or not buf.nbytes:
            return
        key = (buf.ptr, buf.nbytes)         # cffi pointers hash and compare by address
        if key in self.on_device:
            return
        if len(self.on_device) >= DEVICE_RANGES_MAX:        # many short-lived arrays: start over
            self.forget_device_memory()
        addr = int(ffi.cast("uintptr_t", buf.ptr))
        self.b.lib.declare_device_memory(addr, buf.nbytes)
        self.on_device[key] = addr

    def forget_device_memory(self) -> None:
        """Withdraw every range declare_device_memory declared (bound calls were validated on them)."""
        if self.on_device:
            self.cache.invalidate()
            for addr in self.on_device.values():
                self.b.lib.withdraw_device_memory(addr)
            self.on_device.clear()

    def forget_resources(self) -> None:
        """Drop every cached resource set and the schedules recorded on them (they name their handles)."""
        self.targets.forget_resources()
        self.cache.invalidate()

    def _scratch(self, nbytes: int) -> Any:
        """Scratch memory of at least ``nbytes``; a smaller old one is retired (a started collective may use it)."""
        if nbytes > self.scratch_size:
            if self.scratch_ptr is not None:
                self.retired.append(self.scratch_ptr)
                self.scratch_ptr = None
            size = max(nbytes, SCRATCH_MIN, 2 * self.scratch_size)  # doubling: retired buffers total < the live one
            self.cache.invalidate()       # bound calls address the retired scratch
            self.scratch_ptr = self.b.malloc(size)
            self.scratch_size = size
        return self.scratch_ptr

    def _free_retired(self) -> None:
        """Free retired scratch once no started collective can still use it."""
        if self.retired and not self.inflight:
            for ptr in self.retired:
                self.b.free(ptr)
            self.retired.clear()

    # ------------------------------------------------------------------ the three ways in
    def call(self, c: Call) -> Any:
        """Blocking: run ``c`` and return its result; ``async_op`` or ``stream``: start it and return a Request."""
        if c.blocking:
            self.run(c)
            return c.result
        return self.start(c)

    def run(self, c: Call) -> str:
        """Run ``c`` and wait for it; returns the algorithm's name.

        The blocking path: no Pending, no in-flight bookkeeping, the stream synchronised directly.
        The Entry it launches is kept under the call's fast-call key, so the next identical call is
        one lookup (:meth:`fast`).  It holds the communicator's call lock until it returns (api/port.py):
        another thread's call on the communicator waits for it.
        """
        with self.port.lock:
            self.port.check_usable(c.coll)   # again under the lock: another thread may have broken or destroyed it
            return self._run(c)

    def _run(self, c: Call) -> str:
        graphs.check_ordered(self.port, None)     # not after work captured in an open graph (api/graphs.py)
        self._prepare(c)
        self.seq += 1
        record = observe.record_of(c)
        moved = self._moved()
        try:
            entry, bound = self._bind(c, self.targets.own, record)
            # recorded once it will launch: a call its algorithm refused while issuing leaves no open operation
            slot = observe.issue(self.port, self.seq, record, entry.fixed if entry is not None else None)
            self.announce(record)
            self._launch_and_wait(bound, slot, c.coll, c.what)
        except HcclError as exc:       # _bind's (the wait turns its own into a CommError)
            raise self.port.fail(exc, c.what) from exc
        except BaseException as exc:   # anywhere once peers could see it start: the communicator breaks
            self._interrupted(moved, c.what, exc)
            raise
        if c.staging is not NO_STAGING:
            c.staging.finish()
        elif entry is not None and c.fast_key is not None:
            self.cache.fast.store(c.fast_key, entry)
        return c.alg.name

    def fast(self, c: Call, x: Any, x_written: bool, out: Any) -> bool:
        """Whether the Entry kept for this blocking call's key ran it (its flight record and batch; nothing re-derived).

        ``c`` holds the validated op, algorithm and root (the same checks as every call); sets
        ``c.fast_key`` when the call has a key, so the full path keeps its Entry there.
        """
        if not self.fast_ok or c.async_op or c.stream is not None or graphs.holding(self.port):
            return False                # (c.blocking, without the property's call; nothing after captured work)
        key = key_of(c.coll, x, x_written, out, (c.op, c.algorithm, c.root))
        if key is None:
            return False
        with self.port.lock:       # as run(): the call lock until it returns; the lookup too (another thread's
            try:                   # call may drop the Entry, and the scratch memory it addresses, meanwhile)
                entry = self.cache.fast.entries.get(key)
            except TypeError:               # an unhashable algorithm object: the full path serves it
                return False
            c.fast_key = key
            if entry is None:
                return False
            self.port.check_usable(c.coll)
            self.seq += 1
            moved = self._moved()
            try:
                slot = observe.issue(self.port, self.seq, entry.record, entry.fixed)
                bound = self._take(entry)
                self.announce(entry.record)
                self._launch_and_wait(bound, slot, c.coll, entry.what)
            except BaseException as exc:   # anywhere once peers could see it start: the communicator breaks
                self._interrupted(moved, entry.what, exc)
                raise
        return True

    def start(self, c: Call) -> Request[Any]:
        """Issue (or replay) ``c`` into one batch, launch it on its stream and hand back its Request; do not wait (the
        call lock is held until it is launched: api/port.py).

        One guarded region from the lock to the Request returned: an exception anywhere in it once peers could see
        the call start (Ctrl-C, an alarm; also in the lock's release or the Request's making, after the launch)
        breaks the communicator, as the caller then holds no Request to wait for the queued call with.
        """
        moved: Optional[Tuple[int, int]] = None
        try:
            with self.port.lock:
                self.port.check_usable(c.coll)
                moved = self._moved()
                pending = self._start(c)
            return request_for(pending, c.result)
        except BaseException as exc:
            if moved is not None:
                self._interrupted(moved, c.what, exc)
            raise

    def _start(self, c: Call) -> Pending:
        """Start ``c`` under the call lock (its callers guard it against an exception once peers could see it)."""
        graphs.check_ordered(self.port, c.stream)
        self._prepare(c)
        target = self.targets.get(c.stream)
        self.seq += 1
        record = observe.record_of(c)
        graph = graphs.capturing(c.stream)      # an ACL graph captures the stream: recorded (api/graphs.py)
        if graph is not None:                   # before the set-up, which the capture lets this thread do
            slot = graph.captured(self.port, record, self.take_seq, partial(self.targets.order, target))
        try:
            entry, bound = self._bind(c, target, record, None if graph is None else graph.name)
        except HcclError as exc:
            raise self.port.fail(exc, c.what) from exc
        if graph is None:
            slot = observe.issue(self.port, self.seq, record, entry.fixed if entry is not None else None)
        else:     # announced at each replay, in the form whose handshake it repeats (api/announce.py)
            graph.announces(self.port, partial(self.announce, record,
                                               self._has_handshake(self._resources(c, target))))
        pending = self._launch_started(c, bound, target, slot, record, announce=graph is None)
        if graph is not None:
            graph.keep(pending)
            pending.graph = graph
        elif c.stream is not None:
            break_on_interrupted_wait(c.stream, self.port, c.what)
        return pending

    def take_seq(self) -> int:
        """The next operation number (a graph replay is one operation)."""
        self.seq += 1
        return self.seq

    # ------------------------------------------------------------------ persistent requests (persistent.py)
    def bind_persistent(self, c: Call) -> Tuple[Optional[Entry], int]:
        """Resolve ``c`` and bind it to its buffers now (validated once); (its Entry, the cache generation).

        None where a bound call cannot be kept (the backend stages host buffers, or the algorithm is
        not replayable): :meth:`start_persistent` then starts ``c`` the full way each time.
        """
        with self.port.lock:                # its choices and cache entries are the communicator's (api/port.py)
            self.port.check_usable(c.coll)
            return self._bind_persistent(c)

    def _bind_persistent(self, c: Call) -> Tuple[Optional[Entry], int]:
        self._prepare(c)
        if c.staging is not NO_STAGING:
            return None, self.cache.generation
        try:
            entry = self._entry(c, self.targets.own, observe.record_of(c))
        except HcclError as exc:
            raise self.port.fail(exc, c.what) from exc
        return entry, self.cache.generation

    def start_persistent(self, c: Call, bound: Tuple[Optional[Entry], int], pending: Optional[Pending]
                         ) -> Tuple[Pending, Tuple[Optional[Entry], int]]:
        """Launch a persistent request's bound call (or, without one, start ``c`` afresh): (its Pending, the binding
        it used).  ``bound``: what :meth:`bind_persistent` returned, bound again first when the cache's generation
        moved on (what it named may be gone); ``pending``: the request's Pending of its previous start, started
        again.  Under the call lock until it is launched (the generation compared there too: api/port.py)."""
        moved: Optional[Tuple[int, int]] = None
        try:                # one guarded region up to the Pending handed back, as start()'s
            with self.port.lock:
                self.port.check_usable(c.coll)
                moved = self._moved()
                entry, generation = bound
                if entry is not None and generation != self.cache.generation:
                    entry, generation = self._bind_persistent(c)
                started = self._start(c) if entry is None else self._start_bound(c, entry, pending)
            return started, (entry, generation)
        except BaseException as exc:
            if moved is not None:
                self._interrupted(moved, c.what, exc)
            raise

    def _start_bound(self, c: Call, entry: Entry, pending: Optional[Pending]) -> Pending:
        """Launch ``entry`` under the call lock (start_persistent guards it)."""
        graphs.check_ordered(self.port, None)     # not after work captured in an open graph (api/graphs.py)
        self.seq += 1
        slot = observe.issue(self.port, self.seq, entry.record, entry.fixed)
        return self._launch_started(c, self._take(entry), self.targets.own, slot, entry.record, pending)

    # ------------------------------------------------------------------ launching
    def _take(self, entry: Entry) -> Bound:
        """The batch of ``entry`` for the handshake parity now (advancing it when the call has a handshake)."""
        bound = entry.bound
        if len(bound) == 1:
            return bound[0]
        return bound[self.signer.advance(self.seq)]

    def _launch_and_wait(self, bound: Bound, slot: int, coll: str, what: str) -> None:
        """Launch ``bound`` on the communicator's stream after the previous collective and wait for it.

        The callers (:meth:`run`, :meth:`fast`) announced the call first, so an exception that leaves this
        wait (Ctrl-C, an alarm) breaks the communicator in their guard: the queued rest never runs.
        """
        target = self.targets.own
        try:
            self.targets.order(target)
            bound.batch.launch()
            observe.running(self.port, slot)
            self.announce.waiting(partial(sync_stream, self.b, target.stream), collective=self.announce.current)
        except HcclError as exc:
            self.check_exchange(bound.exchange, started=True)    # a mismatch explains the failure better
            raise self.port.fail(exc, what) from exc
        if bound.exchange is not None:
            self.check_exchange(bound.exchange, started=True)
        observe.done(self.port, slot, coll, self.seq)
        if self.retired:
            self._free_retired()

    def _launch_started(self, c: Call, bound: Bound, target: Target, slot: int, record: observe.Record,
                        pending: Optional[Pending] = None, announce: bool = True) -> Pending:
        """Launch ``bound`` on ``target``'s stream after the previous collective; the Pending that completes it
        (``pending`` started again, when given: a persistent request's).  ``announce``: False when an ACL graph
        captures the launch (nothing runs now; each replay announces it)."""
        try:
            self.targets.order(target)
            if announce:
                self.announce(record)
            bound.batch.launch()
            observe.running(self.port, slot)
        except HcclError as exc:
            raise self.port.fail(exc, c.what) from exc
        if pending is None:
            pending = Pending(self.port, c, target.stream, bound.exchange, slot, self.seq)
        else:
            pending.restart(bound.exchange, slot, self.seq)
        pending.announced = self.announce.current if announce else None
        self.inflight.add(pending)
        return pending

    def _moved(self) -> Tuple[int, int]:
        """What peers can see of this rank's progress: handshakes launched and collectives announced."""
        return self.signer.launched, self.announce.count

    def _interrupted(self, before: Tuple[int, int], what: str, exc: BaseException) -> None:
        """``exc`` left a call before its wait: the communicator breaks only when peers saw it start."""
        if self._moved() != before:
            interrupted(self.port, what, exc)

    def check_exchange(self, exchange: Optional[Exchange], started: bool) -> None:
        """Backends without host tasks: compare the handshake's slots now (its stream has passed them)."""
        if exchange is None:
            return
        msg = self.signer.check(exchange)
        if msg is not None:
            err = consistency.CollectiveMismatchError(msg)
            if started:       # the call's data may have moved: the communicator is unusable, as after any failure
                self.port.mark_broken(msg)
                observe.failed(self.port, None, err)
            raise err

    def completed(self, pending: Pending) -> None:
        """A started collective is known complete (its resources may go)."""
        self.inflight.discard(pending)

    # ------------------------------------------------------------------ deriving a call's batches
    def _prepare(self, c: Call) -> None:
        """Resolve ``c``: the algorithm (cached per signature) and the call with the pointers the engines use."""
        key = (c.algorithm, c.coll, c.nbytes, c.dtype, c.op, c.root)
        choice = self.cache.choices.get(key)
        if choice is None:
            alg, why = registry.explain(c.algorithm, c.coll, self.port.topology, c.nbytes, c.dtype, c.op, c.root,
                                        max(1, self.buffer_bytes // 2 // MIB))
            what = f"{c.coll} (algorithm={alg.name}, {c.nbytes} bytes, {self.port.size} ranks)"
            choice = (alg, what)                  # the description too: no formatting per call
            self.cache.choose(key, choice)
            observe.chose(self.port, c.coll, c.nbytes, alg, why)
        c.alg, c.what = choice
        send, recv = c.send, c.recv
        c.in_place = send is not None and recv is not None and recv.ptr == send.ptr
        if self.staging:
            c.staging = staging = Staging(self.b, True)
            sp = staging.device_ptr(send) if send is not None else None
            if c.in_place and recv is not None:
                rp = staging.in_place(recv, sp)
            else:
                rp = staging.device_ptr(recv, copy_in=c.coll == "broadcast", copy_out=True) if recv else None
        else:
            sp = send.ptr if send is not None else None
            rp = recv.ptr if recv is not None else None
            self.declare_device_memory(send)
            if recv is not send:
                self.declare_device_memory(recv)
        c.lib = CollectiveCall(c.coll, sp, rp, c.count, c.dtype, ReduceOp.SUM if c.op is None else c.op, c.root,
                               c.recv_count)

    def _bind(self, c: Call, target: Target, record: observe.Record, captured: Optional[str] = None
              ) -> Tuple[Optional[Entry], Bound]:
        """The Entry of ``c`` on ``target`` (None for an algorithm that is not replayable) and the batch to launch now.

        ``captured``: the name of the ACL graph that records the launch; the handshake takes the captured form,
        which every replay repeats as recorded (api/signatures.py), and the parity does not advance.
        """
        entry = self._entry(c, target, record, captured)
        if entry is not None:
            return entry, self._take(entry)
        res = self._resources(c, target)
        handshake = self._has_handshake(res)
        batch = TaskBatch(self.b)
        form = self.signer.parity if captured is None else CAPTURED
        exchange = self._handshake(batch, c, res, target, form, captured) if handshake else None
        batch.extend(self._issue(c, res, target))
        if handshake and captured is None:  # issued without error: the parity advances with the launch
            self.signer.advance(self.seq)
        return None, Bound(batch, exchange)

    def _has_handshake(self, res: Resources) -> bool:
        """A call on ``res`` starts with the signature handshake: its algorithm talks to peers, or the check is on."""
        return self.port.size > 1 and (bool(res.channels) or self.check_native)

    def _issue(self, c: Call, res: Resources, target: Target) -> TaskBatch:
        """The algorithm's tasks for ``c`` on ``res`` (its Python issue code runs)."""
        lc = c.lib
        body = TaskBatch(self.b)
        ctx = IssueContext(body, res, rank=self.port.rank, size=self.port.size, topology=self.port.topology,
                           timeout_s=self.port.timeout, dtype=lc.dtype, op=lc.op, comm=self.port.handle,
                           stream=target.stream, scratch=self._scratch, step_bytes=self.step_bytes)
        c.alg.issue(ctx, lc)
        return body

    def _schedule(self, c: Call, target: Target) -> Optional[Tuple[Schedule, bool]]:
        """The recorded schedule of ``c``'s signature on ``target`` and whether it has a handshake (recorded now the
        first time); None when the algorithm is not replayable."""
        if not c.alg.replayable:
            return None
        lc = c.lib
        key = (c.alg, lc.coll, lc.count, lc.dtype, lc.op, lc.root, lc.recv_count, c.in_place)
        known = target.schedules.get(key)
        if known is None:
            res = self._resources(c, target)
            body = self._issue(c, res, target)           # issue() may allocate the scratch memory: bases after it
            if len(target.schedules) >= SCHEDULES_MAX:
                target.schedules.clear()
                self.cache.invalidate()
            known = target.schedules[key] = (capture(body, self._bases(c)), self._has_handshake(res))
        return known

    def _entry(self, c: Call, target: Target, record: observe.Record, captured: Optional[str] = None
               ) -> Optional[Entry]:
        """``c`` bound to its buffers on ``target`` (kept in the cache, so the same buffers bind once); ``captured``:
        the graph that records it (the handshake's captured form alone, naming the graph in a mismatch)."""
        known = self._schedule(c, target)
        if known is None:
            return None
        schedule, handshake = known
        key = (schedule, c.lib.send, c.lib.recv, self.scratch_ptr, captured)
        entry = self.cache.entries.get(key)
        if entry is None:
            parities = ((0, 1) if captured is None else (CAPTURED,)) if handshake else (-1,)
            bound = tuple(self._bound(schedule, c, target, parity, captured) for parity in parities)
            entry = Entry(c.alg.name, c.what, bound, record, observe.fixed_of(record))
            self.cache.keep(key, entry)
        return entry

    def _bound(self, known: Schedule, c: Call, target: Target, parity: int, graph: Optional[str] = None) -> Bound:
        """A replay of ``known`` on this call's buffers, after the handshake of ``parity`` (-1: none; CAPTURED: the
        captured form, in ACL graph ``graph``).

        Where the backend prepares batches (the emulator) a schedule of data-plane calls becomes a
        prepared task list (validated once, then launched without the per-call entry points);
        elsewhere the bound TaskBatch is kept (launch only reads it).
        """
        batch = TaskBatch(self.b)
        exchange = None
        if parity >= 0:
            res = self._resources(c, target)
            exchange = self._handshake(batch, c, res, target, parity, graph)
        batch.extend(known.bind(self.b, self._bases(c)))
        if self.caps.prepares_batches and not known.unbatched:
            return Bound(PreparedLaunch(self.b, self.b.lib.prepare_batch(batch.calls)), exchange)
        return Bound(batch, exchange)

    def _resources(self, c: Call, target: Target) -> Resources:
        """What ``c``'s algorithm declares for it on ``target``'s stream, or what a dry run of its schedule derives."""
        alg, call = c.alg, c.lib
        key = (alg, call.signature)
        res = target.res.get(key)
        if res is None:
            spec = alg.resources(self.port.topology, call, self.port.rank)
            if spec is None:
                spec = dry_run(alg, self.port.topology, call, self.buffer_bytes, declared=False).resources_for(self.port.rank)
            if spec.channels and self.port.size > 1 and self._first_use(key):   # agree on the call first
                own = self.targets.own          # not ``target``: a stream= call's stream may be capturing a graph
                self.announce(observe.record_of(c))     # peers blocked on this agreement compare launch orders
                self.signer.agree(own.cache, own.stream, call, alg.name,
                                  self.b.lib.host_task if self.caps.host_tasks else None)
            if len(target.res) >= RESOURCES_MAX:
                target.forget_resources()
                self.cache.invalidate()
            res = target.res[key] = target.cache.get(alg.name, spec)
        return res

    def _first_use(self, key: Tuple[Any, ...]) -> bool:
        """Whether call signature ``key`` (algorithm, signature) is new to the communicator, whichever stream it is
        on, and so is agreed on before its channels are acquired.

        Every rank makes the same calls in the same order, but each chooses its streams: a per-stream test
        would make one rank agree where its peer, on a stream that had the call before, runs the call's own
        handshake, and the agreement would consume that handshake (both ranks then wait for the timeout).
        Once ``AGREED_MAX`` signatures were agreed, later new ones are not (a function of the calls alone).
        """
        agreed = self.agreed
        if key in agreed or len(agreed) >= AGREED_MAX:
            return False
        agreed.add(key)
        return True

    def _handshake(self, sink: TaskBatch, c: Call, res: Resources, target: Target, parity: int,
                   graph: Optional[str] = None) -> Optional[Exchange]:
        """Issue the signature handshake of ``c`` (slots and notifies of ``parity``; CAPTURED: the captured form, in
        ACL graph ``graph``) into ``sink``, on the thread the call's tasks run on."""
        signer = self.signer
        own_thread = bool(res.spec.threads)
        peers = signer.peers_for(res.channels)
        key = ("signature", peers, own_thread)
        links = target.res.get(key)
        if links is None:
            links = target.res[key] = signer.resources(target.cache, peers, not own_thread)
        words = consistency.signature(c.lib, c.alg.name)
        host_task = self.b.lib.host_task if self.caps.host_tasks else None
        return signer.issue(sink, links, res.main if own_thread else links.main, words, host_task, parity, graph)

    def _bases(self, c: Call) -> Tuple[Tuple[Any, int], ...]:
        """The buffers a schedule's addresses are relative to: (pointer, bytes) of send, receive and scratch."""
        return ((c.lib.send, 0 if c.send is None else c.send.nbytes), (c.lib.recv, 0 if c.recv is None else c.recv.nbytes),
                (self.scratch_ptr, self.scratch_size))
