"""ACL graphs from Python: :class:`Graph`, the context manager :func:`graph` (torch's shape) and ``g.replay()``.

Capture is decided below the Python call path: ``aclmdlRICaptureBegin`` puts the stream in capture
mode, and whatever is then launched on it -- a library collective, the tasks of a package algorithm
and of the threads its batch uses -- is recorded by the runtime (CANN's, or the emulator's
:mod:`hcomm_cffi.sim.graphs`), whatever the algorithm.  The Comm API only keeps the books: a call
issued on a capturing stream gets no flight record of its own (it runs at each replay), its buffers
stay alive as long as the graph, and a replay is ONE flight-recorder operation (``replay``, the
graph's name, the number of captured operations) per communicator, done when the stream is
synchronised through :class:`~hcomm_cffi.api.stream.Stream`.
"""
from __future__ import annotations

import contextlib
import itertools
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from .. import trace
from ..binding import Binding, get_binding
from ..errors import ACL_ERROR_RT_PARAM_INVALID, HcclError
from . import observe
from .errors import CommError
from .state import CommState
from .stream import Stream
from .streams import stream_handle, stream_key

__all__ = ["Graph", "graph", "capturing", "check_ordered", "holding", "CAPTURE_MODES"]

#: torch's ``capture_error_mode`` spellings -> aclmdlRICaptureMode
CAPTURE_MODES = {"global": 0, "thread_local": 1, "relaxed": 2}
_CAPTURING: Dict[int, "Graph"] = {}      # stream address -> the Graph capturing on it (this process)
HOLDING: Dict[int, "Graph"] = {}        # id(CommState) -> the capturing Graph that holds operations of it
_NAMES = itertools.count()


def capturing(stream: Any) -> Optional["Graph"]:
    """The Graph capturing ``stream`` (None: no capture, the common case, costs one test)."""
    if not _CAPTURING or stream is None:
        return None
    return _CAPTURING.get(stream_key(stream))


def check_ordered(state: CommState, stream: Any) -> None:
    """Refuse a call on ``state`` that would be ordered after captured work (api/engine.py's hook; cheap when idle).

    A communicator keeps its calls in one order across streams (api/streams.py): after a call captured on
    stream s, a call on another stream would wait for s -- for work that only runs at replay (the runtime
    would pull that stream into the capture).  Refused before anything is issued: the communicator stays usable.
    """
    if not HOLDING:
        return
    g = HOLDING.get(id(state))
    if g is None or g.stream is None or (stream is not None and stream_key(stream) == stream_key(g.stream)):
        return
    what = "a call on its own stream" if stream is None else "a call on another stream"
    raise CommError(f"rank {state.rank} of communicator {state.name!r}: it has operations captured by ACL graph "
                    f"{g.name!r}, which is still capturing; {what} would be ordered after work that runs only when "
                    "the graph is replayed. Issue it before the capture block, after it, or on the capturing stream")


def holding(state: CommState) -> bool:
    """Whether a graph still capturing holds operations of ``state`` (the fast path then steps aside)."""
    return bool(HOLDING) and id(state) in HOLDING


class _Captured:
    """What one communicator issued into a graph: its state, how it numbers operations and orders them across
    streams, the records."""

    def __init__(self, state: CommState, take_seq: Callable[[], int], order: Optional[Callable[[], None]]) -> None:
        self.state = state
        self.take_seq = take_seq
        self.order = order                # orders the graph's stream after the communicator's previous collective
        self.records: List[observe.Record] = []
        self.announces: List[Callable[[], None]] = []   # each captured call's announcement, made at every replay
        self.replay: Any = None           # the flight record of a replay, and its encoded fields (seal())
        self.fixed: Any = None

    def seal(self, graph: str) -> None:
        """The capture ended: a replay's record is one operation naming the graph and counting what it holds."""
        first = self.records[0]
        self.replay = observe.Record("replay", graph, len(self.records), sum(r.nbytes for r in self.records),
                                     first.dtype, None, -1)
        self.fixed = observe.fixed_of(self.replay)


