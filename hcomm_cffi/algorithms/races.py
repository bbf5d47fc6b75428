"""Happens-before check of a dry run: every access to an HCCL buffer must be ordered after the ones it conflicts with.

Threads of all ranks run concurrently; only program order (one thread's FIFO) and notifies (a wait
after the record it consumes) order tasks.  A vector clock per thread follows that order.  Two
accesses to overlapping bytes of one HCCL buffer, at least one a write, must be ordered:

* a write after a read (or write) it is not ordered after: the writer reuses a landing slot the
  reader may still be reading — the missing ACK handshake;
* a read after a write it is not ordered after: the reader takes data that may not have landed —
  the missing DATA signal.

This does not depend on the order the symbolic execution happens to pick, so a schedule that is
right only by luck of timing is rejected.  Only HCCL buffers are tracked (user buffers belong to
one rank and are ordered by its own threads' notifies, which the same check would need a model of
the caller for).
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, NamedTuple, Sequence, Tuple

import numpy as np

__all__ = ["RaceChecker", "Access"]

Where = Callable[[int], Tuple[int, int, int]]


class Access(NamedTuple):
    """One access to bytes [lo, hi) of an HCCL buffer by queue ``qi`` at its clock ``clock``."""

    write: bool
    lo: int
    hi: int
    qi: int
    clock: int
    task: object      # the dry run's Task (describe() names rank, thread, step, peer)


class RaceChecker:
    """Vector clocks of ``n_queues`` thread queues and the accesses of every HCCL buffer."""

    def __init__(self, n_queues: int, hccl_region: int, where: Where) -> None:
        # one row per queue (thousands for a wide mesh: element-wise NumPy keeps merges cheap)
        self.vc = np.zeros((n_queues, n_queues), dtype=np.int32)
        self.hccl, self.where = hccl_region, where
        self.accesses: Dict[int, List[Access]] = {}

    def snapshot(self, qi: int) -> Any:
        """What a record of queue ``qi`` carries: its vector clock now (a copy)."""
        return self.vc[qi].copy()

    def merge(self, qi: int, released: Any) -> None:
        """A wait of queue ``qi`` learns everything the record it consumed knew."""
        np.maximum(self.vc[qi], released, out=self.vc[qi])

    def task(self, qi: int, t: object, reads: Sequence[Tuple[int, int]], writes: Sequence[Tuple[int, int]]) -> str:
        """Tick queue ``qi`` and check its (address, bytes) reads and writes; returns '' or the race found."""
        self.vc[qi, qi] += 1
        for addr, nbytes in reads:
            msg = self._access(qi, t, addr, nbytes, False)
            if msg:
                return msg
        for addr, nbytes in writes:
            msg = self._access(qi, t, addr, nbytes, True)
            if msg:
                return msg
        return ""

    def _access(self, qi: int, t: object, addr: int, nbytes: int, write: bool) -> str:
        rank, region, off = self.where(addr)
        if region != self.hccl or nbytes <= 0:
            return ""
        lo, hi = off, off + nbytes
        known = self.vc[qi]
        now = int(known[qi])
        seen = self.accesses.setdefault(rank, [])
        keep: List[Access] = []
        for p in seen:
            if p.hi <= lo or p.lo >= hi:
                keep.append(p)
                continue
            ordered = p.qi == qi or known[p.qi] >= p.clock
            if not ordered and (write or p.write):
                return _explain(t, p, rank, max(lo, p.lo), min(hi, p.hi), write)
            if not (write and lo <= p.lo and p.hi <= hi):
                keep.append(p)       # a write covering an ordered access supersedes it
        keep.append(Access(write, lo, hi, qi, now, t))
        self.accesses[rank] = keep
        return ""


def _explain(t: object, p: Access, rank: int, lo: int, hi: int, write: bool) -> str:
    me, other = t.describe(), p.task.describe()   # type: ignore[attr-defined]
    if write and not p.write:
        return (f"landing slot reused without a handshake: {me} overwrites bytes [{lo}, {hi}) of rank {rank}'s HCCL "
                f"buffer while {other} may still be reading them; nothing orders the two (the reader must signal "
                "the writer after reading, e.g. record an ACK, and the writer wait for it before writing)")
    if write:
        return (f"two writes race: {me} and {other} both write bytes [{lo}, {hi}) of rank {rank}'s HCCL buffer "
                "and nothing orders them (wait for the ACK of the slot's reader before reusing it)")
    return (f"read before the data is known to have landed: {me} reads bytes [{lo}, {hi}) of rank {rank}'s HCCL "
            f"buffer while {other} may still be writing them; nothing orders the two (the writer must record DATA "
            "after writing and the reader wait for it)")
