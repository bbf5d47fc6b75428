"""Two algorithms written the way a user writes one (docs/guide/own-algorithm.md walks through them).

* ``pairwise``: all-to-all in N-1 steps; in step s rank r sends its block for r+s and receives
  the block of r-s, through one landing slot of the peer's HCCL buffer.
* ``neighbor_exchange``: a collective the Comm API does not name: every rank sends its vector to
  both ring neighbours and receives [from left, from right] (run with ``Comm.run_algorithm``).

Use them as ``algorithm="hcomm_cffi.examples.pairwise:pairwise"`` (or the registered name
``"pairwise"`` once this module is imported), from ``hcomm plan`` / ``hcomm bench --algo`` too.
"""
from __future__ import annotations

from hcomm_cffi.algorithms import ACK, DATA, CollectiveCall, IssueContext, algorithm


@algorithm("pairwise", collectives=("alltoall",))
def pairwise(ctx: IssueContext, call: CollectiveCall) -> None:
    """Step s: wait for rank r+s to free its slot, write my block for it there; copy out r-s's block."""
    n, me, th = ctx.size, ctx.rank, ctx.threads[0]
    blk = call.count * ctx.esz                       # bytes per destination
    ctx.copy(th, call.recv + me * blk, call.send + me * blk, blk)
    piece = ctx.slot_elems(1) * ctx.esz              # one landing slot at offset 0 of every buffer
    for s in range(1, n):
        dst, src = (me + s) % n, (me - s) % n
        for off in range(0, blk, piece):
            nb = min(piece, blk - off)
            ctx.record(th, src, ACK)                 # my slot is free for src
            ctx.send(th, dst, [(0, call.send + dst * blk + off, nb)])   # wait ACK, write, record DATA
            ctx.wait(th, src, DATA)                  # src's piece has landed in my slot
            ctx.copy(th, call.recv + src * blk + off, ctx.mine(0), nb)


@algorithm("neighbor_exchange", collectives=("neighbor_exchange",))
def neighbor_exchange(ctx: IssueContext, call: CollectiveCall) -> None:
    """Send x to both neighbours at once, one thread per direction; out = [from left, from right].

    Each direction has its own notify pair (0/1 rightward, 2/3 leftward), so on 2 ranks, where
    left and right are the same peer, the two directions cannot take each other's signals.
    """
    n, me, nbytes = ctx.size, ctx.rank, call.count * ctx.esz
    if call.recv_count != 2 * call.count:
        raise ValueError(f"neighbor_exchange: out has {call.recv_count} elements; expected 2 x {call.count}")
    left, right = (me - 1) % n, (me + 1) % n
    half = ctx.region_bytes // 2                     # my slot 0 takes my left's data, slot 1 my right's
    if nbytes > half:
        raise ValueError(f"neighbor_exchange: {nbytes} bytes exceed the slot of {half}; raise HCCL_BUFFSIZE")
    ctx.fork(2)
    for th, to, frm, (ack, data), slot, out in ((ctx.threads[0], right, left, (0, 1), 0, 0),
                                                (ctx.threads[1], left, right, (2, 3), half, nbytes)):
        ctx.record(th, frm, ack)                     # my slot for frm is free
        ctx.wait(th, to, ack)                        # the slot at `to` is free
        ctx.put(th, to, slot, call.send, nbytes)     # it lands in the slot `to` keeps for me
        ctx.record(th, to, data)
        ctx.wait(th, frm, data)
        ctx.copy(th, call.recv + out, ctx.mine(slot), nbytes)
    ctx.join(2)
