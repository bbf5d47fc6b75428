"""Flight recorder: the last N operations of every communicator of this process, cheap enough to leave on.

Each communicator owns one :class:`FlightRecorder`: a preallocated ring of fixed 180-byte records
(``struct.pack_into`` into an ``mmap``; no allocation per call) holding, per collective or
point-to-point operation, its sequence number, name, algorithm, count, bytes, dtype, reduce op,
root/peer, state (issued / running / done / failed), the three timestamps and the user's call site
(``path:line`` of the first frame outside the library, :mod:`hcomm_cffi.callsite`).  When a directory
is known (``HCOMM_FR_DIR``; ``hcomm run`` sets one it keeps after the job) the ring is a file there,
so the records of a rank that is killed outright (SIGKILL, OOM) survive it, and the process answers a
report's request for its Python stacks there (:mod:`hcomm_cffi.stacks`).  The header also says
how the rank ended: ``finalised`` (the communicator was destroyed) or ``exited`` (the process ended
without destroying it, with the exception that ended it); a ring still ``live`` whose process is
gone was killed.  The rings of a communicator are removed once every rank has finalised it (the
last to finalise removes them), so a clean job leaves nothing.  Without a directory the ring is
anonymous memory.

:func:`dump_all` writes every live ring of the process as one JSON file
(``<job>.rank<R>.json``); it is called on a collective/point-to-point timeout, on a peer's death,
on ``SIGUSR1`` and on ``SIGTERM`` (a launcher stopping the job: the process then dies of SIGTERM as
before; with the package's other SIGTERM hooks, :mod:`hcomm_cffi.sigterm`; each handler is installed only
where the signal has none) and by ``Comm.dump_flight_recorder()``.  ``hcomm doctor DIR`` (:mod:`hcomm_cffi.desync`) reads the dumps
and the rings of dead ranks and explains the desync.
"""
from __future__ import annotations

import atexit
import errno
import glob
import json
import mmap
import os
import re
import signal
import struct
import sys
import threading
import time
from typing import Any, Dict, List, Optional

from . import files, settings, sigterm, stacks
from .callsite import SITE_BYTES

__all__ = ["FlightRecorder", "fixed_fields", "RECORD", "FIXED", "HEADER", "STATES", "ISSUED", "RUNNING", "DONE", "FAILED", "MAGIC",
           "directory", "checked_directory", "dump_all", "read_ring", "recorders", "DUMP_SUFFIX", "RING_SUFFIX",
           "job_id", "ENDS", "LIVE", "FINALISED", "EXITED", "pid_alive"]

MAGIC = b"HCOMMFR2"
#: ordinal (1-based write count; 0 = empty slot), seq, op, algorithm, count, nbytes, dtype, reduce op,
#: root/peer, t_issued, t_running (0: not yet), t_done (0: not yet, negative: failed at -t_done), call site.
#: The state is derived from the timestamps, so a state change is one 8-byte store.
RECORD = struct.Struct(f"<qq16s16sqqiiiddd{SITE_BYTES}s")
#: the fields from the op to the root/peer, which a repeated call keeps: packed once (:func:`fixed_fields`)
FIXED = struct.Struct("<16s16sqqiii")
#: a record as :meth:`FlightRecorder.issue_fixed` writes it: the same bytes as RECORD, its fixed fields one block
_WRITE = struct.Struct(f"<qq{FIXED.size}sddd{SITE_BYTES}s")
#: magic, capacity, comm rank, comm size, world rank, pid, comm name, job id
HEADER = struct.Struct("<8siiiii64s64s")
_T_ISSUED_AT = 16 + FIXED.size
_T_RUNNING_AT, _T_DONE_AT = _T_ISSUED_AT + 8, _T_ISSUED_AT + 16
_TIME = struct.Struct("<d")
_ORDINAL = struct.Struct("<q")
#: how the rank ended (LIVE, FINALISED, EXITED), when, and what ended the process (an exception, in short)
END = struct.Struct("<qd80s")
_END_AT = 160
HEADER_SIZE = 256
LIVE, FINALISED, EXITED = range(3)
ENDS = ("live", "finalised", "exited")
ISSUED, RUNNING, DONE, FAILED = range(4)
STATES = ("issued", "running", "done", "failed")
DUMP_SUFFIX = ".json"
RING_SUFFIX = ".ring"
_SAFE = re.compile(r"[^A-Za-z0-9_.-]")

_live: List["FlightRecorder"] = []
_lock = threading.Lock()
_names: Dict[str, bytes] = {}
_handler = {"installed": False}
_last_reason: List[str] = []        # why this process last dumped (a later SIGUSR1 dump keeps it)
_exit_hook = {"installed": False}
_no_room: List[str] = []            # why this process keeps its rings in memory (said once)


def _b(text: str) -> bytes:
    """``text`` as at most 16 bytes (cached: the same few names are recorded on every call)."""
    got = _names.get(text)
    if got is None:
        got = _names[text] = text.encode("utf-8", "replace")[:16]
    return got


def fixed_fields(op: str, algorithm: str, count: int, nbytes: int, dtype: int, redop: int,
                 peer: int) -> bytes:
    """The fields of a record that a repeat of the same call keeps, packed as :data:`RECORD` holds them (one
    block: a record then packs 7 values, not 15)."""
    return FIXED.pack(_b(op), _b(algorithm), count, nbytes, dtype, redop, peer)


def job_id() -> str:
    """The job's id, the same on every rank: HCOMM_JOB_ID / HCOMM_RUN_ID, torchrun's run id, Slurm's job and step,
    the PMIx namespace (mpirun), else ``MASTER_ADDR_MASTER_PORT`` (env://); 'pid<pid>' when none is known."""
    jid = settings.value("HCOMM_JOB_ID") or settings.value("HCOMM_RUN_ID")
    env = os.environ
    if not jid:
        elastic = env.get("TORCHELASTIC_RUN_ID", "")
        slurm = env.get("SLURM_JOB_ID", "")
        if elastic and elastic != "none":
            jid = elastic
        elif slurm:
            jid = f"slurm{slurm}.{env.get('SLURM_STEP_ID', '0')}"
        elif env.get("PMIX_NAMESPACE"):
            jid = env["PMIX_NAMESPACE"]
        elif env.get("MASTER_ADDR") and env.get("MASTER_PORT"):
            jid = f"{env['MASTER_ADDR']}_{env['MASTER_PORT']}"
    return _SAFE.sub("_", jid)[:64] if jid else f"pid{os.getpid()}"


def directory() -> Optional[str]:
    """Where rings and dumps go: HCOMM_FR_DIR (``hcomm run`` sets one it keeps after the job), else
    ``<job directory>/flight`` of a launcher that sets only HCOMM_RUN_JOB_DIR, else None."""
    found = settings.value("HCOMM_FR_DIR")
    if found is None:
        job = settings.value("HCOMM_RUN_JOB_DIR")
        found = os.path.join(job, "flight") if job else None
    return found


def checked_directory(where: str) -> str:
    """``where`` as a flight directory this process may write (created if missing); :class:`files.UnsafePath`
    naming HCOMM_FR_DIR when it is a link, not a directory, another user's, or others can write it."""
    return files.checked_dir(where, "HCOMM_FR_DIR" if settings.value("HCOMM_FR_DIR") else
                             "flight directory (HCOMM_RUN_JOB_DIR/flight)")


def _file_ring(path: str, length: int) -> Optional[mmap.mmap]:
    """The ring mapped from a new file at ``path`` with its blocks allocated (a full file system then fails here,
    never as SIGBUS at a record); None, said once per process, when the file system cannot hold it."""
    fd = files.create_file(path, replace=True)
    try:
        os.ftruncate(fd, length)
        files.reserve(fd, length, os.path.dirname(path), "the flight recorder's ring",
                      "free space there, or set HCOMM_FR_DIR elsewhere (HCOMM_FR_SIZE=0 turns the recorder off)")
        return mmap.mmap(fd, length)
    except BaseException as exc:
        os.unlink(path)
        if not isinstance(exc, files.NoSpace):
            raise
        if not _no_room:
            _no_room.append(str(exc))
            sys.stderr.write(f"hcomm: pid {os.getpid()}: {exc}: the flight recorder keeps its ring in memory only "
                             "(it dies with the process; dumps are still attempted)\n")
        return None
    finally:
        os.close(fd)


class FlightRecorder:
    """The ring of one communicator on this rank (see the module docstring)."""

    __slots__ = ("capacity", "head", "path", "_mm", "comm", "rank", "size", "world_rank", "nth")

    def __init__(self, comm: str, rank: int, size: int, world_rank: int, capacity: int,
                 where: Optional[str] = None) -> None:
        if capacity < 1:
            raise ValueError(f"capacity={capacity}; expected >= 1 records (HCOMM_FR_SIZE=0 turns the recorder off)")
        self.capacity, self.head, self.comm, self.rank, self.size = capacity, 0, comm, rank, size
        self.world_rank = world_rank
        length = HEADER_SIZE + capacity * RECORD.size
        self.path: Optional[str] = None
        with _lock:
            self.nth = sum(1 for r in _live if r.comm == comm)
        mapped = None
        if where is not None:
            path = os.path.join(checked_directory(where), _ring_name(job_id(), str(world_rank), comm, self.nth))
            mapped = _file_ring(path, length)
            self.path = path if mapped is not None else None
        self._mm = mapped if mapped is not None else mmap.mmap(-1, length)
        HEADER.pack_into(self._mm, 0, MAGIC, capacity, rank, size, world_rank, os.getpid(),
                         comm.encode()[:64], job_id().encode()[:64])
        with _lock:
            _live.append(self)
        if self.path is not None:
            stacks.install(os.path.dirname(self.path), job_id(), world_rank)   # a report may ask for its stacks
        _install_sigusr1()
        _install_exit_hook()

    # ------------------------------------------------------------------ the hot path
    def issue(self, seq: int, op: str, algorithm: str, count: int, nbytes: int, dtype: int, redop: int,
              peer: int, site: bytes = b"") -> int:
        """Record a new operation as issued (called at ``site``); returns its slot (for :meth:`running` and
        :meth:`done`)."""
        return self.issue_fixed(seq, fixed_fields(op, algorithm, count, nbytes, dtype, redop, peer), site)

    def issue_fixed(self, seq: int, fixed: bytes, site: bytes = b"", launched: bool = False) -> int:
        """:meth:`issue` with the fields :func:`fixed_fields` encoded (once, for a call repeated many times);
        ``launched``: issued and launched at once (one write instead of a :meth:`running` after)."""
        h = self.head + 1
        self.head = h
        slot = HEADER_SIZE + (h % self.capacity) * RECORD.size
        now = time.time()
        _WRITE.pack_into(self._mm, slot, h, seq, fixed, now, now if launched else 0.0, 0.0, site)
        return slot

    def running(self, slot: int) -> None:
        """The operation's tasks were launched."""
        _TIME.pack_into(self._mm, slot + _T_RUNNING_AT, time.time())

    def done(self, slot: int) -> None:
        """The operation completed."""
        _TIME.pack_into(self._mm, slot + _T_DONE_AT, time.time())

    def fail_open(self) -> int:
        """Mark every operation not yet done as failed (the communicator failed); returns how many."""
        n = 0
        for k in range(self.capacity):
            slot = HEADER_SIZE + k * RECORD.size
            if _ORDINAL.unpack_from(self._mm, slot)[0] and not _TIME.unpack_from(self._mm, slot + _T_DONE_AT)[0]:
                _TIME.pack_into(self._mm, slot + _T_DONE_AT, -time.time())
                n += 1
        return n

    # ------------------------------------------------------------------ reading
    def snapshot(self) -> Dict[str, Any]:
        """The header and the records, oldest first, as plain data (what a dump holds per communicator)."""
        return _parse(bytes(self._mm))

    def last_activity(self) -> float:
        """The latest time anything happened on this ring (an operation issued, launched or finished), 0 if none."""
        if not self.head:
            return 0.0
        slot = HEADER_SIZE + (self.head % self.capacity) * RECORD.size
        t0, t1, t2 = struct.unpack_from("<ddd", self._mm, slot + _T_ISSUED_AT)
        return max(t0, t1, abs(t2))

    def end(self, how: int, why: str = "") -> None:
        """Say in the header how this rank ended (FINALISED or EXITED), when and why."""
        END.pack_into(self._mm, _END_AT, how, time.time(), why.encode("utf-8", "replace")[:80])

    def ended(self) -> int:
        """How this rank ended so far (LIVE until :meth:`end`)."""
        return int(END.unpack_from(self._mm, _END_AT)[0])

    def close(self) -> None:
        """Forget the ring (the communicator was destroyed): its file says so; the last rank to finalise removes all."""
        with _lock:
            if self in _live:
                _live.remove(self)
            last = not _live
        if last:
            stacks.uninstall()
        self.end(FINALISED)
        self._mm.close()
        if self.path is not None:
            _remove_if_all_finalised(os.path.dirname(self.path), self.comm, self.nth, self.size)


