"""How a communicator's collectives become launched tasks: :class:`Issuer` (one per member Comm).

For each :class:`~hcomm_cffi.api.call.Call` it resolves the algorithm, stages or declares the
buffers, gets the resources (declared, or derived by a dry run), puts the signature handshake
(:mod:`.signatures`) ahead of the algorithm's tasks, records the schedule the first time and
replays it after (bound batches and blocking fast calls in the :class:`~hcomm_cffi.api.call.CommCache`),
launches, and waits (blocking) or hands back a :class:`~hcomm_cffi.api.nonblocking.Pending`.  It
owns what that needs -- the streams, the caches, the scratch memory, the device-memory
declarations, the sequence number -- and reaches the rest of the communicator through its
:class:`~hcomm_cffi.api.port.CommPort`.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from .._ffi import ffi
from .. import settings
from ..algorithms import registry
from ..algorithms.context import IssueContext
from ..algorithms.dryrun import dry_run
from ..algorithms.interface import Algorithm, CollectiveCall
from ..algorithms.replay import Schedule, capture
from ..algorithms.tasks import TaskBatch
from ..enums import ReduceOp
from ..errors import HcclError
from ..lib.contract import Capabilities
from ..plan import MIB
from ..resources import Resources
from . import consistency, observe
from .buffers import NO_STAGING, Buffer, Staging
from .call import CHOICES_MAX, DEVICE_RANGES_MAX, RESOURCES_MAX, SCHEDULES_MAX, Call, CommCache, Ready
from .announce import Announcer
from .fastcalls import FastCall, key_of
from .interrupts import interrupted
from .nonblocking import Pending, request_for
from .signatures import Exchange, Signer
from .streams import StreamTargets, Target

__all__ = ["Issuer", "SCRATCH_MIN"]

#: The smallest scratch allocation (bytes); larger ones double.
SCRATCH_MIN = 4096


class Issuer:
    """One communicator's collective machinery (see the module docstring)."""

    def __init__(self, port: Any, stream: Any) -> None:
        b = self.b = port.binding
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
        self.fast_ok = not self.staging                   # host buffers used in place: blocking calls may be cached
        self.on_device: Dict[Tuple[Any, int], int] = {}   # (char *, bytes) -> address, declared (emulator)
        self.cache = CommCache()                          # choices, bound batches, fast calls: one generation
        self.signer = Signer(port)
        self.announce = Announcer(b.lib, port.handle)    # launch order, for mismatches that never meet (api/announce.py)
        self.seq = 0                          # collectives issued (flight recorder, mismatch messages)
        self.scratch_ptr: Any = None
        self.scratch_size = 0
        self.retired: List[Any] = []          # scratch buffers a started collective may still use
        self.inflight: "set[Pending]" = set()  # started collectives not yet seen complete

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
        """Withdraw every range _declare_device_memory declared (bound batches were validated on them)."""
        if self.on_device:
            self.cache.invalidate()
            for addr in self.on_device.values():
                self.b.lib.withdraw_device_memory(addr)
            self.on_device.clear()

    def _scratch(self, nbytes: int) -> Any:
        """Scratch memory of at least ``nbytes``; a smaller old one is retired (a started collective may use it)."""
        if nbytes > self.scratch_size:
            if self.scratch_ptr is not None:
                self.retired.append(self.scratch_ptr)
                self.scratch_ptr = None
            size = max(nbytes, SCRATCH_MIN, 2 * self.scratch_size)  # doubling: retired buffers total < the live one
            self.cache.invalidate()       # bound batches address the retired scratch
            self.scratch_ptr = self.b.malloc(size)
            self.scratch_size = size
        return self.scratch_ptr

    def _free_retired(self) -> None:
        """Free retired scratch once no started collective can still use it."""
        if self.retired and not self.inflight:
            for ptr in self.retired:
                self.b.free(ptr)
            self.retired.clear()

    def _resources(self, alg: Algorithm, call: CollectiveCall, target: Target) -> Resources:
        """What ``alg`` declares for this call on ``target``'s stream, or what a dry run of its schedule derives."""
        key = (alg, call.signature)
        res = target.res.get(key)
        if res is None:
            spec = alg.resources(self.port.topology, call, self.port.rank)
            if spec is None:
                spec = dry_run(alg, self.port.topology, call, self.buffer_bytes, declared=False).resources_for(self.port.rank)
            if len(target.res) >= RESOURCES_MAX:
                target.forget_resources()
                self.cache.invalidate()
            res = target.res[key] = target.cache.get(alg.name, spec)
        return res

    def call(self, c: Call) -> Any:
        """Blocking: run ``c`` and return its result; ``async_op`` or ``stream``: start it and return a Request."""
        if c.blocking:
            self.run(c)
            return c.result
        return request_for(self.start(c), c.result)

    def run(self, c: Call) -> str:
        """Run ``c`` and wait for it; returns the algorithm's name (the caller checked the communicator).

        The blocking path: no Pending, no in-flight bookkeeping, the stream synchronised directly.
        Everything derived from the call's signature (the algorithm, its resources, its recorded
        schedule) is cached; a replayed call with a fast-call key (see :mod:`.fastcalls`) is stored
        whole, so the next identical call skips even the lookups (:meth:`fast`).
        """
        self._prepare(c)
        target = self.targets.own
        record = observe.record_of(c)
        slot = observe.issue(self.port, self.seq, record)
        count, announced = self.signer.count, self.announce.count
        try:
            ready = self._batch_for(c, target)
            self.announce(record)
            self._launch_and_wait(ready, slot, c.coll, c.what)
        except HcclError as exc:       # _batch_for's (the wait turns its own into a CommError)
            raise self.port.fail(exc, c.what) from exc
        except BaseException as exc:   # the handshake count or the announcements moved: peers would disagree
            if self.signer.count != count or self.announce.count != announced:
                interrupted(self.port, c.what, exc)
            raise
        if c.staging is not NO_STAGING:
            c.staging.finish()
        elif ready.replayed and c.fast_key is not None:
            self._remember_fast(c, ready, record)
        return c.alg.name

    def _remember_fast(self, c: Call, ready: Ready, record: observe.Record) -> None:
        """Keep the bound batch of a replayed blocking call for its repeats (under its handshake parity)."""
        fast = self.cache.fast.entries.get(c.fast_key) if c.fast_key is not None else None
        if fast is None:
            fast = FastCall(c.alg.name, c.what, [None, None], ready.parity >= 0, record, observe.fixed_of(record))
            self.cache.fast.store(c.fast_key, fast)    # type: ignore[arg-type]
        fast.batches[max(ready.parity, 0)] = ready

    def fast(self, c: Call, x: Any, x_written: bool, out: Any, rest: Tuple[Any, Any, int]) -> bool:
        """Whether a stored blocking call ran ``c`` (its flight record and its batch; nothing re-derived).

        ``rest``: (op, algorithm, root) as the caller passed them; sets ``c.fast_key`` when the call has one.
        """
        if c.async_op or c.stream is not None or not self.fast_ok:
            return False
        key = key_of(c.coll, x, x_written, out, rest)
        if key is None:
            return False
        try:
            fast = self.cache.fast.entries.get(key)
        except TypeError:               # an unhashable op or algorithm object: the full path serves it
            return False
        c.fast_key = key
        if fast is None:
            return False
        signer = self.signer
        parity = signer.count & 1 if fast.handshake else 0
        ready = fast.batches[parity]
        if ready is None:
            return False
        self.seq += 1
        announced = self.announce.count
        try:
            if fast.handshake:
                signer.seq = self.seq
                signer.count += 1
            slot = observe.issue(self.port, self.seq, fast.record, fast.fixed)
            self.announce(fast.record)
            self._launch_and_wait(ready, slot, c.coll, fast.what)
        except BaseException as exc:   # the handshake count or the announcements moved: peers would disagree
            if fast.handshake or self.announce.count != announced:
                interrupted(self.port, fast.what, exc)
            raise
        return True

    def _launch_and_wait(self, ready: Ready, slot: int, coll: str, what: str) -> None:
        """Launch ``ready`` on the communicator's stream after the previous collective and wait for it."""
        target = self.targets.own
        try:
            self.targets.order(target)
            ready.batch.launch()
            if slot >= 0:
                observe.running(self.port, slot)
            self.b.synchronize_stream(target.stream)
        except HcclError as exc:
            self.check_exchange(ready.exchange, started=True)    # a mismatch explains the failure better
            raise self.port.fail(exc, what) from exc
        except BaseException as exc:       # Ctrl-C, an alarm handler...: the queued rest must never run
            interrupted(self.port, what, exc)
            raise
        if ready.exchange is not None:
            self.check_exchange(ready.exchange, started=True)
        observe.done(self.port, slot, coll, self.seq)
        if self.retired:
            self._free_retired()

    def check_exchange(self, exchange: Optional[Exchange], started: bool) -> None:
        """Backends without host tasks: compare the handshake's slots now (its stream has passed them)."""
        if exchange is None or self.signer is None:
            return
        msg = self.signer.check(exchange)
        if msg is not None:
            err = consistency.CollectiveMismatchError(msg)
            if started:       # the call's data may have moved: the communicator is unusable, as after any failure
                self.port.mark_broken(msg)
                observe.failed(self.port, None, err)
            raise err

    def start(self, c: Call) -> Pending:
        """Issue (or replay) ``c`` into one batch and launch it on its stream; do not wait."""
        self.port.check_usable(c.coll)
        self._prepare(c)
        target = self.targets.get(c.stream)
        record = observe.record_of(c)
        slot = observe.issue(self.port, self.seq, record)
        count, announced = self.signer.count, self.announce.count
        try:
            ready = self._batch_for(c, target)
            self.targets.order(target)
            self.announce(record)
            ready.batch.launch()
            observe.running(self.port, slot)
        except HcclError as exc:
            raise self.port.fail(exc, c.what) from exc
        except BaseException as exc:       # a launch cut short: part of the batch may be queued
            if self.signer.count != count or self.announce.count != announced:
                interrupted(self.port, c.what, exc)
            raise
        pending = Pending(self.port, c, target.stream, ready.exchange, slot)
        self.inflight.add(pending)
        return pending

    def _prepare(self, c: Call) -> None:
        """Resolve ``c``: the algorithm (cached per signature), the call with device pointers, the sequence number."""
        key = (c.algorithm, c.coll, c.nbytes, c.dtype, c.op, c.root)
        choice = self.cache.choices.get(key)
        if choice is None:
            if len(self.cache.choices) >= CHOICES_MAX:
                self.cache.choices.clear()
            alg, why = registry.explain(c.algorithm, c.coll, self.port.topology, c.nbytes, c.dtype, c.op, c.root,
                                        max(1, self.buffer_bytes // 2 // MIB))
            what = f"{c.coll} (algorithm={alg.name}, {c.nbytes} bytes, {self.port.size} ranks)"
            choice = self.cache.choices[key] = (alg, what)      # the description too: no formatting per call
            observe.chose(self.port, c.coll, c.nbytes, alg, why)
        c.alg, c.what = choice
        send, recv = c.send, c.recv
        c.in_place = send is not None and recv is not None and recv.ptr == send.ptr
        if self.staging:
            c.staging = staging = Staging(self.b, True)
            sp = staging.device_ptr(send) if send is not None else None
            if c.in_place:
                rp = staging.in_place(recv, sp)     # type: ignore[arg-type]
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
        self.seq += 1
        if self.signer is not None:
            self.signer.seq = self.seq

    def _batch_for(self, c: Call, target: Target) -> Ready:
        """The batch of ``c`` on ``target`` (its signature handshake first, when it carries one): issued the first
        time only, then replayed."""
        lc = c.lib
        key = (c.alg, lc.coll, lc.count, lc.dtype, lc.op, lc.root, lc.recv_count, c.in_place)
        known = target.schedules.get(key)
        if known is not None:
            handshake = self.cache.handshakes.get(key, False)
            parity = self.signer.count & 1 if handshake else -1      # type: ignore[union-attr]
            ready = self.cache.prepared.get((known, lc.send, lc.recv, self.scratch_ptr, parity))
            if ready is None:
                ready = self._bound(known, c, target, parity)
            if handshake:
                self.signer.count += 1                                # type: ignore[union-attr]
            return ready
        res = self._resources(c.alg, lc, target)
        handshake = self.port.size > 1 and (bool(res.channels) or self.check_native)
        batch = TaskBatch(self.b)
        exchange = self._handshake(batch, c, res, target) if handshake else None
        body = TaskBatch(self.b)
        ctx = IssueContext(body, res, rank=self.port.rank, size=self.port.size, topology=self.port.topology, timeout_s=self.port.timeout,
                           dtype=lc.dtype, op=lc.op, comm=self.port.handle, stream=target.stream, scratch=self._scratch,
                           step_bytes=self.step_bytes)
        c.alg.issue(ctx, lc)
        if c.alg.replayable:
            if len(target.schedules) >= SCHEDULES_MAX:
                target.schedules.clear()
                self.cache.invalidate()
            # issue() may have allocated the scratch memory
            target.schedules[key] = capture(body, self._bases(c))
            self.cache.handshakes[key] = handshake
        batch.extend(body)
        parity = -1
        if handshake:
            parity = self.signer.count & 1                            # type: ignore[union-attr]
            self.signer.count += 1                                    # type: ignore[union-attr]
        return Ready(batch, exchange, False, parity)

    def _handshake(self, sink: TaskBatch, c: Call, res: Resources, target: Target) -> Optional[Exchange]:
        """Issue the signature handshake of ``c`` into ``sink``, on the thread the call's tasks run on."""
        signer = self.signer
        assert signer is not None
        own_thread = bool(res.spec.threads)
        peers = signer.peers_for(res.channels)
        key = ("signature", peers, own_thread)
        links = target.res.get(key)
        if links is None:
            links = target.res[key] = signer.resources(target.cache, peers, not own_thread)
        words = consistency.signature(c.lib, c.alg.name)
        host_task = self.b.lib.host_task if self.caps.host_tasks else None
        return signer.issue(sink, links, res.main if own_thread else links.main, words, host_task)

    def _bases(self, c: Call) -> Tuple[Tuple[Any, int], ...]:
        """The buffers a schedule's addresses are relative to: (pointer, bytes) of send, receive and scratch."""
        return ((c.lib.send, 0 if c.send is None else c.send.nbytes), (c.lib.recv, 0 if c.recv is None else c.recv.nbytes),
                (self.scratch_ptr, self.scratch_size))

    def _bound(self, known: Schedule, c: Call, target: Target, parity: int) -> Ready:
        """A replay of ``known`` on this call's buffers (after the handshake of ``parity``), kept for the next call.

        Where the backend prepares batches (the emulator) a schedule of data-plane calls becomes a
        prepared task list (validated once, then launched without the per-call entry points; issue 16);
        elsewhere the bound TaskBatch is kept (launch only reads it). Keyed by the schedule object, so a
        schedule dropped with its resources never matches again.
        """
        batch = TaskBatch(self.b)
        exchange = None
        if parity >= 0:
            res = self._resources(c.alg, c.lib, target)
            exchange = self._handshake(batch, c, res, target)
        batch.extend(known.bind(self.b, self._bases(c)))
        bound: Any = batch
        if self.caps.prepares_batches and not known.unbatched:
            bound = self.b.lib.prepare_batch(self.b, batch.calls)
        ready = Ready(bound, exchange, True, parity)
        self.cache.keep_prepared((known, c.lib.send, c.lib.recv, self.scratch_ptr, parity), ready)
        return ready

    def forget_resources(self) -> None:
        """Drop every cached resource set and the schedules recorded on them (they name their handles)."""
        self.targets.forget_resources()
        self.cache.invalidate()

