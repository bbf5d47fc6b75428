"""Collectives whose arguments differ across ranks raise on every rank at once (issue: mismatches never corrupt).

The default mode on the emulator compares each collective's signature across ranks before any
data moves; each case below would otherwise hang or produce wrong data.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Tuple

import numpy as np
import pytest

from multiproc import run_ranks

#: case -> (what each rank calls, the words every rank's error must contain)
CASES: Dict[str, Tuple[Callable[[Any, int], Any], List[str]]] = {
    "count": (lambda w, r: w.allreduce(np.ones(4 if r == 0 else 8, np.float32)),
              ["ranks disagree on the count of allreduce #2", "rank 0 calls allreduce #2 (count 4 fp32",
               "ranks 1,2 call allreduce #2 (count 8 fp32"]),
    "dtype": (lambda w, r: w.allreduce(np.ones(4, np.float32 if r == 0 else np.int32)),
              ["ranks disagree on the dtype of allreduce #2", "count 4 fp32", "count 4 int32"]),
    "op": (lambda w, r: w.allreduce(np.ones(4, np.float32), "max" if r == 1 else "sum"),
           ["ranks disagree on the reduce op of allreduce #2", "op sum", "op max"]),
    "algorithm": (lambda w, r: w.allreduce(np.ones(4, np.float32), algorithm="ring" if r == 0 else "mesh"),
                  ["ranks disagree on the algorithm of allreduce #2", "algorithm ring", "algorithm mesh"]),
    "broadcast_count": (lambda w, r: w.broadcast(np.ones(16 if r == 0 else 8, np.float32), 0),
                        ["ranks disagree on the count of broadcast #2", "count 16 fp32, root 0",
                         "count 8 fp32, root 0"]),
    "root": (lambda w, r: w.broadcast(np.ones(4, np.float32), r % 2),
             ["ranks disagree on the root of broadcast #2", "root 0", "root 1"]),
    "collective": (lambda w, r: w.broadcast(np.ones(4, np.float32), 0) if r == 1 else w.allreduce(np.ones(4, np.float32)),
                   ["ranks disagree on the collective they are in", "rank 1 calls broadcast #2",
                    "allreduce #2 (count 4 fp32"]),
}


def body(rank: int, n: int, root_info: bytes, case: str) -> Tuple[str, float, float]:
    import hcomm_cffi as hcomm
    w = hcomm.init(rank=rank, world_size=n, root_info=root_info)
    try:
        w.barrier()                       # collective #1: everyone is here, so the timing below is the check's
        t0 = time.monotonic()
        with pytest.raises(hcomm.CollectiveMismatchError) as info:
            CASES[case][0](w, rank)
        elapsed = time.monotonic() - t0
        # nothing was issued: the communicator still works, and the sequence numbers still agree
        total = w.allreduce(np.full(3, rank + 1, np.float32))
        return str(info.value), elapsed, float(total[0])
    finally:
        hcomm.finalize()


@pytest.mark.parametrize("case", sorted(CASES))
def test_mismatch_raises_on_every_rank_within_a_second(case: str) -> None:
    n = 3
    for rank, (msg, elapsed, total) in enumerate(run_ranks(n, body, case, timeout=120)):
        for word in CASES[case][1]:
            assert word in msg, (rank, word, msg)
        assert f"rank {rank} of communicator 'world'" in msg
        assert elapsed < 1.0, (rank, elapsed)
        assert total == n * (n + 1) / 2


def off_body(rank: int, n: int, root_info: bytes) -> int:
    """HCOMM_CHECK_COLLECTIVES=0: no signature allgather is made (counted at the binding)."""
    import hcomm_cffi as hcomm
    from hcomm_cffi.binding import get_binding
    b = get_binding()
    calls = []
    real = b.all_gather
    b.all_gather = lambda *a: (calls.append(a), real(*a))[1]  # type: ignore[method-assign]
    w = hcomm.init(rank=rank, world_size=n, root_info=root_info)
    try:
        w.allreduce(np.ones(4, np.float32), algorithm="ring")
        return len(calls)
    finally:
        hcomm.finalize()
        b.all_gather = real  # type: ignore[method-assign]


def test_check_off_makes_no_extra_collective() -> None:
    assert run_ranks(2, off_body, timeout=60, env={"HCOMM_CHECK_COLLECTIVES": "0"}) == [0, 0]


def blocking_body(rank: int, n: int, root_info: bytes) -> str:
    import hcomm_cffi as hcomm
    w = hcomm.init(rank=rank, world_size=n, root_info=root_info)
    try:
        if rank == 0:
            with pytest.raises(hcomm.CommTimeoutError) as info:
                w.recv(np.empty(4, np.float32), 1, timeout=0.5)   # rank 1 never sends
            with pytest.raises(hcomm.CommError, match="unusable after an earlier failure"):
                w.allreduce(np.ones(1))
            return str(info.value)
        time.sleep(2.0)                   # stay alive past rank 0's timeout (a dead peer is another error)
        return ""
    finally:
        hcomm.finalize()


def test_blocking_recv_timeout_names_the_peer_and_no_request() -> None:
    msg = run_ranks(2, blocking_body, timeout=60)[0]
    assert "recv of 16 bytes from rank 1 did not complete within 0.5 s; check that rank 1 posts the matching send" \
        in msg, msg
    assert "wait again" not in msg
