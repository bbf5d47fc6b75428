"""Execution model of the emulator: the executor that runs the task queues of sim/queues.py.

Every Thread (and every stream) is a FIFO of tasks.  The executor runs all queues of the
process cooperatively: a queue advances until its head task is a wait whose notify is not set,
then the next queue gets its turn, so threads of one rank make progress concurrently and never
in program order.  With nothing runnable, the executor polls briefly with ``sched_yield`` and
then sleeps on the communicator's futex doorbell, which every record into this rank rings.
"""
from __future__ import annotations

import functools
import os
import threading
import time
import warnings
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

from . import compiled, kernels, races
from .compiled import HCE_BLOCKED, HCE_END, HCE_PYTHON
from .announce import BLOCKED_S
from .config import CheckerWarning
from .notifies import CONSUMED, VALUES
from .queues import Queue, SimThread
from .. import trace as _trace
from .errors import (
    ACL_ERROR_RT_FFTS_PLUS_TIMEOUT, ACL_ERROR_RT_INTERNAL_ERROR, ACL_ERROR_RT_SUSPECT_REMOTE_ERROR,
    HcclResult, SimError, warn_caller,
)
from .._ffi import ffi
from .futex import sched_yield
from .tasks import (  # the kind codes the executor dispatches on
    C_RECORD, C_WAIT, CALL, COPY, EVENT_RECORD, EVENT_WAIT, KIND_NAMES, READ, READ_REDUCE, REDUCE, REDUCE3, T_RECORD,
    T_WAIT, UFUNC, WRITE, WRITE_REDUCE, Task, task_bytes,
)

if TYPE_CHECKING:  # pragma: no cover
    from .comm import SimComm

_cast = ffi.cast

SPIN_ROUNDS = 200           # sched_yield polls of the awaited words before sleeping on the doorbell
# The same when the blocked communicator has more ranks than the host has cores (shares_cores): a waiter yielding
# in a loop then hands the core to a rank that is often only polling too, while the rank with work waits.  A 4-rank
# 8-byte HcclAllReduce on 2 cores (benchmarks/profile_native.py, loaded machine): 722-807 us per call with 50-200
# rounds, 196-507 with 20, 216-263 with none; with the wakes deferred (_wake_peers) 20, 5 and 0 are alike.
SHARED_SPIN_ROUNDS = 20
CORES = os.cpu_count() or 1   # the host's cores (not this rank's affinity: a rank bound to one core shares it only
                              # with the ranks bound there too)
MAX_SLEEP_S = 0.02          # bound on one futex sleep (guards against a lost wake-up)
LIVENESS_EVERY_S = 0.1      # how often sleeping waits check that their peers still exist
PEER_LEFT_GRACE_S = 1.0     # a wait blocked this long on a peer that left its communicator fails naming it
LOST_WAIT_GRACE_S = 1.0     # a thread-notify wait blocked this long that nothing can record any more fails
LEFT_AT_ONCE = ("destroyed", "abandoned")   # ways of leaving (SimComm.peer_left) with no more precise error to wait for

__all__ = ["Executor", "EXECUTOR", "KIND_NAMES", "shares_cores",
           "COPY", "REDUCE", "WRITE", "WRITE_REDUCE", "READ", "READ_REDUCE", "T_RECORD", "T_WAIT",
           "C_RECORD", "C_WAIT", "EVENT_RECORD", "EVENT_WAIT", "CALL", "REDUCE3", "UFUNC", "TaskFailure"]


def shares_cores(nranks: int) -> bool:
    """Whether a communicator of ``nranks`` ranks (all on this host) has more ranks than the host has cores: its
    ranks cannot all run at once (the waits' spin and the native collectives' piece size depend on it)."""
    return nranks > CORES


# UFUNC tasks: float overflow to inf is what the hardware produces too, silently
warnings.filterwarnings("ignore", category=RuntimeWarning, module=__name__)


class _Pins(threading.local):
    """The communicators the current host thread has pinned (Executor._pin)."""

    def __init__(self) -> None:
        self.comms: Set["SimComm"] = set()


