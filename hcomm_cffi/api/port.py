"""The named interface the sibling modules (issue, point-to-point, nonblocking, observe, signatures, membership) use of a Comm.

They hold a :class:`CommPort`, never the Comm.  The port owns the communicator's lifecycle state
-- member or not, destroyed, broken and why, its flight recorder, its collective machinery --
and the checks and transitions on it (``check_usable``, ``fail``, ``mark_broken``), so that state
has one owner and one place it changes; the Comm reads it through the port like everyone else.
What the port reads of the Comm itself are its public attributes.

It also owns the two rules of who may call (docs/guide/reliability-threads.md):

- ``lock``, the communicator's call lock: every call that changes the communicator's host state or
  launches work on it holds it from its first change to its last (a blocking collective until it
  returns), so calls of different threads never interleave -- the Issuer's entries and
  PointToPoint's posts take it (the waits of started calls do not);
- ``pid``, its creating process: :meth:`check_usable`, the first thing every call does, and the
  waits of started calls (:meth:`check_process`) refuse any other process (a forked child).
"""
from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, List, Optional

import numpy as np

from ..binding import Binding
from ..errors import HcclError
from ..flight import FlightRecorder
from ..plan import Topology
from . import consistency, live, observe
from .buffers import Buffer
from .errors import CommError, ForeignProcessError, NotMemberError, failure_error
from .interrupts import abandon_queued

if TYPE_CHECKING:   # typing only: comm.py imports this module, issue.py imports it for annotations
    from .announce import Announcer
    from .comm import Comm
    from .issue import Issuer
    from .nonblocking import Pending

__all__ = ["CommPort"]


class CommPort:
    """One communicator as its helpers see it, and the owner of its lifecycle state."""

    __slots__ = ("_c", "issuer", "flight", "member", "destroyed", "broken", "lock", "pid")

    def __init__(self, comm: "Comm") -> None:
        self._c = comm
        self.lock = threading.RLock()            # the call lock (module docstring): one call at a time changes it
        self.pid = live.PID                      # the process that created it: the only one that may use it
        self.issuer: Optional["Issuer"] = None   # the collective machinery (issue.py), set once the handle exists
        self.flight: Optional[FlightRecorder] = None   # its flight recorder ring (observe.created), None when off
        self.member = True                       # False: this rank holds a null communicator
        self.destroyed = False                   # finalize() or destroy() ran
        self.broken: Optional[str] = None        # why it is unusable after a failure (None while it works)

    # ------------------------------------------------------------------ what it is
    @property
    def binding(self) -> Binding:
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
    def parent_ranks(self) -> List[int]:
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
    def _issuer(self) -> "Issuer":
        issuer = self.issuer
        assert issuer is not None, "the communicator has no collective machinery (a null or unset communicator)"
        return issuer

    @property
    def stages(self) -> bool:
        """Host buffers are copied into device memory for the engines (CANN), not declared (the emulator)."""
        return self._issuer.staging

    @property
    def announcer(self) -> "Announcer":
        """What peers see of its calls and waits (api/announce.py)."""
        return self._issuer.announce

    @property
    def checks_library_collectives(self) -> bool:
        """Library collectives carry the package's signature handshake (else: the backend's own check)."""
        return self._issuer.check_native

    def drop_flight(self) -> Optional[FlightRecorder]:
        """Detach and return the flight recorder ring (the communicator is destroyed)."""
        fr, self.flight = self.flight, None
        return fr

    # ------------------------------------------------------------------ checks and transitions
    def check_usable(self, what: str) -> None:
        """Raise unless ``what`` may run (this communicator's process, a member, not destroyed, not broken)."""
        if self.pid != live.PID:
            self.check_process(what)
        if not self.member:
            raise NotMemberError(f"{what}: this rank is not a member of communicator {self.name!r} (ranks "
                                 f"{self.parent_ranks}); it holds a null communicator")
        if self.destroyed:
            raise CommError(f"{what}: communicator {self.name!r} was destroyed; create a new one")
        if self.broken:
            raise CommError(f"{what}: communicator {self.name!r} is unusable after an earlier failure "
                            f"({self.broken}); destroy it and create a new one")

    def check_process(self, what: str) -> None:
        """Raise :class:`ForeignProcessError` unless this is the process that created the communicator.

        A child forked after the communicator was made shares its memory but is not a rank of its job: its
        calls would pair with the peers' calls meant for the parent.  Nothing reaches the library.
        """
        if self.pid == live.PID:
            return
        raise ForeignProcessError(
            f"{what}: communicator {self.name!r} (rank {self.rank} of {self.size}) was created by process {self.pid}; "
            f"this is process {live.PID}, forked from it, which cannot take part in that communicator's calls (its "
            "peers would pair them with the parent's). Use it in the parent only; a child that must communicate "
            "calls hcomm.init(rank=, world_size=, root_info=) as a rank of a job of its own, and workers that only "
            "compute (a data loader's) are best started with multiprocessing's 'spawn' or 'forkserver' context, "
            "which inherit no communicator")

    def rank_arg(self, name: str, value: Any) -> int:
        """``value`` validated as a rank of this communicator (argument ``name``)."""
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{name}={value!r} is not an int rank; expected 0..{self.size - 1}")
        if not 0 <= value < self.size:
            raise ValueError(f"{name}={value} is out of range for communicator {self.name!r} of {self.size} ranks; "
                             f"expected 0..{self.size - 1}")
        return int(value)

    def fail(self, exc: HcclError, where: str) -> CommError:
        """The library failed in ``where``: the communicator becomes unusable; the error to raise (a mismatch when
        the signature handshake saw one)."""
        mismatch = self.issuer.signer.mismatch if self.issuer is not None else None
        err = failure_error(exc, f"rank {self.rank} of communicator {self.name!r}: {where}", live.library_names(),
                            mismatch, consistency.CollectiveMismatchError)
        self.broken = str(err)
        abandon_queued(self.binding, self.handle, self.broken)    # nothing queued runs later (api/interrupts.py)
        observe.failed(self, exc, err)
        return err

    def mark_broken(self, why: str, interrupted: bool = False) -> None:
        """Make the communicator unusable (a failure the library did not report, e.g. a message mismatch).

        Its queued work is discarded and its peers are told (api/interrupts.py); ``interrupted``: an
        exception left a blocking wait.
        """
        self.broken = why
        abandon_queued(self.binding, self.handle, why, interrupted)

    # ------------------------------------------------------------------ the collective machinery
    def declare_device_memory(self, buf: Optional[Buffer]) -> None:
        """Declare ``buf`` device memory where the backend takes host memory so (no-op where it stages)."""
        self._issuer.declare_device_memory(buf)

    def completed(self, pending: "Pending") -> None:
        """A started collective is known complete (its resources may go)."""
        self._issuer.completed(pending)

    @property
    def idle(self) -> bool:
        """No started collective is in flight (nothing queued can still read memory the communicator owns)."""
        return not self._issuer.inflight

    def invalidate(self) -> None:
        """Bound batches may name memory that changes (the communicator's cache drops them)."""
        self._issuer.cache.invalidate()

    def check_exchange(self, exchange: Any) -> None:
        """Compare a completed call's signature handshake (backends without host tasks); raises on a mismatch."""
        self._issuer.check_exchange(exchange, started=True)
