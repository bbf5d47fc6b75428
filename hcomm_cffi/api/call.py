"""One operation, normalised once (:class:`Call`), and the communicator's one cache of bound calls (:class:`CommCache`).

A public method of :class:`~hcomm_cffi.api.comm.Comm` validates its arguments into a ``Call``;
every later step (the fast path, the algorithm choice, staging, the signature handshake, the
batch, the flight record, the Request) reads its fields instead of taking them as arguments.

``CommCache`` holds what is derived from calls and the buffers they name -- the algorithm choice
per signature, the calls bound to their buffers (:class:`BoundCall`), the blocking-call keys that reach
them -- each map with a named bound.  Whatever makes a bound call stale (new scratch memory,
dropped resources, a full map starting over, device ranges withdrawn, the signature table starting
over) calls :meth:`CommCache.invalidate`.  Per-stream resources and recorded schedules live with
their stream (``streams.StreamTarget``: they name that stream's threads), bounded there.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

from ..algorithms.interface import Algorithm, AlgorithmArg, CollectiveCall
from ..enums import DataType, ReduceOp
from .buffers import NO_STAGING, Buffer, Staging
from .buffers import OUT_AT, X_AT, Key, unowned
from .launch_order import Record

__all__ = ["Call", "LaunchBatch", "LibraryCall", "BoundCall", "CommCache", "CHOICES_MAX", "RESOURCES_MAX", "SCHEDULES_MAX",
           "ENTRIES_MAX", "FAST_MAX"]

#: call signatures whose algorithm choice (and description) is kept
CHOICES_MAX = 4096
#: resource sets kept per stream (each names acquired threads and channels)
RESOURCES_MAX = 4096
#: recorded schedules kept per stream (algorithms/replay.py)
SCHEDULES_MAX = 4096
#: calls kept bound to their buffers (emulator: prepared task lists), across every stream
ENTRIES_MAX = 256
#: blocking call keys kept (api/buffers.py), each naming one of the bound calls above
FAST_MAX = 1024


class Call:
    """One operation -- a collective, a stream-ordered send/recv, a lane's send/recv -- as the caller made it, then
    as the engine resolved, bound, recorded and launched it (api/engine.py).

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
    fast_key: Optional[Tuple[Any, ...]] = None  # its key in the fast-call map (buffers.key_of), when it has one
    # resolved by Engine._prepare (engine.py)
    alg: Algorithm
    what = ""                        # the description errors carry
    in_place = False
    staging: Staging = NO_STAGING
    collective: CollectiveCall       # the call with the pointers the engines use
    # a stream-ordered send/recv: the library's HcclSend/HcclRecv (the binding's function) and the peer
    direct: Optional[Callable[..., Any]] = None
    peer = -1
    announces = True                 # launched collectives are announced (api/launch_order.py); send/recv are not
    # on its way through the engine (Engine._launch): what it launches, what records it, what completes it
    entry: Optional["BoundCall"] = None  # the kept BoundCall it launches (the fast path, a persistent request)
    bound: Optional["LaunchBatch"] = None
    graph: Any = None                # the ACL graph capturing its stream
    record: Record
    fixed: Optional[bytes] = None
    name: Optional[str] = None       # its name in the trace (default: the record's operation)
    seq = 0
    slot = -1                        # its flight-recorder slot (-1: none)
    pending: Any = None              # the Pending that completes a started call
    launched = False                 # its batch was launched: cut short from here on, its work is queued
    # a send/recv on a point-to-point lane: what binds it (the lane's tasks; it lists the buffers to declare)
    post: Optional[Callable[["Call", List[Buffer]], "LaunchBatch"]] = None
    moves = False                    # its binding moved state peers see (a lane's numbers): cut short, it breaks
    persistent = False               # a persistent request's: its ``entry`` was bound at the init, in ``generation``
    generation = -1

    def __init__(self, coll: str, algorithm: AlgorithmArg, async_op: bool = False, stream: Any = None) -> None:
        self.coll = coll
        self.algorithm = algorithm            # as the caller spelled it ("auto", a name, an Algorithm)
        self.async_op = async_op
        self.stream = stream
        self.blocking = not async_op and stream is None   # neither ``async_op`` nor ``stream=``: run and wait

    def data(self, send: Optional[Buffer], recv: Optional[Buffer], count: int, nbytes: int) -> "Call":
        """Set the buffers, the element count the library takes and the bytes that choose the algorithm."""
        self.send, self.recv, self.count, self.nbytes = send, recv, count, nbytes
        self.dtype = send.dtype if send is not None else DataType.INT8
        return self


class LaunchBatch(NamedTuple):
    """One launchable batch of a call: its tasks (the signature handshake first, when it has one) and the handshake."""

    batch: Any                  # launch() runs it: a TaskBatch or the backend's prepared batch
    exchange: Any               # the handshake to compare after completion (backends without host tasks), or None


class LibraryCall(NamedTuple):
    """A launchable direct library call (a stream-ordered HcclSend/HcclRecv): ``launch()`` makes it."""

    launch: Callable[[], Any]


class BoundCall(NamedTuple):
    """A call bound to its buffers: one batch per parity of the signature handshake (one alone without a handshake),
    and what observe records of it.  The full path, the fast path and persistent requests all launch these."""

    algorithm: str              # the chosen algorithm's name
    what: str                   # the description errors carry
    bound: Tuple[LaunchBatch, ...]    # indexed by the handshake's parity; a single batch when the call has no handshake
    record: Record              # its flight record fields
    fixed: bytes                # the same, encoded once for the flight recorder (observe.fixed_of)


class CommCache:
    """The communicator's one cache of bound calls, with named bounds: the algorithm choices, the bound calls by
    (schedule, buffers, scratch), and the blocking calls' keys (api/buffers.py) to them; :meth:`invalidate`
    drops whatever may name memory or resources that are gone.

    ``generation`` counts the invalidations: a persistent request (api/persistent.py) holds a BoundCall
    outside these maps and binds again when the generation it was bound in has passed.  (The per-stream
    resources and recorded schedules stay with their stream, api/streams.py: they bind threads to it.)
    """

    __slots__ = ("generation", "choices", "entries", "fast")

    def __init__(self) -> None:
        self.generation = 0
        self.choices: Dict[Tuple[Any, ...], Tuple[Algorithm, str]] = {}   # (spec, coll, bytes, dtype, op, root) -> (alg, what)
        self.entries: Dict[Tuple[Any, ...], BoundCall] = {}  # (schedule, send, recv, scratch) -> the call bound there
        self.fast: Dict[Key, BoundCall] = {}             # blocking call keys (buffers.key_of) -> their BoundCall

    def invalidate(self) -> None:
        """Bound batches may name memory or resources that are gone: drop them and start a new generation."""
        self.generation += 1
        self.entries.clear()
        self.fast.clear()

    def keep(self, key: Tuple[Any, ...], entry: BoundCall) -> None:
        """Keep a bound call (the map starts over, as a new generation, when full)."""
        if len(self.entries) >= ENTRIES_MAX:
            self.invalidate()
        self.entries[key] = entry

    def keep_fast(self, key: Key, entry: BoundCall) -> None:
        """Keep ``entry`` for the blocking call ``key`` (one the lookup hashed), with plain pointers for its views (they
        hash and compare equal, and keep no array alive); zero-size buffers are not kept (no meaningful address)."""
        if not key[X_AT + 1] or (key[OUT_AT] is not None and not key[OUT_AT + 1]):
            return
        stored = key[:X_AT] + (unowned(key[X_AT]),) + key[X_AT + 1:OUT_AT] + (unowned(key[OUT_AT]),) + key[OUT_AT + 1:]
        if len(self.fast) >= FAST_MAX:
            self.fast.clear()
        self.fast[stored] = entry

    def choose(self, key: Tuple[Any, ...], choice: Tuple[Algorithm, str]) -> None:
        """Keep an algorithm choice (the map starts over when full: choices name no resources)."""
        if len(self.choices) >= CHOICES_MAX:
            self.choices.clear()
        self.choices[key] = choice

    def clear(self) -> None:
        """Forget everything (the communicator is destroyed)."""
        self.invalidate()
        self.choices.clear()
