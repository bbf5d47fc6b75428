"""NB (non-uniform Bruck): reduce-scatter, allgather and allreduce in ceil(log2 N) steps on one thread.

The vendor's NB (hcomm ``calc_nb_transport_req.cc:49-73``) holds channels to (r +- 2^k) mod N and
runs on one stream (the whole-communicator executor, ``coll_native_executor_base.cc:70-76``): the
planner's ``nb`` under the A2 profile, which this built-in acquires exactly.

Offsets are relative to the rank: block j sits at offset (j - r) mod N.  ReduceScatter walks the
distances 2^k from the largest down: at distance d a rank sends the partial sums of the blocks at
offsets [d, 2d) to r + d (where they are at offsets [0, d)) and adds what r - d sends into its own;
after the last step only offset 0, its own block, is left.  AllGather is the reverse: at distance
d (smallest first) a rank holding offsets [0, d) sends them to r - d and receives offsets [d, 2d)
from r + d.  Steps with d > N/2 carry N - d blocks.  AllReduce = ReduceScatter + AllGather of
near-equal blocks.  Every step is the shift handshake (``IssueContext.shift``): release my zone to
the sender, wait for the receiver's release, write, signal, wait for my data.
"""
from __future__ import annotations

from typing import Any, List, Sequence

from ..plan.algos.common import ceil_log2
from .interface import ALIGN, CollectiveCall, define, IssueContext, split_even, UnsupportedError
from .formulas import formula_resources

__all__ = ["nb", "nb_reduce_scatter", "nb_allgather", "COLLECTIVES"]

COLLECTIVES = ("allreduce", "reduce_scatter", "allgather")
CData = Any


def _distances(n: int) -> List[int]:
    """2^k for every 2^k < n, smallest first."""
    return [1 << k for k in range(ceil_log2(n))]


def _step(ctx: IssueContext, group: Sequence[int], d: int, send_offs: range, recv_offs: range, toward: int,
          blocks: Sequence[CData], lens: Sequence[int], po: int, slot: int, land: Any) -> None:
    """Send blocks at my offsets ``send_offs`` to the rank ``toward * d`` away; ``land(q, j, n)`` each arrival."""
    n, me, esz, th = len(group), group.index(ctx.rank), ctx.esz, ctx.threads[0]
    sb = -(-slot * esz // ALIGN) * ALIGN
    to, frm = group[(me + toward * d) % n], group[(me - toward * d) % n]
    writes = []
    for q, o in enumerate(send_offs):
        j = (me + o) % n
        ln = max(0, min(slot, lens[j] - po))
        if ln:
            writes.append((q * sb, blocks[j] + po * esz, ln * esz))
    ctx.shift(th, to, frm, writes)
    for q, o in enumerate(recv_offs):
        j = (me + o) % n
        ln = max(0, min(slot, lens[j] - po))
        if ln:
            land(ctx.mine(q * sb), j, ln)


def nb_reduce_scatter(ctx: IssueContext, group: Sequence[int], acc: Sequence[CData], lens: Sequence[int]) -> None:
    """Reduce block j of every rank into ``acc[j]`` of group[j] (``acc`` holds my input and is reduced in place)."""
    n = len(group)
    slot = ctx.slot_elems(max(1, n // 2))
    for po in range(0, max(lens, default=0), slot):
        for d in reversed(_distances(n)):
            top = min(2 * d, n)
            _step(ctx, group, d, range(d, top), range(0, top - d), +1, acc, lens, po, slot,
                  lambda src, j, ln: ctx.reduce(ctx.threads[0], acc[j] + po * ctx.esz, src, ln))


def nb_allgather(ctx: IssueContext, group: Sequence[int], out: Sequence[CData], lens: Sequence[int]) -> None:
    """Every block ``out[j]`` of group[j] to every rank (mine is already in place)."""
    n = len(group)
    slot = ctx.slot_elems(max(1, n // 2))
    for po in range(0, max(lens, default=0), slot):
        for d in _distances(n):
            cnt = min(d, n - d)
            _step(ctx, group, d, range(0, cnt), range(d, d + cnt), -1, out, lens, po, slot,
                  lambda src, j, ln: ctx.copy(ctx.threads[0], out[j] + po * ctx.esz, src, ln * ctx.esz))


def run(ctx: IssueContext, group: Sequence[int], a: CollectiveCall) -> None:
    """Issue ``a`` over ``group`` on this rank."""
    n, esz, th = len(group), ctx.esz, ctx.threads[0]
    me = group.index(ctx.rank)
    if a.coll == "allreduce":
        ctx.copy(th, a.recv, a.send, a.count * esz)
        if n > 1 and a.count:
            chunks = split_even(a.count, n)
            blocks = [a.recv + o * esz for o, _ in chunks]
            lens = [ln for _, ln in chunks]
            nb_reduce_scatter(ctx, group, blocks, lens)
            nb_allgather(ctx, group, blocks, lens)
    elif a.coll == "reduce_scatter":
        if n == 1 or not a.count:
            ctx.copy(th, a.recv, a.send, a.count * esz)
            return
        acc = ctx.scratch(n * a.count * esz)
        ctx.copy(th, acc, a.send, n * a.count * esz)
        blocks = [acc + j * a.count * esz for j in range(n)]
        nb_reduce_scatter(ctx, group, blocks, [a.count] * n)
        ctx.copy(th, a.recv, blocks[me], a.count * esz)
    elif a.coll == "allgather":
        outs = [a.recv + j * a.count * esz for j in range(n)]
        ctx.copy(th, outs[me], a.send, a.count * esz)
        if n > 1 and a.count:
            nb_allgather(ctx, group, outs, [a.count] * n)
    else:
        raise UnsupportedError(f"nb has no {a.coll}; it implements {', '.join(COLLECTIVES)}")


@define("nb", collectives=COLLECTIVES, resources=formula_resources("nb", platform="a2"))
def nb(ctx: IssueContext, call: CollectiveCall) -> None:
    """Non-uniform Bruck over every rank of the communicator (the A2 profile's resources)."""
    run(ctx, ctx.group, call)
