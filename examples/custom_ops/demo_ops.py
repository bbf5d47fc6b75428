"""The two operators of tests/clients/custom_ops_demo (a C operator package) as hcomm_cffi algorithms.

The same operators, step for step, written as a user's algorithms instead of a host library plus an AICPU
kernel: one thread, the same two notifies on the same channels.

* ``demo_allgather``: my input into my HCCL buffer and my own block of the output; "ready" to every peer; for
  each peer, once it is ready, read its buffer into its block and tell it "done"; wait until every peer is
  done with mine.
* ``demo_sendrecv``: a collective of its own in which every even rank sends to the next odd rank, as the
  vendor's send/recv sample pairs its devices: the sender stages its data in its HCCL buffer and says
  "ready", the receiver reads it from there and says "done", the sender waits for that.

Their plans: ``hcomm plan --algo examples/custom_ops/demo_ops.py:demo_allgather --op allgather --ranks 4`` and
``hcomm plan --algo examples/custom_ops/demo_ops.py:demo_sendrecv --ranks 4``; tests/test_custom_ops.py checks
that the C operators acquire what they say.  Run them::

    y = comm.allgather(x, algorithm="examples/custom_ops/demo_ops.py:demo_allgather")
    y = comm.run_algorithm("examples/custom_ops/demo_ops.py:demo_sendrecv", x, out=np.empty_like(x))
"""
from __future__ import annotations

from hcomm_cffi.algorithms import CollectiveCall, IssueContext
from hcomm_cffi.algorithms.interface import UnsupportedError, define

READY = 0       # channel notify: the data is in the sender's HCCL buffer
DONE = 1        # channel notify: the receiver has read it


def _one_step(ctx: IssueContext, call: CollectiveCall) -> int:
    """The bytes of ``call``'s block, which these operators move in one step through the HCCL buffer."""
    nbytes = call.count * ctx.esz
    if nbytes > ctx.region_bytes:
        raise UnsupportedError(f"{call.coll} moves a block in one step: {nbytes} bytes do not fit the HCCL buffer's "
                               f"{ctx.region_bytes}-byte collective region; raise HCCL_BUFFSIZE")
    return nbytes


def _read(ctx: IssueContext, th: int, peer: int, dst: object, nbytes: int) -> None:
    """Once ``peer`` is ready, read the start of its HCCL buffer into ``dst``, then tell it I am done."""
    ctx.wait(th, peer, READY)
    ctx.sink.read(th, ctx.res.channels[peer], dst, ctx.theirs(peer, 0), nbytes)
    ctx.record(th, peer, DONE)


@define("demo_allgather", collectives=("allgather",))
def demo_allgather(ctx: IssueContext, call: CollectiveCall) -> None:
    """Mesh allgather by reading every peer's HCCL buffer."""
    nbytes = _one_step(ctx, call)
    th = ctx.threads[0]
    peers = [p for p in ctx.group if p != ctx.rank]
    ctx.copy(th, ctx.mine(0), call.send, nbytes)
    ctx.copy(th, call.recv + ctx.rank * nbytes, ctx.mine(0), nbytes)
    for peer in peers:
        ctx.record(th, peer, READY)
    for peer in peers:
        _read(ctx, th, peer, call.recv + peer * nbytes, nbytes)
    for peer in peers:
        ctx.wait(th, peer, DONE)


@define("demo_sendrecv", collectives=("demo_sendrecv",))
def demo_sendrecv(ctx: IssueContext, call: CollectiveCall) -> None:
    """Even rank r sends ``send`` to rank r + 1, whose ``recv`` gets it; a last even rank without a partner idles."""
    nbytes = _one_step(ctx, call)
    th, me = ctx.threads[0], ctx.rank
    if me % 2 == 0 and me + 1 < ctx.size:
        ctx.copy(th, ctx.mine(0), call.send, nbytes)
        ctx.record(th, me + 1, READY)
        ctx.wait(th, me + 1, DONE)
    elif me % 2 == 1:
        _read(ctx, th, me - 1, call.recv, nbytes)