class Executor:
    """Runs every queue of this process cooperatively; one per process."""

    def __init__(self) -> None:
        self.active: Set[Queue] = set()
        self.lock = threading.RLock()  # held while stepping, never while sleeping
        # a communicator's control words are read outside the lock (polls, the doorbell sleep) only while
        # pinned; retire() waits here until nobody pins it before its memory is unmapped
        self.unpinned = threading.Condition(self.lock)
        self.pinned_here = _Pins()                  # per host thread: the pins it holds (drop_pins_of_this_thread)
        # when peers were last checked, kept across run_until calls: many short timed waits (a polling
        # thread's) must still find a dead peer, not only one wait longer than LIVENESS_EVERY_S
        self.last_liveness = time.monotonic()
        self.kernels_running = 0   # AICPU kernels running now (sim/aicpu.py): they may still issue records
        # host threads synchronising a stream of a communicator: its host issues nothing more meanwhile
        self.host_waiting: Dict["SimComm", int] = {}
        # channels whose peer this queue run rang and has not woken yet (_run_queue: at the end of a run of records);
        # one list for the executor's life (_run_queue holds it)
        self.unwoken: List[Any] = []
        # a C program calls the emulator (cannlib): its threads may call in without being Python's (alone())
        self.foreign_threads = False
        self.syncers: Set[int] = set()   # the host threads that synchronised a stream (drain), by ident

    def forget_inherited(self) -> None:
        """In a forked child: the parent's queues never run here (their tasks would act in the parent's job), and
        locks another parent thread held at the fork are new."""
        self.active.clear()
        self.host_waiting.clear()
        self.unwoken.clear()
        self.syncers.clear()
        self.kernels_running = 0
        self.lock = threading.RLock()
        self.unpinned = threading.Condition(self.lock)
        self.pinned_here = _Pins()

    # ------------------------------------------------------------------ submission
    def launch(self, queue: Queue, tasks: Sequence[Task], run: bool = True, program: Any = None) -> None:
        """Append tasks to a queue and make it runnable (a captured queue records them, a failed one drops them),
        then run it as far as it goes, and the queues that made runnable, under one lock acquisition (a
        collective's issue path).  ``run`` False (``submit``): only append.

        The tasks go behind whatever the queue already holds: stream order is kept, never run ahead.  ``program``:
        their compiled form (sim/compiled.py), run by the compiled engine when they reach the queue's head.
        """
        with self.lock:
            if queue.capture is not None:
                queue.capture.record(queue, tasks)
                return
            if queue.error is not None:
                return
            if program is not None and not queue.checked and not _trace.ACTIVE:
                queue.programs.append((queue.executed + len(queue.tasks), program))
            queue.tasks.extend(tasks)
            self.active.add(queue)
            if not run:
                return
            progressed = self._run_queue(queue)
            active = self.active
            # what it ran may have made other queues runnable (a blocked ``queue`` stays blocked)
            others = len(active) > 1 or (active and queue not in active)
        if progressed and others:
            self.settle()

    submit = functools.partialmethod(launch, run=False)

    def enter(self, queue: Queue, call: Any) -> bool:
        """Launch a repeated call (sim/compiled.py ``Repeat``) on the queue's replay ring: engine.c writes its
        announcement, counts its chunks, appends its whole compiled list behind the ring's earlier ones and runs the
        ring, in one C call (``Repeat.launch``).

        False, with nothing done, where the ring may not take it: Python tasks or stamps pending on the queue, a
        checked, traced, captured or failed queue, or no whole list for this call's parity (the caller then
        launches it as a first call).
        """
        lock = self.lock
        lock.acquire()      # (acquire/release cost half what ``with`` does on an RLock: this is every repeat's path)
        try:
            if queue.python_tasks or queue.stamps or queue.checked or queue.capture is not None \
                    or queue.error is not None or _trace.ACTIVE:
                return False
            if self.unwoken:
                self._wake_peers()
            try:
                code = call.launch()
                if code == -2:                   # the ring is full
                    call.ring.grow()
                    code = call.launch()
                if code < 0:
                    return False
                ran = code >> 2
                self._ring_ran_here(queue, ran, code & 3)
                active = self.active
            except BaseException as exc:   # a signal's exception between the C run and its bookkeeping
                self.interrupted(queue, call.ring.task(), exc)
                raise
            others = len(active) > 1 or (active and queue not in active)
        finally:
            lock.release()
        if ran and others:
            self.settle()
        return True

    # ------------------------------------------------------------------ driving
    def step_all(self) -> bool:
        """Advance every runnable queue as far as it goes; True if any task ran."""
        progressed = False
        with self.lock:
            for q in list(self.active):
                if self._run_queue(q):
                    progressed = True
        return progressed

    def settle(self) -> None:
        """Run until every queue is empty or blocked (what BatchModeEnd does before returning)."""
        while self.step_all():
            pass

    def run_until(self, done: Callable[[], bool], deadline: Optional[float] = None) -> bool:
        """Drive queues until ``done()``; sleeps when blocked.  False if ``deadline`` passed first.

        When nothing can run, it polls only the notify words the blocked queues wait on (a few
        hundred nanoseconds per look, with ``sched_yield`` between looks), then sleeps on the futex
        doorbell that every record into this rank rings.
        """
        if done():
            return True
        while True:
            comms, bells = self._doorbells()   # pins the communicators until the end of this round
            try:
                if self.step_all():
                    if done():
                        return True
                    continue
                if done():
                    return True
                now = time.monotonic()
                with self.lock:
                    self._expire(now)
                    self._liveness(now)
                if done():
                    return True
                if deadline is not None and now >= deadline:
                    return False
                if not self._poll_heads(deadline):
                    self._sleep(comms, bells, now, deadline)
            finally:
                self._unpin(comms)

    def _liveness(self, now: float) -> None:
        """Every LIVENESS_EVERY_S of a wait (call with the lock held): fail the waits on peers that left and the
        thread-notify waits nothing can record any more."""
        if now - self.last_liveness >= LIVENESS_EVERY_S:
            self.last_liveness = now
            self._check_peers(now)
            self._check_lost_waits(now)

    # ------------------------------------------------------------------ communicators read outside the lock
    def _pin(self, comms: Set["SimComm"]) -> List["SimComm"]:
        """Pin the communicators not being retired (call with the lock held); their memory stays mapped.

        Pins are counted per host thread, so that one an exception left behind in this thread (a signal
        handler raising between a pin and its release) never makes this thread's own ``retire`` wait:
        a thread inside ``retire`` is not reading anything.
        """
        me = threading.get_ident()
        mine = self.pinned_here.comms
        pinned = []
        for c in comms:
            if not c.closing:
                pinned.append(c)
                mine.add(c)
                c.pins[me] = c.pins.get(me, 0) + 1
        return pinned

    def _unpin(self, comms: Sequence["SimComm"]) -> None:
        if not comms:
            return
        me = threading.get_ident()
        with self.lock:
            mine = self.pinned_here.comms
            for c in comms:
                left = c.pins.get(me, 0) - 1
                if left > 0:
                    c.pins[me] = left
                else:
                    c.pins.pop(me, None)
                    mine.discard(c)
                    if c.closing:            # a retire waits for it
                        self.unpinned.notify_all()

    def drop_pins_of_this_thread(self) -> None:
        """Release the pins an exception left behind in this thread (it is no longer inside the executor).

        A signal handler raising between a pin and its release leaves the communicator pinned by this thread;
        another host thread destroying it would then wait for a reader that is gone (sim/abandon.py calls this).
        """
        me = threading.get_ident()
        with self.lock:
            mine = self.pinned_here.comms
            for c in mine:
                c.pins.pop(me, None)
            mine.clear()
            self.unpinned.notify_all()

    def retire(self, comm: "SimComm", release: Callable[[], None], timeout: float = 30.0) -> None:
        """Run ``release`` (it unmaps ``comm``'s memory) once no other thread of this process reads that memory.

        Several ranks live in one process when a program runs one host thread per device: another
        rank's thread may be polling or sleeping on this communicator's words outside the lock, and
        an unmap under it is a SIGSEGV.  New readers skip a communicator from here on; the current
        ones hold it for one poll (SPIN_ROUNDS yields at most) or one sleep (MAX_SLEEP_S) at most.  A pin of
        this thread's own is one an interrupted read left behind: it is dropped, not waited for.
        """
        limit = time.monotonic() + timeout
        me = threading.get_ident()
        with self.lock:
            comm.closing = True
            # a wake an interrupted run left pending would read the peer's doorbell in the memory unmapped below
            self.unwoken[:] = [ch for ch in self.unwoken if ch.comm is not comm]
            if comm.pins.pop(me, None) is not None:
                self.pinned_here.comms.discard(comm)
            while comm.pins:
                left = limit - time.monotonic()
                if left <= 0:                  # a reader never let go: keep the memory mapped, say so
                    readers = sum(comm.pins.values())
                    raise SimError(HcclResult.E_INTERNAL, f"communicator {comm.name}: {readers} reader(s) still "
                                                          f"polled its memory after {timeout:g} s; it was left mapped")
                self.unpinned.wait(left)
            release()

    def _poll_heads(self, deadline: Optional[float] = None) -> bool:
        """Spin briefly on the words blocked channel waits look at; True if one became set.

        Stops at ``deadline``: on a busy machine one ``sched_yield`` can cost a whole time slice of
        another process, so the spin alone could outlast a short wait (a ``Request.test()``).
        """
        words = []
        rounds = SPIN_ROUNDS
        with self.lock:
            comms = set()
            for q in self.active:
                t = q.head()
                if t is not None and t[0] == C_WAIT:
                    ch = t.channel
                    if not ch.comm.closing:
                        words.append((ch.local_words, ch.local_base + t.index))     # its RECORDS word
                        comms.add(ch.comm)
            if not words:
                return False
            for c in comms:
                if c.nranks > CORES:          # shares_cores
                    rounds = SHARED_SPIN_ROUNDS
            pinned = self._pin(comms)
        try:
            for _ in range(rounds):
                for w, i in words:
                    if w[i] != w[i + CONSUMED]:
                        return True
                sched_yield()
                if deadline is not None and time.monotonic() >= deadline:
                    return False
            return False
        finally:
            self._unpin(pinned)

    # ------------------------------------------------------------------ one queue
    def _wake_peers(self) -> None:
        """Wake the sleeping peers the channel records just run rang.

        A record's words and doorbell ring are written at once (a polling peer sees them); the futex wake of a
        sleeping peer waits until the run of consecutive records ends.  Woken at once, a peer sharing this core
        takes it (the scheduler favours a waking sleeper) before this rank's next record: with more ranks than
        cores each record of a handshake cost a context switch (3 records of a 4-rank 8-byte allreduce on 2 cores:
        51-73 us, benchmarks/profile_native.py).
        """
        unwoken = self.unwoken        # (under the lock, as retire(), which drops a closing communicator's channels)
        for ch in unwoken:
            ch.wake_peer()
        unwoken.clear()

    def _run_queue(self, q: Queue) -> bool:
        """Run ``q``'s tasks until it is empty or blocked (or fails); True if any ran.  The sleeping peers
        its last records rang are woken before it returns (_wake_peers).

        Every task kind is dispatched here, in line, those every collective runs first (one Python frame per queue
        run, not one per task).  A race-checked queue passes each task to the checker before (``_race_before``)
        and after it ran (``_race_after``).
        """
        unwoken = self.unwoken
        checked = q.checked
        traced = _trace.ACTIVE      # HCOMM_TRACE: one test per queue run when off
        ran = False
        ring = q.ring
        if ring is not None and len(ring) and not (checked or traced):
            if unwoken:
                self._wake_peers()
            try:
                done, status = ring.drain()
            except BaseException as exc:   # a signal's exception between the C run and its bookkeeping
                self.interrupted(q, ring.task(), exc)
                raise
            ran = done > 0
            if self._ring_ran(q, done, status):
                return ran
            # emptied (the deque below is empty too), or its head is a task for the loop below (q.tasks spills it)
        tasks = q.tasks
        programs = q.programs
        try:
            while tasks:
                if programs and programs[0][0] <= q.executed:     # a compiled form reached the head
                    before = q.executed
                    head = tasks[0]
                    try:
                        status = self._run_compiled(q, checked or traced)
                    except BaseException as exc:   # a signal's exception between the C run and its pops
                        self.interrupted(q, head, exc)
                        raise
                    if q.executed != before:
                        ran = True
                    if status == HCE_BLOCKED:
                        if not q.blocked_since:
                            q.blocked_since = time.monotonic()
                        return ran
                    if status != HCE_PYTHON:
                        continue          # ran to its end, or was not the head's: look at the head again
                    # the head task is one the compiled engine leaves to the loop below
                t = tasks[0]
                kind = t[0]
                if unwoken and kind != C_RECORD:
                    self._wake_peers()
                if traced:
                    t0 = _trace.now()
                done = True
                try:
                    if checked:
                        self._race_before(q, t)
                    if kind == C_WAIT:   # the notify words (sim/notifies.py): records counted by the peer, consumed
                        ch = t.channel
                        words = ch.local_words
                        i = ch.local_base + t.index
                        records = words[i]
                        if records == words[i + CONSUMED]:
                            done = False
                        else:
                            got = words[i + VALUES]
                            words[i + CONSUMED] = records
                            if ch.signalled:                  # the peer signalled: what we handed over is released
                                ch.signalled = []
                            if got != t.expect and t.expect:  # signed: the record carried another call's signature
                                raise TaskFailure(HcclResult.E_INTERNAL, ACL_ERROR_RT_INTERNAL_ERROR,
                                                  ch.comm.native.mismatch(ch.comm, ch.peer, got, t.expect))
                    elif kind == UFUNC:
                        t.ufunc(t.a, t.b, out=t.out)
                    elif kind == C_RECORD:   # the value first, then the count the peer's wait compares
                        ch = t.channel
                        words = ch.remote_words
                        i = ch.remote_base + t.index
                        records = words[i]
                        if records != words[i + CONSUMED]:
                            self.report(t.thread, q, t, f"record of channel notify {t.index} to rank {ch.peer} was "
                                                        "absorbed: the notify was still set (the peer has not waited "
                                                        "on it yet)")
                        words[i + VALUES] = t.value
                        words[i] = (records + 1) & 0xFFFFFFFF
                        if ch.pending:                        # data written before this record is the peer's now
                            ch.signalled.extend(ch.pending)
                            ch.pending = []
                        ch.ring_peer()
                        unwoken.append(ch)        # woken when this run of records ends (_wake_peers)
                    elif kind == CALL:
                        t.fn()
                    elif kind == COPY or kind == READ:      # READ: the peer's buffer is mapped here (src)
                        kernels.copy(t.dst, t.src, t.nbytes)
                    elif kind == T_WAIT:
                        notifies = t.thread.notifies
                        if notifies[t.index]:
                            notifies[t.index] = 0
                            t.thread.comm.thread_notifies_set -= 1
                        else:
                            done = False
                    elif kind == T_RECORD:
                        dst = t.target
                        if dst.notifies[t.index]:
                            self.report(t.thread, q, t, f"record of thread notify {t.index} of {dst.label} was "
                                                        "absorbed: the notify was still set")
                        else:
                            dst.comm.thread_notifies_set += 1
                        dst.notifies[t.index] = 1
                        dst.comm.ring_self()
                    elif kind == REDUCE or kind == READ_REDUCE:
                        kernels.reduce(t.dst, t.src, t.count, t.dtype, t.op)
                    elif kind == EVENT_WAIT:
                        done = t.event.completed >= t.records
                    elif kind == EVENT_RECORD:
                        t.event.completed += 1
                        t.event.stamp = time.perf_counter_ns()      # the stream clock of aclrtEventElapsedTime
                    elif kind == WRITE:
                        t.channel.check_write(self, q, t, t.dst, t.nbytes)
                        kernels.copy(t.dst, t.src, t.nbytes)
                    elif kind == WRITE_REDUCE:
                        t.channel.check_write(self, q, t, t.dst, t.count * t.dtype.itemsize)
                        kernels.reduce(t.dst, t.src, t.count, t.dtype, t.op)
                    elif kind == REDUCE3:
                        kernels.reduce3(t.dst, t.a, t.b, t.count, t.dtype, t.op)
                    else:
                        raise TaskFailure(HcclResult.E_INTERNAL, ACL_ERROR_RT_INTERNAL_ERROR,
                                          f"unknown task kind {kind}")
                    if checked and done:
                        self._race_after(q, t)
                except TaskFailure as exc:
                    self.fail_queue(q, exc.code, exc.acl_code, exc.message)
                    return True
                except Exception as exc:  # a bug or a bad address caught by Python
                    self.fail_queue(q, HcclResult.E_INTERNAL, ACL_ERROR_RT_INTERNAL_ERROR,
                                    f"{q.name}: task {q.executed} ({KIND_NAMES.get(kind)}) raised {exc!r}")
                    return True
                except BaseException as exc:   # Ctrl-C or another signal's exception left this task half done
                    self.interrupted(q, t, exc)
                    raise
                if not done:
                    if not q.blocked_since:
                        q.blocked_since = time.monotonic()
                    return ran
                if traced:
                    _traced(q, t, t0, _trace.now())
                q.blocked_since = 0.0
                tasks.popleft()
                q.executed += 1
                ran = True
            self.active.discard(q)
            comm = q.comm
            if comm is not None and ran and comm.config.check != "off":
                self._check_idle(comm)
            return ran
        finally:
            if unwoken:
                self._wake_peers()

    def _ring_ran_here(self, q: Queue, done: int, status: int) -> None:
        """After a run of ``q``'s replay ring by this thread, outside the executor's loop (the lock held): its
        bookkeeping (:meth:`_ring_ran`), ``q`` runnable or not, the idle check of an emptied queue, and a head that
        is a task for Python run by the loop."""
        blocked = self._ring_ran(q, done, status)
        if status == HCE_END:
            self.active.discard(q)
            comm = q.comm
            if done and comm is not None and comm.config.check != "off":
                self._check_idle(comm)
        else:
            self.active.add(q)
            if not blocked:
                self._run_queue(q)   # its head is a task engine.c leaves to Python: the loop takes it

    @staticmethod
    def _ring_ran(q: Queue, done: int, status: int) -> bool:
        """The bookkeeping of a run of ``q``'s replay ring (``done`` tasks ran, ending with ``status``); True when
        ``q`` is blocked at a wait of the ring."""
        if done:
            q.executed += done
            q.blocked_since = 0.0
        if status != HCE_BLOCKED:
            return False
        if not q.blocked_since:
            q.blocked_since = time.monotonic()
        return True

    def _run_compiled(self, q: Queue, python_only: bool) -> Optional[int]:
        """Run the compiled form registered at ``q``'s head (``launch``) as far as it goes, popping the tasks it ran;
        its status (sim/compiled.py HCE_*), or None when the entry was not the head's (it is dropped).

        ``python_only`` (race checker or tracer on): the Python loop runs everything; the entries are dropped.
        """
        programs = q.programs
        if python_only:
            programs.clear()
            return None
        start, program = programs[0]
        at = q.executed - start
        tasks = q.tasks
        if at >= program.n or tasks[0] is not program.tasks[at]:   # ran past it, or the queue was emptied (failed)
            programs.popleft()
            return None
        if self.unwoken:
            self._wake_peers()
        reached, status, popped = compiled.run(program, at, q.stamps)
        ran = reached - at
        if ran:
            if ran == len(tasks):
                tasks.clear()
            else:
                for _ in range(ran):
                    tasks.popleft()
            q.executed += ran
            q.blocked_since = 0.0
            stamps = q.stamps
            for _ in range(popped):
                stamps.popleft()
        if reached >= program.n:
            programs.popleft()
        return status

    def _check_idle(self, comm: "SimComm") -> None:
        """End-of-operation check: once every thread of the rank is idle, no thread notify should stay set.

        It only reports, in every mode: the notify stays set (a later wait may legitimately consume
        it, as a custom op's host-side record for its kernel does) and each one is reported once while
        it stays set.  Strict mode also fails the rank's streams (their next synchronisation reports it).
        """
        if not comm.thread_notifies_set and not comm.idle_notifies_reported:
            return                  # the common case, busy threads or not: nothing set, nothing to say
        threads = comm.all_threads()
        for th in threads:
            if th.queue.head() is not None:
                return
        left = {(th.handle, idx) for th in threads for idx, value in enumerate(th.notifies) if value}
        reported = comm.idle_notifies_reported
        comm.idle_notifies_reported = left
        for th in threads:
            for idx, value in enumerate(th.notifies):
                if not value or (th.handle, idx) in reported:
                    continue
                message = (f"checker: rank {comm.rank}, {th.label}: thread notify {idx} was recorded but never "
                           "waited on by the end of the operation (it would desynchronise the next one)")
                comm.reports.append(message)
                if comm.config.check == "strict":
                    comm.record_failure(HcclResult.E_INTERNAL, message)
                    comm.strict_findings.append(message)      # HcclCommDestroy reports it too
                    # the thread's own stream and the rank's stream-bound threads fail their next synchronisation
                    for failed in [th] + list(comm.stream_threads.values()):
                        if failed.queue.error is None:
                            failed.queue.error = (int(HcclResult.E_INTERNAL), ACL_ERROR_RT_INTERNAL_ERROR, message)
                else:
                    warn_caller(message, CheckerWarning)

    def _race_before(self, q: Queue, t: Task) -> None:
        """Race checker, before task ``t`` of ``q`` runs: records move clocks, HCCL-buffer accesses are logged."""
        kind = t[0]
        if kind == EVENT_RECORD:      # the stream's order reaches the waiting stream through the event
            races.record_event(q.raced, t.event.clocks)
            return
        if kind > C_WAIT or kind == T_WAIT or kind == C_WAIT:
            return
        th = t.thread
        race = th.comm.race if th is not None else None   # native collectives' copies carry no thread
        if race is None:
            return
        if kind == T_RECORD:
            race.release(th, race.thread_note(t.target, t.index))
        elif kind == C_RECORD:
            ch = t.channel
            note = race.channel_note(ch.peer, ch.remote_slot, t.index)
            race.release(th, note if note is not None else race.scratch_note)
        else:
            for owner, lo, hi, write in _accesses(th.comm, t):
                found = race.access(owner, th, lo, hi, write, q.executed, kind)
                if found is not None:
                    self.report(th, q, t, found)

    def _race_after(self, q: Queue, t: Task) -> None:
        """Race checker, after task ``t`` of ``q`` ran: a completed wait acquires what its record released."""
        kind = t[0]
        if kind == EVENT_WAIT:
            races.wait_event(q.raced, t.event.clocks)
        elif kind == T_WAIT or kind == C_WAIT:
            th = t.thread
            race = th.comm.race
            if race is None:
                return
            note = (race.thread_note(th, t.index) if kind == T_WAIT
                    else race.channel_note(th.comm.rank, t.channel.local_slot, t.index))
            if note is not None:
                race.acquire(th, note)

    # ------------------------------------------------------------------ failures and checks
    def fail_queue(self, q: Queue, code: int, acl_code: int, message: str) -> None:
        """Stop a queue with an error; the comm and its other blocked queues fail too."""
        if q.error is not None:
            return
        q.error = (int(code), int(acl_code), message)
        for t in q.tasks:
            if t[0] == EVENT_RECORD:  # the record will never run: its waiters must not hang
                t.event.completed += 1
                t.event.error = q.error
        q.tasks.clear()
        q.programs.clear()
        q.blocked_since = 0.0
        self.active.discard(q)
        comm = q.comm
        if comm is not None:
            comm.record_failure(int(code), message)
            # the operation is lost: every other queue of this rank with work fails with the root cause
            for other in list(self.active):
                if other.comm is comm and other.tasks:
                    self.fail_queue(other, code, acl_code, f"{other.name} aborted: {message}")

    def interrupted(self, q: Queue, task: Task, exc: BaseException) -> None:
        """``exc`` (not the task's own failure) left ``task`` of ``q`` half done: its queue and communicator fail.

        A wait may have consumed its notify without being popped, a reduction may have run partly: run
        again, the queue would desynchronise from its peers or add twice.  Whichever communicator's
        task it was -- the interrupted caller may have been waiting on another one -- it is abandoned
        (peers fail at once naming this rank), never resumed.
        """
        message = (f"{q.name}: task {q.executed} ({KIND_NAMES.get(task[0])}) was interrupted by "
                   f"{type(exc).__name__}; its queue cannot resume")
        self.fail_queue(q, HcclResult.E_INTERNAL, ACL_ERROR_RT_INTERNAL_ERROR, message)
        if q.comm is not None:
            q.comm.abandoned()

    def report(self, thread: Any, q: Queue, task: Task, text: str) -> None:
        """A checker finding about ``task`` on ``q``; warns or fails the queue per HCOMM_SIM_CHECK."""
        comm = q.comm
        mode = comm.config.check if comm is not None else "warn"
        if mode == "off":
            return
        rank = comm.rank if comm is not None else -1
        label = thread.label if thread is not None else q.name
        message = f"checker: rank {rank}, {label}, step {q.executed}, task {task.name}: {text}"
        if _trace.ACTIVE:   # where to find it in the HCOMM_TRACE timeline
            message += f" [trace: rank {rank}, track {q.name!r}, task {q.executed}]"
        if comm is not None:
            comm.reports.append(message)
        if mode == "strict":
            raise TaskFailure(HcclResult.E_INTERNAL, ACL_ERROR_RT_INTERNAL_ERROR, message)
        warn_caller(message, CheckerWarning)

    def _expire(self, now: float) -> None:
        for q in list(self.active):
            t = q.head() if q.blocked_since else None
            if t is None:
                continue
            limit = _wait_limit(q, t)
            if limit is None or now - q.blocked_since < limit:
                continue
            if t[0] == T_WAIT:
                th = t.thread
                what = (f"rank {th.comm.rank}, {th.label}, thread notify {t.index}, step {q.executed} (no local thread "
                        f"recorded it; {self._peer_waits(q, now)}; raise HCCL_EXEC_TIMEOUT if a peer is legitimately "
                        "slow)")
            else:
                what = (f"{_channel_wait(q, t, now)} (rank {t.channel.peer} never recorded it: it has not reached this "
                        "step of the same operation, or is itself waiting on another rank, which its own error "
                        "names; check that every rank issues the same operations, or raise HCCL_EXEC_TIMEOUT)")
            self.fail_queue(q, HcclResult.E_TIMEOUT, ACL_ERROR_RT_FFTS_PLUS_TIMEOUT,
                            f"notify wait timed out after {limit:g} s: {what}")

    def _peer_waits(self, q: Queue, now: float) -> str:
        """What this rank's other threads are waiting on from peers (why a local thread notify never came)."""
        comm = q.comm
        heads = [(other, other.head()) for other in list(self.active)
                 if other is not q and other.comm is comm and other.blocked_since]
        waits = [_channel_wait(other, t, now, with_rank=False) for other, t in heads if t is not None and t[0] == C_WAIT]
        if not waits:
            return "no thread of this rank is waiting on a peer"
        return "this rank's threads wait on peers: " + "; ".join(sorted(waits))

    def _check_peers(self, now: float) -> None:
        for q in list(self.active):
            t = q.head() if q.blocked_since else None
            if t is not None and t[0] == C_WAIT:
                ch = t.channel
                if ch.has_record(t.index):
                    continue     # the peer signalled before it went: the wait completes at the next step
                if now - q.blocked_since >= BLOCKED_S:       # a call that never meets this one (sim/announce.py)
                    mismatch = ch.comm.disagreeing_call(ch.peer)
                    if mismatch is not None:
                        self.fail_queue(q, HcclResult.E_INTERNAL, ACL_ERROR_RT_INTERNAL_ERROR, mismatch)
                        continue
                left = ch.comm.peer_left(ch.peer)    # its header stays readable: the mapping outlives its owner
                at_once = left is not None and left.startswith(LEFT_AT_ONCE)
                if not at_once and not ch.peer_ctl.owner_alive() and not ch.has_record(t.index):   # read again
                    self.fail_queue(q, HcclResult.E_REMOTE, ACL_ERROR_RT_SUSPECT_REMOTE_ERROR,
                                    f"peer rank {ch.peer} of communicator {ch.comm.name} is gone (its process "
                                    f"exited or was killed) while rank {ch.comm.rank} {t.thread.label} waited on "
                                    f"channel notify {t.index}")
                    continue
                # alive but out of the communicator (finalised, or failed and carrying on): it will never signal;
                # unless it left at once, after a grace, so a peer's own, more precise error (e.g. a mismatch it
                # found) comes first
                if left is not None and (at_once or now - q.blocked_since >= PEER_LEFT_GRACE_S) \
                        and not ch.has_record(t.index):
                    self.fail_queue(q, HcclResult.E_REMOTE, ACL_ERROR_RT_SUSPECT_REMOTE_ERROR,
                                    f"peer rank {ch.peer} of communicator {ch.comm.name} {left}, while rank "
                                    f"{ch.comm.rank} {t.thread.label} waited on channel notify {t.index} from it "
                                    f"(step {q.executed}): every rank must issue the same operations")

    def drain(self, q: Queue, deadline: Optional[float]) -> bool:
        """Drive the queues until the tasks ``q`` holds now have run, or it failed; False if ``deadline`` passed first.

        Meanwhile the calling host thread counts as synchronising a stream of ``q``'s communicator (its host issues
        nothing more: ``_check_lost_waits``).
        """
        comm = q.comm
        waiting = self.host_waiting
        with self.lock:
            self.syncers.add(threading.get_ident())
            until = q.executed + q.pending()
            if comm is not None:
                waiting[comm] = waiting.get(comm, 0) + 1
        def finished() -> bool:
            return q.executed >= until or q.error is not None or not q.pending()

        try:
            with self.lock:           # the peers' records that came since the launch: often all it takes
                self._run_queue(q)
            return finished() or self._wait_ring(q, finished, deadline) or self.run_until(finished, deadline)
        finally:
            if comm is not None:
                with self.lock:
                    left = waiting[comm] - 1
                    if left:
                        waiting[comm] = left
                    else:
                        del waiting[comm]

    def _wait_ring(self, q: Queue, finished: Callable[[], bool], deadline: Optional[float]) -> bool:
        """``drain`` while ``q``'s replay ring is all the process has to run, its head a channel wait: wait in C on
        that one notify (compiled.wait) and run the ring again, until ``finished()`` (True) or something else needs
        :meth:`run_until`'s round (False): another queue, a task for Python, the wait's timeout or ``deadline``.  The
        liveness checks run here as in that round."""
        ring = q.ring
        comm = q.comm
        if ring is None or comm is None:
            return False
        spins = SHARED_SPIN_ROUNDS if comm.nranks > CORES else SPIN_ROUNDS
        pinned: List["SimComm"] = []
        try:
            while True:
                with self.lock:          # one acquisition a round: what the last wait let run, then the next wait
                    if pinned:
                        self._unpin(pinned)
                        pinned = []
                        self._run_queue(q)
                        if finished():
                            return True
                    now = time.monotonic()
                    self._liveness(now)
                    if q.error is not None:          # a wait the liveness check failed
                        return finished()
                    if len(self.active) != 1 or q not in self.active or q.python_tasks or not len(ring) \
                            or not q.blocked_since:
                        return False
                    program, at = ring.head_at()
                    head = program.tasks[at]
                    limit = _wait_limit(q, head) if head[0] == C_WAIT else None
                    if limit is None:
                        return False
                    end = min(q.blocked_since + limit, self.last_liveness + LIVENESS_EVERY_S, now + MAX_SLEEP_S,
                              deadline if deadline is not None else now + MAX_SLEEP_S)
                    c = head.channel.comm
                    if now >= end:
                        return False
                    pinned = self._pin({c})
                    if not pinned:
                        return False
                    if self.alone():         # no other thread needs the lock: run and wait in one C call
                        ran, status = ring.sync(c.words, spins, end - now)
                        self._ring_ran_here(q, ran, status)
                        continue
                compiled.wait(program, at, c.words, spins, end - now)
        finally:
            if pinned:
                self._unpin(pinned)

    def alone(self) -> bool:
        """Whether a wait in C may hold the lock (for MAX_SLEEP_S at most): no other host thread ever synchronised a
        stream here (a program with a thread per rank), no AICPU kernel runs (its thread records), and the
        emulator is not a C program's (``foreign_threads``).  Another thread that launches meanwhile waits that long
        for the lock at most."""
        return len(self.syncers) == 1 and not self.kernels_running and not self.foreign_threads

    def _check_lost_waits(self, now: float) -> None:
        """Fail a thread-notify wait that nothing can record any more, naming it, instead of at its timeout.

        Thread notifies are recorded only by this process: when the rank's host is synchronising one of its
        streams (so it issues nothing more), no queued task records the awaited notify, no queue that could
        still issue work (a host task, a kernel launch) waits to run, no AICPU kernel is running and nothing
        else is runnable, the wait would only end at its timeout (1836 s in the vendor's samples).  Typically
        a missing HcommThreadNotifyRecordOnThread in a custom operator's kernel.
        """
        if self.kernels_running:
            return
        blocked = []
        for q in self.active:
            if not q.blocked_since:
                return                       # something can still run: it may record
            head = q.head()
            if head is not None and head[0] == T_WAIT and now - q.blocked_since >= LOST_WAIT_GRACE_S:
                blocked.append(q)
        for q in blocked:
            t = q.tasks[0]
            th = t.thread
            if th.notifies[t.index] or not self.host_waiting.get(th.comm) or self._may_record(th, t.index):
                continue
            comm = th.comm
            message = (f"checker: rank {comm.rank}, {th.label}, step {q.executed}: waits on thread notify {t.index}, "
                       "which nothing can record any more (no queued task records it, no AICPU kernel is running, "
                       "every thread of the process is idle or waiting): a missing HcommThreadNotifyRecordOnThread("
                       f"..., dstThread=0x{th.handle:x}, dstNotifyIdx={t.index})")
            if comm.config.check != "off":
                comm.reports.append(message)
                if comm.config.check == "warn":
                    warn_caller(message, CheckerWarning)
            self.fail_queue(q, HcclResult.E_TIMEOUT, ACL_ERROR_RT_FFTS_PLUS_TIMEOUT, message)

    def _may_record(self, th: SimThread, index: int) -> bool:
        """Whether a queued task records ``th``'s notify ``index``, or a queued host task or launch could issue one."""
        for q in self.active:
            for task in q.tasks:
                kind = task[0]
                if kind == T_RECORD and task.target is th and task.index == index:
                    return True
                if kind == CALL or kind == EVENT_WAIT:
                    return True
        return False

    # ------------------------------------------------------------------ sleeping
    def _doorbells(self) -> Tuple[List["SimComm"], List[int]]:
        """The communicators with runnable work, each pinned (the caller unpins), and their doorbell values."""
        with self.lock:
            comms = set()
            for q in self.active:
                if q.comm is not None:
                    comms.add(q.comm)
            pinned = self._pin(comms)
            values = []
            for c in pinned:
                values.append(c.bell_value())
            return pinned, values

    def _sleep(self, comms: List["SimComm"], bells: List[int], now: float, deadline: Optional[float]) -> None:
        wake = now + MAX_SLEEP_S
        for q in list(self.active):
            head = q.head() if q.blocked_since else None
            if head is not None:
                limit = _wait_limit(q, head)
                if limit is not None:
                    wake = min(wake, q.blocked_since + limit)
        if deadline is not None:
            wake = min(wake, deadline)
        timeout = max(wake - now, 0.0)
        if len(comms) == 1:
            comms[0].sleep_on_bell(bells[0], timeout)
        else:
            time.sleep(min(timeout, 0.001))


