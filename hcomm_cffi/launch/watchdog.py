"""The process that cleans up after an ``hcomm run`` launcher killed without warning (``kill -9``).

The launcher starts it in its own session with a pipe on its stdin and writes the process-group id of
every rank it starts, one per line.  When the launcher ends normally it writes ``done`` and the watchdog
exits.  When the pipe closes without ``done`` (the launcher died), the watchdog kills every rank's
process group (the rank and all it started: ``PR_SET_PDEATHSIG`` alone would leave the ranks' children
behind), waits for them, sweeps this user's dead emulator segments and removes the job directory, and
the flight recorder directory the launcher made when the ranks left nothing in it.

The launcher runs this file as a script (:func:`command`): ``python .../hcomm_cffi/launch/watchdog.py JOB_DIR
[FLIGHT_DIR]``, which imports nothing of the package until it has to clean up (``python -m`` would import the package
first: a third of a second of CPU at every job's start).  It inherits the fd holding the job directory's lock, so
another ``hcomm run`` never sweeps the directory while the watchdog may still clean it.
"""
from __future__ import annotations

import os
import shutil
import signal
import sys
import time
from typing import List, Optional

__all__ = ["main", "kill_groups", "command"]

DONE = "done"


def command(job_dir: str, flight_dir: str = "") -> List[str]:
    """The watchdog's command line: this file run as a script by this interpreter."""
    return [sys.executable, os.path.abspath(__file__), job_dir, *([flight_dir] if flight_dir else [])]


def kill_groups(pgids: List[int], within: float = 3.0) -> List[int]:
    """SIGKILL every process group; the groups still present after ``within`` seconds (ideally none)."""
    for pgid in pgids:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    end = time.monotonic() + within
    left = list(pgids)
    while left and time.monotonic() < end:
        left = [g for g in left if _group_exists(g)]
        if left:
            time.sleep(0.02)
    return left


def _group_exists(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _sweep() -> None:
    """This user's segments whose owners died (sim/shm.py); run as a script, the package is imported from the
    directory that holds it (the script's own directory, first on ``sys.path`` then, holds no top-level modules)."""
    if not __package__:
        package_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        sys.path[0] = os.path.dirname(package_dir)
    from hcomm_cffi.sim.shm import sweep_stale

    sweep_stale()


def main(argv: Optional[List[str]] = None) -> int:
    """Wait for the launcher's pipe to close; clean up unless it said ``done`` first."""
    args = sys.argv[1:] if argv is None else argv
    job_dir = args[0]
    flight_dir = args[1] if len(args) > 1 else ""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is the launcher's to handle
    pgids: List[int] = []
    for line in sys.stdin:
        word = line.strip()
        if word == DONE:
            return 0
        if word.isdigit():
            pgids.append(int(word))
    kill_groups(pgids)
    try:
        _sweep()
    except Exception:
        pass  # nothing to report to: the launcher is gone
    shutil.rmtree(job_dir, ignore_errors=True)
    if flight_dir:
        try:
            os.rmdir(flight_dir)   # only when empty: rings the ranks wrote stay for `hcomm doctor`
        except OSError:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
