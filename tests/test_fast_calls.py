"""Blocking calls repeated on the same NumPy buffers run from the per-signature cache (api/buffers.py).

Each rank runs every collective several times on fixed buffers under the strict checker, against
NumPy, and checks that the cache served the repeats (its entry count, the algorithm's issue()
count) -- and that it does not serve what differs: the same memory as another dtype, a shorter
view at the same address, another op or root, another output buffer, a buffer made read-only or
non-contiguous (the same errors as the full path), resources re-acquired, the signature check
catching a rank that changed its op on a cached call.  The cache keeps no array alive.
"""
from __future__ import annotations

import gc
import weakref
from typing import Any, Dict

import numpy as np
import pytest

from algohelp import count_issues
from multiproc import run_ranks


def _values(rank: int, step: int, count: int, dtype: Any) -> np.ndarray:
    return (np.arange(count) % 7 + 3 * rank + step).astype(dtype)


def body(rank: int, n: int, root_info: bytes, algo: str) -> Dict[str, Any]:
    import hcomm_cffi as hcomm
    w = hcomm.init(rank=rank, world_size=n, root_info=root_info)
    issued = count_issues(algo)
    seen: Dict[str, Any] = {}
    ranks = range(n)
    try:
        x = np.empty(12, np.float32)
        for step in range(4):                                # in place: issued once, replayed, then served
            x[:] = _values(rank, step, 12, np.float32)
            seq = w._state.seq
            assert w.allreduce(x, algorithm=algo) is x
            assert w._state.seq == seq + 1                          # one flight record per call, fast or not
            np.testing.assert_array_equal(x, sum(_values(r, step, 12, np.float32) for r in ranks))
        seen["entries_in_place"] = len(w._engine.cache.fast)
        seen["issued_in_place"] = issued[0]

        as_int = x.view(np.int32)                            # same address and bytes, another dtype
        as_int[:] = (np.arange(12, dtype=np.int32) + 1) * 1_000_003 * (rank + 1)   # not denormal as float32
        w.allreduce(as_int, algorithm=algo)
        np.testing.assert_array_equal(as_int, (np.arange(12, dtype=np.int32) + 1) * 1_000_003
                                      * sum(r + 1 for r in ranks))

        x[:] = _values(rank, 9, 12, np.float32)              # same address, a shorter view
        head = x[:5]
        w.allreduce(head, algorithm=algo)
        np.testing.assert_array_equal(x[:5], sum(_values(r, 9, 12, np.float32) for r in ranks)[:5])
        np.testing.assert_array_equal(x[5:], _values(rank, 9, 12, np.float32)[5:])   # untouched

        for step in range(3):                                # another op on the cached buffer
            x[:] = _values(rank, step, 12, np.float32)
            w.allreduce(x, "max", algorithm=algo)
            np.testing.assert_array_equal(x, _values(n - 1, step, 12, np.float32))

        out_a, out_b = np.empty(12, np.float32), np.empty(12, np.float32)
        for step in range(3):                                # out=: each output buffer its own entry
            x[:] = _values(rank, step, 12, np.float32)
            for out in (out_a, out_b):
                out[:] = -1
                assert w.allreduce(x, out=out, algorithm=algo) is out
                np.testing.assert_array_equal(out, sum(_values(r, step, 12, np.float32) for r in ranks))
            np.testing.assert_array_equal(x, _values(rank, step, 12, np.float32))

        for root in (0, n - 1, 0):                           # broadcast: the root is part of the signature
            for step in range(2):
                x[:] = _values(rank, step, 12, np.float32)
                w.broadcast(x, root, algorithm=algo)
                np.testing.assert_array_equal(x, _values(root, step, 12, np.float32))

        gathered = np.empty((n, 6), np.float32)
        scattered = np.empty(4, np.float32)
        exchanged = np.empty(4 * n, np.float32)
        src = np.empty(4 * n, np.float32)
        for step in range(3):
            mine = _values(rank, step, 6, np.float32)
            assert w.allgather(mine, out=gathered, algorithm=algo) is gathered
            np.testing.assert_array_equal(gathered, np.stack([_values(r, step, 6, np.float32) for r in ranks]))
            src[:] = _values(rank, step, 4 * n, np.float32)
            w.reduce_scatter(src, out=scattered, algorithm=algo)
            np.testing.assert_array_equal(scattered, sum(_values(r, step, 4 * n, np.float32)
                                                         for r in ranks)[rank * 4:(rank + 1) * 4])
            w.alltoall(src, out=exchanged, algorithm=algo)
            np.testing.assert_array_equal(exchanged, np.concatenate(
                [_values(r, step, 4 * n, np.float32)[rank * 4:(rank + 1) * 4] for r in ranks]))
            x[:] = _values(rank, step, 12, np.float32)
            got = w.reduce(x, root=1, algorithm=algo)
            if rank == 1:
                assert got is x
                np.testing.assert_array_equal(x, sum(_values(r, step, 12, np.float32) for r in ranks))
            else:
                assert got is None
        seen["entries"] = len(w._engine.cache.fast)

        x.flags.writeable = False                            # a cached buffer made read-only: refused
        with pytest.raises(ValueError, match="read-only"):
            w.allreduce(x, algorithm=algo)
        x.flags.writeable = True
        grid = np.zeros((4, 6), np.float32)
        w.allreduce(grid, algorithm=algo)
        with pytest.raises(ValueError, match="C-contiguous"):   # same first address, not contiguous
            w.allreduce(grid.T, algorithm=algo)

        w._engine.forget_resources()                                # resources re-acquired: nothing stale is served
        seen["entries_after_forget"] = len(w._engine.cache.fast)
        before = issued[0]
        for step in range(3):
            x[:] = _values(rank, step, 12, np.float32)
            w.allreduce(x, algorithm=algo)
            np.testing.assert_array_equal(x, sum(_values(r, step, 12, np.float32) for r in ranks))
        seen["reissued_after_forget"] = issued[0] - before

        tmp = np.ones(20, np.float32)                        # the cache keeps no array alive
        for _ in range(3):
            w.allreduce(tmp, algorithm=algo)
        alive = weakref.ref(tmp)
        del tmp
        gc.collect()
        seen["kept_alive"] = alive() is not None
        return seen
    finally:
        hcomm.finalize()


