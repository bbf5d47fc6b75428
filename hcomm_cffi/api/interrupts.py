"""A communicator that breaks with work queued abandons that work: it never runs later against reused memory.

On the emulator the queued tasks of a collective or a send/recv advance inside library calls, so an
exception raised while a blocking call waits (Ctrl-C, an alarm handler, pytest-timeout's signal) would
leave the rest of the operation queued, and the caller's retry would run it with the buffer's *new*
contents: the peer's allreduce would return 1001 instead of 3, silently.  So such an exception breaks the
communicator (:meth:`CommState.interrupted <hcomm_cffi.api.state.CommState.interrupted>`, called from the few
places a blocking call launches or waits), and every way a communicator breaks discards its queued work and
tells its peers (:func:`~hcomm_cffi.api.state.abandon_queued`, ``Backend.abandon_communicator``): later calls
on it raise naming the interrupted operation, peers fail naming this rank, and nobody receives data.

The same holds for every wait a user can interrupt with the communicator's work queued: a started
collective's or a send's/receive's ``Request.wait``, and :meth:`Stream.synchronize
<hcomm_cffi.api.stream.Stream.synchronize>` of a stream holding a graph's replays or calls issued with
``stream=`` (:func:`break_on_interrupted_wait`; a replay interrupted once launched breaks too).
"""
from __future__ import annotations

from functools import partial
from typing import Any, Optional

from ..errors import HcclError
from . import observe
from .state import CommState
from .stream import Stream

__all__ = ["break_on_interrupted_wait"]


def break_on_interrupted_wait(stream: Any, state: CommState, what: str) -> None:
    """``what`` of communicator ``state`` was queued on ``stream``: when that is a :class:`Stream` whose next
    synchronize() fails or an exception interrupts, the communicator breaks (its queued work never runs later)."""
    if isinstance(stream, Stream):
        stream.on_synchronized[id(state)] = partial(_stream_waited, state, what)


def _stream_waited(state: CommState, what: str, error: Optional[BaseException]) -> None:
    if error is None or state.broken or state.destroyed:
        return
    if isinstance(error, HcclError):        # the stream failed with the call queued: synchronize() raises this
        raise observe.fail(state, error, f"a wait on the stream holding {what}") from error
    state.interrupted(f"a wait on the stream holding {what}", error)
