"""The segments this process created leave /dev/shm however it ends (short of SIGKILL).

``atexit`` (where :func:`hcomm_cffi.sim.shutdown` destroys the communicators) does not run in a
process started by multiprocessing (fork, forkserver or spawn: its children end with
``os._exit``) nor in one ended by SIGTERM (torchrun and ``hcomm run`` stop the survivors of a
failed rank so).  So with the first segment a process creates, two more hooks are installed:
a ``multiprocessing.util.Finalize`` (run by a multiprocessing child as it exits, also after
an exception) and a SIGTERM hook (:mod:`hcomm_cffi.sigterm`: installed when SIGTERM still has its
default action) that unlinks the segments before the process dies of SIGTERM as before.  Unlinking is all they do: a segment's name goes,
peers keep their mappings and see the owner's lock drop when the process is gone.  Both hooks also
sweep the segments of owners already dead (:func:`hcomm_cffi.sim.shm.sweep_stale`): a peer killed
by SIGKILL cannot unlink its own, and torchrun stops the survivor before its destroy would.
"""
from __future__ import annotations

import os
from typing import Any, Callable, List, Optional, Set

from .. import sigterm

__all__ = ["owned", "disowned", "unlink_owned", "set_sweeper"]

_OWNED: Set[str] = set()          # paths of the segments this process created and has not unlinked
_HOOKED_PID: Optional[int] = None  # the process whose hooks are installed (a forked child installs its own)
_SWEEP: List[Callable[[], Any]] = []  # shm.sweep_stale, registered by shm (which imports this module)


def set_sweeper(sweep: Callable[[], Any]) -> None:
    """The function that removes segments of dead owners (shm.sweep_stale)."""
    _SWEEP[:] = [sweep]


def owned(path: str) -> None:
    """Record a segment this process created (installs the exit hooks on the first one)."""
    _OWNED.add(path)
    if _HOOKED_PID != os.getpid():
        _install()


def disowned(path: str) -> None:
    """The segment was unlinked normally."""
    _OWNED.discard(path)


def unlink_owned() -> None:
    """Unlink every segment this process still owns, then those of dead owners (names only; safe at any point
    of an exit)."""
    for path in list(_OWNED):
        try:
            os.unlink(path)
        except OSError:
            pass
        _OWNED.discard(path)
    for sweep in _SWEEP:
        try:
            sweep()
        except Exception:
            pass


def _install() -> None:
    global _HOOKED_PID
    _HOOKED_PID = os.getpid()
    import multiprocessing.util

    multiprocessing.util.Finalize(None, unlink_owned, exitpriority=0)
    sigterm.add_hook(unlink_owned)        # with the package's other SIGTERM hooks (the flight recorder's dump)


def _after_fork() -> None:
    """A forked child owns none of its parent's segments (and must never unlink them)."""
    global _HOOKED_PID
    _OWNED.clear()
    _HOOKED_PID = None


os.register_at_fork(after_in_child=_after_fork)