def _ring_name(job: str, world_rank: str, comm: str, nth: Any) -> str:
    return f"{job}.rank{world_rank}.{_SAFE.sub('_', comm)}.{nth}{RING_SUFFIX}"


def _remove_if_all_finalised(where: str, comm: str, nth: int, size: int) -> None:
    """Remove the rings of communicator ``comm`` once all ``size`` ranks finalised it (each checks after its own mark,
    so the last one to finalise sees every mark)."""
    paths = glob.glob(os.path.join(glob.escape(where), _ring_name(glob.escape(job_id()), "*", comm, nth)))
    ends = []
    for path in paths:
        try:
            with open(path, "rb") as f:
                head = f.read(HEADER_SIZE)
        except OSError:
            return
        if len(head) < HEADER_SIZE or HEADER.unpack_from(head, 0)[0] != MAGIC:
            return
        ends.append(END.unpack_from(head, _END_AT)[0])
    if len(ends) >= size and all(e == FINALISED for e in ends):
        for path in paths:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass


def pid_alive(pid: int) -> bool:
    """True when a process ``pid`` exists on this machine (a live ring whose process is gone was killed)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except OSError as exc:
        return exc.errno == errno.EPERM
    return True


def _text(raw: bytes) -> str:
    return raw.rstrip(b"\0").decode("utf-8", "replace")


def _parse(raw: bytes) -> Dict[str, Any]:
    """Header + records of a ring image (a live ring or a file left by a dead rank)."""
    magic, cap, rank, size, world_rank, pid, comm, job = HEADER.unpack_from(raw, 0)
    end, end_time, why = END.unpack_from(raw, _END_AT)
    if magic != MAGIC:
        raise ValueError(f"not a flight recorder ring (magic {magic!r}, expected {MAGIC!r})")
    rows = sorted(RECORD.unpack_from(raw, HEADER_SIZE + k * RECORD.size) for k in range(cap))
    records = []
    for (ordinal, seq, op, alg, count, nbytes, dtype, redop, peer, t0, t1, t2, site) in rows:
        if not ordinal:
            continue
        state = FAILED if t2 < 0 else DONE if t2 else RUNNING if t1 else ISSUED
        records.append({"seq": seq, "op": _text(op), "algorithm": _text(alg),
                        "count": count, "nbytes": nbytes, "dtype": dtype, "redop": redop, "peer": peer,
                        "state": STATES[state], "t_issued": t0, "t_running": t1 or None, "t_done": abs(t2) or None,
                        "site": _text(site)})
    return {"comm": _text(comm), "rank": rank, "size": size, "world_rank": world_rank, "pid": pid,
            "job": _text(job), "capacity": cap, "recorded": rows[-1][0] if rows else 0,
            "end": ENDS[end] if 0 <= end < len(ENDS) else ENDS[LIVE], "end_time": end_time or None,
            "end_why": _text(why), "records": records}


def read_ring(path: str) -> Dict[str, Any]:
    """The snapshot of a ring file (e.g. one a killed rank left); ValueError if it is not one."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < HEADER_SIZE:
        raise ValueError(f"{path}: {len(raw)} bytes, too short for a flight recorder ring")
    return _parse(raw)


