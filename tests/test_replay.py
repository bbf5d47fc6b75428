"""Schedule capture and replay: later calls with the same signature launch the recorded tasks with new buffers.

Each algorithm runs several times under the strict checker against NumPy: with new buffers of the
same signature (replayed: the algorithm's issue() is not called again), in place vs out of place,
with another count and another dtype (each a schedule of its own), and after the communicator's
resources were re-acquired (the old schedule is not used).
"""
from __future__ import annotations

from typing import Any, Dict

import numpy as np
import pytest

from algohelp import count_issues
from multiproc import run_ranks


def body(rank: int, n: int, root_info: bytes, algo: str, coll: str) -> Dict[str, int]:
    import hcomm_cffi as hcomm
    w = hcomm.init(rank=rank, world_size=n, root_info=root_info, topology=(2, n // 2))
    issued = count_issues(algo)
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
        w._engine.forget_resources()                            # resources re-acquired: the old schedules are stale
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
    issued = count_issues("pairwise")
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
    # issue() ran for the 3 ranks of the dry run that derived its plan, twice more per rank for its
    # steady-state check (the call followed by itself), then once for real; 2 replays
    assert run_ranks(3, user_body, timeout=120) == [3 + 2 * 3 + 1] * 3


def prepared_body(rank: int, n: int, root_info: bytes, algo: str) -> Dict[str, int]:
    """Emulator: replays on the same buffers launch prepared task lists (Backend.prepare_batch), still right."""
    import hcomm_cffi as hcomm
    w = hcomm.init(rank=rank, world_size=n, root_info=root_info)
    try:
        x = np.empty(64, np.float32)
        y = np.empty(64, np.float32)
        for step in range(5):
            for buf in (x, y):                   # two buffers of one signature: two prepared batches
                buf[:] = np.arange(64, dtype=np.float32) * (rank + 1) + step
                w.allreduce(buf, algorithm=algo)
                expect = np.arange(64, dtype=np.float32) * (n * (n + 1) // 2) + n * step
                np.testing.assert_array_equal(buf, expect)
        prepared = [b.batch for e in w._engine.cache.entries.values() for b in e.bound]
        return {"prepared": len(prepared), "tasks": min(len(p) for p in prepared)}
    finally:
        hcomm.finalize()


@pytest.mark.parametrize("algo", ["ring", "mesh"])
def test_replays_on_the_emulator_launch_prepared_task_lists(algo: str) -> None:
    for seen in run_ranks(3, prepared_body, algo, timeout=120):
        # one per buffer and handshake parity: each buffer's call is bound for both parities at its first call,
        # which launches its prepared batch too (one path from the first call on)
        assert seen["prepared"] == 4
        assert seen["tasks"] > 0


def test_prepared_batch_validates_once_and_needs_batch_mode() -> None:
    """sim_prepare_batch raises on a bad call and leaves batch mode closed; issuing one needs an open batch."""
    from hcomm_cffi.algorithms.tasks import PreparedLaunch
    from hcomm_cffi.binding import Binding
    from hcomm_cffi.errors import HcclError
    from hcomm_cffi.sim import SimLibrary
    lib = SimLibrary()
    b = Binding(lib)
    with pytest.raises(HcclError):
        lib.sim_prepare_batch([(b.thread_notify_wait, (0xdead, 0, 1))])    # not a thread handle
    assert lib.primitives.open_batch() is None
    empty = lib.sim_prepare_batch([])
    assert len(empty) == 0
    with pytest.raises(RuntimeError, match="outside HcommBatchModeStart"):
        lib.sim_issue_prepared(empty)
    PreparedLaunch(b, empty).launch()            # an empty batch launches nothing and succeeds
