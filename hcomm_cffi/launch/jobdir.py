"""Job directories of ``hcomm run``: private to the user, unguessable, locked by their launcher, swept once dead.

Each launch gets ``<parent>/hcomm-<uid>-run-<job id>-XXXXXXXX``, made by ``mkdtemp`` (created exclusively,
``0700``, a random suffix nobody can predict) directly in ``parent`` (``HCOMM_RENDEZVOUS_DIR`` or the temp
dir), so no directory another user could create first stands in the way.  It holds the root-info
rendezvous files and a ``.lock`` file on which the launcher (and its watchdog) hold an ``flock`` for as
long as they live.  The kernel drops the lock when they die, even by SIGKILL, so
:func:`sweep_dead_job_dirs` (run by every ``hcomm run`` at start) can tell a dead job's directory from a
live one without trusting pids; it removes only directories this user owns (never a symbolic link).
"""
from __future__ import annotations

import fcntl
import os
import shutil
import stat
import tempfile
from typing import List, Optional, Tuple

from .. import settings
from ..bootstrap.errors import BootstrapError
from ..bootstrap.file_store import JOB_LOCK_NAME, private_dir
from ..files import create_file
from ..flocks import lock_held

__all__ = ["create_job_dir", "sweep_dead_job_dirs", "job_dir_parent", "LOCK_NAME"]

LOCK_NAME = JOB_LOCK_NAME


def _prefix() -> str:
    return f"hcomm-{os.getuid()}-run-"


def job_dir_parent(parent: Optional[str] = None) -> str:
    """Where job directories go: ``parent``, else ``HCOMM_RENDEZVOUS_DIR``, else the temp dir."""
    where = parent or settings.value("HCOMM_RENDEZVOUS_DIR") or tempfile.gettempdir()
    if not os.path.isdir(str(where)):
        raise BootstrapError(f"HCOMM_RENDEZVOUS_DIR={where!r} (the parent of hcomm run's job directories) is not an "
                             "existing directory; expected one this user can create directories in")
    return str(where)


def create_job_dir(job_id: str, parent: Optional[str] = None) -> Tuple[str, int]:
    """A new private job directory and the fd of its held lock (close the fd only when the job is over)."""
    base = job_dir_parent(parent)
    try:
        path = private_dir(tempfile.mkdtemp(prefix=f"{_prefix()}{job_id}-", dir=base))
    except OSError as exc:
        raise BootstrapError(f"cannot create hcomm run's job directory in {base}: {exc.strerror}; set "
                             "HCOMM_RENDEZVOUS_DIR to a directory this user can write") from None
    fd = create_file(os.path.join(path, LOCK_NAME))
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return path, fd


def _dead(path: str) -> bool:
    """True when nobody holds the directory's lock (its launcher and watchdog are gone, or it never got one:
    a launcher killed in the middle of creating it)."""
    return lock_held(os.path.join(path, LOCK_NAME)) is not True


def sweep_dead_job_dirs(parent: Optional[str] = None) -> List[str]:
    """Remove this user's job directories whose launcher is dead; returns the paths removed."""
    base = job_dir_parent(parent)
    removed: List[str] = []
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return removed
    for name in names:
        if not name.startswith(_prefix()):
            continue
        path = os.path.join(base, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and _dead(path):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed
