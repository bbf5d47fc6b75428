"""Ring: chunked reduce-scatter + allgather in 2(N-1) steps, chains for rooted ops, store-and-forward alltoall.

For N >= 3 the data is split in two halves driven by two threads in opposite directions (main
thread: clockwise, toward the right neighbour; slave: counter-clockwise, toward the left), so both
links of every rank carry traffic.  Each step is the §3.3 ring step: ``record(left, ACK)``,
``wait(right, ACK)``, ``write``, ``record(right, DATA)``, ``wait(left, DATA)``, then the local
reduce/copy.  Landing slots alternate by step parity, so the chunk a rank forwards is never the one
its left neighbour is overwriting.  Writes go from the user's buffer (or the previous landing slot
that holds the partial sum) straight into the neighbour's HCCL buffer; reductions go from the HCCL
buffer into the user's output.  Large messages are processed in pieces that fit the slots.
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

from .interface import ACK, DATA, CollectiveCall, define, IssueContext, split_even, UnsupportedError
from .formulas import formula_resources

__all__ = ["ring", "run", "COLLECTIVES", "ring_pass", "ring_broadcast", "ring_reduce", "ring_barrier"]

COLLECTIVES = ("allreduce", "reduce_scatter", "allgather", "broadcast", "reduce", "alltoall", "barrier")
CData = Any



def ring_pass(ctx: IssueContext, th: int, ring: Sequence[int], srcs: List[Optional[CData]], outs: List[Optional[CData]],
              lens: List[int], rs: bool, ag: bool, region: int, slot: int, ack: int = ACK, data: int = DATA) -> None:
    """One direction: reduce-scatter (chunk i ends reduced at ring[i]) then/or allgather of chunks.

    ``srcs[j]``/``outs[j]`` point at chunk j's input/output (None where unused), ``lens[j]`` its
    elements; ``region`` is the byte offset of this direction's two landing slots of ``slot`` elements;
    ``ack``/``data`` its notify pair (lanes sharing a channel each have their own).
    """
    n = len(ring)
    i = ring.index(ctx.rank)
    left, right = ring[(i - 1) % n], ring[(i + 1) % n]
    esz = ctx.esz
    sb = ctx.slot_bytes(slot)
    offs = (region, region + sb)
    for po in range(0, max(lens), slot):
        ln = [max(0, min(slot, l - po)) for l in lens]
        at = lambda p, j: p[j] + po * esz  # noqa: E731
        g = 0
        if rs:
            for s in range(n - 1):
                cs, cr = (i - s - 1) % n, (i - s - 2) % n
                src = at(srcs, cs) if s == 0 else ctx.mine(offs[(g - 1) % 2])
                land = offs[g % 2]
                _step(ctx, th, right, left, land, src, ln[cs] * esz, ln[cr], ack, data)
                if s < n - 2:
                    ctx.reduce(th, ctx.mine(land), at(srcs, cr), ln[cr])
                else:
                    ctx.copy(th, at(outs, cr), at(srcs, cr), ln[cr] * esz)
                    ctx.reduce(th, at(outs, cr), ctx.mine(land), ln[cr])
                g += 1
        if ag:
            for t in range(n - 1):
                cs, cr = (i - t) % n, (i - t - 1) % n
                src = at(srcs, cs) if (t == 0 and not rs) else at(outs, cs)
                if t == 0 and not rs:
                    ctx.copy(th, at(outs, cs), src, ln[cs] * esz)
                land = offs[g % 2]
                _step(ctx, th, right, left, land, src, ln[cs] * esz, ln[cr], ack, data)
                ctx.copy(th, at(outs, cr), ctx.mine(land), ln[cr] * esz)
                g += 1


def _step(ctx: IssueContext, th: int, right: int, left: int, land: int, src: CData, sent: int, received: int,
          ack: int, data: int) -> None:
    """One ring step (``ctx.shift``: release my slot to ``left``, send to ``right``, wait for ``left``'s data)
    without the half whose chunk is empty (``sent`` bytes, ``received`` elements).

    Both ends of a link compute the same chunk lengths, so a sender skips exactly the ACK wait and DATA
    record its receiver skips, and each notify still alternates record, wait.  A small message (fewer
    elements than ranks: most chunks empty) then costs the steps that move data, not 2(N-1) handshakes
    per lane.  The landing slot a step writes is still free: its ACK, when the step moves data, says so.
    """
    if received:
        ctx.record(th, left, ack)
    if sent:
        ctx.send(th, right, [(land, src, sent)], ack, data)
    if received:
        ctx.wait(th, left, data)


#: A lane of a ring pass: (direction: 0 clockwise, 1 counter-clockwise; ACK index; DATA index).
Lane = Tuple[int, int, int]


def _lanes(ctx: IssueContext, group: Sequence[int]) -> Tuple[Lane, ...]:
    """One clockwise lane, and a counter-clockwise one when there are 3+ members and 2 threads."""
    return ((0, ACK, DATA), (1, ACK, DATA)) if len(group) >= 3 and len(ctx.threads) >= 2 else ((0, ACK, DATA),)


def _chunked(ctx: IssueContext, group: Sequence[int], a: CollectiveCall, rs: bool, ag: bool,
             lanes: Optional[Sequence[Lane]] = None) -> None:
    """allreduce / reduce_scatter / allgather over ``group``, the data split between ``lanes`` (thread i drives lane i)."""
    n, esz = len(group), ctx.esz
    lanes = _lanes(ctx, group) if lanes is None else lanes
    slot = ctx.slot_elems(2 * len(lanes))
    width = a.count  # elements split between the lanes
    parts = split_even(width, len(lanes))
    if len(lanes) > 1:
        ctx.fork(len(lanes))
    for li, ((off, cnt), (d, ack, data)) in enumerate(zip(parts, lanes)):
        th = ctx.threads[li]
        ring = list(group) if d == 0 else list(group)[::-1]
        region = li * 2 * ctx.slot_bytes(slot)
        if a.coll == "allreduce":
            chunks = split_even(cnt, n)
            srcs = [a.send + (off + o) * esz for o, _ in chunks]
            outs = [a.recv + (off + o) * esz for o, _ in chunks]
            lens = [l for _, l in chunks]
        elif a.coll == "reduce_scatter":
            srcs = [a.send + (j * a.count + off) * esz for j in range(n)]
            outs = [a.recv + off * esz if group[j] == ctx.rank else None for j in range(n)]
            lens = [cnt] * n
        else:  # allgather: block j of the output comes from group[j]
            srcs = [a.send + off * esz if group[j] == ctx.rank else None for j in range(n)]
            outs = [a.recv + (j * a.count + off) * esz for j in range(n)]
            lens = [cnt] * n
        # the ring order of the ccw direction is reversed: re-index chunk lists to match
        if d == 1:
            srcs, outs, lens = srcs[::-1], outs[::-1], lens[::-1]
        if max(lens, default=0) > 0:
            ring_pass(ctx, th, ring, srcs, outs, lens, rs, ag, region, slot, ack, data)
    if len(lanes) > 1:
        ctx.join(len(lanes))


def ring_broadcast(ctx: IssueContext, group: Sequence[int], buf: CData, count: int, root: int, th: Optional[int] = None) -> None:
    """Pipelined chain root -> root+1 -> ... over ``group`` (one thread, pieces of one slot)."""
    n = len(group)
    if n == 1 or count == 0:
        return
    th = ctx.threads[0] if th is None else th
    i, r = group.index(ctx.rank), group.index(root)
    v = (i - r) % n
    prev, nxt = group[(i - 1) % n], group[(i + 1) % n]
    slot, esz = ctx.slot_elems(1), ctx.esz
    for po in range(0, count, slot):
        nb = min(slot, count - po) * esz
        ptr = buf + po * esz
        if v > 0:
            ctx.record(th, prev, ACK)
            ctx.wait(th, prev, DATA)
            ctx.copy(th, ptr, ctx.mine(0), nb)
        if v < n - 1:
            ctx.send(th, nxt, [(0, ptr, nb)])


def ring_reduce(ctx: IssueContext, group: Sequence[int], send: CData, recv: CData, count: int, root: int,
                th: Optional[int] = None) -> None:
    """Chain root+1 -> ... -> root, each rank adding its input to the partial sum in its HCCL buffer."""
    n = len(group)
    th = ctx.threads[0] if th is None else th
    if n == 1:
        ctx.copy(th, recv, send, count * ctx.esz)
        return
    if count == 0:
        return
    i, r = group.index(ctx.rank), group.index(root)
    v = (i - r - 1) % n
    prev, nxt = group[(i - 1) % n], group[(i + 1) % n]
    slot, esz = ctx.slot_elems(1), ctx.esz
    for po in range(0, count, slot):
        cnt = min(slot, count - po)
        src = send + po * esz
        if v == 0:
            ctx.send(th, nxt, [(0, src, cnt * esz)])
            continue
        ctx.record(th, prev, ACK)
        ctx.wait(th, prev, DATA)
        if v < n - 1:
            ctx.reduce(th, ctx.mine(0), src, cnt)
            ctx.send(th, nxt, [(0, ctx.mine(0), cnt * esz)])
        else:
            dst = recv + po * esz
            ctx.copy(th, dst, src, cnt * esz)
            ctx.reduce(th, dst, ctx.mine(0), cnt)


def ring_alltoall(ctx: IssueContext, group: Sequence[int], send: CData, recv: CData, block: int) -> None:
    """Store-and-forward: block (src -> src+d) travels d hops right; step s moves N-s blocks per rank."""
    n, esz, th = len(group), ctx.esz, ctx.threads[0]
    i = group.index(ctx.rank)
    left, right = group[(i - 1) % n], group[(i + 1) % n]
    slot = ctx.slot_elems(2 * max(1, n - 1))
    sb = ctx.slot_bytes(slot)
    ctx.copy(th, recv + i * block * esz, send + i * block * esz, block * esz)
    if n == 1:
        return
    for po in range(0, block, slot):
        ln = min(slot, block - po)
        nb = ln * esz
        for s in range(1, n):
            mine_land = (s % 2) * (n - 1) * sb
            if s == 1:
                writes = [(mine_land + (d - 1) * sb, send + (((i + d) % n) * block + po) * esz, nb)
                          for d in range(1, n)]
            else:
                prev_land = ((s - 1) % 2) * (n - 1) * sb
                run = (n - s - 1) * sb + nb
                writes = [(mine_land, ctx.mine(prev_land + sb), run)]
            ctx.record(th, left, ACK)
            ctx.send(th, right, writes)
            ctx.wait(th, left, DATA)
            src_rank = (i - s) % n
            ctx.copy(th, recv + (src_rank * block + po) * esz, ctx.mine(mine_land), nb)


def ring_barrier(ctx: IssueContext, group: Sequence[int], th: Optional[int] = None) -> None:
    """N-1 handshake steps around the ring: afterwards every rank knows every other one arrived."""
    n = len(group)
    th = ctx.threads[0] if th is None else th
    i = group.index(ctx.rank)
    left, right = group[(i - 1) % n], group[(i + 1) % n]
    for _ in range(n - 1):
        ctx.record(th, left, ACK)
        ctx.send(th, right, [])
        ctx.wait(th, left, DATA)


def run(ctx: IssueContext, group: Sequence[int], a: CollectiveCall) -> None:
    """Issue ``a`` over ``group`` (comm ranks in ring order) on this rank."""
    n = len(group)
    if a.coll in ("allreduce", "reduce_scatter", "allgather"):
        if n == 1:
            ctx.copy(ctx.threads[0], a.recv, a.send, a.count * ctx.esz)
        else:
            _chunked(ctx, group, a, rs=a.coll != "allgather", ag=a.coll != "reduce_scatter")
    elif a.coll == "broadcast":
        ring_broadcast(ctx, group, a.recv, a.count, a.root)
    elif a.coll == "reduce":
        ring_reduce(ctx, group, a.send, a.recv, a.count, a.root)
    elif a.coll == "alltoall":
        ring_alltoall(ctx, group, a.send, a.recv, a.count)
    elif a.coll == "barrier":
        if n > 1:
            ring_barrier(ctx, group)
    else:
        raise UnsupportedError(f"ring has no {a.coll}")


@define("ring", resources=formula_resources("ring"))
def ring(ctx: IssueContext, call: CollectiveCall) -> None:
    """Ring over every rank of the communicator, in rank order."""
    run(ctx, ctx.group, call)
