"""Started collectives: what one needs until it completes (:class:`Pending`) and the Request handed back.

A collective is *started* when its tasks are launched onto a stream (the communicator's own, or a
user stream for stream-ordered calls); it *completes* when that stream has drained past it.  Until
then the user's buffers (and, on CANN, the staging copies) are kept alive here.

What progresses when (the emulator, as MPI): queued work advances inside library calls — any
stream or event synchronisation, ``Request.wait``/``test``, and every later collective or
point-to-point call of the process, whichever communicator it is on.  A rank that computes for a
long time without calling the library delays its peers, it cannot deadlock them: every rank
issues collectives of one communicator in the same order, each communicator keeps its
collectives in one total order (one stream, or event-chained streams), and waiting on anything
drives every queue of the process.  On Ascend the device runs the queued tasks by itself.
The torch backend adds a driver of its own: a background thread that waits on the started
collectives whose Future was asked for (:mod:`hcomm_cffi.torch.progress`), so they progress
while the caller computes without calling the library.
"""
from __future__ import annotations

from functools import partial
from typing import Any, Optional, Tuple

from ..errors import HcclError
from . import live, observe
from .buffers import NO_STAGING, Staging
from .op import Call
from .errors import CommError
from .graphs import refusal
from .request import Request
from .signatures import Signer
from .state import CommState
from .streams import sync_stream

__all__ = ["Pending", "request_for"]


class Pending:
    """One started collective: its stream, its buffers and staging until :meth:`sync` sees it done."""

    __slots__ = ("state", "signer", "what", "coll", "seq", "stream", "staging", "keep", "done", "exchange", "slot", "error",
                 "graph", "announced")

    def __init__(self, state: CommState, signer: Signer, call: Call, stream: Any, exchange: Any, slot: int,
                 seq: int) -> None:
        self.state = state             # the communicator's state (its in-flight set holds this until it completes)
        self.signer = signer           # its signature handshakes (compares ``exchange`` at completion)
        self.what = call.what
        self.coll = call.coll
        self.seq = seq                 # its sequence number (flight recorder, trace)
        self.stream = stream
        self.staging: Staging = call.staging
        self.keep: Tuple[Any, ...] = (call.send, call.recv)   # the user's buffers stay alive until it completes
        self.done = False
        self.exchange = exchange       # its signature handshake, compared at completion (backends without host tasks)
        self.slot = slot               # its flight-recorder slot (-1: none)
        self.error: Optional[BaseException] = None   # the failure, raised again by every later sync
        self.graph: Any = None         # the ACL graph that captured it: it runs at that graph's replays
        self.announced: Optional[Tuple[int, str]] = None   # its number and description among the announced collectives

    def restart(self, exchange: Any, slot: int, seq: int) -> None:
        """The same call started again (a persistent request's next start): pending, with this start's record."""
        self.done = False
        self.exchange = exchange
        self.slot = slot
        self.seq = seq

    def sync(self, timeout: Optional[float]) -> bool:
        """Wait up to ``timeout`` s (None: the communicator's limits) for the stream; raises CommError on failure.

        A failed collective raises its error again on every later call (a second wait never reports success).
        """
        if self.error is not None:
            raise self.error
        state = self.state
        if state.pid != live.PID:        # a forked child: the stream is its parent's (refused, nothing waited for)
            state.check_process(self.what)
        if self.done:
            return True
        try:
            if timeout is None:                   # committed: published if it lasts (api/launch_order.py)
                announced = self.announced
                if announced is None:
                    state.binding.synchronize_stream(self.stream)
                    finished = True
                else:
                    finished = state.announcer.waiting(partial(sync_stream, state.binding, self.stream),
                                                      collective=announced)
            else:
                finished = sync_stream(state.binding, self.stream, timeout)
        except HcclError as exc:
            refusal(exc)             # refused because an ACL graph captures the stream: the communicator is fine
            self.forget()
            self._check_exchange()          # a mismatch explains the failure better than its symptom
            self.error = observe.fail(state, exc, self.what)
            raise self.error from exc
        except BaseException as exc:        # Ctrl-C, an alarm...: its queued work must never run later
            state.interrupted(self.what, exc)
            raise
        if finished:
            observe.done(state, self.slot, self.coll, self.seq)
            self.forget()
            if self.exchange is not None:
                self._check_exchange()
            broken = state.broken
            if broken:   # the stream failed while this was queued, and an earlier wait took the error
                self.error = CommError(f"{state.where()}: {self.what} was in "
                                       f"flight when the communicator failed ({broken}); its result is not valid")
                raise self.error
            if self.staging is not NO_STAGING:
                self.staging.finish()
        return finished

    def _check_exchange(self) -> None:
        """Raise the mismatch the call's signature handshake found, if any (compared once)."""
        exchange, self.exchange = self.exchange, None
        if exchange is not None:
            try:
                self.signer.check_completed(exchange)
            except BaseException as mismatch:
                self.error = mismatch
                raise

    def forget(self) -> None:
        """Retire this operation without waiting for it (it failed, or its ACL graph held it and was reset)."""
        self.done = True
        self.keep = ()
        self.state.inflight.discard(self)


def request_for(pending: Optional[Pending], result: Any) -> Request[Any]:
    """A Request completing with ``pending`` (a started collective's: never None); wait() returns ``result`` (the
    output buffer)."""
    assert pending is not None
    what = f"{pending.state.where()}: {pending.what}"
    return Request(what, pending.sync, result=result)
