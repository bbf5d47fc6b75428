"""What ``hcomm run`` does with the ranks' flight recorders: keep them past the job, report failures and stalls.

* Where: the ranks' ``HCOMM_FR_DIR``; when the user set none, a new ``<temp dir>/hcomm-<uid>-flight-<job
  id>-XXXXXXXX`` (``mkdtemp``: created exclusively, ``0700``, so no directory another user made first stands
  in the way, as for job directories), exported to the ranks, outside the job directory so that what the
  report names is still there after the job: ``hcomm doctor DIR`` reproduces the report.  It is removed
  at the end unless a report named it; kept directories older than :data:`KEEP_DAYS` are swept by later
  launches.
* A failure: when a rank fails after dumping its flight recorder (a collective timed out, a peer
  died, the signature check found a mismatch) or was killed, the launcher asks the ranks still
  running for their dumps (SIGUSR1, the handler :mod:`hcomm_cffi.flight` installs), lets ranks that
  dumped exit by themselves for up to :data:`COLLECT_S`, takes the stacks of live ranks that never arrived
  (:func:`hcomm_cffi.desync.capture`), and only then stops the job; once every rank
  is gone it prints the desync report (:mod:`hcomm_cffi.desync`) with what it saw of each rank's end.
* A stall: when no rank of a communicator made progress for ``HCOMM_STUCK_REPORT_S`` seconds while
  a live rank waits in an operation (:func:`hcomm_cffi.desync.stalled`, read from the live rings),
  and on SIGUSR1 to the launcher, it prints the report and keeps waiting.
"""
from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from typing import Any, Dict, List, Mapping, Optional, Set, Tuple

from .. import settings
from ..bootstrap.errors import BootstrapError
from ..bootstrap.file_store import private_dir
from .. import files
from ..files import UnsafePath, checked_dir

__all__ = ["flight_dir", "kept", "pattern", "dumped", "collect", "report_lines", "summary", "note", "sweep_old",
           "StallWatch", "COLLECT_S", "KEEP_DAYS", "FLIGHT_PREFIX"]

COLLECT_S = 3.0        # most seconds the launcher waits for the other ranks' dumps (and their own exit)
KEEP_DAYS = 7.0        # kept flight directories older than this are removed by a later launch
FLIGHT_PREFIX = "flight-"
POLL_S = 1.0           # how often the launcher reads the rings for a stall


def _prefix() -> str:
    return f"hcomm-{os.getuid()}-{FLIGHT_PREFIX}"


def flight_dir(env: Mapping[str, str], job_id: str) -> str:
    """Where the ranks write: HCOMM_FR_DIR of their environment, else a new private directory in the temp dir."""
    chosen = settings.value("HCOMM_FR_DIR", env)
    if chosen:
        if os.path.lexists(chosen):         # the ranks create it when missing; one that exists must be usable now
            try:
                checked_dir(chosen, "HCOMM_FR_DIR", create=False)
            except UnsafePath as exc:
                raise BootstrapError(str(exc)) from None
        return str(chosen)
    base = tempfile.gettempdir()
    try:
        return private_dir(tempfile.mkdtemp(prefix=f"{_prefix()}{job_id}-", dir=base))
    except OSError as exc:
        raise BootstrapError(f"cannot create the flight recorder directory in {base}: {exc.strerror}; set "
                             "HCOMM_FR_DIR (or TMPDIR) to a directory this user can write") from None


def _own_dirs(base: Optional[str] = None) -> List[Tuple[float, str]]:
    """(mtime, path) of this user's flight directories in ``base`` (default the temp dir)."""
    return files.own_dirs(base or tempfile.gettempdir(), _prefix())


def sweep_old(now: Optional[float] = None) -> List[str]:
    """Remove this user's kept flight directories older than KEEP_DAYS; returns the paths removed."""
    cutoff = (time.time() if now is None else now) - KEEP_DAYS * 86400
    removed: List[str] = []
    for mtime, path in _own_dirs():
        if mtime < cutoff:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def kept(base: Optional[str] = None) -> List[str]:
    """This user's flight directories in ``base`` (default the temp dir) that hold anything, newest first."""
    found = []
    for mtime, path in _own_dirs(base):
        try:
            if os.listdir(path):
                found.append((mtime, path))
        except OSError:
            continue
    return [p for _, p in sorted(found, reverse=True)]


