"""The named interface the sibling modules (point-to-point, nonblocking, observe, signatures) use of a Comm.

They hold a :class:`CommPort`, never the Comm: what they read and the few things they may do to
it are listed here, so the communicator's private state has one owner (comm.py).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from ..errors import HcclError
from ..plan import Topology
from .buffers import Buffer
from .errors import CommError
from .interrupts import abandon_queued

if TYPE_CHECKING:   # typing only: comm.py imports this module
    from .comm import Comm

__all__ = ["CommPort"]


class CommPort:
    """One communicator as its helpers see it."""

    __slots__ = ("_c",)

    def __init__(self, comm: "Comm") -> None:
        self._c = comm

    # ------------------------------------------------------------------ what it is
    @property
    def binding(self) -> Any:
        """The Binding the communicator calls through."""
        return self._c.binding

    @property
    def name(self) -> str:
        """Its name (as given to Comm() / init())."""
        return self._c.name

    @property
    def rank(self) -> int:
        """This process's rank in it."""
        return self._c.rank

    @property
    def size(self) -> int:
        """Its number of ranks."""
        return self._c.size

    @property
    def parent_ranks(self) -> Any:
        """Its members' ranks in the parent communicator."""
        return self._c.parent_ranks

    @property
    def topology(self) -> Topology:
        """Its topology."""
        return self._c.topology

    @property
    def timeout(self) -> int:
        """Seconds each notify wait may take (0: never)."""
        return self._c.timeout

    @property
    def handle(self) -> Any:
        """The HcclComm handle."""
        return self._c.handle

    @property
    def buffer_bytes(self) -> int:
        """Its HCCL buffer's size."""
        return self._c.buffer_bytes

    @property
    def eager_limit(self) -> int:
        """Bytes up to which point-to-point sends are eager."""
        return self._c.eager_limit

    @property
    def stages(self) -> bool:
        """Host buffers are copied into device memory for the engines (CANN), not declared (the emulator)."""
        return self._c._issuer.staging

    @property
    def checks_library_collectives(self) -> bool:
        """Library collectives carry the package's signature handshake (else: the backend's own check)."""
        return self._c._issuer.check_native

    @property
    def flight(self) -> Any:
        """Its flight recorder ring (None when off)."""
        return self._c._flight

    def drop_flight(self) -> Any:
        """Detach and return the flight recorder ring (the communicator is destroyed)."""
        fr, self._c._flight = self._c._flight, None
        return fr

    @property
    def destroyed(self) -> bool:
        """It was destroyed (finalize() or destroy())."""
        return self._c._destroyed

    @property
    def broken(self) -> Optional[str]:
        """Why it is unusable after a failure (None while it works)."""
        return self._c._broken

    # ------------------------------------------------------------------ what helpers may do
    def check_usable(self, what: str) -> None:
        """Raise unless ``what`` may run (a member, not destroyed, not broken)."""
        self._c._check_usable(what)

    def rank_arg(self, name: str, value: Any) -> int:
        """``value`` validated as a rank of this communicator (argument ``name``)."""
        return self._c._rank_arg(name, value)

    def declare_device_memory(self, buf: Optional[Buffer]) -> None:
        """Declare ``buf`` device memory where the backend takes host memory so (no-op where it stages)."""
        self._c._issuer.declare_device_memory(buf)

    def fail(self, exc: HcclError, where: str) -> CommError:
        """The library failed in ``where``: the communicator becomes unusable; returns the error to raise."""
        return self._c._fail(exc, where)

    def mark_broken(self, why: str, interrupted: bool = False) -> None:
        """Make the communicator unusable (a failure the library did not report, e.g. a message mismatch).

        Its queued work is discarded and its peers are told (api/interrupts.py); ``interrupted``: an
        exception left a blocking wait.
        """
        self._c._broken = why
        abandon_queued(self._c.binding, self._c._handle, why, interrupted)

    def completed(self, pending: Any) -> None:
        """A started collective is known complete (its resources may go)."""
        self._c._issuer.inflight.discard(pending)

    @property
    def idle(self) -> bool:
        """No started collective is in flight (nothing queued can still read memory the communicator owns)."""
        return not self._c._issuer.inflight

    def invalidate(self) -> None:
        """Bound batches may name memory that changes (a new generation of the communicator's cache)."""
        self._c._issuer.cache.invalidate()

    def check_exchange(self, exchange: Any) -> None:
        """Compare a completed call's signature handshake (backends without host tasks); raises on a mismatch."""
        self._c._issuer.check_exchange(exchange, started=True)
