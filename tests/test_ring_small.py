"""Ring collectives of fewer elements than ranks: only the hops that move data are issued, and they stay correct.

A ring allreduce splits each lane's elements into one chunk per rank; below N elements most chunks
are empty.  Both ends of a link compute the same chunk lengths, so a step skips the half (ACK
wait, write, DATA record on the sender; ACK record, DATA wait on the receiver) whose chunk is
empty.  The dry run checks every such schedule symbolically (no wait without its record, no
record on a notify still set, no landing slot reused before it was read, also for a call followed
by itself); real processes under the strict checker check the bytes.
"""
from __future__ import annotations

from typing import List

import numpy as np
import pytest

from hcomm_cffi.algorithms import CollectiveCall, dry_run, resolve
from hcomm_cffi.enums import DataType, ReduceOp
from hcomm_cffi.plan import Topology
from multiproc import run_ranks

BUFFER = 16 << 20


def _call(coll: str, count: int, dtype: DataType = DataType.FP32) -> CollectiveCall:
    return CollectiveCall(coll, 0, 0, count, dtype, ReduceOp.SUM, 0)


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8])
def test_every_small_ring_schedule_passes_the_dry_run(n: int) -> None:
    """Counts 0..2N+1 (most chunks empty up to N), allreduce / reduce_scatter / allgather, two element sizes."""
    ring, topo = resolve("ring"), Topology.single_server(n)
    for coll in ("allreduce", "reduce_scatter", "allgather"):
        for dtype in (DataType.FP32, DataType.INT8):
            for count in range(2 * n + 2):
                dry_run(ring, topo, _call(coll, count, dtype), BUFFER, declared=True)


def _channel_records(n: int, count: int) -> int:
    run = dry_run(resolve("ring"), Topology.single_server(n), _call("allreduce", count), BUFFER, declared=True)
    return sum(1 for rank in run.tasks for t in rank if t.kind == "record")


def test_a_small_allreduce_issues_the_hops_that_move_data() -> None:
    """8 bytes on 4 ranks: each of the two lanes holds one element, one non-empty chunk of four, which makes
    2(N-1) = 6 hops, each an ACK and a DATA record: 24 channel records in all (every step of every lane on every
    rank would be 2 lanes x 6 steps x 4 ranks x 2 = 96).  With a chunk per rank on every lane nothing is skipped."""
    assert _channel_records(4, 2) == 2 * 6 * 2
    assert _channel_records(4, 8) == 2 * 6 * 4 * 2


def _small_body(rank: int, n: int, root_info: bytes, counts: List[int]) -> List[str]:
    import hcomm_cffi as hcomm

    w = hcomm.init(rank=rank, world_size=n, root_info=root_info)
    try:
        out = []
        for count in counts:
            for repeat in range(3):          # the same call again: notifies alternate record, wait across calls
                x = (np.arange(count, dtype=np.float32) + 1) * (rank + 1) + repeat
                got = w.allreduce(x.copy(), algorithm="ring")
                want = sum((np.arange(count, dtype=np.float32) + 1) * (r + 1) + repeat for r in range(n))
                assert np.array_equal(got, want), (rank, count, repeat, got, want)
            ys = np.arange(count * n, dtype=np.int32) * (rank + 1)
            got_rs = w.reduce_scatter(ys, algorithm="ring")
            full = sum(np.arange(count * n, dtype=np.int32) * (r + 1) for r in range(n))
            assert np.array_equal(got_rs, full[rank * count:(rank + 1) * count]), (rank, count)
            out.append(f"{count} ok")
        return out
    finally:
        hcomm.finalize()


@pytest.mark.parametrize("n", [3, 4])
def test_small_ring_collectives_move_the_right_bytes(n: int) -> None:
    """Every count from 1 to 2N+1, three times each, on real processes under the strict checker."""
    counts = list(range(1, 2 * n + 2))
    results = run_ranks(n, _small_body, counts, timeout=120)
    assert all(r == [f"{c} ok" for c in counts] for r in results)
