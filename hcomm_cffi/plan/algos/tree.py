"""Tree: recursive halving-doubling (RHD) for symmetric ops, binomial tree for rooted ops.

HCCL has no binary-tree AllReduce; its logarithmic algorithms are RHD/NHR/NB (the cost model of
docs/design/plan-model.md), so "tree" here means RHD.  With B = 2^floor(log2 N) and E = N - B, the first 2E ranks pair
up: even rank 2i keeps a channel to its odd partner 2i+1 and joins the core of B ranks; odd ranks
only talk to their partner (fold before, unfold after).  Core member c talks to c XOR 2^k.
Resources: T = 1 (sequential steps), channels log2 B (+1 for an even rank with a partner; 1 for
an odd one).  Steps: log2 p for a power of two, else floor(log2 p) + 2 (fold + unfold) for
RS/AG/Barrier and 2 floor(log2 p) + 2 for AllReduce.  Broadcast/Reduce: binomial tree over the
virtual rank v = (r - root) mod N, ceil(log2 N) steps of the full message; AlltoAll unsupported.
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple

from ..cost import Phase
from .common import (ROOTED, Collective, FlatAlgorithm, RoleShape, ceil_log2, floor_log2,
                     fork_join_notifies)

__all__ = ["Tree", "binomial_children"]


def binomial_children(v: int, n: int) -> Tuple[int, ...]:
    """Children of virtual rank v in a binomial tree rooted at 0: v + 2^k for 2^k > v, < n."""
    out = []
    k = v.bit_length()
    while v + (1 << k) < n:
        out.append(v + (1 << k))
        k += 1
    return tuple(out)


def _child_histogram(n: int) -> Dict[int, Tuple[int, int]]:
    """children count -> (number of non-root virtual ranks with it, smallest such v); O(log^2 n)."""
    hist: Dict[int, Tuple[int, int]] = {}
    for h in range(1, n.bit_length() + 1):
        lo, hi = 1 << (h - 1), min(1 << h, n)       # v in [lo, hi) has bit_length h
        if lo >= hi:
            continue
        c = 0
        while True:
            # v has >= c children  <=>  v + 2^(h+c-1) < n  (c >= 1)
            upper = hi if c == 0 else min(hi, n - (1 << (h + c - 1)))
            nxt = min(hi, n - (1 << (h + c)))        # v has >= c+1 children below this bound
            start = max(lo, nxt)
            if upper > start:
                cnt, ex = hist.get(c, (0, start))
                hist[c] = (cnt + upper - start, min(ex, start))
            if nxt <= lo:
                break
            c += 1
    return hist


class Tree(FlatAlgorithm):
    """RHD (symmetric ops) and binomial tree (rooted ops)."""

    name = "tree"

    def invalid_reason(self, n: int, coll: Collective) -> Optional[str]:
        if coll is Collective.ALLTOALL:
            return "alltoall has no recursive halving-doubling schedule (use nhr's Bruck, mesh or ring)"
        return None

    # -- RHD geometry -----------------------------------------------------------------
    @staticmethod
    def _split(n: int) -> Tuple[int, int]:
        b = 1 << floor_log2(n)
        return b, n - b

    def roles(self, n: int, coll: Collective, root: int) -> Tuple[RoleShape, ...]:
        if coll in ROOTED:
            hist = _child_histogram(n)
            out = [RoleShape("root", 1, root)]
            for c in sorted(hist, reverse=True):
                cnt, v = hist[c]
                out.append(RoleShape(f"node-{c}-children", cnt, (v + root) % n))
            return tuple(out)
        b, e = self._split(n)
        if e == 0:
            return (RoleShape("rhd", n, 0),)
        out = [RoleShape("rhd+fold", e, 0), RoleShape("folded", e, 1)]
        if n - 2 * e:
            out.append(RoleShape("rhd", n - 2 * e, 2 * e))
        return tuple(out)

    def role_of(self, i: int, n: int, coll: Collective, root: int) -> str:
        if coll in ROOTED:
            v = (i - root) % n
            return "root" if v == 0 else f"node-{len(binomial_children(v, n))}-children"
        b, e = self._split(n)
        if i < 2 * e:
            return "folded" if i % 2 else "rhd+fold"
        return "rhd"

    def peers(self, i: int, n: int, coll: Collective, root: int) -> Tuple[int, ...]:
        if coll in ROOTED:
            v = (i - root) % n
            vs = binomial_children(v, n)
            if v:
                vs = (v - (1 << (v.bit_length() - 1)),) + vs
            return tuple((x + root) % n for x in vs)
        b, e = self._split(n)
        if i < 2 * e and i % 2:
            return (i - 1,)
        core = i // 2 if i < 2 * e else i - e
        out = [2 * c if c < e else c + e for c in (core ^ (1 << k) for k in range(floor_log2(b)))]
        if i < 2 * e:
            out.append(i + 1)
        return tuple(out)

    def thread_notifies(self, role: str, n: int, coll: Collective) -> Tuple[int, ...]:
        return fork_join_notifies(1)

    def phases(self, n: int, coll: Collective, size: float) -> Tuple[Phase, ...]:
        if coll in ROOTED:
            d = ceil_log2(n)
            red = d * size if coll is Collective.REDUCE else 0.0
            return (Phase("binomial-" + coll.value, d, d * size, d * size, reduce_bytes=red),)
        b, e = self._split(n)
        k = floor_log2(b)
        core = (b - 1) * size / b
        fold = e > 0
        if coll is Collective.BARRIER:
            return (Phase("rhd-barrier", k + (2 if fold else 0), 0.0, 0.0),)
        phases = []
        if coll is Collective.ALLREDUCE:
            if fold:
                phases.append(Phase("fold", 1, size, size, reduce_bytes=size))
            phases += [Phase("halving", k, core, core, reduce_bytes=core), Phase("doubling", k, core, core)]
            if fold:
                phases.append(Phase("unfold", 1, size, size))
        elif coll is Collective.REDUCE_SCATTER:
            if fold:
                phases.append(Phase("fold", 1, size, size, reduce_bytes=size))
            phases.append(Phase("halving", k, core, core, reduce_bytes=core))
            if fold:
                phases.append(Phase("unfold", 1, size / n, size / n))
        elif coll is Collective.ALLGATHER:
            if fold:
                phases.append(Phase("fold", 1, size / n, size / n))
            phases.append(Phase("doubling", k, core, core))
            if fold:
                phases.append(Phase("unfold", 1, size, size))
        else:
            raise ValueError(f"tree has no schedule for {coll.value}")
        return tuple(phases)
