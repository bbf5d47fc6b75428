"""The send/recv of tests/clients/custom_ops_demo (HcclDemoSend / HcclDemoRecv, a C operator package) as an
hcomm_cffi algorithm: a collective of its own in which every even rank sends to the next odd rank, as the
vendor's send/recv sample pairs its devices.

The same protocol, step for step, on one thread and one channel: the sender stages its data in its HCCL
buffer and says "ready", the receiver reads it from there and says "done", the sender waits for that.  Its
plan: ``hcomm plan --algo examples/custom_ops/demo_sendrecv.py:demo_sendrecv --ranks 4``; tests/
test_custom_ops.py checks that the C operator acquires what it says.  Run it::

    out = comm.run_algorithm("examples/custom_ops/demo_sendrecv.py:demo_sendrecv", x, out=np.empty_like(x))
"""
from __future__ import annotations

from hcomm_cffi.algorithms import CollectiveCall, IssueContext
from hcomm_cffi.algorithms.interface import UnsupportedError, define

READY = 0       # channel notify: the data is in the sender's HCCL buffer
DONE = 1        # channel notify: the receiver has read it


@define("demo_sendrecv", collectives=("demo_sendrecv",))
def demo_sendrecv(ctx: IssueContext, call: CollectiveCall) -> None:
    """Even rank r sends ``send`` to rank r + 1, whose ``recv`` gets it; a last even rank without a partner idles."""
    nbytes = call.count * ctx.esz
    if nbytes > ctx.region_bytes:
        raise UnsupportedError(f"demo_sendrecv moves its data in one step: {nbytes} bytes do not fit the HCCL "
                               f"buffer's {ctx.region_bytes}-byte collective region; raise HCCL_BUFFSIZE")
    th, me = ctx.threads[0], ctx.rank
    if me % 2 == 0 and me + 1 < ctx.size:
        ctx.copy(th, ctx.mine(0), call.send, nbytes)
        ctx.record(th, me + 1, READY)
        ctx.wait(th, me + 1, DONE)
    elif me % 2 == 1:
        ctx.wait(th, me - 1, READY)
        ctx.sink.read(th, ctx.res.channels[me - 1], call.recv, ctx.theirs(me - 1, 0), nbytes)
        ctx.record(th, me - 1, DONE)