def pattern() -> str:
    """Where :func:`kept` looks, as a shell pattern."""
    return os.path.join(tempfile.gettempdir(), f"{_prefix()}*")


def dumped(directory: str, job_id: str) -> Set[int]:
    """Ranks of job ``job_id`` that wrote a dump into ``directory``."""
    from ..flight import DUMP_SUFFIX
    prefix = f"{job_id}.rank"
    try:
        names = os.listdir(directory)
    except OSError:
        return set()
    return {int(n[len(prefix):-len(DUMP_SUFFIX)]) for n in names
            if n.startswith(prefix) and n.endswith(DUMP_SUFFIX) and n[len(prefix):-len(DUMP_SUFFIX)].isdigit()}


def collect(job: Any, directory: str, failed: int) -> bool:
    """Ask the running ranks for their dumps (SIGUSR1), then let the ranks that dumped exit by themselves; True if
    asked.  Waits up to COLLECT_S in all.

    Only when rank ``failed`` dumped its own (a communication failure) or was killed by a signal
    (it could not dump: the others' records are then all there is).
    """
    have = dumped(directory, job.job_id)
    if failed not in have and job.exited[failed] >= 0:
        return False
    missing = [r for r in job.running() if r not in have]
    for rank in missing:
        try:
            os.kill(job.procs[rank].pid, signal.SIGUSR1)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + COLLECT_S
    while time.monotonic() < deadline:
        job.poll()
        have = dumped(directory, job.job_id)
        if all(r in have or r not in job.running() for r in missing):
            break
        time.sleep(0.02)
    # a rank that dumped because of its own failure is on its way out: its clean exit says more than our SIGTERM
    while time.monotonic() < deadline and any(r in have and r not in missing for r in job.running()):
        job.poll()
        time.sleep(0.02)
    from ..desync import capture
    capture(directory, job.job_id, job.exits())   # the stacks of live ranks that never arrived, before the stop
    return True


def report_lines(directory: str, job_id: str, exits: Optional[Dict[int, str]] = None,
                 title: str = "desync report") -> List[str]:
    """The desync report as lines, with the command that reproduces it and the next step last (empty when there is
    nothing to read).  The stacks of live ranks that never arrived are taken first (:func:`desync.capture`)."""
    from ..desync import capture, report
    from ..flight import RING_SUFFIX
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    if not dumped(directory, job_id) and not any(n.startswith(job_id + ".") and n.endswith(RING_SUFFIX)
                                                 for n in names):
        return []
    try:
        capture(directory, job_id, exits)
        return [f"{title}:"] + report(directory, job=job_id, command=f"hcomm doctor {directory}").splitlines()
    except (ValueError, OSError) as exc:
        return [f"could not read the flight recorders in {directory}: {exc}"]


def summary(directory: str, job_id: str, exits: Dict[int, str]) -> str:
    """The flight recorders' part of the job's one-paragraph summary ('' when there are none)."""
    from ..desync import summary as flight_summary
    return flight_summary(directory, job_id, exits)


def note(directory: str, job_id: str, exits: Dict[int, str]) -> None:
    """Keep what the launcher saw of each rank's end beside the flight recorders (``hcomm doctor`` reports it)."""
    from ..desync import capture
    capture(directory, job_id, exits)


class StallWatch:
    """Reads the job's rings every POLL_S and says which communicators newly stalled (each stall reported once)."""

    def __init__(self, directory: str, job_id: str, threshold: float) -> None:
        self.directory = directory
        self.job_id = job_id
        self.threshold = threshold
        self.next_at = time.monotonic() + POLL_S
        self.reported: Set[str] = set()

    def check(self) -> Dict[str, float]:
        """Communicators that stalled since the last report -> seconds without progress (empty if none or off)."""
        if not self.threshold or time.monotonic() < self.next_at:
            return {}
        self.next_at = time.monotonic() + POLL_S
        from ..desync import stalled
        now_stalled = stalled(self.directory, self.threshold, job=self.job_id)
        new = {c: t for c, t in now_stalled.items() if c not in self.reported}
        self.reported = set(now_stalled)       # a communicator that moves again is reported again when it stalls
        return new
