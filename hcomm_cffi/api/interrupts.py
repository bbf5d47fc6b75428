"""A communicator that breaks with work queued abandons that work: it never runs later against reused memory.

On the emulator the queued tasks of a collective or a send/recv advance inside library calls, so an
exception raised while a blocking call waits (Ctrl-C, an alarm handler, pytest-timeout's signal) would
leave the rest of the operation queued, and the caller's retry would run it with the buffer's *new*
contents: the peer's allreduce would return 1001 instead of 3, silently.  So such an exception breaks the
communicator (:func:`interrupted`, called from the few places a blocking call launches or waits), and
every way a communicator breaks discards its queued work and tells its peers
(:func:`abandon_queued`, ``Backend.abandon_communicator``): later calls on it raise naming the
interrupted operation, peers fail naming this rank, and nobody receives data.

The same holds for every wait a user can interrupt with the communicator's work queued: a started
collective's or a send's/receive's ``Request.wait``, and :meth:`Stream.synchronize
<hcomm_cffi.api.stream.Stream.synchronize>` of a stream holding a graph's replays or calls issued with
``stream=`` (:func:`break_on_interrupted_wait`; a replay interrupted once launched breaks too).
"""
from __future__ import annotations

from functools import partial
from typing import Any, Optional

from ..errors import HcclError
from .errors import CommError
from .stream import Stream

__all__ = ["interrupted", "abandon_queued", "break_on_interrupted_wait"]


def interrupted(port: Any, what: str, exc: BaseException) -> None:
    """``exc`` left the blocking ``what`` while its work was queued: the communicator breaks (the caller re-raises).

    ``port``: the communicator's CommPort.  A CommError (the library failed, already handled) changes nothing.
    """
    if isinstance(exc, CommError) or port.broken:
        return
    text = str(exc)
    why = (f"{what} was interrupted by {type(exc).__name__}{': ' + text if text else ''} while it waited; "
           "its queued work was discarded")
    port.mark_broken(f"rank {port.rank}: {why}", interrupted=True)


def break_on_interrupted_wait(stream: Any, port: Any, what: str) -> None:
    """``what`` of communicator ``port`` was queued on ``stream``: when that is a :class:`Stream` whose next
    synchronize() fails or an exception interrupts, the communicator breaks (its queued work never runs later)."""
    if isinstance(stream, Stream):
        stream.on_synchronized[id(port)] = partial(_stream_waited, port, what)


def _stream_waited(port: Any, what: str, error: Optional[BaseException]) -> None:
    if error is None or port.broken or port.destroyed:
        return
    if isinstance(error, HcclError):        # the stream failed with the call queued: synchronize() raises this
        raise port.fail(error, f"a wait on the stream holding {what}") from error
    interrupted(port, f"a wait on the stream holding {what}", error)


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
