"""The live communicators of this process: the world made by init() and the sub-communicators finalize() destroys.

Kept apart from ``world.py`` (which creates the world ``Comm``) so that ``comm.py`` can find its
parent and register itself without importing ``world.py``: no import cycle.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Dict, List, Optional

from .errors import NotInitializedError

if TYPE_CHECKING:   # comm.py imports this module
    from .comm import Comm

__all__ = ["get_world", "current_world", "set_world", "register", "unregister", "registered", "library_names"]

_world: Optional["Comm"] = None
_comms: List["Comm"] = []


def get_world() -> "Comm":
    """The world communicator made by init()."""
    if _world is None:
        raise NotInitializedError("hcomm is not initialised: call hcomm.init() first")
    return _world


def current_world() -> Optional["Comm"]:
    """The world communicator, or None before init() / after finalize()."""
    return _world


def set_world(comm: Optional["Comm"]) -> Optional["Comm"]:
    """Make ``comm`` the world (None: no world); returns the previous one."""
    global _world
    old, _world = _world, comm
    return old


def register(comm: "Comm") -> None:
    """Track a sub-communicator so finalize() can destroy it."""
    _comms.append(comm)


def unregister(comm: "Comm") -> None:
    """Forget a destroyed communicator."""
    if comm in _comms:
        _comms.remove(comm)


def registered() -> List["Comm"]:
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
