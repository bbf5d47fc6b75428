"""Stream-ordered send/recv (``Comm.send(x, dst, stream=s)``): the library's HcclSend/HcclRecv on the caller's stream.

The default send/recv run the package's own protocol on per-peer lanes (a header checked on the host when
the receive completes, eager and rendezvous modes); a call with ``stream=`` is instead enqueued after the
work on that stream, like a stream-ordered collective, and returns a Request without waiting -- so it can
be captured into an ACL graph (:mod:`.graphs`).  Sizes and dtypes must match the peer's call, as for
HcclSend/HcclRecv.  It is a :class:`~hcomm_cffi.api.call.Call` the engine (api/issue.py) takes the way it
takes a started collective: one flight record and trace entry, closed by its Pending's completion.
"""
from __future__ import annotations

from typing import Any

from .announce import Record
from .buffers import as_buffer
from .call import Call
from .issue import Issuer
from .nonblocking import request_for
from .request import Request
from .streams import stream_handle

__all__ = ["post"]


def post(engine: Issuer, direction: str, x: Any, peer: int, stream: Any) -> Request[Any]:
    """Enqueue a send (``direction`` "send": ``x`` to ``peer``) or a receive ("recv": into ``x`` from ``peer``)."""
    state = engine.state
    sending = direction == "send"
    peer = state.rank_arg("dst" if sending else "src", peer)
    if peer == state.rank:
        raise ValueError(f"{'dst' if sending else 'src'}={peer} is this rank; expected another rank of "
                         f"communicator {state.name!r}")
    buf = as_buffer(x, "x" if sending else "buf", writable=not sending)
    stream_handle(stream)                      # a stream of this process (refused before anything is issued)
    c = Call(direction, "native", stream=stream)    # the library's own send/recv
    c.data(buf if sending else None, None if sending else buf, buf.count, buf.nbytes)
    c.dtype = buf.dtype
    c.direct = state.binding.send if sending else state.binding.recv
    c.peer = peer
    c.announces = False
    c.what = f"{direction} of {buf.nbytes} bytes {'to' if sending else 'from'} rank {peer} (stream-ordered)"
    c.record = Record(direction, "p2p", buf.count, buf.nbytes, buf.dtype, None, peer)
    return request_for(engine.start(c), None if sending else x)
