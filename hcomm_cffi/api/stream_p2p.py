"""Stream-ordered send/recv (``Comm.send(x, dst, stream=s)``): the library's HcclSend/HcclRecv on the caller's stream.

The default send/recv run the package's own protocol on per-peer lanes (a header checked on the host when
the receive completes, eager and rendezvous modes); a call with ``stream=`` is instead enqueued after the
work on that stream, like a stream-ordered collective, and returns a Request without waiting -- so it can
be captured into an ACL graph (:mod:`.graphs`).  Sizes and dtypes must match the peer's call, as for
HcclSend/HcclRecv.  Operations are numbered with the communicator's collectives (its ``seq``); each opens
one flight record and trace entry, which its request's completion closes (``observe.done``).
"""
from __future__ import annotations

from typing import Any

from ..errors import HcclError
from . import graphs, observe
from .buffers import Staging, as_buffer
from .interrupts import break_on_interrupted_wait
from .request import Request
from .state import CommState
from .streams import stream_handle, sync_stream

__all__ = ["post"]


def post(state: CommState, direction: str, x: Any, peer: int, stream: Any) -> Request[Any]:
    """Enqueue a send (``direction`` "send": ``x`` to ``peer``) or a receive ("recv": into ``x`` from ``peer``)."""
    with state.lock:          # the call lock until it is enqueued (api/state.py)
        return _post(state, direction, x, peer, stream)


def _post(state: CommState, direction: str, x: Any, peer: int, stream: Any) -> Request[Any]:
    sending = direction == "send"
    state.check_usable(direction)
    graphs.check_ordered(state, stream)
    peer = state.rank_arg("dst" if sending else "src", peer)
    if peer == state.rank:
        raise ValueError(f"{'dst' if sending else 'src'}={peer} is this rank; expected another rank of "
                         f"communicator {state.name!r}")
    buf = as_buffer(x, "x" if sending else "buf", writable=not sending)
    handle = stream_handle(stream)
    state.device_memory.declare(buf)
    staging = Staging(state.binding, state.stages)
    ptr = staging.device_ptr(buf) if sending else staging.device_ptr(buf, False, True)
    desc = f"{direction} of {buf.nbytes} bytes {'to' if sending else 'from'} rank {peer} (stream-ordered)"
    record = observe.Record(direction, "p2p", buf.count, buf.nbytes, buf.dtype, None, peer)
    graph = graphs.capturing(stream)
    seq = state.next_seq() if graph is None else 0
    if graph is None:
        slot = observe.issue(state, seq, record)
    else:                 # recorded by the graph: each replay is an operation of its own (api/graphs.py)
        slot = graph.captured(state, record, state.next_seq)
    call = state.binding.send if sending else state.binding.recv
    try:
        call(ptr, buf.count, int(buf.dtype), peer, state.handle, handle)
    except HcclError as exc:
        raise observe.fail(state, exc, desc) from exc
    except BaseException as exc:     # Ctrl-C, an alarm... in the launch: part of it may be queued
        if graph is None:
            state.interrupted(desc, exc)
        raise
    finally:
        if graph is not None:
            graph.keep(buf)          # its memory stays with the graph
    if graph is None:
        break_on_interrupted_wait(stream, state, desc)
    observe.running(state, slot)
    closed = [graph is not None]     # a captured call's record is the graph's: its replays close their own

    def sync(timeout: Any) -> bool:
        state.check_process(desc)
        try:
            done = sync_stream(state.binding, handle, timeout)
        except HcclError as exc:
            graphs.refusal(exc)      # a wait refused because the stream captures: the communicator is fine
            raise observe.fail(state, exc, desc) from exc
        except BaseException as exc:   # Ctrl-C, an alarm...: the queued transfer must never land later
            state.interrupted(desc, exc)
            raise
        if done:
            if not closed[0]:
                closed[0] = True
                observe.done(state, slot, direction, seq)
            staging.finish()
        return done

    return Request(f"{state.where()}: {desc}", sync, lambda: None if sending else x)
