"""Stream-ordered send/recv (``Comm.send(x, dst, stream=s)``): the library's HcclSend/HcclRecv on the caller's stream.

The default send/recv run the package's own protocol on per-peer lanes (a header checked on the host when
the receive completes, eager and rendezvous modes); a call with ``stream=`` is instead enqueued after the
work on that stream, like a stream-ordered collective, and returns a Request without waiting -- so it can
be captured into an ACL graph (:mod:`.graphs`).  Sizes and dtypes must match the peer's call, as for
HcclSend/HcclRecv.
"""
from __future__ import annotations

import itertools
from typing import Any

from ..errors import HcclError
from . import graphs, observe
from .buffers import Staging, as_buffer
from .interrupts import break_on_interrupted_wait, interrupted
from .request import Request
from .streams import stream_handle, sync_stream

__all__ = ["post"]

_SEQ = itertools.count(1)      # flight-record numbers of these operations (p2p records are not matched by number)


def post(port: Any, direction: str, x: Any, peer: int, stream: Any) -> Request[Any]:
    """Enqueue a send (``direction`` "send": ``x`` to ``peer``) or a receive ("recv": into ``x`` from ``peer``)."""
    with port.lock:          # the call lock until it is enqueued (api/port.py)
        return _post(port, direction, x, peer, stream)


def _post(port: Any, direction: str, x: Any, peer: int, stream: Any) -> Request[Any]:
    sending = direction == "send"
    port.check_usable(direction)
    graphs.check_ordered(port, stream)
    peer = port.rank_arg("dst" if sending else "src", peer)
    if peer == port.rank:
        raise ValueError(f"{'dst' if sending else 'src'}={peer} is this rank; expected another rank of "
                         f"communicator {port.name!r}")
    buf = as_buffer(x, "x" if sending else "buf", writable=not sending)
    handle = stream_handle(stream)
    port.declare_device_memory(buf)
    staging = Staging(port.binding, port.stages)
    ptr = staging.device_ptr(buf) if sending else staging.device_ptr(buf, False, True)
    desc = f"{direction} of {buf.nbytes} bytes {'to' if sending else 'from'} rank {peer} (stream-ordered)"
    record = observe.Record(direction, "p2p", buf.count, buf.nbytes, buf.dtype, None, peer)
    graph = graphs.capturing(stream)
    slot = (observe.issue(port, next(_SEQ), record) if graph is None
            else graph.captured(port, record, lambda: next(_SEQ)))
    call = port.binding.send if sending else port.binding.recv
    try:
        call(ptr, buf.count, int(buf.dtype), peer, port.handle, handle)
    except HcclError as exc:
        raise port.fail(exc, desc) from exc
    except BaseException as exc:     # Ctrl-C, an alarm... in the launch: part of it may be queued
        if graph is None:
            interrupted(port, desc, exc)
        raise
    finally:
        if graph is not None:
            graph.keep(buf)          # its memory stays with the graph
    if graph is None:
        break_on_interrupted_wait(stream, port, desc)
    observe.running(port, slot)

    def sync(timeout: Any) -> bool:
        port.check_process(desc)
        try:
            done = sync_stream(port.binding, handle, timeout)
        except HcclError as exc:
            graphs.refusal(exc)      # a wait refused because the stream captures: the communicator is fine
            raise port.fail(exc, desc) from exc
        except BaseException as exc:   # Ctrl-C, an alarm...: the queued transfer must never land later
            interrupted(port, desc, exc)
            raise
        if done:
            if slot >= 0 and port.flight is not None:
                port.flight.done(slot)
            staging.finish()
        return done

    return Request(f"rank {port.rank} of communicator {port.name!r}: {desc}", sync,
                   lambda: None if sending else x)
