"""The live communicators of this process: the world made by init() and the sub-communicators finalize() destroys.

Kept apart from ``world.py`` (which creates the world ``Comm``) so that ``comm.py`` can find its
parent and register itself without importing ``world.py``: no import cycle.

Communicators belong to the process that created them (:data:`PID`, compared by every call through
``CommState.check_usable``).  A child forked after ``init()`` starts with no world and no live
communicators: the parent's are not its to use, finalize or destroy (its ``finalize()`` leaves them
alone), and it may ``init()`` a world of its own.
"""
from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Protocol, Tuple

from .errors import NotInitializedError

__all__ = ["PID", "forked_from", "get_world", "current_world", "set_world", "register", "unregister", "registered",
           "library_names"]

#: This process's id, kept current across fork(): the owner every communicator records at its creation.
PID = os.getpid()
#: (parent pid, its world's size) when this process is a child forked while the parent had a world; else None.
_inherited: Optional[Tuple[int, int]] = None


class LiveComm(Protocol):
    """What the registry reads of a communicator (comm.py's Comm; typed there as a Comm again)."""

    name: str
    rank: int
    size: int
    handle: Any
    binding: Any

    def destroy(self) -> None: ...


_world: Optional[LiveComm] = None
_comms: List[LiveComm] = []


def forked_from() -> Optional[int]:
    """The pid of the parent this process was forked from while the parent had a world (None otherwise)."""
    return None if _inherited is None else _inherited[0]


def _after_fork_in_child() -> None:
    """A forked child owns none of its parent's communicators: forget them (never destroyed here)."""
    global PID, _inherited, _world, _comms
    parent = PID
    PID = os.getpid()
    if _world is not None:
        _inherited = (parent, _world.size)
    _world, _comms = None, []


os.register_at_fork(after_in_child=_after_fork_in_child)


def get_world() -> LiveComm:
    """The world communicator made by init()."""
    if _world is None:
        if _inherited is not None:
            raise NotInitializedError(
                f"hcomm is not initialised in this process (pid {PID}): it was forked from pid {_inherited[0]} after "
                f"that process's hcomm.init() (a world of {_inherited[1]} ranks), and a communicator belongs to the "
                "process that created it; call hcomm.init(rank=, world_size=, root_info=) in this process for a "
                "world of its own, or leave the communication to the parent")
        raise NotInitializedError("hcomm is not initialised: call hcomm.init() first")
    return _world


def current_world() -> Optional[LiveComm]:
    """The world communicator, or None before init() / after finalize()."""
    return _world


def set_world(comm: Optional[LiveComm]) -> Optional[LiveComm]:
    """Make ``comm`` the world (None: no world); returns the previous one."""
    global _world
    old, _world = _world, comm
    return old


def register(comm: LiveComm) -> None:
    """Track a sub-communicator so finalize() can destroy it."""
    _comms.append(comm)


def unregister(comm: LiveComm) -> None:
    """Forget a destroyed communicator."""
    if comm in _comms:
        _comms.remove(comm)


def registered() -> List[LiveComm]:
    """The live sub-communicators, oldest first (a copy)."""
    return list(_comms)


def library_names() -> Dict[str, str]:
    """The library's id of each live communicator (``HcclGetCommName``) -> its Comm name, for error texts."""
    names: Dict[str, str] = {}
    for comm in [current_world(), *registered()]:
        if comm is None or comm.handle is None:
            continue
        try:
            lib_name = comm.binding.get_comm_name(comm.handle)
        except Exception:    # noqa: BLE001 - a failing library must not hide the failure being reported
            continue
        if lib_name:
            names[lib_name] = comm.name
    return names
