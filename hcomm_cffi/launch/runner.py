"""``hcomm run``: start N local ranks, prefix their output, stop them all on the first failure.

Behaviour:

* Each rank is a child process in its own session (``setsid``: its own process group, no controlling
  terminal), so the launcher alone decides how ranks are stopped: it signals every rank's process
  group (the rank and anything it started).  Children also get ``PR_SET_PDEATHSIG=SIGKILL``, and a
  watchdog process (``watchdog.py``) kills every rank's process group, sweeps the job's segments and
  removes its directory if the launcher itself is killed (even with SIGKILL).
* At most ``max_ranks()`` ranks (4 per usable CPU core, at least 16; ``HCOMM_MAX_RANKS`` overrides):
  emulated ranks are processes, and more of them than that only oversubscribe the cores.
* A ``RANK_TABLE_FILE`` in the environment is validated before anything starts, and its rank count must
  equal ``-n``.
* At start the launcher removes this user's job directories and emulator segments left by dead jobs.
* Environment of rank r: ``RANK=r``, ``WORLD_SIZE=N``, ``LOCAL_RANK=r``, ``LOCAL_WORLD_SIZE=N``,
  ``HCOMM_RUN_ID`` and ``HCOMM_JOB_ID`` (the job id), ``HCOMM_RUN_JOB_DIR`` (a private directory
  ``<temp dir or HCOMM_RENDEZVOUS_DIR>/hcomm-<uid>-run-<job id>-*`` for the root-info rendezvous, removed at the end),
  ``HCOMM_JOB_SECRET`` (random per launch: ranks prove membership of this job with it), ``HCOMM_RUN_NPROCS=N``, ``HCOMM_BACKEND`` (inherited,
  else the backend this machine selects: ``sim`` without CANN), ``MASTER_ADDR=127.0.0.1`` and a free
  ``MASTER_PORT`` (for scripts that also use torch.distributed), ``PYTHONUNBUFFERED=1`` unless set,
  ``OMP_NUM_THREADS=1`` unless set when N > 1 (what torchrun does: one intra-op thread per rank).
  ``TORCHELASTIC_*`` variables of an enclosing torchrun job are removed.  ``HCOMM_FR_DIR`` (the flight
  recorders), unless set: ``<temp dir>/hcomm-<uid>-flight-<job id>-XXXXXXXX``, kept after the job when it holds
  anything (``flightwatch.py``).
* Reports: when a rank fails, the desync report (who is in which operation, who never arrived, who
  finalised, exited or is gone) and the ``hcomm doctor DIR`` command that reproduces it; while ranks
  run, the same report when no rank of a communicator made progress for ``HCOMM_STUCK_REPORT_S``
  seconds (the job keeps waiting), whenever the launcher gets SIGUSR1, and at ``--timeout`` before
  stopping the ranks; each with the Python stack of every live rank that never arrived.
* Output: every line of a rank's stdout/stderr goes to the launcher's stdout/stderr as ``[r] line``
  (``--no-prefix``: unchanged), written whole, never interleaved inside a line.  A rank's traceback
  (its stderr from ``Traceback (most recent call last):`` on) is held: when a rank fails the launcher
  prints the job's one-paragraph summary (who failed first, the flight recorders' first finding with
  the user's lines, how each rank ended), then each rank's held output whole, in rank order, then the
  desync report.
* Stopping: when a rank exits non-zero or is killed, on SIGINT/SIGTERM/SIGHUP to the launcher, or after
  ``--timeout``, every remaining rank group gets SIGTERM and, after ``--grace`` seconds, SIGKILL (a
  second Ctrl-C skips the grace period).  After the last rank is gone the launcher kills what is left in
  the ranks' process groups, sweeps emulator segments whose owner died (``sim.shm.sweep_stale``) and
  removes the rendezvous directory.
* Exit status: 0 if every rank exited 0; else the first failure's code (a rank killed by signal S ->
  128+S); 124 after ``--timeout``; 128+S when the launcher was stopped by signal S; 127/126 when the
  command cannot be started.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import re
import secrets
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import IO, Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ..bootstrap.env import ENV_JOB_ID, ENV_RUN_ID, ENV_RUN_JOB_DIR
from .. import settings
from ..files import write_atomically
from ..bootstrap.errors import BootstrapError, format_ranks
from . import affinity, flightwatch, watchdog
from .jobdir import create_job_dir, sweep_dead_job_dirs
from .watchdog import DONE

__all__ = ["LaunchConfig", "launch", "add_arguments", "config_from_args", "main", "check_local_ranks", "ENV_RUN_NPROCS",
           "EXIT_TIMEOUT", "LaunchError"]

ENV_RUN_NPROCS = "HCOMM_RUN_NPROCS"
ENV_JOB_SECRET = "HCOMM_JOB_SECRET"
EXIT_TIMEOUT = 124
RANKS_PER_CORE = 4
MIN_RANK_LIMIT = 16
_JOB_ID_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_PR_SET_PDEATHSIG = 1
_CHUNK = 65536
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
TRACEBACK = b"Traceback (most recent call last):"
HOLD_S = 2.0           # a traceback of a rank that goes on, the job not failing, is written after this long


class LaunchError(ValueError):
    """A bad launcher argument; the message names it, its value and what is expected."""


@dataclass
class LaunchConfig:
    """What to launch: ``nprocs`` copies of ``command``; see the module doc for the other fields."""

    nprocs: int
    command: List[str]
    timeout: Optional[float] = None
    prefix: bool = True
    job_id: Optional[str] = None
    grace: float = 5.0
    env: Dict[str, str] = field(default_factory=dict)
    bind_to: str = "auto"
    # the ranks' HCOMM_EMULATE_NPU: True "1", False "0"; None the environment's value, else "auto"
    emulate_npu: Optional[bool] = None

    def validate(self) -> None:
        """Raise LaunchError for an unusable field."""
        if isinstance(self.nprocs, bool) or not isinstance(self.nprocs, int) or self.nprocs < 1:
            raise LaunchError(f"-n/--nprocs={self.nprocs!r}; expected a number of ranks >= 1")
        if not self.command:
            raise LaunchError("no command given; expected e.g. `hcomm run -n 4 -- python script.py`")
        if self.timeout is not None and not self.timeout > 0:
            raise LaunchError(f"--timeout={self.timeout!r}; expected a number of seconds > 0")
        if self.bind_to not in affinity.MODES:
            raise LaunchError(f"--bind-to={self.bind_to!r}; expected one of {', '.join(affinity.MODES)}")
        if not self.grace >= 0:
            raise LaunchError(f"--grace={self.grace!r}; expected a number of seconds >= 0")
        if self.job_id is not None and not _JOB_ID_RE.match(self.job_id):
            raise LaunchError(f"--job-id={self.job_id!r}; expected 1-64 characters from [A-Za-z0-9_.-]")
        check_local_ranks(self.nprocs, {**os.environ, **self.env})
        _check_ranktable({**os.environ, **self.env}, self.nprocs)


def check_local_ranks(nprocs: int, environ: Optional[Mapping[str, str]] = None) -> None:
    """LaunchError when ``nprocs`` local ranks exceed :func:`max_ranks` (checked before anything else needs them)."""
    limit, why = max_ranks(environ)
    if nprocs > limit:
        raise LaunchError(f"{nprocs} ranks exceed the limit of {limit} local ranks ({why}): every rank is "
                          f"a process, more only oversubscribe the cores; set HCOMM_MAX_RANKS={nprocs} to "
                          "start them anyway")


def max_ranks(environ: Optional[Mapping[str, str]] = None) -> Tuple[int, str]:
    """The most local ranks a launch may start, and why: HCOMM_MAX_RANKS, else 4 per usable core (at least 16)."""
    try:
        chosen = settings.value("HCOMM_MAX_RANKS", environ)
    except settings.SettingsError as exc:
        raise LaunchError(str(exc)) from None
    if chosen is not None:
        return int(chosen), f"HCOMM_MAX_RANKS={chosen}"
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    limit = max(MIN_RANK_LIMIT, RANKS_PER_CORE * cores)
    return limit, f"{RANKS_PER_CORE} per usable CPU core, {cores} here, at least {MIN_RANK_LIMIT}"


def _check_ranktable(environ: Mapping[str, str], nprocs: int) -> None:
    """A RANK_TABLE_FILE the ranks will use must be valid and list exactly ``nprocs`` ranks (checked at once)."""
    path = environ.get("RANK_TABLE_FILE", "").strip()
    if not path:
        return
    from ..plan.ranktable import load_ranktable

    try:
        topo = load_ranktable(path)
    except ValueError as exc:
        raise LaunchError(f"RANK_TABLE_FILE: {exc}") from None
    if topo.n_ranks != nprocs:
        raise LaunchError(f"RANK_TABLE_FILE={path!r} lists {topo.n_ranks} ranks but -n/--nprocs={nprocs}; "
                          "expected the same number")


# ---------------------------------------------------------------------------------------------- output
class _Sink:
    """A destination stream taking whole byte lines (binary buffer if the stream has one)."""

    def __init__(self, stream: IO[Any], lock: threading.Lock) -> None:
        self.stream = stream
        self.lock = lock
        self.broken = False

    def write(self, data: bytes) -> None:
        if self.broken:
            return
        with self.lock:
            try:
                buf = getattr(self.stream, "buffer", None)
                if buf is not None:
                    buf.write(data)
                    buf.flush()
                else:
                    self.stream.write(data.decode("utf-8", "replace"))
                    self.stream.flush()
            except (BrokenPipeError, ValueError, OSError):
                self.broken = True  # e.g. `hcomm run ... | head`: keep running, drop output


class _Pump(threading.Thread):
    """One thread moving every rank's pipes to the sinks, line by line, with the rank prefix.

    A traceback on a rank's stderr (from a ``Traceback (most recent call last):`` line on) is held,
    not written: once the job fails the launcher prints its summary, then each rank's held output
    whole (:meth:`release`), so tracebacks never interleave; a rank that prints a traceback and goes
    on while the job has not failed gets it written after :data:`HOLD_S`.
    """

    def __init__(self, prefix: bool) -> None:
        super().__init__(name="hcomm-run-output", daemon=True)
        self.prefix = prefix
        self.selector = selectors.DefaultSelector()
        self.partial: Dict[int, bytes] = {}
        self.count = 0
        self.failing = False                      # the job failed: hold until release()
        self.held: Dict[int, List[bytes]] = {}    # rank -> held lines (its stderr from a traceback on)
        self.holding: Dict[int, float] = {}       # rank -> when its held block started
        self.sinks: Dict[int, _Sink] = {}
        self.lock = threading.Lock()

    def add(self, pipe: IO[bytes], rank: int, sink: _Sink, errors: bool = False) -> None:
        self.selector.register(pipe, selectors.EVENT_READ, (rank, sink, errors))
        self.partial[pipe.fileno()] = b""
        self.count += 1
        if errors:
            self.sinks[rank] = sink

    def _emit(self, rank: int, sink: _Sink, lines: bytes) -> None:
        if self.prefix:
            tag = f"[{rank}] ".encode()
            lines = b"".join(tag + line for line in lines.splitlines(keepends=True))
        sink.write(lines)

    def _error_lines(self, rank: int, sink: _Sink, lines: bytes) -> None:
        """Write a rank's stderr lines, holding them from a traceback on."""
        with self.lock:
            if rank not in self.holding:
                at = lines.find(TRACEBACK)
                if at < 0 or (at and lines[at - 1:at] != b"\n"):
                    self._emit(rank, sink, lines)
                    return
                if at:
                    self._emit(rank, sink, lines[:at])
                lines = lines[at:]
                self.holding[rank] = time.monotonic()
            self.held.setdefault(rank, []).append(lines)

    def _expire(self) -> None:
        """Write the held output of ranks that went on HOLD_S after a traceback while the job has not failed."""
        with self.lock:
            if self.failing:
                return
            now = time.monotonic()
            for rank in [r for r, t in self.holding.items() if now - t > HOLD_S]:
                del self.holding[rank]
                self._emit(rank, self.sinks[rank], b"".join(self.held.pop(rank, [])))

    def release(self) -> None:
        """Write every rank's held output, whole, in rank order."""
        with self.lock:
            for rank in sorted(self.held):
                self._emit(rank, self.sinks[rank], b"".join(self.held[rank]))
            self.held.clear()
            self.holding.clear()

    def run(self) -> None:
        while self.count:
            for key, _ in self.selector.select(timeout=0.5):
                rank, sink, errors = key.data
                write = self._error_lines if errors else self._emit
                fd = key.fd
                try:
                    data = os.read(fd, _CHUNK)
                except OSError:
                    data = b""
                if not data:  # EOF: flush a last line without newline, with one added
                    rest = self.partial.pop(fd, b"")
                    if rest:
                        write(rank, sink, rest + b"\n")
                    self.selector.unregister(key.fileobj)
                    self.count -= 1
                    continue
                buf = self.partial[fd] + data
                cut = buf.rfind(b"\n") + 1
                if cut == 0 and len(buf) >= _CHUNK:  # an endless line: pass it on in pieces
                    cut = len(buf)
                    buf += b"\n"
                    self.partial[fd] = b""
                    write(rank, sink, buf)
                    continue
                if cut:
                    write(rank, sink, buf[:cut])
                self.partial[fd] = buf[cut:]
            self._expire()


