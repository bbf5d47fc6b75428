"""Several threads of each rank on ONE communicator: every call is atomic, none mixes two calls' data, none hangs.

Each call carries a code that names it (thread, index) scaled by ``B ** rank``, so a result says which
call of every rank it was paired with.  What the package promises (docs/guide/reliability-threads.md):

- every result is the data of exactly one call of each rank (the whole buffer, never a mix);
- the pairing is the same on every rank (rank 0's call paired with rank 1's call c sees c, and c sees
  it), each call paired once -- calls pair in the order each rank made them, which threads racing
  make a race (as on torch's process groups), so the test checks consistency, not thread identity;
- calls of different threads whose paired calls differ are named a mismatch, within seconds.

Before the call lock (api/state.py) two threads' ring calls interleaved their tasks: results that
were no call's sum (1000 where 2001 was due), then both ranks waited HCCL_EXEC_TIMEOUT.
"""
from __future__ import annotations

import collections
import threading
from typing import Any, Callable, Dict, List, Tuple

import numpy as np
import pytest

from multiproc import run_ranks

pytestmark = pytest.mark.slow

THREADS = 2
RANKS = 3                   # double_ring needs three; topology (3, 1) lets hierarchical run too
B = 1 << 10                 # codes are below B: a three-rank sum decodes into every rank's code (int32)
CALLS = 40                  # per thread, mode and algorithm
COUNT = 3 * 20              # elements per call (alltoall: a block of 20 per rank)
#: every built-in algorithm with a collective it implements
ALGORITHMS = [("auto", "allreduce"), ("ring", "allreduce"), ("mesh", "allreduce"), ("tree", "allreduce"),
              ("hierarchical", "allreduce"), ("native", "allreduce"), ("nb", "allreduce"),
              ("double_ring", "allreduce"), ("alltoall_pairwise", "alltoall"), ("ring", "alltoall")]
ENV = {"HCCL_EXEC_TIMEOUT": "30"}     # a hang (the defect) fails within the test's bound


