"""Mesh: every peer at once, one thread per peer (thread t drives the t-th peer; thread 0 is main).

Symmetric ops fork the slaves, let each thread do the ACK/DATA handshake with its peer while
writing straight from the user's buffer into the peer's slot ``[my index]`` of its HCCL buffer,
join, and finish on the main thread.  Reductions run in group order on every rank (rank 0's
contribution first), so all ranks produce the same bytes.  AllReduce is one-shot (everyone
reduces everything: one phase, few tasks) up to ``ONE_SHOT_BYTES``, two-shot (reduce-scatter +
allgather) above.  Broadcast and Reduce are stars around the root.
"""
from __future__ import annotations

from typing import Any, Callable, List, Sequence, Tuple

from .interface import ACK, DATA, CollectiveCall, define, IssueContext, split_even, UnsupportedError
from .formulas import formula_resources

__all__ = ["mesh", "run", "mesh_rs", "mesh_ag", "mesh_broadcast", "mesh_reduce", "mesh_barrier", "ONE_SHOT_BYTES"]

ONE_SHOT_BYTES = 64 << 10
CData = Any



def _phase(ctx: IssueContext, peers: Sequence[int], body: Callable[[int, int], None]) -> None:
    """fork, ``body(thread, peer)`` for every peer on its own thread, join."""
    used = min(len(peers), len(ctx.threads))
    ctx.fork(used)
    for t, p in enumerate(peers):
        body(ctx.threads[t % used], p)
    ctx.join(used)


def _sum_into(ctx: IssueContext, th: int, out: CData, ptrs: Sequence[CData], count: int) -> None:
    """out = ptrs[0] op ptrs[1] op ... in this order."""
    ctx.copy(th, out, ptrs[0], count * ctx.esz)
    for p in ptrs[1:]:
        ctx.reduce(th, out, p, count)


def mesh_rs(ctx: IssueContext, group: Sequence[int], srcs: List[CData], lens: List[int], out: CData) -> None:
    """Member j receives op over ranks of ``srcs[j]`` (my input for j, ``lens[j]`` elements) in ``out``."""
    n, esz, main = len(group), ctx.esz, ctx.threads[0]
    me = group.index(ctx.rank)
    if n == 1:
        ctx.copy(main, out, srcs[0], lens[0] * esz)
        return
    slot = ctx.slot_elems(n)
    sb = ctx.slot_bytes(slot)
    peers = [p for p in group if p != ctx.rank]
    for po in range(0, max(lens), slot):
        ln = [max(0, min(slot, l - po)) for l in lens]
        own = srcs[me] + po * esz
        dst = out + po * esz
        if own == dst and me != 0:  # in place: keep my contribution before the output is overwritten
            ctx.copy(main, ctx.mine(me * sb), own, ln[me] * esz)
            own = ctx.mine(me * sb)

        def body(th: int, p: int) -> None:
            j = group.index(p)
            ctx.exchange(th, p, [(me * sb, srcs[j] + po * esz, ln[j] * esz)])
        _phase(ctx, peers, body)
        _sum_into(ctx, main, dst, [own if j == me else ctx.mine(j * sb) for j in range(n)], ln[me])


def mesh_ag(ctx: IssueContext, group: Sequence[int], own: CData, lens: List[int], outs: List[CData]) -> None:
    """Every member's chunk (mine at ``own``) lands at ``outs[j]`` on every rank."""
    n, esz, main, me, slot, sb, peers = _slotted(ctx, group)
    for po in range(0, max(lens), slot):
        ln = [max(0, min(slot, l - po)) for l in lens]
        src = own + po * esz
        ctx.copy(main, outs[me] + po * esz, src, ln[me] * esz)
        if n == 1:
            continue
        _phase(ctx, peers, lambda th, p: ctx.exchange(th, p, [(me * sb, src, ln[me] * esz)]))
        for j in range(n):
            if j != me:
                ctx.copy(main, outs[j] + po * esz, ctx.mine(j * sb), ln[j] * esz)


def mesh_broadcast(ctx: IssueContext, group: Sequence[int], buf: CData, count: int, root: int) -> None:
    """Star: the root writes every piece into each leaf's buffer; leaves copy it out."""
    if len(group) == 1 or count == 0:
        return
    slot, esz, main = ctx.slot_elems(1), ctx.esz, ctx.threads[0]
    peers = [p for p in group if p != root]
    for po in range(0, count, slot):
        nb = min(slot, count - po) * esz
        ptr = buf + po * esz
        if ctx.rank == root:
            _phase(ctx, peers, lambda th, p: ctx.send(th, p, [(0, ptr, nb)]))
        else:
            ctx.record(main, root, ACK)
            ctx.wait(main, root, DATA)
            ctx.copy(main, ptr, ctx.mine(0), nb)


