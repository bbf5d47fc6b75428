"""The compiled data plane (sim/compiled.py, sim/engine_c/engine.c) against the Python engine (sim/runtime.py).

Random schedules of copies, reductions (every dtype and op, random bytes: NaNs, infinities, signed zeros), channel
records and waits (signed and not, absorbed, blocked, delivered later by a "peer"), and the native collectives'
chunk stamps run on both engines over identical memory; the bytes, the notify words, the checker's reports, the
queue's errors and how far it got must be equal.  Skipped, with the reason, where no compiled engine can be built.
"""
from __future__ import annotations

import time
import warnings
from collections import deque
from types import SimpleNamespace
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hcomm_cffi._ffi import ffi
from hcomm_cffi.enums import DataType, ReduceOp
from hcomm_cffi.sim import compiled, kernels, runtime, tasks
from hcomm_cffi.sim.comm import H_BELL, HEADER_WORDS, SimChannel
from hcomm_cffi.sim.native import _StampCheck, _StampWrite
from hcomm_cffi.sim.notifies import CONSUMED, VALUES
from hcomm_cffi.sim.queues import Queue

pytestmark = pytest.mark.skipif(compiled.engine() is None, reason=f"no compiled engine: {compiled.engine_status()}")

DATA = 4096            # bytes of the data buffer the schedules work in
WORDS = 512            # control words (one rank's; channel notifies at BASE)
BASE = HEADER_WORDS + 16
NOTIFIES = 4
STAMP_WORDS = 4        # int64 stamp words
SIGS = (1, 0x80000001, 0x80000002)
DTYPES = [DataType.INT8, DataType.INT16, DataType.INT32, DataType.INT64, DataType.UINT8, DataType.UINT16,
          DataType.UINT32, DataType.UINT64, DataType.FP16, DataType.FP32, DataType.FP64, DataType.BFP16]
OPS = [ReduceOp.SUM, ReduceOp.PROD, ReduceOp.MAX, ReduceOp.MIN]

_offset = st.integers(0, DATA // 2 - 64)
STEPS = st.one_of(
    st.tuples(st.just("copy"), _offset, _offset, st.integers(0, 64), st.booleans()),
    st.tuples(st.just("reduce"), _offset, _offset, st.integers(0, 80), st.sampled_from(DTYPES), st.sampled_from(OPS)),
    st.tuples(st.just("reduce3"), _offset, _offset, _offset, st.integers(0, 80), st.sampled_from(DTYPES),
              st.sampled_from(OPS)),
    st.tuples(st.just("ufunc"), _offset, _offset, st.integers(1, 80), st.sampled_from(DTYPES),
              st.sampled_from(OPS), st.booleans()),
    st.tuples(st.just("record"), st.integers(0, NOTIFIES - 1), st.sampled_from(SIGS)),
    st.tuples(st.just("wait"), st.integers(0, NOTIFIES - 1), st.sampled_from((0,) + SIGS[1:])),
    st.tuples(st.just("stamp_write"), st.integers(0, STAMP_WORDS - 1)),
    st.tuples(st.just("stamp_check"), st.lists(st.integers(0, STAMP_WORDS - 1), max_size=3)),
    st.tuples(st.just("call"),),
    st.tuples(st.just("write"), _offset, _offset, st.integers(1, 64)),
)


class _World:
    """One rank's memory, a channel to itself (its records land in its own notifies) and an executor."""

    def __init__(self, data: bytes, stamps: List[int], stamp_words: List[int], check: str) -> None:
        self.data = ffi.new("char[]", DATA)
        ffi.memmove(self.data, data, DATA)
        self.words = ffi.new("uint32_t[]", WORDS)
        self.stamp_words = ffi.new("int64_t[]", stamp_words)
        self.note = ffi.new("uint32_t[]", 3)         # a call's announcement (sim/announce.py): one entry
        self.seq = ffi.new("int64_t[1]")              # the communicator's chunk count and calls announced
        self.number = ffi.new("int64_t[1]")
        self.call: Any = None                         # the repeated call (compiled.Repeat), made on its first replay
        self.calls: List[int] = []
        self.comm = SimpleNamespace(rank=0, name="c", config=SimpleNamespace(check=check), reports=[], threads=[],
                                    stream_threads={}, idle_notifies_reported=set(), thread_notifies_set=0,
                                    failure=None, all_threads=lambda: [],
                                    native=SimpleNamespace(mismatch=lambda c, p, got, want:
                                                           f"mismatch: got 0x{got:x}, want 0x{want:x}"))
        self.comm.record_failure = lambda code, message: setattr(self.comm, "failure", (code, message))
        ch = object.__new__(SimChannel)
        ch.comm, ch.peer = self.comm, 0
        ch.local_words = ch.remote_words = self.words
        ch.local_base = ch.remote_base = BASE
        ch.peer_bell_addr = int(ffi.cast("uintptr_t", self.words)) + 4 * H_BELL
        ch.pending, ch.signalled = [], []
        ch.buf_lo = int(ffi.cast("uintptr_t", self.data))
        ch.local_slot = ch.remote_slot = 0
        self.channel = ch
        self.thread = SimpleNamespace(label="thread 0x1", comm=self.comm)
        self.queue = Queue("q")
        self.queue.comm = self.comm
        self.queue.stamps.extend(stamps)
        self.executor = runtime.Executor()

    def at(self, offset: int) -> Any:
        return self.data + offset

    def task(self, step: Tuple[Any, ...]) -> tasks.Task:
        kind = step[0]
        th, ch = self.thread, self.channel
        if kind == "copy":
            _, dst, src, n, read = step
            return (tasks.Read(th, ch, self.at(dst), self.at(src), n) if read
                    else tasks.LocalCopy(th, self.at(dst), self.at(src), n))
        if kind == "reduce":
            _, dst, src, count, dt, op = step
            return tasks.LocalReduce(th, self.at(dst), self.at(src), count, dt, op)
        if kind == "reduce3":
            _, dst, a, b, count, dt, op = step
            return tasks.Reduce3(th, self.at(dst), self.at(a), self.at(b), count, dt, op)
        if kind == "ufunc":
            _, dst, src, count, dt, op, in_place = step
            if dt == DataType.BFP16:
                dt = DataType.UINT16          # the native collectives' bf16 goes through Reduce3
            out = kernels.view(self.at(dst), count, dt)
            other = kernels.view(self.at(src), count, dt)
            a = out if in_place else kernels.view(self.at(DATA // 2 + dst % 64), count, dt)
            return tasks.UfuncReduce(th, kernels.ufunc_of(op), out, a, other)
        if kind == "record":
            return tasks.ChannelRecord(th, ch, step[1], step[2])
        if kind == "wait":
            return tasks.ChannelWait(th, ch, step[1], 0.0, step[2])
        if kind == "stamp_write":
            return tasks.HostCall(_StampWrite(self.stamp_words + step[1], self.queue.stamps))
        if kind == "stamp_check":
            theirs = [(p, self.stamp_words + p) for p in step[1]]
            return tasks.HostCall(_StampCheck(self.comm, theirs, self.queue.stamps))   # type: ignore[arg-type]
        if kind == "write":      # the checker's hand-over lists of the channel (its records stay in Python)
            _, dst, src, n = step
            return tasks.Write(th, ch, self.at(dst), self.at(src), n)
        return tasks.HostCall(lambda: self.calls.append(self.queue.executed))

    def replay(self, task_list: Tuple[tasks.Task, ...], program: Any, stamp0: int, stamps: int) -> None:
        """Launch as the native collectives launch a repeated call: through the replay ring (its chunks counted from
        ``stamp0``), else as a launch."""
        q = self.queue
        if program is not None and self.call is None:
            if q.ring is None:
                q.ring = compiled.Ring()
            self.call = compiled.Repeat(q.ring, self.seq, self.number, self.note, 0, 1, 0x80000001, stamps, stamps > 0)
            self.call.keep(0, program)
            self.call.keep(1, program)
        self.seq[0], self.number[0] = stamp0, 0
        if self.call is not None and self.executor.enter(q, self.call):
            assert self.seq[0] == stamp0 + stamps and self.number[0] == 1 and list(self.note) == [1, 0x80000001, 1]
            return
        q.stamps.extend(range(stamp0, stamp0 + stamps))
        self.executor.launch(q, task_list, program=program)

    def deliver(self) -> bool:
        """The peer records the notify the queue's head waits on (value 1 or the head's signature); False: the head
        is no wait."""
        t = self.queue.head()      # (the replay ring's head: looking does not move it to the task deque)
        if t is None or t[0] != tasks.C_WAIT:
            return False
        i = BASE + t.index
        self.words[i + VALUES] = t.expect or 1
        self.words[i] = (self.words[i] + 1) & 0xFFFFFFFF
        return True

    def stamps_left(self) -> List[int]:
        """The chunk stamps launched and not yet consumed: the replay ring's, then the queue's FIFO."""
        q = self.queue
        ring = q.ring.segments() if q.ring is not None else []
        return [v for _, _, left in ring for v in left] + list(q.stamps)

    def state(self) -> Dict[str, Any]:
        q = self.queue
        return {"data": ffi.buffer(self.data)[:], "words": list(self.words), "stamp_words": list(self.stamp_words),
                "executed": q.executed, "left": q.pending(), "error": q.error, "reports": list(self.comm.reports),
                "failure": self.comm.failure, "stamps": self.stamps_left(), "calls": list(self.calls),
                "blocked": bool(q.blocked_since), "handed": [[(lo - self.channel.buf_lo, hi - self.channel.buf_lo) for lo, hi in ranges]
                           for ranges in (self.channel.pending, self.channel.signalled)]}


_SPECIAL_F64 = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1.0, -1.0, 5e-324, 1.7976931348623157e308])
_SPECIAL_F32 = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -2.5, 1e-45, 3.4028235e38], np.float32)
_SPECIAL_U16 = np.array([0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0xFFC1, 0x7C00, 0xFC00, 0x7E00, 0x3F80, 0x0001,
                         0x7F7F], np.uint16)   # bf16 and fp16 zeros, infinities, NaNs, 1.0, subnormals, maxima