def _own(comm: Any, ptr: Any, nbytes: int, write: bool) -> Optional[Tuple[int, int, int, bool]]:
    """The part of [ptr, +nbytes) inside ``comm``'s own HCCL buffer as an access (rank, lo, hi, write), or None."""
    base = comm.buf.addr
    lo = int(_cast("uintptr_t", ptr)) - base
    hi = lo + nbytes
    size = comm.buffer_bytes
    if hi <= 0 or lo >= size:
        return None
    return comm.rank, max(lo, 0), min(hi, size), write


def _accesses(comm: Any, t: Task) -> List[Tuple[int, int, int, bool]]:
    """HCCL-buffer accesses of a data task: (owner rank, lo, hi, write) with offsets in the owner's buffer."""
    kind = t[0]
    nbytes = task_bytes(t)
    out: List[Tuple[int, int, int, bool]] = []
    if kind == COPY or kind == REDUCE:
        for access in (_own(comm, t.src, nbytes, False), _own(comm, t.dst, nbytes, True)):
            if access is not None:
                out.append(access)
        return out
    ch = t.channel
    remote_write = kind == WRITE or kind == WRITE_REDUCE
    remote, local = (t.dst, t.src) if remote_write else (t.src, t.dst)
    lo = int(_cast("uintptr_t", remote)) - ch.buf_lo
    out.append((ch.peer, lo, lo + nbytes, remote_write))
    mine = _own(comm, local, nbytes, not remote_write)
    if mine is not None:
        out.append(mine)
    return out


def _channel_wait(q: Queue, t: Task, now: float, with_rank: bool = True) -> str:
    """'rank 1, thread 0x..., channel notify 0 from peer rank 3, step 2' (+ for how long, for a thread still waiting)."""
    _, th, ch, index = t[:4]     # a ChannelWait: kind, thread, channel, index
    where = f"rank {ch.comm.rank}, " if with_rank else ""
    text = f"{where}{th.label}, channel notify {index} from peer rank {ch.peer}, step {q.executed}"
    return text if with_rank else f"{text} (for {now - q.blocked_since:.1f} s)"


def _wait_limit(q: Queue, t: Task) -> Optional[float]:
    """Timeout in seconds of a notify-wait task (0 means the communicator's HCCL_EXEC_TIMEOUT)."""
    if t[0] != T_WAIT and t[0] != C_WAIT:
        return None
    return t.timeout or (q.comm.config.exec_timeout_s if q.comm is not None else 86400.0)


def _traced(q: Queue, task: Task, t0: float, t1: float) -> None:
    """Hand a task that ran from ``t0`` (from when it started waiting, for a wait that blocked) to ``t1`` to the
    tracer (imported on first use: tracing is rare)."""
    from .tracing import record
    record(q, task, q.blocked_since or t0, t1)


class TaskFailure(Exception):
    """Raised by a task (or a checker task) to fail its queue with this HcclResult, aclError and message."""

    def __init__(self, code: int, acl_code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.acl_code = acl_code
        self.message = message


EXECUTOR = Executor()
