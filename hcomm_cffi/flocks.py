"""Liveness by ``flock``: a process holds an exclusive lock on a file for as long as it lives.

The kernel drops the lock when the process dies, even by SIGKILL, so any process can tell a live
holder from a dead one without trusting pids.  Used by the emulator's segments, the rendezvous
claims and ``hcomm run``'s job directories.
"""
from __future__ import annotations

import errno
import fcntl
import os
from typing import Optional

__all__ = ["lock_held"]


def lock_held(path: str) -> Optional[bool]:
    """Whether a live process holds an ``flock`` on ``path``: True, False, or None when there is no such file.

    A file this process cannot open (another user's) counts as held: it is never ours to judge.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return True
        raise
    finally:
        os.close(fd)  # closing drops a lock we may have taken
    return False