def _memory(seed: int) -> bytes:
    """Random bytes with IEEE special values (signed zeros, infinities, NaNs with payloads, extremes) sprinkled in
    for every float width."""
    rng = np.random.default_rng(seed)
    raw = bytearray(rng.bytes(DATA))
    for block in range(0, DATA, 8):
        pick = rng.integers(0, 6)
        if pick == 0:
            raw[block:block + 8] = _SPECIAL_F64[rng.integers(len(_SPECIAL_F64))].tobytes()
        elif pick == 1:
            raw[block:block + 8] = rng.choice(_SPECIAL_F32, 2).tobytes()
        elif pick == 2:
            raw[block:block + 8] = rng.choice(_SPECIAL_U16, 4).tobytes()
    return bytes(raw)


def _run(engine: str, steps: List[Tuple[Any, ...]], data: bytes, stamps: List[int], stamp_words: List[int],
         check: str, launches: int, replay: Sequence[bool] = (), deliver_each: bool = True
         ) -> Tuple[List[Dict[str, Any]], int]:
    """Run ``steps`` ``launches`` times on one queue (peers' records delivered whenever it blocks); every state
    on the way, and how many tasks the compiled engine ran.  ``replay`` (one flag per launch): each launch with the
    chunk stamps that follow ``stamps[0]``, one per stamp check, as the native collectives launch -- True: a
    repeated call (``Executor.enter``: the replay ring when the compiled form is whole), False: a first call
    (its stamps pushed on the FIFO, then ``launch``).  ``deliver_each`` False: the peer's records come only after
    the last launch (the launches queue up behind a blocked wait)."""
    world = _World(data, [] if replay else stamps, stamp_words, check)
    checks = sum(1 for s in steps if s[0] == "stamp_check")
    stamp0 = stamps[0] if stamps else 0
    task_list = tuple(world.task(s) for s in steps)
    program = compiled.compile_tasks(task_list, least=1) if engine == "compiled" else None
    states = []
    ran_in_c = 0
    real_run = compiled.run

    def counted(program: compiled.Program, start: int, fifo: Any) -> Tuple[int, int, int]:
        nonlocal ran_in_c
        out = real_run(program, start, fifo)
        ran_in_c += out[0] - start
        return out

    compiled.run = counted            # type: ignore[assignment]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for i in range(launches):
                if replay and replay[i]:
                    world.replay(task_list, program, stamp0 + i * checks, checks)
                elif replay:
                    world.queue.stamps.extend(range(stamp0 + i * checks, stamp0 + (i + 1) * checks))
                    world.executor.launch(world.queue, task_list, program=program)
                else:
                    world.executor.launch(world.queue, task_list, program=program)
                states.append(world.state())
                if i + 1 < launches and not deliver_each:
                    continue
                for _ in range(2 * len(steps) * (1 if deliver_each else launches)):
                    if not world.deliver():
                        break
                    with world.executor.lock:
                        world.executor._run_queue(world.queue)
                    states.append(world.state())
    finally:
        compiled.run = real_run       # type: ignore[assignment]
    return states, ran_in_c


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(STEPS, min_size=1, max_size=14), seed=st.integers(0, 2**32 - 1),
       stamps=st.lists(st.integers(0, 3), max_size=4), stamp_words=st.lists(st.integers(0, 4), min_size=STAMP_WORDS,
                                                                            max_size=STAMP_WORDS),
       check=st.sampled_from(["off", "warn", "strict"]), launches=st.integers(1, 3))
def test_random_schedules_give_equal_bytes_reports_and_errors(steps: List[Tuple[Any, ...]], seed: int,
                                                              stamps: List[int], stamp_words: List[int], check: str,
                                                              launches: int) -> None:
    data = _memory(seed)
    python, _ = _run("python", steps, data, stamps, stamp_words, check, launches)
    fast, _ = _run("compiled", steps, data, stamps, stamp_words, check, launches)
    assert len(python) == len(fast)
    for i, (want, got) in enumerate(zip(python, fast)):
        for key in want:
            if got[key] != want[key] and isinstance(want[key], (bytes, list)):
                at = next(j for j, (x, y) in enumerate(zip(got[key], want[key])) if x != y)
                pytest.fail(f"state {i}, {key}[{at}]: compiled {got[key][at]!r} != python {want[key][at]!r}")
            assert got[key] == want[key], f"state {i}, {key}: compiled {got[key]!r} != python {want[key]!r}"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(STEPS, min_size=1, max_size=14), seed=st.integers(0, 2**32 - 1), stamp0=st.integers(0, 3),
       stamp_words=st.lists(st.integers(0, 4), min_size=STAMP_WORDS, max_size=STAMP_WORDS),
       check=st.sampled_from(["off", "warn", "strict"]), repeats=st.lists(st.booleans(), min_size=1, max_size=5),
       deliver_each=st.booleans())
def test_repeated_calls_through_the_replay_ring_agree(steps: List[Tuple[Any, ...]], seed: int, stamp0: int,
                                                      stamp_words: List[int], check: str, repeats: List[bool],
                                                      deliver_each: bool) -> None:
    """Repeated calls launched through Executor.enter (their compiled lists on the replay ring when whole, queued
    behind one another while blocked), mixed with first calls launched behind them, against the same launches on
    the Python engine."""
    data = _memory(seed)
    python, _ = _run("python", steps, data, [stamp0], stamp_words, check, len(repeats), repeats, deliver_each)
    fast, _ = _run("compiled", steps, data, [stamp0], stamp_words, check, len(repeats), repeats, deliver_each)
    assert len(python) == len(fast)
    for i, (want, got) in enumerate(zip(python, fast)):
        for key in want:
            assert got[key] == want[key], f"state {i}, {key}: compiled {got[key]!r} != python {want[key]!r}"


