"""One communicator's state (:class:`CommState`): what it is, its lifecycle, and the checks and transitions on them.

Every part of a communicator -- the Comm's methods, the collective engine (engine.py), the
point-to-point lanes, started and persistent requests, the signature handshake, the observers --
holds this one object and reads and changes the communicator through it; it points at nothing of
theirs (its announcer, device-memory ranges and flight recorder are plain parts below it), so
where a piece of state lives has one answer.

It also holds the two rules of who may call (docs/guide/reliability-threads.md):

- ``lock``, the communicator's call lock: every call that changes the communicator's host state or
  launches work on it holds it from its first change to its last (a blocking collective until it
  returns), so calls of different threads never interleave -- the engine's calls and the
  point-to-point posts take it (the waits of started calls do not);
- ``pid``, its creating process: :meth:`CommState.check_usable`, the first thing every call does,
  and the waits of started calls (:meth:`CommState.check_process`) refuse any other process (a forked
  child).
"""
from __future__ import annotations

import threading
from typing import Any, List, Optional, Set

import numpy as np

from ..binding import Binding
from ..flight import FlightRecorder
from ..plan import Topology
from . import live
from .launch_order import Announcer
from .buffers import DeviceMemory
from .errors import CommError, ForeignProcessError, NotMemberError

__all__ = ["CommState", "abandon_queued"]


class CommState:
    """One communicator's identity, lifecycle and shared parts (see the module docstring)."""

    # set when the communicator's handle exists (Comm._setup); a null communicator never has them
    announcer: Announcer            # what peers see of its calls and waits (api/launch_order.py)
    device_memory: DeviceMemory     # host ranges declared device memory (the emulator)

    __slots__ = ("binding", "name", "rank", "size", "parent_ranks", "topology", "timeout", "handle", "eager_limit",
                 "buffer_bytes", "stages", "checks_library_collectives", "announcer", "device_memory", "lock", "pid",
                 "member", "destroyed", "broken", "mismatch", "flight", "inflight", "seq")

    def __init__(self, binding: Binding, name: str) -> None:
        self.binding = binding
        self.name = name
        self.rank = -1                           # this process's rank in it (-1: a null communicator)
        self.size = 0
        self.parent_ranks: List[int] = []        # its members' ranks in the parent communicator
        self.topology = Topology.single_server(1)   # its topology (replaced once its size is known)
        self.timeout = 0                         # seconds each notify wait may take (0: never)
        self.handle: Any = None                  # the HcclComm handle (None until made, and once destroyed)
        self.eager_limit = 0                     # bytes up to which point-to-point sends are eager
        self.buffer_bytes = 0                    # its HCCL buffer's size
        caps = binding.lib.capabilities
        self.stages = not caps.host_memory_as_device   # host buffers are copied into device memory (CANN)
        self.checks_library_collectives = False  # library collectives carry the package's signature handshake
        self.lock = threading.RLock()            # the call lock (module docstring): one call at a time changes it
        self.pid = live.PID                      # the process that created it: the only one that may use it
        self.member = True                       # False: this rank holds a null communicator
        self.destroyed = False                   # finalize() or destroy() ran
        self.broken: Optional[str] = None        # why it is unusable after a failure (None while it works)
        self.mismatch: Optional[str] = None      # what the signature handshake's in-stream comparison found
        self.flight: Optional[FlightRecorder] = None   # its flight recorder ring (observe.created), None when off
        self.inflight: Set[Any] = set()          # started operations not yet seen complete (api/requests.py)
        self.seq = 0                             # operations issued so far (flight recorder, trace, mismatch texts)

    def where(self) -> str:
        """'rank 0 of communicator 'world'': how error messages name this rank of it."""
        return f"rank {self.rank} of communicator {self.name!r}"

    def next_seq(self) -> int:
        """The next operation number."""
        self.seq += 1
        return self.seq

    # ------------------------------------------------------------------ checks
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

    # ------------------------------------------------------------------ transitions
    def mark_broken(self, why: str, interrupted: bool = False) -> None:
        """Make the communicator unusable: its queued work is discarded and its peers are told
        (:func:`abandon_queued`); ``interrupted``: an exception left a blocking wait."""
        self.broken = why
        abandon_queued(self.binding, self.handle, why, interrupted)

    def interrupted(self, what: str, exc: BaseException) -> None:
        """``exc`` left the blocking ``what`` while its work was queued: the communicator breaks (the caller
        re-raises).  A CommError (the library failed, already handled) changes nothing (api/engine.py)."""
        if isinstance(exc, CommError) or self.broken:
            return
        text = str(exc)
        why = (f"{what} was interrupted by {type(exc).__name__}{': ' + text if text else ''} while it waited; "
               "its queued work was discarded")
        self.mark_broken(f"rank {self.rank}: {why}", interrupted=True)


def abandon_queued(binding: Any, handle: Any, why: str, interrupted: bool = False) -> None:
    """Discard communicator ``handle``'s queued work and tell its peers it failed (the backend's part; never raises).

    ``interrupted``: an exception left a wait (peers fail at once instead of waiting for a more precise error).
    """
    if handle is None:
        return
    try:
        binding.lib.abandon_communicator(handle, why, interrupted)
    except Exception:        # the communicator is already broken; the original failure is what the caller reports
        pass