def mesh_reduce(ctx: IssueContext, group: Sequence[int], send: CData, recv: CData, count: int, root: int) -> None:
    """Star: leaves write into the root's slot ``[their index]``; the root reduces in group order."""
    n, esz, main = len(group), ctx.esz, ctx.threads[0]
    if n == 1:
        ctx.copy(main, recv, send, count * esz)
        return
    if count == 0:
        return
    me = group.index(ctx.rank)
    slot = ctx.slot_elems(n)
    sb = ctx.slot_bytes(slot)
    peers = [p for p in group if p != root]
    for po in range(0, count, slot):
        cnt = min(slot, count - po)
        own = send + po * esz
        if ctx.rank != root:
            ctx.send(main, root, [(me * sb, own, cnt * esz)])
            continue
        dst = recv + po * esz
        if own == dst and me != 0:
            ctx.copy(main, ctx.mine(me * sb), own, cnt * esz)
            own = ctx.mine(me * sb)

        def body(th: int, p: int) -> None:
            ctx.record(th, p, ACK)
            ctx.wait(th, p, DATA)
        _phase(ctx, peers, body)
        _sum_into(ctx, main, dst, [own if j == me else ctx.mine(j * sb) for j in range(n)], cnt)


def mesh_barrier(ctx: IssueContext, group: Sequence[int]) -> None:
    """Handshake with every peer at once."""
    peers = [p for p in group if p != ctx.rank]
    if peers:
        _phase(ctx, peers, lambda th, p: ctx.exchange(th, p, []))


def _slotted(ctx: IssueContext, group: Sequence[int]) -> Tuple[int, int, int, int, int, int, List[int]]:
    """A one-phase exchange's frame: group size, element size, main thread, my index, and one landing slot per
    member (elements, bytes); my peers."""
    n = len(group)
    slot = ctx.slot_elems(n)
    return (n, ctx.esz, ctx.threads[0], group.index(ctx.rank), slot, ctx.slot_bytes(slot),
            [p for p in group if p != ctx.rank])


def _one_shot(ctx: IssueContext, group: Sequence[int], a: CollectiveCall) -> None:
    """Everyone sends everything to everyone and reduces locally: one phase."""
    n, esz, main, me, slot, sb, peers = _slotted(ctx, group)
    for po in range(0, a.count, slot):
        cnt = min(slot, a.count - po)
        own, dst = a.send + po * esz, a.recv + po * esz
        if own == dst and me != 0:
            ctx.copy(main, ctx.mine(me * sb), own, cnt * esz)
            own = ctx.mine(me * sb)
        src = a.send + po * esz
        _phase(ctx, peers, lambda th, p: ctx.exchange(th, p, [(me * sb, src, cnt * esz)]))
        _sum_into(ctx, main, dst, [own if j == me else ctx.mine(j * sb) for j in range(n)], cnt)


def run(ctx: IssueContext, group: Sequence[int], a: CollectiveCall) -> None:
    """Issue ``a`` over ``group`` on this rank."""
    n, esz = len(group), ctx.esz
    me = group.index(ctx.rank) if ctx.rank in group else -1
    c = a.coll
    if c == "allreduce":
        if n == 1 or a.count == 0:
            ctx.copy(ctx.threads[0], a.recv, a.send, a.count * esz)
        elif a.count * esz <= ONE_SHOT_BYTES:
            _one_shot(ctx, group, a)
        else:
            chunks = split_even(a.count, n)
            lens = [l for _, l in chunks]
            mesh_rs(ctx, group, [a.send + o * esz for o, _ in chunks], lens, a.recv + chunks[me][0] * esz)
            mesh_ag(ctx, group, a.recv + chunks[me][0] * esz, lens, [a.recv + o * esz for o, _ in chunks])
    elif c == "reduce_scatter":
        if a.count:
            mesh_rs(ctx, group, [a.send + j * a.count * esz for j in range(n)], [a.count] * n, a.recv)
    elif c == "allgather":
        if a.count:
            mesh_ag(ctx, group, a.send, [a.count] * n, [a.recv + j * a.count * esz for j in range(n)])
    elif c == "alltoall":
        if a.count:
            _alltoall(ctx, group, a)
    elif c == "broadcast":
        mesh_broadcast(ctx, group, a.recv, a.count, a.root)
    elif c == "reduce":
        mesh_reduce(ctx, group, a.send, a.recv, a.count, a.root)
    elif c == "barrier":
        mesh_barrier(ctx, group)
    else:
        raise UnsupportedError(f"mesh has no {c}")


def _alltoall(ctx: IssueContext, group: Sequence[int], a: CollectiveCall) -> None:
    n, esz, main, me, slot, sb, peers = _slotted(ctx, group)
    blk = a.count
    for po in range(0, blk, slot):
        nb = min(slot, blk - po) * esz
        ctx.copy(main, a.recv + (me * blk + po) * esz, a.send + (me * blk + po) * esz, nb)
        if n == 1:
            continue

        def body(th: int, p: int) -> None:
            j = group.index(p)
            ctx.exchange(th, p, [(me * sb, a.send + (j * blk + po) * esz, nb)])
        _phase(ctx, peers, body)
        for j in range(n):
            if j != me:
                ctx.copy(main, a.recv + (j * blk + po) * esz, ctx.mine(j * sb), nb)


@define("mesh", resources=formula_resources("mesh"))
def mesh(ctx: IssueContext, call: CollectiveCall) -> None:
    """Mesh over every rank of the communicator."""
    run(ctx, ctx.group, call)
