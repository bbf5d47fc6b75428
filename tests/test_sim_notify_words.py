"""A store into a peer's notify that lands twice never makes a record out of nothing (sim/notifies.py).

cffi stores an integer with a call of libc's memcpy, and glibc's memcpy of 4 bytes writes them twice.
When a wait consumed a record between the two writes, the second one brought the record back: the next
wait on that notify passed at once, a rank went out of step and reduced its peer's earlier data (CI saw
``992`` instead of 9 once, and an "absorbed" record in another run).  These tests repeat every store
that rank 0's records made, one call later -- by then rank 1 has consumed those records -- and check
that every collective still agrees and returns the right data.
"""
from __future__ import annotations

from typing import Any, Dict, List, Tuple

import numpy as np
import pytest

from multiproc import run_ranks

CALLS = 12


class StoresRepeated:
    """Stands in for a channel's view of the peer's control words: reads and writes go through; the writes
    of one call are kept so that the test can make them land again later, as a repeated store does."""

    def __init__(self, words: Any) -> None:
        self.words = words
        self.stores: List[Tuple[int, int]] = []

    def __getitem__(self, i: int) -> int:
        return self.words[i]

    def __setitem__(self, i: int, value: int) -> None:
        self.words[i] = value
        self.stores.append((i, value))

    def land_again(self, stores: List[Tuple[int, int]]) -> int:
        """Make the last of ``stores`` to each word land again, unless this rank wrote that word since: a
        repeated store comes before the writer's next store to the same word (one CPU's stores to one
        address are seen in order).  Returns how many landed."""
        since = {i for i, _ in self.stores}
        last = {i: value for i, value in stores if i not in since}
        for i, value in last.items():
            self.words[i] = value
        return len(last)


def _body(rank: int, n: int, root_info: bytes, algorithm: str, size: int) -> Dict[str, Any]:
    import hcomm_cffi as hcomm
    from hcomm_cffi.sim.library import _STATE

    world = hcomm.init(rank=rank, world_size=n, root_info=root_info)
    got: List[float] = []
    try:
        x = np.full(size, float(rank + 1), np.float32)
        world.allreduce(x, algorithm=algorithm)                # every channel it uses exists now
        views: List[StoresRepeated] = []
        if rank == 0:
            for ch in _STATE.comm(world.handle).channels.values():
                ch.remote_words = StoresRepeated(ch.remote_words)
                views.append(ch.remote_words)
        previous: List[List[Tuple[int, int]]] = [[] for _ in views]
        repeated = 0
        for step in range(CALLS):
            for view in views:
                view.stores = []
            x = np.full(size, float(step * 10 + rank + 1), np.float32)
            world.allreduce(x, algorithm=algorithm)
            got.append(float(x.min()))
            got.append(float(x.max()))
            for view, stores in zip(views, previous):  # the last call's records land again: the peer took them
                repeated += view.land_again(stores)
            previous = [view.stores for view in views]
        return {"got": got, "repeated": repeated}
    except Exception as exc:                            # noqa: BLE001 -- the test names it
        return {"got": got, "error": f"{type(exc).__name__}: {exc}"}
    finally:
        hcomm.finalize()


@pytest.mark.parametrize("algorithm,size", [("native", 4), ("native", 1024), ("ring", 1024)])
def test_a_record_stored_twice_never_lets_a_later_wait_pass(algorithm: str, size: int) -> None:
    # the Python engine: its stores are what StoresRepeated instruments (engine.c's are single plain stores)
    results = run_ranks(2, _body, algorithm, size, timeout=90, env={"HCCL_EXEC_TIMEOUT": "10",
                                                                  "HCOMM_SIM_ENGINE": "python"})
    want = [v for step in range(CALLS) for v in (float(step * 20 + 3),) * 2]
    for rank, r in enumerate(results):
        assert "error" not in r, f"rank {rank}: {r['error']}"
        assert r["got"] == want, f"rank {rank}: {r['got']} != {want}"
    assert results[0]["repeated"] > 0, "rank 0 repeated no store: the test exercised nothing"