@pytest.mark.parametrize("algo", ["native", "ring", "mesh"])
def test_repeated_calls_are_served_from_the_cache_and_stay_right(algo: str) -> None:
    for seen in run_ranks(3, body, algo, timeout=240):
        assert seen["entries_in_place"] == 1                 # stored at the first replay, served after
        assert seen["issued_in_place"] == 1
        assert seen["entries"] >= 10
        assert seen["entries_after_forget"] == 0
        assert seen["reissued_after_forget"] == 1
        assert not seen["kept_alive"]


def mismatch_body(rank: int, n: int, root_info: bytes, algo: str) -> str:
    """A rank that changes its op on a cached call is caught on every rank (the handshake, or the native in-band check)."""
    import hcomm_cffi as hcomm
    from hcomm_cffi.api.consistency import CollectiveMismatchError
    w = hcomm.init(rank=rank, world_size=n, root_info=root_info)
    try:
        x = np.ones(8, np.float32)
        for _ in range(3):
            w.allreduce(x, algorithm=algo)
        assert len(w._engine.cache.fast) == 1
        x[:] = 1
        with pytest.raises(CollectiveMismatchError) as info:
            w.allreduce(x, "max" if rank == 1 else "sum", algorithm=algo)
        np.testing.assert_array_equal(x, 1)                  # caught before any data moved
        return str(info.value)
    finally:
        hcomm.finalize()


@pytest.mark.parametrize("check", ["0", "1"])
@pytest.mark.parametrize("algo", ["native", "ring"])
def test_signature_check_still_runs_on_cached_calls(algo: str, check: str) -> None:
    for msg in run_ranks(2, mismatch_body, algo, timeout=120, env={"HCOMM_CHECK_COLLECTIVES": check}):
        assert "op" in msg
