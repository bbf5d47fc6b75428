"""What ``hcomm run`` does with the ranks' flight recorders when a job fails: collect every rank's, print the report.

When a rank fails after dumping its flight recorder (a collective timed out, a peer died), the
launcher sends SIGUSR1 to the ranks still running so they dump theirs too (the handler
:mod:`hcomm_cffi.flight` installs), waits briefly for them, and only then stops the job; once
every rank is gone it prints the desync report (:mod:`hcomm_cffi.desync`) on stderr.
"""
from __future__ import annotations

import os
import signal
import time
from typing import Any, Mapping, Set

from .. import settings

__all__ = ["flight_dir", "dumped", "collect", "report_lines", "COLLECT_S"]

COLLECT_S = 3.0   # most seconds the launcher waits for the other ranks' dumps


def flight_dir(env: Mapping[str, str], job_dir: str) -> str:
    """Where the ranks dump: HCOMM_FR_DIR of their environment, else ``<job dir>/flight`` (as flight.directory)."""
    return settings.value("HCOMM_FR_DIR", env) or os.path.join(job_dir, "flight")


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
    """Ask the running ranks for their dumps (SIGUSR1) and wait up to COLLECT_S; True if asked.

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
    return True


def report_lines(directory: str, job_id: str) -> list:
    """The desync report as lines (empty when no rank dumped)."""
    if not dumped(directory, job_id):
        return []
    from ..desync import report
    try:
        return ["desync report (hcomm doctor):"] + report(directory).splitlines()
    except (ValueError, OSError) as exc:
        return [f"could not read the flight recorders in {directory}: {exc}"]
