"""The user-facing Comm API: init/finalize/set_device, Comm, Request, wait_all (see world.py, comm.py), and empty/zeros
(memory.py)."""
from __future__ import annotations

from .comm import Comm
from .consistency import CollectiveMismatchError
from .graphs import Graph, graph
from .membership import MembershipError
from .memory import empty, zeros
from .errors import (CommError, CommTimeoutError, ForeignProcessError, MessageMismatchError, NotInitializedError,
                     NotMemberError)
from .requests import Request, wait_all
from .stream import Stream
from .world import finalize, get_world, init, is_initialized, set_device

__all__ = ["init", "finalize", "set_device", "get_world", "is_initialized", "Comm", "Request", "wait_all",
           "CommError", "CommTimeoutError", "CollectiveMismatchError", "MembershipError", "MessageMismatchError",
           "NotInitializedError", "NotMemberError", "ForeignProcessError", "Stream", "Graph", "graph", "empty", "zeros"]
