"""One collective call, normalised once (:class:`Call`), and what a communicator derives from calls (:class:`CommCache`).

A public method of :class:`~hcomm_cffi.api.comm.Comm` validates its arguments into a ``Call``;
every later step (the fast path, the algorithm choice, staging, the signature handshake, the
batch, the flight record, the Request) reads its fields instead of taking them as arguments.

``CommCache`` holds everything derived from call signatures and the resources they name, each
map with a named bound, and one ``generation``: whatever makes derived state stale (new scratch
memory, dropped resources, a full map starting over, device ranges withdrawn, the signature table
starting over) calls :meth:`CommCache.invalidate`, which bumps it and drops the bound batches
built in the older generation.
"""
from __future__ import annotations

from typing import Any, Dict, NamedTuple, Optional, Tuple

from ..algorithms.interface import Algorithm, CollectiveCall
from ..enums import DataType, ReduceOp
from .buffers import NO_STAGING, Buffer, Staging
from .fastcalls import FastCalls

__all__ = ["Call", "Ready", "CommCache", "CHOICES_MAX", "RESOURCES_MAX", "SCHEDULES_MAX", "PREPARED_MAX", "DEVICE_RANGES_MAX"]

#: call signatures whose algorithm choice (and description) is kept
CHOICES_MAX = 4096
#: resource sets kept per stream (each names acquired threads and channels)
RESOURCES_MAX = 4096
#: recorded schedules kept per stream (algorithms/replay.py)
SCHEDULES_MAX = 4096
#: schedules kept bound to their buffers (emulator: prepared task lists)
PREPARED_MAX = 256
#: host ranges declared device memory on the emulator before the declarations start over
DEVICE_RANGES_MAX = 4096


class Call:
    """One collective as the caller made it, then as the communicator resolved it.

    The fields a call may leave unset default at class level (no per-call cost for them).
    """

    send: Optional[Buffer] = None
    recv: Optional[Buffer] = None
    count = 0
    dtype = DataType.INT8
    op: Optional[ReduceOp] = None
    root = 0
    nbytes = 0
    recv_count: Optional[int] = None
    result: Any = None               # what a blocking call returns (and Request.wait())
    fast_key: Optional[tuple] = None  # its key in the fast-call cache (fastcalls.py), when it has one
    # resolved by Issuer._prepare (issue.py)
    alg: Algorithm
    what = ""                        # the description errors carry
    in_place = False
    staging: Staging = NO_STAGING
    lib: CollectiveCall              # the call with the pointers the engines use

    def __init__(self, coll: str, algorithm: Any, async_op: bool = False, stream: Any = None) -> None:
        self.coll = coll
        self.algorithm = algorithm            # as the caller spelled it ("auto", a name, an Algorithm)
        self.async_op = async_op
        self.stream = stream

    def data(self, send: Optional[Buffer], recv: Optional[Buffer], count: int, nbytes: int) -> "Call":
        """Set the buffers, the element count the library takes and the bytes that choose the algorithm."""
        self.send, self.recv, self.count, self.nbytes = send, recv, count, nbytes
        self.dtype = send.dtype if send is not None else DataType.INT8
        return self

    @property
    def blocking(self) -> bool:
        """Neither ``async_op`` nor ``stream=``: run and wait."""
        return not self.async_op and self.stream is None


class Ready(NamedTuple):
    """A batch ready to launch: the call's signature handshake (if any) and its tasks."""

    batch: Any                  # launch() runs it: a TaskBatch or the backend's prepared batch
    exchange: Any               # the handshake to compare after completion (backends without host tasks), or None
    replayed: bool              # built from a recorded schedule (what the fast-call cache keeps)
    parity: int                 # the handshake's parity, -1 when the call has none


class CommCache:
    """Per-communicator derived state, with one generation counter bumped by anything that invalidates it."""

    __slots__ = ("generation", "choices", "prepared", "fast", "handshakes")

    def __init__(self) -> None:
        self.generation = 0
        self.choices: Dict[tuple, Tuple[Algorithm, str]] = {}   # (spec, coll, bytes, dtype, op, root) -> (alg, what)
        self.prepared: Dict[tuple, Any] = {}      # (schedule, buffers, parity) -> its bound batch
        self.fast = FastCalls()                   # blocking calls on NumPy buffers seen before -> their batches
        self.handshakes: Dict[tuple, bool] = {}   # schedule key -> whether the call carries a signature handshake

    def invalidate(self) -> None:
        """Bound batches of the current generation may name memory or resources that are gone: start a new one."""
        self.generation += 1
        self.prepared.clear()
        self.fast.clear()

    def keep_prepared(self, key: tuple, batch: Any) -> None:
        """Keep a bound batch (the map starts over, as a new generation, when full)."""
        if len(self.prepared) >= PREPARED_MAX:
            self.invalidate()
        self.prepared[key] = batch

    def clear(self) -> None:
        """Forget everything (the communicator is destroyed)."""
        self.invalidate()
        self.choices.clear()
        self.handshakes.clear()