def test_a_first_call_launched_behind_the_ring_keeps_the_stamp_order() -> None:
    """A first call's stamps go on the FIFO before its launch moves the ring's blocked calls into the task deque:
    theirs must still come first (else every later chunk check fails the stream)."""
    steps = [("stamp_write", 1), ("wait", 0, SIGS[1]), ("stamp_check", [1])]
    data = bytes(range(256)) * (DATA // 256)
    for repeats in ([True, True, False], [True, False, True, False]):
        python, _ = _run("python", steps, data, [3], [0] * STAMP_WORDS, "strict", len(repeats), repeats, False)
        fast, _ = _run("compiled", steps, data, [3], [0] * STAMP_WORDS, "strict", len(repeats), repeats, False)
        assert fast == python and fast[-1]["error"] is None and fast[-1]["executed"] == 3 * len(repeats)


def test_the_replay_ring_runs_whole_lists_in_c() -> None:
    """The ring test compares something: a whole list repeated while blocked runs from the ring, in C."""
    steps = [("copy", 0, 64, 16, False), ("stamp_write", 1), ("wait", 0, SIGS[1]), ("stamp_check", [1]),
             ("reduce", 0, 128, 4, DataType.FP32, ReduceOp.SUM)]
    data = bytes(range(256)) * (DATA // 256)
    world = _World(data, [], [0] * STAMP_WORDS, "warn")
    task_list = tuple(world.task(s) for s in steps)
    program = compiled.compile_tasks(task_list, least=1)
    assert program is not None and program.whole
    for i in range(3):
        world.replay(task_list, program, 7 + i, 1)
    ring = world.queue.ring
    assert ring is not None and len(ring) == 3 and not world.queue.python_tasks   # blocked at the first wait
    assert world.stamps_left() == [7, 8, 9] and world.queue.pending() == 3 * len(steps) - 2
    while world.deliver():                        # each wait's record arrives: the ring drains, in C
        with world.executor.lock:
            world.executor._run_queue(world.queue)
        assert not world.queue.python_tasks
    assert not len(ring) and world.queue.executed == 3 * len(steps) and world.queue.error is None
    python, _ = _run("python", steps, data, [7], [0] * STAMP_WORDS, "warn", 3, replay=[True] * 3)
    fast, _ = _run("compiled", steps, data, [7], [0] * STAMP_WORDS, "warn", 3, replay=[True] * 3)
    assert fast == python and fast[-1]["executed"] == 3 * len(steps) and fast[-1]["error"] is None


def test_the_compiled_engine_runs_the_tasks_it_has_code_for() -> None:
    """The differential test compares something: a schedule of compiled kinds runs in C, not by the fallback."""
    steps = [("copy", 0, 64, 16, False), ("record", 0, SIGS[1]), ("wait", 0, SIGS[1]),
             ("reduce", 0, 128, 4, DataType.FP32, ReduceOp.SUM), ("reduce3", 0, 64, 128, 4, DataType.BFP16,
                                                                 ReduceOp.MAX),
             ("ufunc", 256, 512, 8, DataType.INT32, ReduceOp.PROD, True), ("stamp_write", 1), ("stamp_check", [1])]
    data = bytes(range(256)) * (DATA // 256)
    python, _ = _run("python", steps, data, [5], [0] * STAMP_WORDS, "warn", 2)
    fast, ran_in_c = _run("compiled", steps, data, [5, 6], [0] * STAMP_WORDS, "warn", 2)
    assert ran_in_c == 2 * len(steps)
    assert fast[-1]["executed"] == 2 * len(steps) and fast[-1]["error"] is None
    python, _ = _run("python", steps, data, [5, 6], [0] * STAMP_WORDS, "warn", 2)
    assert fast == python


def test_what_only_python_reproduces_is_left_to_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """An absorbed record, a signature mismatch, fp16 and a large reduction run in Python: the report, the error,
    NumPy's rounding and NumPy's wider vectors."""
    steps = [("record", 1, 1), ("record", 1, 1), ("reduce", 0, 64, 8, DataType.FP16, ReduceOp.SUM),
             ("reduce", 0, DATA // 2, 100, DataType.FP32, ReduceOp.MAX), ("wait", 2, SIGS[1])]
    monkeypatch.setattr(compiled, "C_REDUCE_MAX_BYTES", 256)     # 100 fp32 count as large
    data = bytes(range(256)) * (DATA // 256)
    states = []
    for engine in ("python", "compiled"):
        world = _World(data, [], [0] * STAMP_WORDS, "warn")
        world.words[BASE + 2 + VALUES] = SIGS[2]       # a peer's record carrying another call's signature
        world.words[BASE + 2] = 1
        task_list = tuple(world.task(s) for s in steps)
        program = compiled.compile_tasks(task_list, least=1) if engine == "compiled" else None
        assert engine == "python" or [program.records[i].kind for i in range(5)] == [   # large reductions: NumPy
            compiled.E_C_RECORD, compiled.E_C_RECORD, compiled.E_PYTHON, compiled.E_PYTHON, compiled.E_C_WAIT]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            world.executor.launch(world.queue, task_list, program=program)
        states.append(world.state())
    python, fast = states
    assert fast == python
    assert len(fast["reports"]) == 1 and "was absorbed" in fast["reports"][0]
    assert fast["error"] is not None and "mismatch: got 0x80000002, want 0x80000001" in fast["error"][2]


def _repeats(rank: int, n: int, root_info: bytes, calls: int, elements: int = 4) -> Dict[str, Any]:
    import hcomm_cffi as hcomm

    ran, synced, entered = [0], [0], [0]
    real_run = compiled.run

    def counted(program: compiled.Program, start: int, fifo: Any) -> Tuple[int, int, int]:
        out = real_run(program, start, fifo)
        ran[0] += out[0] - start
        return out

    real_init, real_drain = compiled.Repeat.__init__, compiled.Ring.drain

    def counted_init(call: compiled.Repeat, *args: Any) -> None:   # each repeated call's launch, counted
        real_init(call, *args)
        real_launch = call.launch

        def counted_launch() -> int:
            code = real_launch()
            ran[0] += max(0, code) >> 2
            entered[0] += code >= 0
            return code
        call.launch = counted_launch

    def counted_drain(ring: compiled.Ring) -> Tuple[int, int]:
        out = real_drain(ring)
        ran[0] += out[0]
        return out

    real_sync = compiled.Ring.sync

    def counted_sync(ring: compiled.Ring, *args: Any) -> Tuple[int, int]:
        out = real_sync(ring, *args)
        ran[0] += out[0]
        synced[0] += 1
        return out

    compiled.run = counted            # type: ignore[assignment]
    compiled.Repeat.__init__ = counted_init     # type: ignore[method-assign]
    compiled.Ring.drain = counted_drain         # type: ignore[method-assign]
    compiled.Ring.sync = counted_sync           # type: ignore[method-assign]
    world = hcomm.init(rank=rank, world_size=n, root_info=root_info)
    got = []
    try:
        x = np.zeros(elements, np.float32)
        for step in range(calls):
            x[...] = step * 10 + rank + 1
            if rank == 1 and step % 5 == 4:
                time.sleep(0.05)          # rank 0's synchronisation waits for this one (in C, where it may)
            world.allreduce(x, algorithm="native")
            got.append(x.tolist())
    finally:
        hcomm.finalize()
    return {"got": got, "ran_in_c": ran[0], "synced_in_c": synced[0], "entered_ring": entered[0],
            "engine": compiled.engine_status()}


@pytest.mark.parametrize("check", ["warn", "off", "strict"])
def test_repeated_native_allreduces_run_in_c_and_agree(check: str) -> None:
    """The native collectives' repeats run their kept lists in C (strict mode: in Python, for the race analysis)."""
    from multiproc import run_ranks

    calls = 20
    results = run_ranks(2, _repeats, calls, timeout=120, env={"HCOMM_SIM_CHECK": check})
    want = [[float(2 * (step * 10) + 3)] * 4 for step in range(calls)]
    for r in results:
        assert r["got"] == want and r["engine"] == "compiled"
        if check == "strict":
            assert r["ran_in_c"] == 0
        else:
            assert r["ran_in_c"] >= 5 * (calls - 2)     # the repeats' tasks (6 a call on 2 ranks), nearly all in C
    if check != "strict":
        assert results[0]["synced_in_c"] > 0            # rank 0's synchronisations waited for rank 1 in C


def test_the_largest_repeated_allreduces_below_the_direct_path_run_whole_from_the_ring() -> None:
    """The largest allreduce whose list is kept (one element below native.DIRECT_FROM, within SMALL_CACHED) reduces in
    C: its list is whole, and every repeat enters the replay ring in one C call."""
    from multiproc import run_ranks

    from hcomm_cffi.sim import native

    calls, elements = 12, native.DIRECT_FROM // 4 - 1
    assert elements * 4 <= native.SMALL_CACHED
    results = run_ranks(2, _repeats, calls, elements, timeout=120, env={"HCOMM_SIM_CHECK": "warn"})
    want = [[float(2 * (step * 10) + 3)] * elements for step in range(calls)]
    for r in results:
        assert r["got"] == want and r["engine"] == "compiled"
        assert r["entered_ring"] >= calls - 2          # the first call of each parity takes the full path


def _engine_in_child(env: Dict[str, str], code: str) -> str:
    import os
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})
    return proc.stdout.strip() + proc.stderr.strip()


STATUS = "from hcomm_cffi.sim import compiled; print(compiled.engine_status())"


@pytest.mark.skipif(not compiled._VARIANTS[0], reason="the AVX2 versions are built on x86-64 Linux only")
def test_a_compiler_without_target_clones_still_builds_the_engine(tmp_path: Any) -> None:
    """The build with the reductions' AVX2 versions is tried first; a compiler refusing it gets the baseline build."""
    import shutil
    import stat

    real = compiled.c_compiler()
    if real is None:
        pytest.skip("no C compiler")
    cc = tmp_path / "cc-without-clones"
    cc.write_text("#!/bin/sh\nfor a in \"$@\"; do [ \"$a\" = -DHCE_CLONES ] && { echo 'no target_clones' >&2; "
                  f"exit 1; }}; done\nexec {shutil.which(real[0])} \"$@\"\n")
    cc.chmod(cc.stat().st_mode | stat.S_IXUSR)
    code = ("from hcomm_cffi.sim import compiled; import numpy as np; print(compiled.engine_status()); "
            "a = np.arange(4096, dtype=np.float32); out = np.empty_like(a); rec = compiled._ffi.new('hce_task[1]'); "
            "assert compiled._reduce(rec[0], out.ctypes.data, a.ctypes.data, a.ctypes.data, 4096, "
            "compiled.DataType.FP32, compiled.ReduceOp.SUM); o = compiled._ffi.new('int64_t[2]'); "
            "assert compiled.engine().hce_run(rec, 1, 0, compiled._ffi.NULL, 0, o) == 1; "
            "print(bool((out == 2 * a).all()))")
    out = _engine_in_child({"CC": str(cc), "HCOMM_SIM_ENGINE": "compiled", "XDG_CACHE_HOME": str(tmp_path / "cache")},
                           code)
    assert out == "compiled\nTrue", out
    built = list((tmp_path / "cache").rglob("engine.so"))
    assert len(built) == 1
    assert b"reduce3.avx2" not in built[0].read_bytes()     # the baseline build


def test_without_a_compiler_auto_falls_back_to_python_and_says_why() -> None:
    assert _engine_in_child({"CC": "/nonexistent/cc", "HCOMM_SIM_ENGINE": "auto"}, STATUS) == \
        "python (no C compiler ($CC, cc or gcc on PATH))"
    assert _engine_in_child({"HCOMM_SIM_ENGINE": "python"}, STATUS) == "python (HCOMM_SIM_ENGINE=python)"
    out = _engine_in_child({"CC": "/nonexistent/cc", "HCOMM_SIM_ENGINE": "compiled"},
                           "from hcomm_cffi.sim import compiled; compiled.engine()")
    assert "RuntimeError: HCOMM_SIM_ENGINE=compiled but the compiled engine is unavailable: no C compiler" in out
    out = _engine_in_child({"HCOMM_SIM_ENGINE": "fast"}, STATUS)
    assert "HCOMM_SIM_ENGINE='fast' is not an executor engine" in out and "python, compiled, auto" in out


@pytest.mark.parametrize("head", [0, 1, 3])
def test_a_full_ring_grows_keeping_its_segments_in_order(head: int) -> None:
    """Ring.grow: twice the room, the held segments first in launch order (a head past the start wraps around)."""
    ring = compiled.Ring(capacity=4)
    segs = ring.ring.segs
    for i in range(4):                              # the segment launched i-th sits at (head + i) % 4
        segs[(head + i) % 4].pid, segs[(head + i) % 4].at = 100 + i, i
    ring.ring.head, ring.ring.count = head, 4
    ring.grow()
    assert ring.cap == ring.ring.cap == 8 and ring.ring.head == 0 and ring.ring.count == 4
    assert [(ring.ring.segs[i].pid, ring.ring.segs[i].at) for i in range(4)] == [(100 + i, i) for i in range(4)]
