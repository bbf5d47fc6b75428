"""Persistent collectives (MPI-4 ``MPI_Allreduce_init`` & co, mpi4py's ``Comm.Allreduce_init``): bound once, started often.

``Comm.allreduce_init(x, ...)`` validates its arguments exactly as ``allreduce`` does and binds
the call to its buffers (the algorithm chosen, the schedule recorded, the batches bound for both
parities of the signature handshake) before it returns a :class:`Persistent` request.  Each
:meth:`Persistent.start` checks that every buffer still has the address, shape and dtype it had
at the init -- a change is a ValueError naming the buffer, and nothing is launched -- and launches
the bound call on the communicator's stream; :meth:`~Persistent.wait` / :meth:`~Persistent.test`
complete it, and the request is inactive again (MPI's semantics: start only an inactive request;
wait on an inactive one returns at once).  Every start is an operation of its own in the flight
recorder and the trace, ended through ``observe`` like any started collective.  When the
communicator's cache starts a new generation (new scratch memory, resources dropped, ...) the
next start binds again.
"""
from __future__ import annotations

from typing import Any, List, Optional, Tuple, TypeVar

import numpy as np

from .._ffi import ffi
from .errors import CommError
from .op import Call, as_buffer, buffer_view
from .engine import Engine
from .requests import Pending, Request

__all__ = ["Persistent"]

T = TypeVar("T")


def _state(obj: Any, name: str, written: bool) -> Tuple[int, int, Any]:
    """(address, bytes, dtype) of a buffer, checked as a fresh call checks it (raises what as_buffer raises)."""
    view = buffer_view(obj, written)
    if view is None:
        buf = as_buffer(obj, name, written)
        return buf.addr, buf.nbytes, buf.dtype
    addr = view[0]
    return (addr if isinstance(addr, int) else int(ffi.cast("uintptr_t", addr))), view[1], view[2]


class _Held:
    """One buffer of a persistent request as it was at the init: what every start compares it with."""

    __slots__ = ("name", "obj", "written", "state", "shape", "ptr", "array")

    def __init__(self, name: str, obj: Any, written: bool) -> None:
        self.name = name
        self.obj = obj                  # kept alive by the request (MPI: the buffer belongs to the request)
        self.written = written
        self.state = _state(obj, name, written)
        self.shape = tuple(obj.shape) if hasattr(obj, "shape") else None
        self.array = type(obj) is np.ndarray                    # checked inline at every start (the common case)
        self.ptr = ffi.cast("char *", self.state[0])

    def unchanged(self) -> bool:
        """The cheap check of an ndarray: the same address, bytes, dtype and shape, contiguous and (written) writable."""
        obj = self.obj
        try:
            view = ffi.from_buffer("char[]", obj, self.written)
        except (ValueError, TypeError, BufferError):
            return False
        return view == self.ptr and len(view) == self.state[1] and obj.dtype == self.state[2] and obj.shape == self.shape

    def changed(self) -> Optional[str]:
        """How the buffer changed since the init (None: unchanged); raises what a fresh call would raise of it."""
        now = _state(self.obj, self.name, self.written)
        shape = tuple(self.obj.shape) if self.shape is not None else None
        if now == self.state and shape == self.shape:
            return None
        (addr, nbytes, dtype), (addr0, nbytes0, dtype0) = now, self.state
        return (f"{self.name} is now {nbytes} bytes of {dtype}, shape {shape}, at 0x{addr:x}; at the init it was "
                f"{nbytes0} bytes of {dtype0}, shape {self.shape}, at 0x{addr0:x}")


class Persistent(Request[T]):
    """A persistent collective request: :meth:`start` launches the call bound at its init; wait()/test() complete it
    (active from a start until then: the request's ``done`` is False)."""

    def __init__(self, issuer: Engine, call: Call, what: str,
                 buffers: Tuple[Tuple[str, Any, bool], ...]) -> None:
        super().__init__(what, self._sync, result=call.result)
        self._done = True                        # inactive until the first start
        self._engine = issuer
        self._call = call
        self._held: List[_Held] = [_Held(name, obj, written) for name, obj, written in buffers]
        self._pending: Optional[Pending] = None    # its last start's (re-armed by the next when the call is bound)
        self._engine.bind_persistent(self._call)     # bound to its buffers once (again when the cache starts over)

    @property
    def active(self) -> bool:
        """Started and not yet seen complete by wait() or test()."""
        return not self._done

    def start(self) -> None:
        """Launch the bound call (MPI_Start): after the communicator's previous collective, without waiting."""
        if not self._done:
            raise CommError(f"{self.what}: start() while the previous start is still active; wait() or test() it "
                            "to completion first (a persistent request runs one operation at a time)")
        for held in self._held:
            if held.array and held.unchanged():     # the common case, without changed()'s frame
                continue
            change = held.changed()
            if change is not None:
                raise ValueError(f"{self.what}: start(): {change}; a persistent request's buffers must keep the "
                                 "address, shape and dtype they had at the init (create a new request for new buffers)")
        self._pending = self._engine.start_persistent(self._call, self._pending)
        self._done = False

    def _sync(self, timeout: Optional[float]) -> bool:
        assert self._pending is not None        # active: poll() waits only then
        return self._pending.sync(timeout)

    def __repr__(self) -> str:
        return f"<Persistent {self.what} {'active' if not self._done else 'inactive'}>"