# ---------------------------------------------------------------------------------------------- children
def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _backend(env: Mapping[str, str]) -> str:
    from ..lib import choose_backend  # looks for files only; never loads CANN

    return choose_backend(environ=env).name


def _rank_env(base: Mapping[str, str], rank: int, n: int, job_id: str, job_dir: str, master_port: int,
              secret: str) -> Dict[str, str]:
    env = {k: v for k, v in base.items() if not k.startswith("TORCHELASTIC_")}
    env.update({
        "RANK": str(rank), "WORLD_SIZE": str(n), "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": str(n),
        ENV_RUN_ID: job_id, ENV_JOB_ID: job_id, ENV_RUN_JOB_DIR: job_dir, ENV_RUN_NPROCS: str(n),
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(master_port), ENV_JOB_SECRET: secret,
    })
    env.setdefault("PYTHONUNBUFFERED", "1")
    if n > 1:   # as torchrun: one intra-op thread per rank unless the variable is set (torch/distributed/run.py:872)
        env.setdefault("OMP_NUM_THREADS", "1")
    return env


def _child_setup_factory(cores: Optional[Sequence[int]] = None) -> Any:
    """preexec_fn for ranks: die with the launcher, run on ``cores``.  ctypes is resolved here, before fork."""
    parent = os.getpid()
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        prctl = None

    def setup() -> None:
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the launcher died before prctl took effect
            os._exit(1)
        if cores:
            os.sched_setaffinity(0, cores)

    return setup


