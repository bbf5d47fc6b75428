"""Schedule capture and replay: later calls with the same signature launch the recorded tasks with new buffers.

Each algorithm runs several times under the strict checker against NumPy: with new buffers of the
same signature (replayed: the algorithm's issue() is not called again), in place vs out of place,
with another count and another dtype (each a schedule of its own), and after the communicator's
resources were re-acquired (the old schedule is not used).
"""
from __future__ import annotations

from typing import Any, Dict, List

import numpy as np
import pytest

from multiproc import run_ranks


def _counting(name: str) -> List[int]:
    """Count calls of the named algorithm's issue()."""
    from hcomm_cffi.algorithms import resolve
    alg = resolve(name)
    calls = [0]
    fn = alg.fn

    def counted(ctx: Any, call: Any) -> None:
        calls[0] += 1
        fn(ctx, call)
    alg.fn = counted
    return calls


def body(rank: int, n: int, root_info: bytes, algo: str, coll: str) -> Dict[str, int]:
    import hcomm_cffi as hcomm
    w = hcomm.init(rank=rank, world_size=n, root_info=root_info, topology=(2, n // 2))
    issued = _counting(algo)
    seen: Dict[str, int] = {}

    def run(count: int, dtype: Any, seed: int, in_place: bool) -> None:
        rng = np.random.default_rng(seed)
        per_rank = [rng.integers(-20, 20, count * (n if coll != "allreduce" else 1)).astype(dtype) for _ in range(n)]
        x = per_rank[rank].copy()
        if coll == "allreduce":
            expect = sum(p.astype(np.float64) for p in per_rank).astype(dtype)
            out = w.allreduce(x, algorithm=algo) if in_place else w.allreduce(x, out=np.empty_like(x), algorithm=algo)
        elif coll == "reduce_scatter":
            expect = sum(p.astype(np.float64) for p in per_rank).astype(dtype)[rank * count:(rank + 1) * count]
            out = w.reduce_scatter(x, algorithm=algo)
        else:  # allgather of my block
            mine = per_rank[rank][:count].copy()
            expect = np.stack([p[:count] for p in per_rank])
            out = w.allgather(mine, algorithm=algo)
        np.testing.assert_array_equal(out, expect)

    try:
        run(100, np.float32, 1, True)
        seen["first"] = issued[0]
        run(100, np.float32, 2, True)                    # new buffers, same signature: replayed
        run(100, np.float32, 3, True)
        seen["same_signature"] = issued[0]
        if coll == "allreduce":
            run(100, np.float32, 4, False)               # out of place: a schedule of its own
            run(100, np.float32, 5, False)
            seen["out_of_place"] = issued[0]
        run(37, np.float32, 6, True)                     # another count
        run(100, np.int32, 7, True)                      # another dtype
        seen["other_signatures"] = issued[0]
        run(100, np.float32, 8, True)                    # the first signature: still replayed
        seen["back"] = issued[0]
        w._forget_resources()                            # resources re-acquired: the old schedules are stale
        run(100, np.float32, 9, True)
        seen["after_new_resources"] = issued[0]
        return seen
    finally:
        hcomm.finalize()


@pytest.mark.parametrize("algo,coll", [("ring", "allreduce"), ("mesh", "allreduce"), ("tree", "allreduce"),
                                       ("hierarchical", "allreduce"), ("hierarchical", "reduce_scatter"),
                                       ("ring", "allgather"), ("native", "allreduce")])
def test_replay_matches_numpy_and_reissues_only_when_needed(algo: str, coll: str) -> None:
    for seen in run_ranks(4, body, algo, coll, timeout=180):
        assert seen["first"] == 1
        assert seen["same_signature"] == 1                       # replayed twice
        oop = 1 if coll == "allreduce" else 0
        if coll == "allreduce":
            assert seen["out_of_place"] == 2
        assert seen["other_signatures"] == 3 + oop
        assert seen["back"] == 3 + oop
        assert seen["after_new_resources"] == 4 + oop


def user_body(rank: int, n: int, root_info: bytes) -> int:
    """A user algorithm (the shipped pairwise alltoall) is replayed too."""
    import hcomm_cffi as hcomm
    import hcomm_cffi.examples.pairwise  # noqa: F401
    w = hcomm.init(rank=rank, world_size=n, root_info=root_info)
    issued = _counting("pairwise")
    try:
        for seed in range(3):
            x = np.arange(n * 50, dtype=np.float32) + 1000 * rank + seed
            y = w.alltoall(x, algorithm="pairwise")
            expect = np.concatenate([np.arange(rank * 50, (rank + 1) * 50, dtype=np.float32) + 1000 * r + seed
                                     for r in range(n)])
            np.testing.assert_array_equal(y, expect)
        return issued[0]
    finally:
        hcomm.finalize()


def test_user_algorithm_is_replayed() -> None:
    # issue() ran for the 3 ranks of the dry run that derived its plan, then once for real; 2 replays
    assert run_ranks(3, user_body, timeout=120) == [3 + 1] * 3
