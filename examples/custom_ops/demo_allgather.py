"""The custom allgather of tests/clients/custom_ops_demo (a C operator package) as an hcomm_cffi algorithm.

The same operator, step for step, written as a user's algorithm instead of a host library plus an AICPU
kernel: one thread; my input into my HCCL buffer and my own block of the output; "ready" to every peer; for
each peer, once it is ready, read its buffer into its block and tell it "done"; wait until every peer is
done with mine.  Its plan (``hcomm plan --algo examples/custom_ops/demo_allgather.py:demo_allgather --op
allgather --ranks 4``) is derived from this schedule, and tests/test_custom_ops.py checks that the C
operator acquires what it says.  Run it::

    comm.allgather(x, algorithm="examples/custom_ops/demo_allgather.py:demo_allgather")
"""
from __future__ import annotations

from hcomm_cffi.algorithms import CollectiveCall, IssueContext
from hcomm_cffi.algorithms.interface import UnsupportedError, define

READY = 0       # channel notify: my input is in my HCCL buffer
DONE = 1        # channel notify: I have read your HCCL buffer


@define("demo_allgather", collectives=("allgather",))
def demo_allgather(ctx: IssueContext, call: CollectiveCall) -> None:
    """Mesh allgather by reading every peer's HCCL buffer (one step: a block must fit the buffer's first half)."""
    nbytes = call.count * ctx.esz
    if nbytes > ctx.region_bytes:
        raise UnsupportedError(f"demo_allgather moves a block in one step: {nbytes} bytes do not fit the HCCL "
                               f"buffer's {ctx.region_bytes}-byte collective region; raise HCCL_BUFFSIZE")
    th = ctx.threads[0]
    peers = [p for p in ctx.group if p != ctx.rank]
    ctx.copy(th, ctx.mine(0), call.send, nbytes)
    ctx.copy(th, call.recv + ctx.rank * nbytes, ctx.mine(0), nbytes)
    for peer in peers:
        ctx.record(th, peer, READY)
    for peer in peers:
        ctx.wait(th, peer, READY)
        ctx.sink.read(th, ctx.res.channels[peer], call.recv + peer * nbytes, ctx.theirs(peer, 0), nbytes)
        ctx.record(th, peer, DONE)
    for peer in peers:
        ctx.wait(th, peer, DONE)