def _exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _describe_exit(returncode: int) -> str:
    if returncode < 0:
        return f"was killed by {_signal_name(-returncode)} (exit code {128 - returncode})"
    return f"exited with code {returncode}"


class _Job:
    """The running ranks of one launch, and how to stop them."""

    def __init__(self, config: LaunchConfig, job_id: str, job_dir: str, lock_fd: int, out: _Sink, err: _Sink) -> None:
        self.config = config
        self.job_id = job_id
        self.job_dir = job_dir
        self.lock_fd = lock_fd
        self.secret = secrets.token_hex(16)
        self.watchdog: Optional[subprocess.Popen] = None
        self.out = out
        self.err = err
        self.procs: List[subprocess.Popen] = []
        self.exited: Dict[int, int] = {}
        self.pump = _Pump(config.prefix)
        self.kill_at: Optional[float] = None
        self.killed = False
        self.backend = ""
        self.flight_dir = ""
        self.own_flight_dir = False            # the launcher chose it (the user set no HCOMM_FR_DIR)
        self.stopped: set = set()              # ranks the launcher sent SIGTERM to
        self.reported = False                  # a report named the flight directory: keep it
        self.failure_report = False            # the failure is a communication failure: report it at the end
        self.first_failure: Optional[int] = None   # the rank whose failure stopped the job

    def say(self, text: str) -> None:
        self.err.write(f"hcomm run: {text}\n".encode())

    def start(self) -> None:
        base = dict(os.environ)
        base.update(self.config.env)
        base["HCOMM_BACKEND"] = self.backend
        # torch's device npu over the emulator (hcomm_cffi/npu), as torch_npu's is on an Ascend machine: on unless
        # told otherwise; "auto" leaves torch as it is (with a warning) where the device cannot be made
        if self.config.emulate_npu is None:
            base.setdefault("HCOMM_EMULATE_NPU", "auto")
        else:
            base["HCOMM_EMULATE_NPU"] = "1" if self.config.emulate_npu else "0"
        try:
            self.flight_dir = flightwatch.flight_dir(base, self.job_id)
        except BootstrapError as exc:
            raise LaunchError(str(exc)) from None
        if not settings.value("HCOMM_FR_DIR", base):
            base["HCOMM_FR_DIR"] = self.flight_dir
            self.own_flight_dir = True
        port = _free_port()
        binds = affinity.plan(self.config.bind_to, self.config.nprocs)
        command = list(self.config.command)
        if command[0].endswith(".py"):  # `hcomm run -n 2 script.py` runs it with this interpreter
            command.insert(0, sys.executable)
        n = self.config.nprocs
        self.watchdog = subprocess.Popen(
            watchdog.command(self.job_dir, self.flight_dir if self.own_flight_dir else ""), env=base,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True,
            pass_fds=(self.lock_fd,), text=True)
        for rank in range(n):
            env = _rank_env(base, rank, n, self.job_id, self.job_dir, port, self.secret)
            env["HCOMM_RUN_BIND"] = affinity.describe(self.config.bind_to, binds[rank])
            proc = subprocess.Popen(  # raises OSError when the command cannot be started
                command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                start_new_session=True, preexec_fn=_child_setup_factory(binds[rank]), close_fds=True)
            self.procs.append(proc)
            self._tell_watchdog(str(proc.pid))  # its session id = its process group id
        for rank, proc in enumerate(self.procs):
            assert proc.stdout is not None and proc.stderr is not None
            self.pump.add(proc.stdout, rank, self.out)
            self.pump.add(proc.stderr, rank, self.err, errors=True)
        self.pump.start()

    def running(self) -> List[int]:
        return [r for r in range(len(self.procs)) if r not in self.exited]

    def poll(self) -> List[int]:
        """Ranks that exited since the last poll, in rank order."""
        new = []
        for rank in self.running():
            rc = self.procs[rank].poll()
            if rc is not None:
                self.exited[rank] = rc
                new.append(rank)
        return new

    def signal_groups(self, sig: int, ranks: Sequence[int]) -> None:
        for rank in ranks:
            try:
                os.killpg(self.procs[rank].pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def begin_stop(self) -> None:
        if self.kill_at is not None:
            return
        self.stopped.update(self.running())
        self.signal_groups(signal.SIGTERM, self.running())
        self.kill_at = time.monotonic() + self.config.grace

    def kill_now(self) -> None:
        self.signal_groups(signal.SIGKILL, self.running())
        self.killed = True

    def finish(self) -> None:
        """Reap everything, kill leftovers in the ranks' groups, drain output, sweep, remove the job dir."""
        for proc in self.procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
        # grandchildren that outlived their rank (same process group) must not outlive the job
        self.signal_groups(signal.SIGKILL, range(len(self.procs)))
        if self.pump.is_alive():
            self.pump.join(timeout=3.0)
        self.pump.release()
        if not self.pump.is_alive():  # else something outside the groups holds a pipe: leave it to exit
            for proc in self.procs:
                for pipe in (proc.stdout, proc.stderr):
                    if pipe is not None:
                        pipe.close()
        try:
            from ..sim.shm import sweep_stale

            sweep_stale()
        except Exception as exc:  # never let cleanup hide the job's own result
            self.say(f"warning: could not sweep shared-memory segments: {exc}")
        shutil.rmtree(self.job_dir, ignore_errors=True)
        self._tell_watchdog(DONE)
        if self.watchdog is not None:
            try:
                self.watchdog.stdin.close()  # type: ignore[union-attr]
                self.watchdog.wait(timeout=5.0)
            except (OSError, subprocess.TimeoutExpired):
                self.watchdog.kill()
                self.watchdog.wait()
        os.close(self.lock_fd)

    def exits(self) -> Dict[int, str]:
        """What the launcher saw of each rank's end, for the report."""
        return {r: (f"stopped by hcomm run ({_signal_name(-rc)})" if r in self.stopped and rc < 0 else
                    _describe_exit(rc)) for r, rc in self.exited.items()}

    def report(self, title: str) -> bool:
        """Print the desync report of the flight recorders (and keep a copy beside them); True if there was one."""
        lines = flightwatch.report_lines(self.flight_dir, self.job_id, self.exits(), title)
        for line in lines:
            self.say(line)
        if lines:
            try:
                write_atomically(os.path.join(self.flight_dir, "report.txt"), "\n".join(lines) + "\n", 0o600)
            except OSError:
                pass
        self.reported = self.reported or bool(lines)
        return bool(lines)

    def summarise(self) -> None:
        """After a rank failed: the job's one-paragraph summary, then each rank's held output (tracebacks) whole."""
        if self.pump.is_alive():
            self.pump.join(timeout=3.0)          # the ranks are gone: their pipes end
        rank = -1 if self.first_failure is None else self.first_failure
        exits = self.exits()
        text = f"job {self.job_id} failed: rank {rank} {exits.get(rank, 'failed')} first"
        found = flightwatch.summary(self.flight_dir, self.job_id, exits) if self.failure_report else ""
        if found:
            text += f"; {found}"
        else:
            ends: Dict[str, List[int]] = {}
            for r, how in sorted(exits.items()):
                if r != rank:
                    ends.setdefault(how, []).append(r)
            text += "".join(f"; rank(s) {format_ranks(rs)} {how}" for how, rs in ends.items())
        with self.pump.lock:
            held = sorted(self.pump.held)
        follows = [f"the error output of {'rank' if len(held) == 1 else 'ranks'} {format_ranks(held)}, each rank's "
                   "whole"] if held else []
        follows += ["the flight recorder report"] if self.failure_report else []
        text += f". Below: {', then '.join(follows)}." if follows else "."
        self.say(text)
        self.pump.release()

    def _tell_watchdog(self, line: str) -> None:
        if self.watchdog is None or self.watchdog.stdin is None:
            return
        try:
            self.watchdog.stdin.write(line + "\n")
            self.watchdog.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            pass  # a dead watchdog must not stop the job; the launcher still cleans up itself


def launch(config: LaunchConfig, stdout: Optional[IO[Any]] = None, stderr: Optional[IO[Any]] = None) -> int:
    """Run the job to completion and return the launcher's exit status (see module doc)."""
    config.validate()
    try:
        backend = _backend({**os.environ, **config.env})
    except ValueError as exc:
        raise LaunchError(str(exc)) from None
    job_id = config.job_id or uuid.uuid4().hex[:12]
    lock = threading.Lock()
    out = _Sink(stdout if stdout is not None else sys.stdout, lock)
    err = _Sink(stderr if stderr is not None else sys.stderr, lock)
    try:
        _sweep_dead_jobs()
        job_dir, lock_fd = create_job_dir(job_id)
    except BootstrapError as exc:
        raise LaunchError(str(exc)) from None
    job = _Job(config, job_id, job_dir, lock_fd, out, err)
    job.backend = backend
    received: List[int] = []
    previous: Dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in _STOP_SIGNALS + (signal.SIGUSR1,):
            previous[sig] = signal.signal(sig, lambda signum, frame: received.append(int(signum)))
    try:
        return _supervise(job, received)
    finally:
        job.finish()
        if job.own_flight_dir and not job.reported:
            shutil.rmtree(job.flight_dir, ignore_errors=True)   # nothing named it: the job's rings go with it
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _sweep_dead_jobs() -> None:
    """What dead jobs of this user left: job directories whose launcher is gone, segments whose owner is gone."""
    sweep_dead_job_dirs()
    flightwatch.sweep_old()
    from ..sim.shm import sweep_stale

    sweep_stale()


def _supervise(job: _Job, received: List[int]) -> int:
    config = job.config
    try:
        job.start()
    except OSError as exc:
        job.begin_stop()
        code = 127 if isinstance(exc, FileNotFoundError) else 126
        job.say(f"cannot start rank {len(job.procs)}: {config.command[0]!r}: {exc.strerror or exc}")
        _wait_stopped(job, received)
        return code
    started = time.monotonic()
    result: Optional[int] = None
    handled_signals = 0
    try:
        stall = flightwatch.StallWatch(job.flight_dir, job.job_id,
                                       settings.value("HCOMM_STUCK_REPORT_S", {**os.environ, **config.env}))
    except settings.SettingsError as exc:
        job.say(f"warning: {exc}; no stall reports")
        stall = flightwatch.StallWatch(job.flight_dir, job.job_id, 0.0)
    while True:
        for rank in job.poll():
            rc = job.exited[rank]
            if rc != 0 and result is None:
                result = _exit_code(rc)
                job.first_failure = rank
                job.pump.failing = True
                others = job.running()
                job.say(f"rank {rank} {_describe_exit(rc)}"
                        + (f"; stopping rank(s) {format_ranks(others)}" if others else ""))
                # the other ranks' flight recorders, before they stop
                job.failure_report = flightwatch.collect(job, job.flight_dir, rank)
                job.begin_stop()
        if not job.running():
            break
        if len(received) > handled_signals:
            sig = received[handled_signals]
            handled_signals += 1
            if sig == signal.SIGUSR1:
                if not job.report("report on SIGUSR1 (the job keeps running)"):
                    job.say(f"SIGUSR1: no flight recorder in {job.flight_dir} yet (no communicator created)")
            elif job.kill_at is None:
                job.say(f"received {signal.Signals(sig).name}; stopping rank(s) {format_ranks(job.running())}")
                if result is None:
                    result = 128 + sig
                job.begin_stop()
            elif not job.killed:
                job.say(f"received {signal.Signals(sig).name} again; killing rank(s) {format_ranks(job.running())}")
                job.kill_now()
        if config.timeout is not None and job.kill_at is None and time.monotonic() - started > config.timeout:
            job.say(f"timeout: the job ran longer than --timeout {config.timeout:g} s; "
                    f"stopping rank(s) {format_ranks(job.running())}")
            job.report(f"report at the timeout (before stopping rank(s) {format_ranks(job.running())})")
            result = EXIT_TIMEOUT
            job.begin_stop()
        if result is None and job.kill_at is None:
            for comm, idle in sorted(stall.check().items()):
                job.report(f"stuck: no rank of communicator {comm!r} made progress for {idle:.0f} s "
                           f"(HCOMM_STUCK_REPORT_S={stall.threshold:g}); the job keeps waiting")
        if job.kill_at is not None and not job.killed and time.monotonic() >= job.kill_at:
            job.say(f"rank(s) {format_ranks(job.running())} still running {config.grace:g} s after SIGTERM; "
                    "sending SIGKILL")
            job.kill_now()
        time.sleep(0.02)
    if job.first_failure is not None:
        job.summarise()
    if job.failure_report:
        job.report("desync report (hcomm doctor)")
    elif job.reported:
        flightwatch.note(job.flight_dir, job.job_id, job.exits())   # doctor: the job's end, as the launcher saw it
    return 0 if result is None else result


def _wait_stopped(job: _Job, received: List[int]) -> None:
    while job.running():
        job.poll()
        if job.kill_at is not None and not job.killed and (time.monotonic() >= job.kill_at or received):
            job.kill_now()
        time.sleep(0.02)


# ---------------------------------------------------------------------------------------------- command line
def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer; expected a number of ranks >= 1") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} ranks; expected a number of ranks >= 1")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r}; expected a number of seconds > 0")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The launcher's options, shared by ``hcomm run`` and ``python -m hcomm_cffi.run``."""
    parser.add_argument("-n", "--nprocs", type=_positive_int, required=True, metavar="N",
                        help="number of ranks to start on this machine")
    parser.add_argument("--timeout", type=_seconds, metavar="S",
                        help="stop the whole job after S seconds (exit status 124)")
    parser.add_argument("--grace", type=float, default=5.0, metavar="S",
                        help="seconds between SIGTERM and SIGKILL when stopping ranks (default 5)")
    parser.add_argument("--no-prefix", dest="prefix", action="store_false",
                        help="do not prefix output lines with [rank]")
    parser.add_argument("--bind-to", default="auto", choices=affinity.MODES,
                        help="CPU binding of each rank, as mpirun's: core (one core each), numa (the cores of one "
                             "NUMA node, round-robin), none; auto (default) = core while ranks <= usable cores, "
                             "else none")
    switch = parser.add_mutually_exclusive_group()
    switch.add_argument("--emulate-npu", dest="emulate_npu", action="store_const", const=True, default=None,
                        help="HCOMM_EMULATE_NPU=1 for the ranks: torch without torch_npu gets the emulated npu device "
                             "and backend 'hccl', and a device that cannot be made is an error at import torch "
                             "(default: the environment's HCOMM_EMULATE_NPU, else auto: the device where it can be "
                             "made, else a warning)")
    switch.add_argument("--no-emulate-npu", dest="emulate_npu", action="store_const", const=False,
                        help="HCOMM_EMULATE_NPU=0 for the ranks: torch exactly as without this package, no npu device")
    parser.add_argument("--job-id", metavar="ID",
                        help="job id ([A-Za-z0-9_.-], default random); exported as HCOMM_RUN_ID and HCOMM_JOB_ID")
    # dest "program", not "command": the `hcomm` parser keeps the subcommand name in args.command
    parser.add_argument("program", nargs=argparse.REMAINDER, metavar="-- COMMAND ...",
                        help="the program every rank runs, e.g. `-- python script.py args`")


def config_from_args(args: argparse.Namespace) -> LaunchConfig:
    """A LaunchConfig from parsed ``add_arguments`` options (a leading ``--`` is dropped)."""
    command = list(args.program)
    if command and command[0] == "--":
        command = command[1:]
    return LaunchConfig(nprocs=args.nprocs, command=command, timeout=args.timeout, prefix=args.prefix,
                        job_id=args.job_id, grace=args.grace, bind_to=args.bind_to,
                        emulate_npu=getattr(args, "emulate_npu", None))


def main(argv: Optional[List[str]] = None) -> int:
    """``hcomm run ARGS`` (the one implementation is ``hcomm_cffi/cli/run.py``); ``python -m hcomm_cffi.run``
    and ``python -m hcomm_cffi.launch`` are aliases of it."""
    from ..cli import main as hcomm_main  # the CLI imports this module: resolve it at call time

    return hcomm_main(["run", *(sys.argv[1:] if argv is None else argv)])