class Graph:
    """An ACL graph (``aclmdlRI``): capture once with :func:`graph`, run it again with :meth:`replay`.

    ``torch.npu.NPUGraph``'s shape: ``capture_begin(stream)``, ``capture_end()``, ``replay()``,
    ``reset()``.  Captured buffers are kept alive until :meth:`reset`.
    """

    def __init__(self, name: Optional[str] = None, binding: Optional[Binding] = None) -> None:
        self.name = name or f"graph{next(_NAMES)}"
        self.binding = binding if binding is not None else get_binding()
        self.model: Any = None
        self.stream: Optional[Any] = None          # the Stream or aclrtStream it was captured on (replays go there)
        self._own_stream: Optional[Stream] = None  # made for it when none was given
        self._comms: Dict[int, _Captured] = {}
        self._pendings: List[Any] = []             # captured calls: their buffers stay alive with the graph
        self._saved_mode: Optional[int] = None     # this thread's capture mode while a call sets itself up
        self._stream_handle: Any = None            # of the captured stream (replays go there)
        self._books: List[_Captured] = []          # per communicator, once captured
        self._opened: List[Tuple[Any, int, int]] = []   # replays whose flight records are not done yet

    # ------------------------------------------------------------------ capture
    def capture_begin(self, stream: Any = None, capture_error_mode: str = "global") -> None:
        """Start capturing ``stream`` (None: a new Stream of the graph's own)."""
        if self.model is not None or self.stream is not None:
            raise RuntimeError(f"graph {self.name!r} was already captured; reset() it first")
        mode = CAPTURE_MODES.get(capture_error_mode)
        if mode is None:
            raise ValueError(f"capture_error_mode={capture_error_mode!r}; expected one of {sorted(CAPTURE_MODES)}")
        if stream is None:
            stream = self._own_stream = Stream(self.binding)
        handle = stream_handle(stream)
        self.binding.capture_begin(handle, mode)
        self.stream = stream
        _CAPTURING[stream_key(handle)] = self

    def capture_end(self) -> None:
        """End the capture: the graph is ready to replay (an invalidated capture raises its error)."""
        handle = self._stop()
        try:
            self.model = self.binding.capture_end(handle)
        except BaseException:
            self._forget_captured()
            raise
        self._stream_handle = handle
        self._books = [book for book in self._comms.values() if book.records]
        for book in self._books:
            book.seal(self.name)

    def capture_abort(self) -> None:
        """The capture block raised: end the capture and drop what it recorded."""
        handle = self._stop()
        try:
            model = self.binding.capture_end(handle)
            self.binding.graph_destroy(model)
        except HcclError:
            pass                  # invalidated by the refused call: nothing was made
        self._forget_captured()

    def _stop(self) -> Any:
        """The package's books leave capture mode (the caller ends the runtime's capture); the stream handle."""
        if self.stream is None:
            raise RuntimeError(f"graph {self.name!r} is not capturing")
        handle = stream_handle(self.stream)
        _CAPTURING.pop(stream_key(handle), None)
        for key in [k for k, g in HOLDING.items() if g is self]:
            del HOLDING[key]
        self._restore_mode()
        return handle

    def captured(self, state: CommState, record: observe.Record, take_seq: Callable[[], int],
                 order: Optional[Callable[[], None]] = None) -> int:
        """A Comm call issued on the capturing stream (api/engine.py's hook): no flight record of its own.

        ``order``: what the communicator does to keep its collectives in one order across streams
        (api/streams.py); each replay does it first, as a collective issued on the stream would.
        """
        book = self._comms.get(id(state))
        if book is None:
            book = self._comms[id(state)] = _Captured(state, take_seq, order)
            HOLDING[id(state)] = self
        book.records.append(record)
        # the call's own set-up (scratch, resources, a signature row written once with aclrtMemcpy) is host work
        # that does not affect the capture: RELAXED for this thread until it is launched, as the vendor documents
        # (hicann/runtime@681ef76:docs/zh/dev_guide/04-01_single_stream_capture.md:15)
        if self._saved_mode is None:
            self._saved_mode = self.binding.capture_thread_exchange_mode(CAPTURE_MODES["relaxed"])
        return observe.NO_SLOT

    def announces(self, state: CommState, announce: Callable[[], None]) -> None:
        """How the call of ``state`` just captured is announced at each replay (api/launch_order.py): a capture runs
        nothing, so the call takes its place in the communicator's order when a replay launches it."""
        self._comms[id(state)].announces.append(announce)

    def keep(self, pending: Any) -> None:
        """Keep a captured call (its Pending: buffers and the communicator's scratch) until reset()."""
        self._restore_mode()
        self._pendings.append(pending)

    def _restore_mode(self) -> None:
        if self._saved_mode is not None:
            mode, self._saved_mode = self._saved_mode, None
            self.binding.capture_thread_exchange_mode(mode)

    @property
    def operations(self) -> List[str]:
        """What was captured: 'allreduce (algorithm ring, 4096 bytes)' per Comm call, in issue order."""
        return [f"{r.collective} (algorithm {r.algorithm}, {r.nbytes} bytes)"
                for book in self._comms.values() for r in book.records]

    # ------------------------------------------------------------------ replay
    def replay(self) -> None:
        """Run the whole recording on the stream it was captured on: one launch, stream-ordered (no wait)."""
        model = self.model
        if model is None:
            raise RuntimeError(f"graph {self.name!r} has nothing to replay; capture it first")
        books = self._books
        try:
            for book in books:      # a usable communicator, ordered on this stream as a call issued here would be
                state = book.state
                if state.destroyed or state.broken:
                    raise CommError(f"graph {self.name!r} replays operations of communicator {state.name!r}, which "
                                    f"{'was destroyed' if state.destroyed else 'failed: ' + str(state.broken)}; "
                                    "capture again on a working communicator")
                if book.order is not None:
                    book.order()
        except HcclError as exc:
            if not exc.from_library:          # refused here (a destroyed or failed communicator): as raised
                raise
            raise CommError(f"replay of graph {self.name!r} failed (nothing ran): {exc}") from exc
        what = f"the replay of ACL graph {self.name!r}"
        try:
            try:
                self.binding.graph_execute_async(model, self._stream_handle)
            except HcclError as exc:
                if exc.code == ACL_ERROR_RT_PARAM_INVALID:     # refused before anything was queued (a freed buffer...)
                    raise CommError(f"replay of graph {self.name!r} failed (nothing ran): {exc}") from exc
                failed = None       # failed while queueing or running: what it queued must never run later
                for book in books:
                    if not (book.state.destroyed or book.state.broken):
                        failed = failed or observe.fail(book.state, exc, what)
                raise (failed or CommError(f"replay of graph {self.name!r} failed: {exc}")) from exc
            self._opened_replays(books)
        except BaseException as exc:    # Ctrl-C, an alarm... in the launch or before its books are open: part of it
            for book in books:          # may be queued and must never run (each breaks; a CommError above: handled)
                if not book.state.destroyed:
                    book.state.interrupted(what, exc)
            raise

    def _opened_replays(self, books: List[_Captured]) -> None:
        """The replay just launched: its calls announced, one operation per communicator opened, the stream told."""
        opened = self._opened
        for book in books:      # one operation per communicator: the replay, naming the graph and its contents
            for announce in book.announces:     # its calls take their places in the communicator's order
                announce()
            state, seq = book.state, book.take_seq()
            slot = observe.issue(state, seq, book.replay, book.fixed, launched=True)   # it was launched above
            if trace.ACTIVE:    # the replay's slice lists what it contains; its tasks are tagged with it
                trace.op_begin(state.name, "replay", seq, {"graph": self.name, "captured": [
                    f"{r.collective} ({r.algorithm}, {r.nbytes} bytes)" for r in book.records]})
            opened.append((state, slot, seq))
        stream = self.stream
        if opened and isinstance(stream, Stream):   # the stream tells it when the replays are done (or interrupted)
            stream.on_synchronized[id(self)] = self._close_opened

    def _close_opened(self, error: Optional[BaseException]) -> None:
        """The stream passed the replays launched so far (their flight records are done), or failed in them:
        their communicators fail naming the graph (a timeout or a dead peer dumps every flight recorder); or
        an exception interrupted the wait: they break, and their queued work never runs (api/engine.py)."""
        opened, self._opened = self._opened, []
        failed: Optional[CommError] = None
        for state, slot, seq in opened:
            if state.destroyed:
                continue
            if error is None:
                observe.done(state, slot, "replay", seq)
            elif not isinstance(error, HcclError):
                state.interrupted(f"replay #{seq} of ACL graph {self.name!r}", error)
            elif not state.broken:
                failed = failed or observe.fail(state, error, f"replay #{seq} of ACL graph {self.name!r}")
        if failed is not None:
            raise failed from error

    def reset(self) -> None:
        """Destroy the graph; its captured buffers are released and it may be captured again."""
        if self.model is not None:
            model, self.model = self.model, None
            self.binding.graph_destroy(model)
        self._forget_captured()
        if self._own_stream is not None:
            own, self._own_stream = self._own_stream, None
            own.close()

    def _forget_captured(self) -> None:
        """Drop what the capture recorded (its calls' Pendings, books and open replays) and the stream."""
        self.stream = None
        for pending in self._pendings:
            pending.forget()             # a captured call never waited on: the graph held it (forgetting is idempotent)
        self._pendings.clear()
        self._comms.clear()
        self._books = []
        self._opened = []

    def __repr__(self) -> str:
        state = "captured" if self.model is not None else ("capturing" if self.stream is not None else "empty")
        return f"Graph({self.name!r}, {state}, {sum(len(b.records) for b in self._comms.values())} operations)"


@contextlib.contextmanager
def graph(g: Graph, pool: Any = None, stream: Any = None, capture_error_mode: str = "global") -> Iterator[Graph]:
    """Capture what the block issues on ``stream`` into ``g`` (torch.npu.graph's shape and argument order).

    Collectives issued with ``stream=`` that stream are recorded, not run; ``g.replay()`` runs them.
    An exception in the block ends the capture, drops it and propagates.  ``pool`` is torch's memory pool
    argument: the package allocates no tensors, so only None is accepted.
    """
    if pool is not None:
        raise ValueError(f"pool={pool!r}; expected None (hcomm_cffi graphs capture no allocator: the captured "
                         "buffers are the caller's, kept alive by the graph)")
    g.capture_begin(stream, capture_error_mode)
    try:
        yield g
    except BaseException:
        g.capture_abort()
        raise
    g.capture_end()
