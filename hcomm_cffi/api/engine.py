"""The engine of one member Comm (:class:`Engine`): every operation of the communicator launches here, one way.

Every public call becomes a :class:`~hcomm_cffi.api.op.Call` (api/op.py) -- a collective in every mode, a
stream-ordered send/recv, a send/recv on a point-to-point lane -- and :meth:`Engine._launch` takes it through
check -> bind -> record -> announce -> launch, then waits (blocking) or hands back a
:class:`~hcomm_cffi.api.requests.Pending`.  Each thing every call must do has its one place there (the
usability check, the order after captured work, the flight record and trace entry, the device-memory
declaration, the guard :meth:`Engine._failed`).  Binding a collective resolves the algorithm, stages or
declares the buffers, gets the resources, records the algorithm's schedule once per signature and stream and
binds it to the call's buffers behind the signature handshake (:mod:`.signatures`).  The Engine owns the
streams, the caches, the scratch memory and the device-memory declarations, and reads and changes the
communicator through its :class:`~hcomm_cffi.api.state.CommState`.
"""
from __future__ import annotations

import warnings
from functools import partial
from typing import Any, Callable, List, Optional, Sequence, Set, Tuple, TypeVar

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
from .buffers import NO_STAGING, Buffer, DeviceBlock, DeviceMemory, Staging
from .launch_order import Announcer
from .op import RESOURCES_MAX, SCHEDULES_MAX, LaunchBatch, Call, CommCache, BoundCall, LibraryCall, validate
from .errors import CommError
from .stream import Stream
from .requests import Pending, request_for
from .signatures import Exchange, Signer
from .state import CommState
from .streams import StreamTargets, StreamTarget, stream_handle, sync_stream

R = TypeVar("R")

__all__ = ["Engine", "SCRATCH_MIN", "break_on_interrupted_wait"]

#: The smallest scratch allocation (bytes); larger ones double.
SCRATCH_MIN = 4096
#: call signatures a communicator agrees on before acquiring their channels (later new ones are not agreed on)
AGREED_MAX = 4096