def _after_fork_in_child() -> None:
    """A forked child holds none of its parent's rings: its exit, SIGTERM or SIGUSR1 never writes into them."""
    global _lock
    _lock = threading.Lock()
    _live.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def recorders() -> List[FlightRecorder]:
    """The live rings of this process, oldest first (a copy)."""
    with _lock:
        return list(_live)


def dump_all(reason: str, where: Optional[str] = None, failed_comm: Optional[str] = None) -> Optional[str]:
    """Write every live ring of the process to ``<where>/<job>.rank<R>.json`` (default :func:`directory`).

    Returns the path, or None when there is no directory to write to or nothing to write.
    ``failed_comm``: the communicator whose failure caused the dump (named in the file).
    """
    where = where or directory()
    rings = recorders()
    if where is None or not rings:
        return None
    world = min(rings, key=lambda r: r.world_rank).world_rank
    path = os.path.join(checked_directory(where), f"{job_id()}.rank{world}{DUMP_SUFFIX}")
    body = {"version": 1, "job": job_id(), "world_rank": world, "pid": os.getpid(), "time": time.time(),
            "reason": reason, "failed_comm": failed_comm, "comms": [r.snapshot() for r in rings]}
    files.write_atomically(path, json.dumps(body, indent=1), 0o600)   # readers never see half a dump
    _last_reason[:] = [reason]
    return path


def _at_exit() -> None:
    """The process is ending with communicators never destroyed: say so in their rings, with the exception if any."""
    exc = getattr(sys, "last_value", None)
    why = f"{type(exc).__name__}: {exc}" if exc is not None else ""
    for ring in recorders():
        try:
            ring.end(EXITED, why)
        except (ValueError, TypeError):          # already unmapped
            pass
    stacks.uninstall()


def _install_exit_hook() -> None:
    """Register :func:`_at_exit` once per process."""
    if not _exit_hook["installed"]:
        _exit_hook["installed"] = True
        atexit.register(_at_exit)


def _on_sigusr1(signum: int, frame: Any) -> None:
    """SIGUSR1: dump every ring (what a launcher or a user asks of a hung rank); never raises into the program."""
    try:
        dump_all(f"SIGUSR1 (after: {_last_reason[0]})" if _last_reason else "SIGUSR1")
    except (OSError, ValueError, TypeError) as exc:
        sys.stderr.write(f"hcomm: SIGUSR1: could not write the flight recorder: {exc}\n")


def _on_sigterm() -> None:
    """SIGTERM (a launcher stopping the job): dump every ring and say so in them (the process then dies of SIGTERM,
    see :mod:`hcomm_cffi.sigterm`)."""
    rings = recorders()
    path = dump_all(f"SIGTERM (after: {_last_reason[0]})" if _last_reason else "SIGTERM")
    for ring in rings:
        if ring.ended() == LIVE:      # an error already ending the process says more
            ring.end(EXITED, "signal SIGTERM")
    if path is not None and not settings.value("HCOMM_RUN_JOB_DIR"):    # hcomm run reports itself
        sys.stderr.write(f"hcomm: rank {min(r.world_rank for r in rings)} stopped by SIGTERM; `hcomm doctor "
                         f"{os.path.dirname(path)}` explains where every rank was\n")
        sys.stderr.flush()


def _install_sigusr1() -> None:
    """Install the SIGUSR1 (dump) and SIGTERM (dump, then die) handlers once, only where nobody else has one (and
    only from the main thread)."""
    if _handler["installed"] or threading.current_thread() is not threading.main_thread():
        return
    _handler["installed"] = True
    if signal.getsignal(signal.SIGUSR1) in (signal.SIG_DFL, None):
        signal.signal(signal.SIGUSR1, _on_sigusr1)
    sigterm.add_hook(_on_sigterm)

