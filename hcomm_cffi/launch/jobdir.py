"""Job directories of ``hcomm run``: private to the user, locked by their launcher, swept once it is dead.

Each launch gets ``<temp dir>/hcomm-<uid>/run-<job id>-XXXXXXXX`` (``0700``, see
``bootstrap.file_store.user_dir``) holding the root-info rendezvous files and a ``.lock`` file on which
the launcher (and its watchdog) hold an ``flock`` for as long as they live.  The kernel drops the lock
when they die, even by SIGKILL, so :func:`sweep_dead_job_dirs` (run by every ``hcomm run`` at start)
can tell a dead job's directory from a live one without trusting pids.
"""
from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from typing import List, Optional, Tuple

from ..bootstrap.file_store import JOB_LOCK_NAME, user_dir

__all__ = ["create_job_dir", "sweep_dead_job_dirs", "LOCK_NAME"]

LOCK_NAME = JOB_LOCK_NAME
_PREFIX = "run-"


def create_job_dir(job_id: str, parent: Optional[str] = None) -> Tuple[str, int]:
    """A new private job directory and the fd of its held lock (close the fd only when the job is over)."""
    path = tempfile.mkdtemp(prefix=f"{_PREFIX}{job_id}-", dir=user_dir(parent))
    fd = os.open(os.path.join(path, LOCK_NAME), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return path, fd


def _dead(path: str) -> bool:
    """True when nobody holds the directory's lock (its launcher and watchdog are gone)."""
    try:
        fd = os.open(os.path.join(path, LOCK_NAME), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return True  # never got its lock (a launcher killed in the middle of creating it)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    finally:
        os.close(fd)
    return True


def sweep_dead_job_dirs(parent: Optional[str] = None) -> List[str]:
    """Remove this user's job directories whose launcher is dead; returns the paths removed."""
    base = user_dir(parent)
    removed = []
    for name in sorted(os.listdir(base)):
        path = os.path.join(base, name)
        if name.startswith(_PREFIX) and os.path.isdir(path) and not os.path.islink(path) and _dead(path):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed
