"""The executor's compiled data plane: engine_c/engine.c, built on first use with the system C compiler and
loaded through cffi's ABI mode (no Python headers needed).

``HCOMM_SIM_ENGINE`` chooses: ``python`` (the reference engine, sim/runtime.py only), ``compiled`` (this one; an
error when it cannot be built) or ``auto`` (this one when a C compiler is found, else Python; ``hcomm info`` says
which and why).  A task list is compiled once (:func:`compile_tasks`: the native collectives keep the lists of
their small calls and relaunch them on every repeat) into an array of fixed records; the executor runs it with
:func:`run` from the queue's head and pops what ran.  The C loop stops before anything it does not reproduce
exactly (engine.c's comment): Python runs that task, then the C loop resumes.

The library is built into ``$XDG_CACHE_HOME|~/.cache/hcomm_cffi/engine/<source digest>/`` (a private directory of
this user), written to a temporary name and renamed into place, so ranks building it at once each load a whole
file.
"""
from __future__ import annotations

import functools
import hashlib
import itertools
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import cffi
import numpy as np

from .. import settings
from .._ffi import ffi as _main_ffi
from ..enums import DataType, ReduceOp, dtype_from_numpy
from ..files import UnsafePath, checked_dir
from .tasks import C_RECORD, C_WAIT, CALL, COPY, READ, READ_REDUCE, REDUCE, REDUCE3, UFUNC, WRITE, WRITE_REDUCE, Task

__all__ = ["Program", "Ring", "Repeat", "c_compiler", "compile_tasks", "engine", "engine_status", "run", "wait", "HCE_END",
           "HCE_BLOCKED", "HCE_PYTHON"]

SOURCE = Path(__file__).with_name("engine_c") / "engine.c"
HCE_END, HCE_BLOCKED, HCE_PYTHON = 0, 1, 2     # engine.c's statuses
E_PYTHON, E_COPY, E_REDUCE3, E_C_RECORD, E_C_WAIT, E_STAMP_WRITE, E_STAMP_CHECK = range(7)   # its record kinds
# IEEE arithmetic as written (no -ffast-math); -O3 vectorises the reductions (-O2 leaves them scalar)
FLAGS = ("-O3", "-shared", "-fPIC")
# tried in turn: on x86-64 Linux the reductions also in an AVX2 version picked at load (engine.c HCE_CLONES; a
# compiler or C library without target_clones fails that build), then the baseline build alone
_VARIANTS: Tuple[Tuple[str, ...], ...] = ((("-DHCE_CLONES",),) if platform.machine() in ("x86_64", "AMD64")
                                          and sys.platform.startswith("linux") else ()) + ((),)
# Reductions up to this size run in C: every reduction of a list the native collectives keep (at most 1 MiB, their
# SMALL_CACHED), so such a list is whole and runs from the replay ring.  A reduction left to NumPy costs a Python
# task besides and keeps the whole call off the ring: a 64 KiB allreduce on 4 ranks took 59 us against 111-153 us
# with the limit at 4 KiB, reduce-scatter 25 against 92-106, on 8 ranks 170 against 440-475 (_compare_workers.py,
# 2 cores).  A 16384-fp32 sum alone: 2.1 us with NumPy (ufunc call included), 1.9 in engine.c's AVX2 version, 2.7
# in its baseline one.  Larger ones stay with NumPy, whose loops use the CPU's widest vectors; bf16, which NumPy
# reduces in several passes, stays in C at any size.
C_REDUCE_MAX_BYTES = 1 << 20
MAX_STAMPS = 64          # chunk numbers of the queue's stamp FIFO handed to one run (engine.c pops at most these)
# DataType values engine.c reduces (FP16 stays with NumPy: its rounding is NumPy's own)
_C_DTYPES = frozenset({DataType.INT8, DataType.INT16, DataType.INT32, DataType.INT64, DataType.UINT8, DataType.UINT16,
                       DataType.UINT32, DataType.UINT64, DataType.FP32, DataType.FP64, DataType.BFP16})
_UFUNC_OPS = {np.add: ReduceOp.SUM, np.multiply: ReduceOp.PROD, np.maximum: ReduceOp.MAX, np.minimum: ReduceOp.MIN}

_CDEF = """
typedef struct {
    int32_t kind; int32_t dtype; int32_t op; uint32_t value;
    uint32_t *words; int64_t index;
    void *dst; const void *a; const void *b; int64_t count;
} hce_task;
int64_t hce_run(const hce_task *tasks, int64_t n, int64_t start, const int64_t *stamps, int64_t nstamps,
                int64_t *out);
typedef struct {
    const hce_task *tasks; int64_t n; int64_t at; int64_t stamp0; int64_t stamps; int64_t popped; int64_t pid;
} hce_seg;
typedef struct { hce_seg *segs; int64_t cap; int64_t head; int64_t count; int64_t left; } hce_ring;
int64_t hce_drain(hce_ring *r, int64_t *out);
typedef struct {
    hce_ring *ring; int64_t *seq; int64_t *number; uint32_t *note; int64_t base; int64_t entries;
    const hce_task *tasks[2]; int64_t n[2]; int64_t pid[2]; int64_t advance; int64_t stamps; uint32_t value;
} hce_entry;
int64_t hce_enter(hce_entry *e);
int64_t hce_sync(hce_ring *r, uint32_t *ctl, int spins, int64_t timeout_ns, int64_t *out);
int hce_wait(const hce_task *waits, int64_t n, uint32_t *ctl, int spins, int64_t timeout_ns);
"""

_ffi = cffi.FFI()
_ffi.cdef(_CDEF)
_addr = _main_ffi.cast


def c_compiler() -> Optional[List[str]]:
    """The C compiler command: ``$CC`` split as a shell would, else ``cc`` or ``gcc`` on PATH; None when none is found
    (cannlib/build.py's check_toolchain names what is missing from that)."""
    command = shlex.split(os.environ.get("CC", "")) or [shutil.which("cc") or shutil.which("gcc") or "cc"]
    return command if shutil.which(command[0]) is not None else None


class _Engine:
    """The loaded library, or why there is none."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.lib: Any = None
        self.reason = ""        # why the compiled engine is not in use ("" once it is)
        self.required = False   # HCOMM_SIM_ENGINE=compiled: no engine is an error
        self.tried = False


_ENGINE = _Engine()
_PIDS = itertools.count(1)


def _cache_dir(source: bytes) -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    root = checked_dir(os.path.join(base, "hcomm_cffi", "engine"), "the compiled engine's cache", private=True)
    key = hashlib.sha256(source + _CDEF.encode() + " ".join(FLAGS).encode()).hexdigest()[:16]
    return checked_dir(os.path.join(root, key), "the compiled engine's cache", private=True)


def _build(compiler: List[str]) -> str:
    """The library's path: built now unless this source's build is in the cache."""
    source = SOURCE.read_bytes()
    where = _cache_dir(source)
    target = os.path.join(where, "engine.so")
    if os.path.isfile(target):
        return target
    fd, partial = tempfile.mkstemp(prefix=".engine-", suffix=".so", dir=where)
    os.close(fd)
    try:
        for extra in _VARIANTS:
            proc = subprocess.run(compiler + list(FLAGS) + list(extra) + ["-o", partial, str(SOURCE)],
                                  capture_output=True, text=True, timeout=120)
            if proc.returncode == 0:
                break
        else:
            raise RuntimeError(f"{' '.join(compiler)} failed on {SOURCE} (exit {proc.returncode}): "
                               f"{proc.stderr.strip()[:2000]}")
        os.replace(partial, target)           # atomic: a rank building at once loads one whole file or the other
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
    return target


def engine() -> Any:
    """The loaded compiled engine per ``HCOMM_SIM_ENGINE``, or None (the Python engine runs everything).

    ``compiled`` and no build possible: RuntimeError naming why.  ``auto``: None, the reason kept for
    :func:`engine_status`.  Tried once per process.
    """
    state = _ENGINE
    if not state.tried:
        _choose(state)
    if state.lib is None and state.required:
        raise RuntimeError(f"HCOMM_SIM_ENGINE=compiled but the compiled engine is unavailable: {state.reason}")
    return state.lib


def _choose(state: _Engine) -> None:
    """Decide once per process (a forked child keeps its parent's decision): load the engine or keep why not."""
    with state.lock:
        if state.tried:
            return
        choice = settings.value("HCOMM_SIM_ENGINE")
        state.required = choice == "compiled"
        if choice == "python":
            state.reason = "HCOMM_SIM_ENGINE=python"
        else:
            compiler = c_compiler()
            if compiler is None:
                state.reason = "no C compiler ($CC, cc or gcc on PATH)"
            else:
                try:
                    state.lib = _ffi.dlopen(_build(compiler))
                except (OSError, RuntimeError, UnsafePath, subprocess.SubprocessError) as exc:
                    state.reason = f"the build failed: {exc}"
        state.tried = True


def engine_status() -> str:
    """'compiled' or 'python (<why>)': which engine runs the emulator's data plane (``hcomm info``)."""
    try:
        lib = engine()
    except RuntimeError as exc:
        return f"none ({exc})"
    return "compiled" if lib is not None else f"python ({_ENGINE.reason})"


class Program:
    """A task list in engine.c's records: built once, run many times (each launch registers it on its queue)."""

    __slots__ = ("tasks", "records", "n", "keep", "out", "stamps", "stamps_needed", "whole", "wait_runs", "pid")

    def __init__(self, tasks: Sequence[Task], records: Any, keep: List[Any], stamps_needed: int) -> None:
        self.tasks = tuple(tasks)          # the task objects, the same ones the queue holds (identity-checked)
        self.pid = next(_PIDS)             # its id in a replay ring's segments (Ring.known)
        self.records = records
        self.n = len(self.tasks)
        # every task has a compiled record (none is handed to Python): the list can run from a Ring
        self.whole = all(records[i].kind != E_PYTHON for i in range(self.n)) and stamps_needed < MAX_STAMPS
        # per task: how many channel waits run in a row from it (0: it is none), the waits one hce_wait looks at
        self.wait_runs = [0] * (self.n + 1)
        for i in range(self.n - 1, -1, -1):
            if records[i].kind == E_C_WAIT:
                self.wait_runs[i] = self.wait_runs[i + 1] + 1
        self.keep = keep                   # what the records point into that nothing else keeps alive
        self.out = _ffi.new("int64_t[2]")
        self.stamps_needed = min(stamps_needed, MAX_STAMPS)   # the most of the stamp FIFO one run can use
        self.stamps = _ffi.new("int64_t[]", max(1, self.stamps_needed))


def _ptr(p: Any) -> int:
    return int(_addr("uintptr_t", p))


def _array_addr(arr: Any) -> Optional[int]:
    if not isinstance(arr, np.ndarray) or not arr.flags.c_contiguous:
        return None
    return int(arr.__array_interface__["data"][0])


def _overlaps(a: int, b: int, nbytes: int) -> bool:
    """Two ranges of ``nbytes`` at different starts that share bytes (NumPy and the chunked memmove then differ from
    an element-wise C loop)."""
    return a != b and a < b + nbytes and b < a + nbytes


def _record(rec: Any, t: Task, keep: List[Any]) -> bool:
    """Fill ``rec`` from task ``t``; False when engine.c has no exact code for it (Python runs it)."""
    kind = t[0]
    if kind == COPY or kind == READ:
        dst, src, n = _ptr(t.dst), _ptr(t.src), int(t.nbytes)
        if _overlaps(dst, src, n):
            return False
        rec.kind, rec.dst, rec.a, rec.count = E_COPY, _ffi.cast("void *", dst), _ffi.cast("void *", src), n
        return True
    if kind in (REDUCE, READ_REDUCE, REDUCE3):
        dst = _ptr(t.dst)
        a, b = (dst, _ptr(t.src)) if kind != REDUCE3 else (_ptr(t.a), _ptr(t.b))
        return _reduce(rec, dst, a, b, int(t.count), t.dtype, t.op)
    if kind == UFUNC:
        op = _UFUNC_OPS.get(t.ufunc)
        at_out, at_a, at_b = (_array_addr(x) for x in (t.out, t.a, t.b))
        if op is None or at_out is None or at_a is None or at_b is None or not (t.out.dtype == t.a.dtype == t.b.dtype) \
                or not (t.out.size == t.a.size == t.b.size):
            return False
        dt = dtype_from_numpy(t.out.dtype)
        return dt is not None and _reduce(rec, at_out, at_a, at_b, int(t.out.size), dt, op)
    if kind == C_RECORD or kind == C_WAIT:
        ch = t.channel
        record = kind == C_RECORD
        rec.kind = E_C_RECORD if record else E_C_WAIT
        rec.words = _ffi.cast("uint32_t *", _ptr(ch.remote_words if record else ch.local_words))
        rec.index = (ch.remote_base if record else ch.local_base) + t.index
        rec.value = t.value if record else t.expect
        return True
    if kind == CALL:
        word = getattr(t.fn, "stamp_word", None)       # native.py's chunk stamps
        if word is not None:
            rec.kind, rec.dst = E_STAMP_WRITE, _ffi.cast("void *", _ptr(word))
            return True
        peers = getattr(t.fn, "stamp_peers", None)
        if peers is not None:
            table = _ffi.new("int64_t *[]", [_ffi.cast("int64_t *", _ptr(p)) for p in peers] or [_ffi.NULL])
            keep.append(table)
            rec.kind, rec.a, rec.count = E_STAMP_CHECK, table, len(peers)
            return True
    return False


def _reduce(rec: Any, dst: int, a: int, b: int, count: int, dtype: Any, op: Any) -> bool:
    if dtype not in _C_DTYPES or op not in (ReduceOp.SUM, ReduceOp.PROD, ReduceOp.MAX, ReduceOp.MIN):
        return False
    nbytes = count * DataType(dtype).itemsize
    if nbytes > C_REDUCE_MAX_BYTES and dtype != DataType.BFP16:
        return False
    if _overlaps(dst, a, nbytes) or _overlaps(dst, b, nbytes):
        return False
    rec.kind, rec.dtype, rec.op, rec.count = E_REDUCE3, int(dtype), int(op), count
    rec.dst, rec.a, rec.b = _ffi.cast("void *", dst), _ffi.cast("void *", a), _ffi.cast("void *", b)
    return True


def compile_tasks(tasks: Sequence[Task], least: int = 3) -> Optional[Program]:
    """``tasks`` as a :class:`Program`; None when no compiled engine is in use or engine.c could run fewer than
    ``least`` of them (entering C costs about what a Python task does: one compiled task gains nothing).

    Every task the C loop cannot reproduce exactly becomes a record that hands it to Python.  The records hold raw
    addresses: the caller keeps the program no longer than the memory the tasks point into (the native
    collectives' cache is checked against a destroyed communicator before each reuse).  The C loop does not keep
    the checker's hand-over lists of a channel (``SimChannel.pending``/``signalled``, filled by Write tasks): a
    channel written through in ``tasks`` keeps its records and waits in Python, and the channels of other
    callers' lists must carry no Write tasks (the native collectives' own channels carry none).
    """
    if engine() is None or not tasks:
        return None
    records = _ffi.new("hce_task[]", len(tasks))
    keep: List[Any] = []
    compiled = 0
    written = {id(t.channel) for t in tasks if t[0] == WRITE or t[0] == WRITE_REDUCE}
    for i, t in enumerate(tasks):
        try:
            done = (t[0] != C_RECORD and t[0] != C_WAIT or id(t.channel) not in written) and _record(records[i], t, keep)
        except (TypeError, AttributeError):  # a field that is no address (an instrumented channel's words): Python
            done = False
        if done:
            compiled += 1
        else:
            records[i].kind = E_PYTHON
    checks = sum(1 for i in range(len(tasks)) if records[i].kind == E_STAMP_CHECK)
    stamped = checks or any(records[i].kind == E_STAMP_WRITE for i in range(len(tasks)))
    return Program(tasks, records, keep, checks + 1 if stamped else 0) if compiled >= max(1, least) else None


class Ring:
    """A queue's replay ring (engine.c hce_ring): the whole programs of repeated calls (:class:`Repeat`), launched
    while the queue held no Python task, each with its chunk stamps as a range; run from the head in launch order by
    engine.c alone.

    Each segment names its program by ``Program.pid``; ``known`` maps those ids back for the calls that may have
    segments here (:meth:`adopt`).  :meth:`take` empties the ring into what the Python queue holds instead
    (sim/queues.py ``Queue.tasks``).
    """

    __slots__ = ("ring", "segs", "out", "cap", "known", "calls")

    def __init__(self, capacity: int = 64) -> None:
        self.ring = _ffi.new("hce_ring *")
        self.segs = _ffi.new("hce_seg[]", capacity)
        self.ring.segs, self.ring.cap = self.segs, capacity
        self.cap = capacity
        self.out = _ffi.new("int64_t[1]")
        self.known: Dict[int, Program] = {}
        self.calls: List["Repeat"] = []      # the calls launched here that are not forgotten, or still have segments

    def __len__(self) -> int:
        """The segments held."""
        return int(self.ring.count)

    @property
    def left(self) -> int:
        """The tasks held not yet run."""
        return int(self.ring.left)

    def adopt(self, call: "Repeat") -> None:
        """Let ``call`` launch here: its programs become known (:meth:`prune` first)."""
        self.prune()
        self.calls.append(call)

    def prune(self) -> None:
        """Once the ring is empty, drop the forgotten calls and the programs no call launches any more."""
        if not self.ring.count and (any(c.forgotten for c in self.calls) or len(self.known) > 2 * len(self.calls) + 2):
            self.calls = [c for c in self.calls if not c.forgotten]
            self.known = {p.pid: p for c in self.calls for p in c.programs if p is not None}

    def drain(self) -> Tuple[int, int]:
        """Run the ring as far as it goes: (tasks run, status HCE_*; HCE_END once it is empty)."""
        ran = _ENGINE.lib.hce_drain(self.ring, self.out)
        return ran, int(self.out[0])

    def sync(self, ctl: Any, spins: int, timeout_s: float) -> Tuple[int, int]:
        """Run the ring as far as it goes, waiting in C (:func:`wait`) whenever its head is a run of channel waits on
        ``ctl`` (this rank's control words), for at most ``timeout_s``: (tasks run, status HCE_*: HCE_BLOCKED when it
        stopped at anything else, a signal or the timeout)."""
        ran = _ENGINE.lib.hce_sync(self.ring, ctl, spins, int(timeout_s * 1e9), self.out)
        return ran, int(self.out[0])

    def head(self) -> Optional[Task]:
        """The task the ring runs next (None: empty)."""
        if not self.ring.count:
            return None
        program, at = self.head_at()
        return program.tasks[at]

    def task(self) -> Task:
        """The task the ring runs next, or once it is empty a task of a program it ran (what a run interrupted
        between its C call and its bookkeeping names)."""
        head = self.head()
        return head if head is not None else next(iter(self.known.values())).tasks[-1]

    def head_at(self) -> Tuple[Program, int]:
        """The program at the ring's head (it holds one) and the position of the task it runs next."""
        s = self.segs[self.ring.head]
        return self.known[s.pid], int(s.at)

    def segments(self) -> List[Tuple[Program, int, range]]:
        """Per segment in order: (program, its next task, its chunk stamps not yet consumed)."""
        ring, segs = self.ring, self.segs
        out = []
        for i in range(ring.count):
            s = segs[(ring.head + i) % ring.cap]
            out.append((self.known[s.pid], int(s.at), range(s.stamp0 + s.popped, s.stamp0 + s.stamps)))
        return out

    def take(self) -> List[Tuple[Program, int, range]]:
        """Empty the ring: its :meth:`segments`."""
        out = self.segments()
        self.ring.head = self.ring.count = self.ring.left = 0
        self.prune()
        return out

    def grow(self) -> None:
        """Twice the room for segments."""
        ring, old = self.ring, self.segs
        cap, head, count = int(ring.cap), int(ring.head), int(ring.count)
        segs = _ffi.new("hce_seg[]", 2 * cap)
        first = min(count, cap - head)          # the held segments in order: from the head, then wrapped around
        size = _ffi.sizeof(old) // cap          # (of the array: a type named by a string is parsed, 0.5 ms)
        _ffi.memmove(segs, old + head, first * size)
        _ffi.memmove(segs + first, old, (count - first) * size)
        self.segs = segs
        ring.segs, ring.cap, ring.head = segs, 2 * cap, 0
        self.cap = 2 * cap


class Repeat:
    """A repeated native call engine.c launches by itself (hce_enter): its whole compiled lists per chunk parity
    (:meth:`keep`), the replay ring of its stream, and its communicator's counters in C memory -- the chunks issued
    (``seq``: the parity and the stamps of the next call) and the library calls announced (``number``), whose entry
    in the announcement table ``note`` it writes (sim/announce.py: ``base``, ``entries`` slots of three words)."""

    __slots__ = ("c", "ring", "programs", "forgotten", "launch")

    def __init__(self, ring: Ring, seq: Any, number: Any, note: Any, base: int, entries: int, value: int,
                 advance: int, stamped: bool) -> None:
        c = self.c = _ffi.new("hce_entry *")
        c.ring, c.seq, c.number, c.note, c.base, c.entries = ring.ring, seq, number, note, base, entries
        c.value, c.advance, c.stamps = value, advance, advance if stamped else 0
        self.ring = ring
        self.programs: List[Optional[Program]] = [None, None]
        self.forgotten = False     # dropped from its cache: it launches nothing more
        #: hce_enter on this call: the tasks run * 4 + the status (HCE_*), or -1 (nothing kept for this parity) or -2
        #: (the ring is full): nothing was done then.  A partial of the C function: no Python frame on every repeat
        self.launch: Callable[[], int] = functools.partial(_ENGINE.lib.hce_enter, c)
        ring.adopt(self)

    def keep(self, parity: int, program: Optional[Program]) -> None:
        """Launch ``program`` on ``parity`` (None, or one that is not whole: that parity takes Python's path)."""
        if program is not None and not program.whole:
            program = None
        self.programs[parity] = program
        c = self.c
        if program is None:
            c.n[parity] = 0
            return
        self.ring.known[program.pid] = program
        c.tasks[parity], c.n[parity], c.pid[parity] = program.records, program.n, program.pid


def wait(program: Program, at: int, ctl: Any, spins: int, timeout_s: float) -> bool:
    """Wait (engine.c hce_wait) until every channel wait of the run that starts at task ``at`` of ``program``
    (``Program.wait_runs``) finds its record: up to ``spins`` looks with ``sched_yield``, then doorbell sleeps (``ctl``:
    the rank's control words), at most ``timeout_s`` in all; True when every record is there (False: look again)."""
    return bool(_ENGINE.lib.hce_wait(program.records + at, program.wait_runs[at], ctl, spins, int(timeout_s * 1e9)))


def run(program: Program, start: int, stamps: Any) -> Tuple[int, int, int]:
    """Run ``program`` from task ``start``: (index reached, status HCE_*, stamps consumed).  ``stamps``: the queue's
    stamp FIFO (its first MAX_STAMPS values are handed over)."""
    buf = program.stamps
    nstamps = 0
    needed = program.stamps_needed
    if needed:
        for value in stamps:
            buf[nstamps] = value
            nstamps += 1
            if nstamps == needed:
                break
    out = program.out
    reached = _ENGINE.lib.hce_run(program.records, program.n, start, buf, nstamps, out)
    return reached, int(out[0]), int(out[1])