class Engine:
    """One communicator's collective machinery (see the module docstring)."""

    def __init__(self, state: CommState, stream: Any, p2p_pending: Callable[[], int]) -> None:
        b: Binding = state.binding
        self.b = b
        self.state = state
        self.targets = StreamTargets(b, state.handle, stream, state.name)
        self.buffer_bytes: int = self.targets.own.cache.local_buffer()[1]
        state.buffer_bytes = self.buffer_bytes
        self.caps: Capabilities = b.lib.capabilities      # the backend contract (lib/contract.py)
        self.staging = state.stages                       # host buffers are staged (CANN): no fast keys (op.py)
        step = settings.value("HCOMM_STEP_BYTES")
        self.step_bytes: Optional[int] = (self.caps.step_bytes if step is None else step) or None
        # library collectives: the backend's own in-band check, else (with the check on) the package's handshake
        self.check_native = bool(settings.value("HCOMM_CHECK_COLLECTIVES")) and not self.caps.checks_signatures_in_band
        state.checks_library_collectives = self.check_native
        self.cache = CommCache()                          # choices, bound calls, fast-call keys
        # ranges declared device memory (the emulator): bound calls were validated on them
        self.device_memory = state.device_memory = DeviceMemory(b.lib, not self.staging, self.cache.invalidate)
        self.signer = Signer(state, self.cache.invalidate)
        # launch order, for mismatches that never meet (api/launch_order.py); ``p2p_pending``: what a wait may publish
        self.announce = state.announcer = Announcer(b.lib, state.handle, p2p_pending)
        self.scratch = DeviceBlock(b, state.inflight)   # the algorithms' scratch memory (grows by doubling)
        self.agreed: Set[Tuple[Any, ...]] = set()   # call signatures agreed on before their channels (_first_use)

    # ------------------------------------------------------------------ lifetime
    def drain(self, timeout_s: float) -> None:
        """Let started operations finish before their resources go (bounded: a failure is warned, not raised)."""
        state = self.state
        for pending in list(state.inflight):   # started, not yet seen complete (api/requests.py)
            try:
                if not pending.sync(timeout_s):
                    warnings.warn(f"rank {state.rank}: destroy of {state.name!r}: {pending.what} never completed",
                                  RuntimeWarning, stacklevel=4)
            except CommError as exc:
                warnings.warn(f"rank {state.rank}: destroy of {state.name!r}: {exc}", RuntimeWarning, stacklevel=4)

    def release(self) -> None:
        """Free what the machinery holds (the communicator is destroyed; its handle is gone)."""
        self.scratch.release()
        self.signer.release()
        self.targets.clear()
        self.device_memory.withdraw()
        self.cache.clear()

    def forget_resources(self) -> None:
        """Drop every cached resource set and the schedules recorded on them (they name their handles)."""
        self.targets.forget_resources()
        self.cache.invalidate()

    def _scratch(self, nbytes: int) -> Any:
        """Scratch memory of at least ``nbytes``; a smaller old one is kept while a started collective may use it."""
        scratch = self.scratch
        if nbytes > scratch.size:
            self.cache.invalidate()       # bound calls address the old scratch
            scratch.replace(max(nbytes, SCRATCH_MIN, 2 * scratch.size))   # doubling: the old ones total < the new
        return scratch.ptr

    # ------------------------------------------------------------------ the ways in
    def call(self, c: Call) -> Any:
        """Blocking: run ``c`` and return its result; ``async_op`` or ``stream``: start it and return a Request.  A call
        with a fast key runs the BoundCall kept for it, if any; else its buffers are validated (:func:`.op.validate`)."""
        if c.fast_key is not None:
            if graphs.HOLDING and graphs.holding(self.state):
                c.fast_key = None           # (nothing after captured work: the full path refuses it)
            else:
                with self.state.lock:       # as run(): the call lock until it returns; the lookup too (another
                    try:                    # thread's call may drop the BoundCall, and the scratch it addresses)
                        c.entry = self.cache.fast.get(c.fast_key)
                    except TypeError:       # an unhashable algorithm object: the full path serves it
                        c.fast_key = None
                    if c.entry is not None:
                        self._launch(c)
                        return c.result
        if c.unchecked:
            validate(self.state, c)
        if c.blocking:
            self.run(c)
            return c.result
        return self.start(c, lambda pending: request_for(pending, c.result))

    def run(self, c: Call) -> None:
        """Run ``c`` and wait for it (no Pending; the call lock held until it returns); the BoundCall it launched is
        kept under its fast key."""
        with self.state.lock:
            self._launch(c)
        if c.staging is not NO_STAGING:
            c.staging.finish()
        elif c.entry is not None and c.fast_key is not None:
            self.cache.keep_fast(c.fast_key, c.entry)

    def start(self, c: Call, hand_back: Callable[[Optional[Pending]], R]) -> R:
        """Launch ``c`` under the call lock without waiting and return ``hand_back(pending)`` (its Request; a lane's
        send/recv makes its Pending on its lane: ``pending`` is None).  From the launch to the hand-back is one
        guarded region: an exception there breaks the communicator (the caller holds nothing to wait for the queued
        work with); before it, :meth:`_failed`."""
        try:
            with self.state.lock:
                self._launch(c)
                pending = c.pending
                if c.graph is not None:
                    c.graph.keep(pending)
                elif c.stream is not None:
                    break_on_interrupted_wait(c.stream, self.state, c.what)
            return hand_back(pending)
        except BaseException as exc:
            if c.launched:
                self.state.interrupted(c.what, exc)
            raise

    # ------------------------------------------------------------------ persistent requests (persistent.py)
    def bind_persistent(self, c: Call) -> None:
        """Resolve ``c`` and bind it to its buffers now: ``c.entry``, in ``c.generation`` (None where a bound call cannot
        be kept: :meth:`start_persistent` then starts ``c`` the full way each time)."""
        c.persistent = True
        with self.state.lock:                # its choices and cache entries are the communicator's (api/state.py)
            self.state.check_usable(c.coll)
            self._bind_persistent(c)

    def _bind_persistent(self, c: Call) -> None:
        self._prepare(c)
        c.generation = self.cache.generation
        if c.staging is not NO_STAGING:
            c.entry = None
            return
        try:
            c.entry = self._entry(c, self.targets.own, observe.record_of(c))
        except HcclError as exc:
            if not exc.from_library:          # the API's own (a mismatch the agreement found): as raised
                raise
            raise observe.fail(self.state, exc, c.what) from exc

    def start_persistent(self, c: Call, pending: Optional[Pending]) -> Pending:
        """Launch a persistent request's bound call (or, without one, start ``c`` afresh) as :meth:`start` does: its
        Pending (``pending``, the request's of its previous start, started again)."""
        c.pending = pending if c.entry is not None else None   # without a BoundCall: a fresh start each time
        pending = self.start(c, lambda started: started)
        assert pending is not None                # (a collective's start always makes its Pending)
        return pending

    # ------------------------------------------------------------------ the one way every operation launches
    def _launch(self, c: Call) -> None:
        """Take ``c`` through check -> bind -> record -> announce -> launch, and (blocking) wait for it; the caller holds
        the call lock.  Every operation comes this way: each step has its one place here (module docstring)."""
        state = self.state
        state.check_usable(c.coll)   # under the lock: another thread may have broken or destroyed it
        if graphs.HOLDING and c.post is None:   # (a lane runs on a stream of its own)
            graphs.check_ordered(state, c.stream)   # not after work captured in an open graph (api/graphs.py)
        signer, announce = self.signer, self.announce
        before = (signer.launched, announce.count)   # what peers see of this rank: a guard that knows if it moved
        try:
            bound, target = self._bind_op(c)
            graph = c.graph
            if graph is None:   # recorded once it will launch: a call refused while issuing leaves no open operation
                c.slot = observe.issue(state, c.seq, c.record, c.fixed, c.name)
            elif c.announces:   # announced at each replay, in the form whose handshake it repeats (api/launch_order.py)
                assert target is not None
                graph.announces(state, partial(self.announce, c.record,
                                               self._has_handshake(self._resources(c, target))))
            if target is not None and target is not self.targets.last:
                self.targets.order(target)
            if graph is None and c.announces:
                announce(c.record)
            bound.batch.launch()
            c.launched = True
            observe.running(state, c.slot)
            if c.blocking:              # wait (announced: a wait that lasts is published), then it is done
                assert target is not None
                announce.waiting(partial(sync_stream, self.b, target.stream),
                                 collective=(announce.count, announce.text))
                if bound.exchange is not None:
                    signer.check_completed(bound.exchange)
                observe.done(state, c.slot, c.coll, c.seq)
                if self.scratch.replaced:
                    self.scratch.free_old()
            elif c.post is None:
                self._pending(c, bound, target)
        except BaseException as exc:
            err = self._failed(c, exc, before, c.bound)
            if err is exc:
                raise
            raise err from exc

    def _failed(self, c: Call, exc: BaseException, before: Tuple[int, int], bound: Optional[LaunchBatch]) -> BaseException:
        """What leaves a call that raised ``exc``: a library error fails the communicator (a mismatch its handshake saw
        explains it better); anything else (Ctrl-C, an alarm) breaks it once peers could see the call start."""
        if isinstance(exc, HcclError) and exc.from_library:
            if bound is not None and c.blocking:
                self.signer.check_completed(bound.exchange)
            return observe.fail(self.state, exc, c.what)
        if c.moves or (self.signer.launched, self.announce.count) != before:
            self.state.interrupted(c.what, exc)
        return exc

    def _bind_op(self, c: Call) -> Tuple[LaunchBatch, Optional[StreamTarget]]:
        """The batch ``c`` launches now and the stream target it goes to (None: a direct library call)."""
        state = self.state
        if c.post is not None:                      # a send/recv on a point-to-point lane
            declared: List[Buffer] = []
            bound = c.post(c, declared)
            self._declare(declared)
            return bound, None
        state.seq += 1
        c.seq = state.seq
        entry = c.entry
        if c.direct is not None:                    # a stream-ordered send/recv: the library's own call
            graph = c.graph = graphs.capturing(c.stream)
            if graph is not None:
                c.slot = graph.captured(state, c.record, state.next_seq)
            sp, rp = self._pointers(c)
            call = partial(c.direct, sp if sp is not None else rp, c.count, int(c.dtype), c.peer, state.handle,
                           stream_handle(c.stream))
            return LaunchBatch(LibraryCall(call), None), None
        if entry is not None and c.persistent and c.generation != self.cache.generation:
            self._bind_persistent(c)                # bound in a generation that has passed: again (api/op.py: CommCache)
            entry = c.entry
        if entry is not None:                       # a kept BoundCall (the fast path, a persistent request)
            c.what, c.record, c.fixed = entry.what, entry.record, entry.fixed
            bound = c.bound = entry.bound[0] if len(entry.bound) == 1 else self._take(entry)
            return bound, self.targets.own
        self._prepare(c)
        target = self.targets.get(c.stream)
        c.record = record = observe.record_of(c)
        graph = c.graph = graphs.capturing(c.stream) if c.stream is not None else None
        if graph is not None:                       # before the set-up, which the capture lets this thread do
            c.slot = graph.captured(state, record, state.next_seq, partial(self.targets.order, target))
        entry, bound = self._bind(c, target, record, None if graph is None else graph.name)
        c.bound = bound
        if not c.persistent:                        # (a persistent request keeps the BoundCall of its init)
            c.entry = entry
        c.fixed = entry.fixed if entry is not None else None
        return bound, target

    def _take(self, entry: BoundCall) -> LaunchBatch:
        """The batch of ``entry`` for the handshake parity now (advancing it when the call has a handshake)."""
        bound = entry.bound
        if len(bound) == 1:
            return bound[0]
        return bound[self.signer.advance(self.state.seq)]

    def _pending(self, c: Call, bound: LaunchBatch, target: Optional[StreamTarget]) -> None:
        """The Pending that completes the started ``c`` (a persistent request's, started again, when it has one)."""
        exchange = bound.exchange
        check = None if exchange is None else partial(self.signer.check_completed, exchange)
        announced = self.announce.current if c.graph is None and c.announces else None
        if c.pending is not None:
            c.pending.restart((c.slot, c.coll, c.seq), check, announced)
            return
        stream = target.stream if target is not None else stream_handle(c.stream)
        c.pending = Pending(self.state, c.what, stream, (c.send, c.recv), self.state.inflight, (c.slot, c.coll, c.seq),
                            check, announced, c.stream, staging=c.staging)

    # ------------------------------------------------------------------ deriving a call's batches
    def _prepare(self, c: Call) -> None:
        """Resolve ``c``: the algorithm (cached per signature) and the call with the pointers the engines use."""
        send, recv = c.send, c.recv              # device memory: what the library takes as it is (registry.explain)
        device = self.staging or ((send is None or send.device == "npu") and (recv is None or recv.device == "npu"))
        key = (c.algorithm, c.coll, c.nbytes, c.dtype, c.op, c.root, device)
        choice = self.cache.choices.get(key)
        if choice is None:
            cores = self.caps.host_cores
            alg, why = registry.explain(c.algorithm, c.coll, self.state.topology, c.nbytes, c.dtype, c.op, c.root,
                                        max(1, self.buffer_bytes // 2 // MIB), device,
                                        cores is not None and self.state.size > cores)
            what = f"{c.coll} (algorithm={alg.name}, {c.nbytes} bytes, {self.state.size} ranks)"
            choice = (alg, what)                  # the description too: no formatting per call
            self.cache.choose(key, choice)
            observe.chose(self.state, c.coll, c.nbytes, alg, why)
        c.alg, c.what = choice
        sp, rp = self._pointers(c)
        c.collective = CollectiveCall(c.coll, sp, rp, c.count, c.dtype, ReduceOp.SUM if c.op is None else c.op, c.root,
                               c.recv_count)

    def _pointers(self, c: Call) -> Tuple[Any, Any]:
        """The pointers the engines use for ``c``'s send and receive buffers: staged copies (CANN), else the buffers
        themselves, declared device memory (the emulator)."""
        send, recv = c.send, c.recv
        c.in_place = send is not None and recv is not None and recv.ptr == send.ptr
        if self.staging:
            c.staging = staging = Staging(self.b, True)
            sp = staging.device_ptr(send) if send is not None else None
            if c.in_place and recv is not None:
                return sp, staging.in_place(recv, sp)
            return sp, staging.device_ptr(recv, copy_in=c.coll == "broadcast", copy_out=True) if recv else None
        self._declare((send, recv) if recv is not send else (send,))
        return (send.ptr if send is not None else None), (recv.ptr if recv is not None else None)

    def _declare(self, bufs: Sequence[Optional[Buffer]]) -> None:
        """Declare the host buffers an operation launches on device memory (the emulator; nothing where it stages)."""
        for buf in bufs:
            self.device_memory.declare(buf)

    def _bind(self, c: Call, target: StreamTarget, record: observe.Record, captured: Optional[str] = None
              ) -> Tuple[Optional[BoundCall], LaunchBatch]:
        """The BoundCall of ``c`` on ``target`` (None for an algorithm that is not replayable) and the batch to launch now;
        ``captured``: as :meth:`_entry` (the parity then does not advance)."""
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
            self.signer.advance(self.state.seq)
        return None, LaunchBatch(batch, exchange)

    def _has_handshake(self, res: Resources) -> bool:
        """A call on ``res`` starts with the signature handshake: its algorithm talks to peers, or the check is on."""
        return self.state.size > 1 and (bool(res.channels) or self.check_native)

    def _issue(self, c: Call, res: Resources, target: StreamTarget) -> TaskBatch:
        """The algorithm's tasks for ``c`` on ``res`` (its Python issue code runs)."""
        lc = c.collective
        body = TaskBatch(self.b)
        ctx = IssueContext(body, res, rank=self.state.rank, size=self.state.size, topology=self.state.topology,
                           timeout_s=self.state.timeout, dtype=lc.dtype, op=lc.op, comm=self.state.handle,
                           stream=target.stream, scratch=self._scratch, step_bytes=self.step_bytes)
        c.alg.issue(ctx, lc)
        return body

    def _schedule(self, c: Call, target: StreamTarget) -> Optional[Tuple[Schedule, bool]]:
        """The recorded schedule of ``c``'s signature on ``target`` and whether it has a handshake (recorded now the
        first time); None when the algorithm is not replayable."""
        if not c.alg.replayable:
            return None
        lc = c.collective
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

    def _entry(self, c: Call, target: StreamTarget, record: observe.Record, captured: Optional[str] = None
               ) -> Optional[BoundCall]:
        """``c`` bound to its buffers on ``target`` (kept in the cache, so the same buffers bind once); ``captured``:
        the graph that records it (the handshake's captured form alone, naming the graph in a mismatch)."""
        known = self._schedule(c, target)
        if known is None:
            return None
        schedule, handshake = known
        key = (schedule, c.collective.send, c.collective.recv, self.scratch.ptr, captured)
        entry = self.cache.entries.get(key)
        if entry is None:
            parities = ((0, 1) if captured is None else (CAPTURED,)) if handshake else (-1,)
            bound = tuple(self._bound(schedule, c, target, parity, captured) for parity in parities)
            entry = BoundCall(c.alg.name, c.what, bound, record, observe.fixed_of(record))
            self.cache.keep(key, entry)
        return entry

    def _bound(self, known: Schedule, c: Call, target: StreamTarget, parity: int, graph: Optional[str] = None) -> LaunchBatch:
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
            return LaunchBatch(PreparedLaunch(self.b, self.b.lib.prepare_batch(batch.calls)), exchange)
        return LaunchBatch(batch, exchange)

    def _resources(self, c: Call, target: StreamTarget) -> Resources:
        """What ``c``'s algorithm declares for it on ``target``'s stream, or what a dry run of its schedule derives."""
        alg, call = c.alg, c.collective
        key = (alg, call.signature)
        res = target.res.get(key)
        if res is None:
            spec = alg.resources(self.state.topology, call, self.state.rank)
            if spec is None:
                spec = dry_run(alg, self.state.topology, call, self.buffer_bytes, declared=False).resources_for(self.state.rank)
            if spec.channels and self.state.size > 1 and self._first_use(key):   # agree on the call first
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

    def _handshake(self, sink: TaskBatch, c: Call, res: Resources, target: StreamTarget, parity: int,
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
        words = consistency.signature(c.collective, c.alg.name)
        host_task = self.b.lib.host_task if self.caps.host_tasks else None
        return signer.issue(sink, links, res.main if own_thread else links.main, words, host_task, parity, graph)

    def _bases(self, c: Call) -> Tuple[Tuple[Any, int], ...]:
        """The buffers a schedule's addresses are relative to: (pointer, bytes) of send, receive and scratch."""
        return ((c.collective.send, 0 if c.send is None else c.send.nbytes), (c.collective.recv, 0 if c.recv is None else c.recv.nbytes),
                (self.scratch.ptr, self.scratch.size))


def break_on_interrupted_wait(stream: Any, state: CommState, what: str) -> None:
    """``what`` of communicator ``state`` was queued on ``stream``: when that is a :class:`Stream` whose next
    synchronize() fails or an exception interrupts, the communicator breaks (its queued work never runs later)."""
    if isinstance(stream, Stream):
        stream.on_synchronized[id(state)] = partial(_stream_waited, state, what)


def _stream_waited(state: CommState, what: str, error: Optional[BaseException]) -> None:
    if error is None or state.broken or state.destroyed:
        return
    if isinstance(error, HcclError):        # the stream failed with the call queued: synchronize() raises this
        raise observe.fail(state, error, f"a wait on the stream holding {what}") from error
    state.interrupted(f"a wait on the stream holding {what}", error)