def _code(t: int, i: int) -> int:
    return t * (B // 2) + i + 1


def _threads(fn: Callable[[int], None]) -> None:
    """Run ``fn(t)`` on THREADS threads at once; re-raise the first failure (every thread joined, bounded)."""
    errors: List[BaseException] = []
    start = threading.Barrier(THREADS)

    def run(t: int) -> None:
        try:
            start.wait(30)
            fn(t)
        except BaseException as exc:     # noqa: BLE001 - reported below
            errors.append(exc)
    ts = [threading.Thread(target=run, args=(t,), name=f"worker-{t}") for t in range(THREADS)]
    for th in ts:
        th.start()
    for th in ts:
        th.join(120)
        assert not th.is_alive(), f"{th.name} did not finish within 120 s"
    if errors:
        raise errors[0]


def _pair(coll: str, rank: int, n: int, t: int, i: int, out: np.ndarray) -> Tuple[int, ...]:
    """The code of the call of each rank this call was paired with; asserts the buffer holds one call of each."""
    if coll == "alltoall":          # block j came from rank j, scaled by B ** j
        blocks = out.reshape(n, -1)
        assert np.all(blocks == blocks[:, :1]), f"one buffer holds data of several calls: {blocks}"
        assert all(int(blocks[j, 0]) % B ** j == 0 for j in range(n)), blocks
        got = tuple(int(blocks[j, 0]) // B ** j for j in range(n))
    else:
        assert np.all(out == out[0]), f"one buffer holds data of several calls: {np.unique(out)}"
        got = tuple((int(out[0]) // B ** r) % B for r in range(n))
    assert got[rank] == _code(t, i), f"thread {t} call {i}: its own contribution is {got[rank]}, not {_code(t, i)}"
    assert all(0 < g < B for g in got), got
    return got


def _collectives_body(rank: int, n: int, root: bytes) -> Dict[str, List[Tuple[int, ...]]]:
    """Every algorithm, blocking and nonblocking (and persistent and stream-ordered for two): the pairs seen."""
    import hcomm_cffi as hcomm
    w = hcomm.init(rank=rank, world_size=n, root_info=root, topology=(n, 1))
    seen: Dict[str, List[Tuple[int, ...]]] = collections.defaultdict(list)
    streams = [hcomm.Stream() for _ in range(THREADS)]    # one per thread, alive until the end (the comm orders
    try:                                                 # its calls across them)
        def value(t: int, i: int) -> np.ndarray:
            return np.full(COUNT, _code(t, i) * B ** rank, np.int32)

        def call(key: str, coll: str, alg: str, mode: str, t: int) -> None:
            depth: collections.deque = collections.deque()
            stream = streams[t] if mode == "stream" else None
            x0 = value(t, 0)
            out0 = np.empty_like(x0)
            persistent = (w.allreduce_init(x0, algorithm=alg) if coll == "allreduce" else
                          w.alltoall_init(x0, out=out0, algorithm=alg)) if mode == "persistent" else None
            for i in range(CALLS):
                x = value(t, i)
                out = x if coll == "allreduce" else np.empty_like(x)
                kw: Dict[str, Any] = {} if coll == "allreduce" else {"out": out}
                if mode == "blocking":
                    getattr(w, coll)(x, algorithm=alg, **kw)
                    seen[key].append(_pair(coll, rank, n, t, i, out))
                elif mode == "persistent":
                    assert persistent is not None
                    x0[:] = x
                    persistent.start()
                    persistent.wait(60)
                    seen[key].append(_pair(coll, rank, n, t, i, x0 if coll == "allreduce" else out0))
                else:                   # nonblocking (two in flight per thread) or stream-ordered
                    req = getattr(w, coll)(x, algorithm=alg, async_op=True, stream=stream, **kw)
                    depth.append((i, req, out))
                    if len(depth) == 2 or i == CALLS - 1:
                        while depth:
                            j, r, o = depth.popleft()
                            r.wait(60)
                            seen[key].append(_pair(coll, rank, n, t, j, o))

        for alg, coll in ALGORITHMS:
            for mode in ("blocking", "nonblocking"):
                key = f"{coll}/{alg}/{mode}"
                _threads(lambda t, k=key, c=coll, a=alg, m=mode: call(k, c, a, m, t))
        for alg, mode in (("ring", "persistent"), ("native", "persistent"), ("ring", "stream"), ("native", "stream")):
            if mode == "stream":    # a stream's first call acquires its resources, collectively: every rank must
                for st in streams:  # make it at the same call, so one call per stream first, in one order
                    w.allreduce(np.zeros(COUNT, np.int32), algorithm=alg, async_op=True, stream=st).wait(60)
            key = f"allreduce/{alg}/{mode}"
            _threads(lambda t, k=key, a=alg, m=mode: call(k, "allreduce", a, m, t))
        return dict(seen)
    finally:
        for st in streams:
            st.close()
        hcomm.finalize()


def _p2p_body(rank: int, n: int, root: bytes) -> List[int]:
    """Each thread sends and receives on one communicator: exchanges in both directions (isend/irecv, and blocking
    send/recv), then blocking send/recv one way and back; what arrived (every message must be one whole send)."""
    import hcomm_cffi as hcomm
    w = hcomm.init(rank=rank, world_size=n, root_info=root)
    peer = 1 - rank
    got: List[int] = []
    try:
        def message(t: int, i: int) -> np.ndarray:
            return np.full(COUNT, _code(t, i) + B * rank, np.int32)

        def check(buf: np.ndarray) -> None:
            assert np.all(buf == buf[0]), f"one message holds data of several sends: {np.unique(buf)}"
            assert int(buf[0]) // B == peer, buf[0]
            got.append(int(buf[0]) % B)

        def exchange(t: int) -> None:
            for i in range(2 * CALLS):
                buf = np.empty(COUNT, np.int32)
                if i % 2:                   # blocking both ways: a wait never waits for the other thread's later posts
                    if rank == 0:
                        w.send(message(t, i), peer)
                        w.recv(buf, peer)
                    else:
                        w.recv(buf, peer)
                        w.send(message(t, i), peer)
                else:
                    reqs = [w.isend(message(t, i), peer), w.irecv(buf, peer)]
                    for r in reqs:
                        r.wait(60)
                check(buf)

        def one_way(sender: int, base: int) -> Callable[[int], None]:
            def run(t: int) -> None:
                for i in range(base, base + CALLS):
                    if rank == sender:
                        w.send(message(t, i), peer)
                    else:
                        buf = np.empty(COUNT, np.int32)
                        w.recv(buf, peer)
                        check(buf)
            return run
        _threads(exchange)
        _threads(one_way(0, 2 * CALLS))
        _threads(one_way(1, 3 * CALLS))
        w.barrier()
        return got
    finally:
        hcomm.finalize()


def test_threads_on_one_communicator_pair_whole_calls_consistently_on_every_algorithm() -> None:
    by_rank = run_ranks(RANKS, _collectives_body, timeout=600, env=ENV)
    codes = sorted(_code(t, i) for t in range(THREADS) for i in range(CALLS))
    assert len(by_rank[0]) == 2 * len(ALGORITHMS) + 4 and all(set(r) == set(by_rank[0]) for r in by_rank)
    for key, pairs in by_rank[0].items():
        for r in range(1, RANKS):
            assert sorted(pairs) == sorted(by_rank[r][key]), f"{key}: ranks 0 and {r} paired their calls differently"
        for r in range(RANKS):
            assert sorted(p[r] for p in pairs) == codes, f"{key}: some call of rank {r} was paired twice or never"


def test_threads_sending_and_receiving_on_one_communicator_get_every_message_once() -> None:
    got = run_ranks(2, _p2p_body, timeout=300, env=ENV)
    both = [_code(t, i) for t in range(THREADS) for i in range(2 * CALLS)]
    assert sorted(got[0]) == sorted(both + [_code(t, i) for t in range(THREADS) for i in range(3 * CALLS, 4 * CALLS)])
    assert sorted(got[1]) == sorted(both + [_code(t, i) for t in range(THREADS) for i in range(2 * CALLS, 3 * CALLS)])


def _crossed_body(rank: int, n: int, root: bytes, alg: str) -> List[str]:
    """Two threads whose calls differ (count), made in opposite orders on the two ranks: a named mismatch."""
    import hcomm_cffi as hcomm
    w = hcomm.init(rank=rank, world_size=n, root_info=root)
    try:
        first_done = threading.Event()
        outcomes: List[str] = ["", ""]
        bufs = [np.full(16, 1 + rank, np.float32), np.full(32, 10 + rank, np.float32)]
        order = [0, 1] if rank == 0 else [1, 0]

        def run(t: int) -> None:
            if t != order[0]:
                first_done.wait(60)
            try:
                w.allreduce(bufs[t], algorithm=alg)
                outcomes[t] = "ok"
            except hcomm.CommError as exc:
                outcomes[t] = f"{type(exc).__name__}: {exc}"
            finally:
                first_done.set()
        ts = [threading.Thread(target=run, args=(t,)) for t in range(2)]
        for th in ts:
            th.start()
        for th in ts:
            th.join(90)
            assert not th.is_alive()
        assert np.all(bufs[0] == 1 + rank) and np.all(bufs[1] == 10 + rank), "a refused call moved data"
        return [outcomes[order[0]], outcomes[order[1]]]
    finally:
        hcomm.finalize()


@pytest.mark.parametrize("alg", ["ring", "mesh"])
def test_threads_calling_in_different_orders_are_named_a_mismatch(alg: str) -> None:
    # the default HCCL_EXEC_TIMEOUT (1836 s): the mismatch must be named long before any wait times out
    out = run_ranks(2, _crossed_body, alg, timeout=90)
    for rank, (first, second) in enumerate(out):
        assert first.startswith("CollectiveMismatchError"), (rank, first)
        assert "count 16 fp32" in first and "count 32 fp32" in first, first     # both calls are named
        assert "unusable after an earlier failure" in second, (rank, second)
