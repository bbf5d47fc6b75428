"""Tree: recursive doubling (RHD geometry of the planner) and binomial trees; for barrier and small messages.

With B = 2^floor(log2 N) and E = N - B, the first 2E members pair up: odd member 2c+1 folds its
data into even member 2c before the core steps and gets the result back after them (unfold).
Core member c exchanges with c XOR 2^s at step s.  AllReduce exchanges the whole vector each step
(log2 B steps, one thread, a handful of tasks per step: the small-message path); both partners
compute ``x op y`` with the same two operands, so every rank ends with the same bytes.
AllGather doubles the held range of blocks; ReduceScatter is the AllReduce accumulated in the
HCCL buffer, keeping one block.  Broadcast/Reduce use the binomial tree of the planner.
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

from ..plan.algos.common import ceil_log2, floor_log2
from ..plan.algos.tree import binomial_children
from .interface import ACK, COLLECTIVES, DATA, CollectiveCall, define, IssueContext, UnsupportedError
from .formulas import formula_resources

__all__ = ["tree", "run", "rd_allreduce", "rd_barrier", "binomial_broadcast", "binomial_reduce"]

CData = Any



def _geometry(n: int, i: int) -> Tuple[int, int, int, bool]:
    """(k = log2 B, E, core index or -1, has an odd partner) of member i."""
    b = 1 << floor_log2(n)
    e = n - b
    if i < 2 * e:
        return floor_log2(b), e, (-1 if i % 2 else i // 2), i % 2 == 0
    return floor_log2(b), e, i - e, False


def _pos(c: int, e: int) -> int:
    """Group position of core member c (the even member of a folded pair)."""
    return 2 * c if c < e else c + e


def rd_allreduce(ctx: IssueContext, group: Sequence[int], send: CData, acc: Optional[CData], count: int,
                 keep: Optional[Tuple[CData, int, int]] = None) -> None:
    """Recursive doubling over the whole vector into ``acc`` (None: accumulate in the HCCL buffer).

    ``keep=(out, lo, hi)`` copies elements [lo, hi) of the result to ``out`` (reduce-scatter).
    """
    n, esz, th = len(group), ctx.esz, ctx.threads[0]
    i = group.index(ctx.rank)
    k, e, c, has_odd = _geometry(n, i)
    slot = ctx.slot_elems(k + 2)
    sb = ctx.slot_bytes(slot)
    for po in range(0, count, slot):
        cnt = min(slot, count - po)
        nb = cnt * esz
        src = send + po * esz
        dst = acc + po * esz if acc is not None else ctx.mine((k + 1) * sb)
        if c < 0:  # folded odd member: hand my data over, get the result back
            partner = group[i - 1]
            ctx.send(th, partner, [(0, src, nb)])
            ctx.record(th, partner, ACK)
            ctx.wait(th, partner, DATA)
            ctx.copy(th, dst, ctx.mine(0), nb)
        else:
            ctx.copy(th, dst, src, nb)
            if has_odd:
                ctx.record(th, group[i + 1], ACK)
                ctx.wait(th, group[i + 1], DATA)
                ctx.reduce(th, dst, ctx.mine(0), cnt)
            for s in range(k):
                p = group[_pos(c ^ (1 << s), e)]
                ctx.exchange(th, p, [((s + 1) * sb, dst, nb)])
                ctx.reduce(th, dst, ctx.mine((s + 1) * sb), cnt)
            if has_odd:
                ctx.send(th, group[i + 1], [(0, dst, nb)])
        if keep is not None:
            out, lo, hi = keep
            a, b = max(lo, po), min(hi, po + cnt)
            if b > a:
                ctx.copy(th, out + (a - lo) * esz, dst + (a - po) * esz, (b - a) * esz)


def rd_barrier(ctx: IssueContext, group: Sequence[int]) -> None:
    """Fold, log2 B handshakes, unfold: no data."""
    n, th = len(group), ctx.threads[0]
    if n == 1:
        return
    i = group.index(ctx.rank)
    k, e, c, has_odd = _geometry(n, i)
    if c < 0:
        ctx.send(th, group[i - 1], [])
        ctx.record(th, group[i - 1], ACK)
        ctx.wait(th, group[i - 1], DATA)
        return
    if has_odd:
        ctx.record(th, group[i + 1], ACK)
        ctx.wait(th, group[i + 1], DATA)
    for s in range(k):
        ctx.exchange(th, group[_pos(c ^ (1 << s), e)], [])
    if has_odd:
        ctx.send(th, group[i + 1], [])


def rd_allgather(ctx: IssueContext, group: Sequence[int], send: CData, recv: CData, block: int) -> None:
    """Blocks gathered in the HCCL buffer by recursive doubling, then copied to ``recv``."""
    n, esz, th = len(group), ctx.esz, ctx.threads[0]
    i = group.index(ctx.rank)
    k, e, c, has_odd = _geometry(n, i)
    slot = ctx.slot_elems(n)
    sb = ctx.slot_bytes(slot)
    for po in range(0, block, slot):
        nb = min(slot, block - po) * esz
        if c < 0:
            partner = group[i - 1]
            ctx.send(th, partner, [(i * sb, send + po * esz, nb)])
            ctx.record(th, partner, ACK)
            ctx.wait(th, partner, DATA)
        else:
            ctx.copy(th, ctx.mine(i * sb), send + po * esz, nb)
            if has_odd:
                ctx.record(th, group[i + 1], ACK)
                ctx.wait(th, group[i + 1], DATA)
            for s in range(k):
                c0 = c & ~((1 << s) - 1)
                lo, hi = _pos(c0, e), _pos(c0 + (1 << s), e)
                ctx.exchange(th, group[_pos(c ^ (1 << s), e)], [(lo * sb, ctx.mine(lo * sb), (hi - lo - 1) * sb + nb)])
            if has_odd:
                ctx.send(th, group[i + 1], [(0, ctx.mine(0), (n - 1) * sb + nb)])
        for j in range(n):
            ctx.copy(th, recv + (j * block + po) * esz, ctx.mine(j * sb), nb)


def _tree_links(group: Sequence[int], root: int, rank: int) -> Tuple[Optional[int], List[int], int]:
    """(parent, children (comm ranks), my index among my parent's children) in the binomial tree."""
    n = len(group)
    r = group.index(root)
    v = (group.index(rank) - r) % n
    kids = [group[(x + r) % n] for x in binomial_children(v, n)]
    if v == 0:
        return None, kids, -1
    pv = v - (1 << (v.bit_length() - 1))
    return group[(pv + r) % n], kids, binomial_children(pv, n).index(v)


def binomial_broadcast(ctx: IssueContext, group: Sequence[int], buf: CData, count: int, root: int) -> None:
    """Receive from the parent, forward to the children (largest subtree first)."""
    if len(group) == 1 or count == 0:
        return
    th, esz = ctx.threads[0], ctx.esz
    parent, kids, _ = _tree_links(group, root, ctx.rank)
    slot = ctx.slot_elems(1)
    for po in range(0, count, slot):
        nb = min(slot, count - po) * esz
        ptr = buf + po * esz
        if parent is not None:
            ctx.record(th, parent, ACK)
            ctx.wait(th, parent, DATA)
            ctx.copy(th, ptr, ctx.mine(0), nb)
        for kid in reversed(kids):
            ctx.send(th, kid, [(0, ptr, nb)])


def binomial_reduce(ctx: IssueContext, group: Sequence[int], send: CData, recv: CData, count: int, root: int) -> None:
    """Children write into slot 1+index of their parent; partial sums climb to the root."""
    n, th, esz = len(group), ctx.threads[0], ctx.esz
    if n == 1:
        ctx.copy(th, recv, send, count * esz)
        return
    parent, kids, my_idx = _tree_links(group, root, ctx.rank)
    slot = ctx.slot_elems(ceil_log2(n) + 1)
    sb = ctx.slot_bytes(slot)
    for po in range(0, count, slot):
        cnt = min(slot, count - po)
        acc = recv + po * esz if parent is None else ctx.mine(0)
        ctx.copy(th, acc, send + po * esz, cnt * esz)
        for kid in kids:
            ctx.record(th, kid, ACK)
        for j, kid in enumerate(kids):
            ctx.wait(th, kid, DATA)
            ctx.reduce(th, acc, ctx.mine((1 + j) * sb), cnt)
        if parent is not None:
            ctx.send(th, parent, [((1 + my_idx) * sb, acc, cnt * esz)])


def run(ctx: IssueContext, group: Sequence[int], a: CollectiveCall) -> None:
    """Issue ``a`` over ``group`` on this rank."""
    n, esz = len(group), ctx.esz
    c = a.coll
    if c == "allreduce":
        if n == 1 or a.count == 0:
            ctx.copy(ctx.threads[0], a.recv, a.send, a.count * esz)
        else:
            rd_allreduce(ctx, group, a.send, a.recv, a.count)
    elif c == "reduce_scatter":
        me = group.index(ctx.rank)
        if n == 1:
            ctx.copy(ctx.threads[0], a.recv, a.send, a.count * esz)
        elif a.count:
            rd_allreduce(ctx, group, a.send, None, n * a.count, keep=(a.recv, me * a.count, (me + 1) * a.count))
    elif c == "allgather":
        if a.count:
            rd_allgather(ctx, group, a.send, a.recv, a.count)
    elif c == "broadcast":
        binomial_broadcast(ctx, group, a.recv, a.count, a.root)
    elif c == "reduce":
        if a.count or n == 1:
            binomial_reduce(ctx, group, a.send, a.recv, a.count, a.root)
    elif c == "barrier":
        rd_barrier(ctx, group)
    else:
        raise UnsupportedError(f"algorithm='tree' has no {c}: alltoall has no recursive-doubling schedule; "
                               "use algorithm='mesh', 'ring' or 'native'")


@define("tree", collectives=[c for c in COLLECTIVES if c != "alltoall"], resources=formula_resources("tree"))
def tree(ctx: IssueContext, call: CollectiveCall) -> None:
    """Recursive doubling / binomial trees over every rank (alltoall has no recursive-doubling schedule)."""
    run(ctx, ctx.group, call)
