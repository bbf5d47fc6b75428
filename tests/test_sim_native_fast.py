"""HcclAllReduce's fast path for repeated small calls (sim/native.py) gives exactly what the full path gives.

Every test counts the calls that took the full path (argument checks and task-list lookup), so it
knows the fast path really served the others, and checks the data against NumPy.
"""
from __future__ import annotations

import functools
import itertools
import time
from typing import Any, Dict, List

import numpy as np
import pytest

from hcomm_cffi._ffi import ffi
from hcomm_cffi.enums import DataType, Engine, ReduceOp
from multiproc import run_ranks
from simhelp import RankEnv, open_rank

REF = {ReduceOp.SUM: np.add, ReduceOp.PROD: np.multiply, ReduceOp.MAX: np.maximum, ReduceOp.MIN: np.minimum}
NP = {DataType.FP32: np.float32, DataType.INT32: np.int32, DataType.FP64: np.float64}
ACL_ERROR_RT_FFTS_PLUS_TIMEOUT = 507048   # what a stream reports for a notify wait that timed out
HCCL_E_PARA = 1


def _counted(env: RankEnv, name: str) -> List[int]:
    """Count the calls of C function ``name`` (e.g. HcclBroadcast) that took the full path: those for which the
    collectives part's repeat found no kept task list to launch."""
    raw = next(part for part in getattr(env.lib, "raw", env.lib).parts if hasattr(part, "repeat"))
    repeat = raw.repeat          # possibly already counting another function
    calls = [0]

    def counted(called: str, args: tuple, count_at: Any) -> Any:
        rc = repeat(called, args, count_at)
        if rc is None and called == name:
            calls[0] += 1
        return rc
    raw.repeat = counted
    return calls


def _data(rank: int, it: int, count: int, np_t: type) -> np.ndarray:
    return ((np.arange(count) * (rank + 2) + it) % 5 + 1).astype(np_t)


# (send buffer, recv buffer ("same": in place), count, dtype, op, stream index)
SCHEDULE = [("a", "ya", 8, DataType.FP32, ReduceOp.SUM, 0),
            ("a", "a", 8, DataType.FP32, ReduceOp.SUM, 0),
            ("a", "ya", 3, DataType.FP32, ReduceOp.MAX, 0),
            ("b", "yb", 5, DataType.INT32, ReduceOp.PROD, 1),
            ("c", "yc", 3, DataType.FP64, ReduceOp.MIN, 0),
            ("b", "yb", 5, DataType.INT32, ReduceOp.SUM, 1)]
ORDER = [0, 0, 1, 0, 2, 3, 2, 4, 1, 5, 5, 0, 3, 4, 4, 2, 1, 0, 3, 5, 1, 2, 0, 0, 4, 3, 5, 1]


def _alternating(rank: int, n: int, root: bytes) -> dict:
    env = open_rank(rank, n, root)
    calls = _counted(env, "HcclAllReduce")
    b, lib = env.b, env.lib
    bufs = {"a": np.zeros(8, np.float32), "ya": np.zeros(8, np.float32), "b": np.zeros(5, np.int32),
            "yb": np.zeros(5, np.int32), "c": np.zeros(3, np.float64), "yc": np.zeros(3, np.float64)}
    ptrs = {k: env.ptr(v) for k, v in bufs.items()}
    streams = [env.stream, b.create_stream()]
    got = []
    for it, which in enumerate(ORDER):
        src, dst, count, dt, op, s = SCHEDULE[which]
        bufs[src][:count] = _data(rank, it, count, NP[dt])
        if dst != src:
            bufs[dst][:] = 0
        assert lib.HcclAllReduce(ptrs[src], ptrs[dst], count, dt, op, env.comm, streams[s]) == 0
        assert lib.aclrtSynchronizeStream(streams[s]) == 0
        got.append(bufs[dst][:count].copy())
    b.destroy_stream(streams[1])
    env.close()
    return {"got": got, "full": calls[0]}


@pytest.mark.parametrize("n,check", [(2, "strict"), (3, "off")])
def test_repeated_allreduces_alternating_buffers_counts_types_ops_and_streams(n: int, check: str) -> None:
    results = run_ranks(n, _alternating, timeout=120, env={"HCOMM_SIM_CHECK": check})
    for it, which in enumerate(ORDER):
        _, _, count, dt, op, _ = SCHEDULE[which]
        expected = functools.reduce(REF[op], [_data(r, it, count, NP[dt]) for r in range(n)])
        for r in range(n):
            np.testing.assert_array_equal(results[r]["got"][it], expected, err_msg=f"call {it}, rank {r}")
    for r in range(n):   # at most one full-path call per (schedule entry, parity); the rest were fast
        assert results[r]["full"] <= 2 * len(SCHEDULE) < len(ORDER)


def _behind_a_blocked_queue(rank: int, n: int, root: bytes) -> dict:
    """A fast-path allreduce issued while its stream waits on a thread notify runs after it, in stream order."""
    env = open_rank(rank, n, root)
    calls = _counted(env, "HcclAllReduce")
    lib, comm, s = env.lib, env.comm, env.stream
    x, src = np.zeros(4, np.float32), np.full(4, rank + 1.0, np.float32)
    px, psrc = env.ptr(x), env.ptr(src)
    for _ in range(2):                                    # both parities: the next call is fast
        assert lib.HcclAllReduce(px, px, 4, DataType.FP32, ReduceOp.SUM, comm, s) == 0
        assert lib.aclrtSynchronizeStream(s) == 0
    st, workers = ffi.new("ThreadHandle *"), ffi.new("ThreadHandle[1]")
    assert lib.HcclThreadAcquireWithStream(comm, Engine.CPU_TS, s, 1, st) == 0   # the stream's own thread
    assert lib.HcclThreadAcquire(comm, Engine.CPU_TS, 1, 1, workers) == 0
    assert lib.HcommBatchModeStart(b"held") == 0
    assert lib.HcommThreadNotifyWaitOnThread(st[0], 0, 0) == 0
    assert lib.HcommLocalCopyOnThread(st[0], px, psrc, x.nbytes) == 0       # x = src, once the wait passes
    assert lib.HcommBatchModeEnd(b"held") == 0
    before = calls[0]
    assert lib.HcclAllReduce(px, px, 4, DataType.FP32, ReduceOp.SUM, comm, s) == 0
    fast = calls[0] == before
    held = x.tolist()                                     # nothing of the stream may have run yet
    assert lib.HcommBatchModeStart(b"release") == 0
    assert lib.HcommThreadNotifyRecordOnThread(workers[0], st[0], 0) == 0
    assert lib.HcommBatchModeEnd(b"release") == 0
    rc = lib.aclrtSynchronizeStream(s)
    out = {"fast": fast, "held": held, "sync": rc, "x": x.tolist()}
    env.close()
    return out


def test_fast_path_keeps_stream_order_behind_a_blocked_queue() -> None:
    n = 2
    results = run_ranks(n, _behind_a_blocked_queue, timeout=120, env={"HCOMM_SIM_CHECK": "off"})
    for r, out in enumerate(results):
        assert out["fast"], f"rank {r}: the allreduce took the full path; the test needs the fast one"
        assert out["sync"] == 0
        assert out["held"] == [0.0] * 4, f"rank {r}: the allreduce ran ahead of the blocked stream"
        assert out["x"] == [float(sum(q + 1 for q in range(n)))] * 4, f"rank {r}: got {out['x']}"


def _comm_destroyed_then_handle_reused(rank: int, n: int, root: bytes) -> dict:
    """Warm the fast path on a sub-communicator, destroy it, make another at the same handle value, reuse the call."""
    env = open_rank(rank, n, root)
    calls = _counted(env, "HcclAllReduce")
    b, lib, s = env.b, env.lib, env.stream
    raw = getattr(lib, "raw", lib)
    x, y = np.zeros(2, np.float32), np.zeros(2, np.float32)
    px, py = env.ptr(x), env.ptr(y)
    first = b.create_sub_comm(env.comm, list(range(n)), 1, rank)
    key = int(ffi.cast("uintptr_t", first))
    for it in range(3):
        x[:] = rank + it
        assert lib.HcclAllReduce(px, py, 2, DataType.FP32, ReduceOp.SUM, first, s) == 0
        assert lib.aclrtSynchronizeStream(s) == 0
    warm = calls[0]
    b.comm_destroy(first)
    gone = lib.HcclAllReduce(px, py, 2, DataType.FP32, ReduceOp.SUM, first, s)
    raw.state._ptr_keys = itertools.count(key, 0x100)     # the next communicator gets the same handle value
    ranks = list(reversed(range(n)))                      # another layout: sub rank r is world rank n-1-r
    second = b.create_sub_comm(env.comm, ranks, 2, ranks.index(rank))
    same = int(ffi.cast("uintptr_t", second)) == key
    x[:] = 10 * (rank + 1)
    y[:] = 0
    rc = lib.HcclAllReduce(px, py, 2, DataType.FP32, ReduceOp.SUM, first, s)   # the old handle object, same value
    sync = lib.aclrtSynchronizeStream(s)
    out = {"warm": warm, "gone": gone, "same": same, "rc": rc, "sync": sync, "y": y.tolist(),
           "full": calls[0]}
    b.comm_destroy(second)
    env.close()
    return out


def test_destroyed_communicator_and_a_new_one_at_the_same_handle() -> None:
    n = 2
    for r, out in enumerate(run_ranks(n, _comm_destroyed_then_handle_reused, timeout=120)):
        assert out["warm"] == 2, f"rank {r}: warm-up took the full path {out['warm']} times (expected one per parity)"
        assert out["gone"] == HCCL_E_PARA, f"rank {r}: an allreduce on a destroyed communicator returned {out['gone']}"
        assert out["same"], "the test did not manage to reuse the handle value"
        assert (out["rc"], out["sync"]) == (0, 0)
        assert out["y"] == [float(10 * sum(range(1, n + 1)))] * 2
        assert out["full"] == out["warm"] + 2      # the destroyed call and the first on the new communicator


def _one_rank_skips_a_call(rank: int, n: int, root: bytes) -> dict:
    """Rank 1 issues one allreduce fewer: rank 0's fast-path call must time out, not pass or hang."""
    env = open_rank(rank, n, root)
    calls = _counted(env, "HcclAllReduce")
    lib, comm, s = env.lib, env.comm, env.stream
    x = np.ones(2, np.float32)
    px = env.ptr(x)
    for _ in range(2):
        assert lib.HcclAllReduce(px, px, 2, DataType.FP32, ReduceOp.SUM, comm, s) == 0
        assert lib.aclrtSynchronizeStream(s) == 0
    out: dict = {}
    if rank == 0:
        t0 = time.monotonic()
        out["issue"] = lib.HcclAllReduce(px, px, 2, DataType.FP32, ReduceOp.SUM, comm, s)
        out["fast"] = calls[0] == 2
        out["sync"] = lib.aclrtSynchronizeStream(s)
        out["message"] = ffi.string(lib.aclGetRecentErrMsg()).decode()
        out["waited"] = time.monotonic() - t0
        out["destroy"] = lib.HcclCommDestroy(comm)
    else:
        time.sleep(4)                                     # stays alive: the peer's error must be its own timeout
        out["destroy"] = lib.HcclCommDestroy(comm)
    return out


def test_a_missing_call_still_times_out_on_the_fast_path() -> None:
    results = run_ranks(2, _one_rank_skips_a_call, timeout=120, env={"HCCL_EXEC_TIMEOUT": "2"})
    out = results[0]
    assert out["issue"] == 0 and out["fast"]
    assert out["sync"] == ACL_ERROR_RT_FFTS_PLUS_TIMEOUT, out
    assert "notify wait timed out after 2 s" in out["message"]
    assert 1.5 < out["waited"] < 4.0


# ---------------------------------------------------------------------- the other symmetric collectives
def _other_collectives(rank: int, n: int, root: bytes) -> dict:
    """Broadcast (alternating roots and buffers), allgather, reduce_scatter and barrier repeated, interleaved."""
    env = open_rank(rank, n, root)
    full = {name: _counted(env, name) for name in ("HcclBroadcast", "HcclAllGather", "HcclReduceScatter", "HcclBarrier")}
    lib = env.lib
    a, b2 = np.zeros(6, np.float32), np.zeros(6, np.float32)
    blk, gathered = np.zeros(3, np.float32), np.zeros(3 * n, np.float32)
    src, part = np.zeros(2 * n, np.int32), np.zeros(2, np.int32)
    p = {k: env.ptr(v) for k, v in (("a", a), ("b", b2), ("blk", blk), ("g", gathered), ("src", src), ("part", part))}
    out: Dict[str, list] = {"bcast": [], "gather": [], "rs": []}
    fp32, i32 = int(DataType.FP32), int(DataType.INT32)
    for it in range(12):
        buf, bp = (a, p["a"]) if it % 3 else (b2, p["b"])
        buf[:] = _data(rank, it, 6, np.float32)
        bcast_root = it % n
        assert lib.HcclBroadcast(bp, 6, fp32, bcast_root, env.comm, env.stream) == 0
        blk[:] = _data(rank, it, 3, np.float32)
        assert lib.HcclAllGather(p["blk"], p["g"], 3, fp32, env.comm, env.stream) == 0
        src[:] = _data(rank, it, 2 * n, np.int32)
        assert lib.HcclReduceScatter(p["src"], p["part"], 2, i32, int(ReduceOp.SUM), env.comm, env.stream) == 0
        assert lib.HcclBarrier(env.comm, env.stream) == 0
        assert lib.aclrtSynchronizeStream(env.stream) == 0
        out["bcast"].append((bcast_root, buf.copy()))
        out["gather"].append(gathered.copy())
        out["rs"].append(part.copy())
    # queued back to back, one synchronisation: a repeat on the wrong parity would record a notify its
    # peer has not consumed yet (the strict checker fails the stream) or overwrite a region still read
    for it in range(40):
        a[:] = _data(rank, it, 6, np.float32)
        assert lib.HcclBroadcast(p["a"], 6, fp32, 0, env.comm, env.stream) == 0
        assert lib.HcclAllGather(p["blk"], p["g"], 3, fp32, env.comm, env.stream) == 0
    assert lib.aclrtSynchronizeStream(env.stream) == 0
    out["queued"] = [a.copy(), gathered.copy()]
    env.close()
    return {"out": out, "full": {k: v[0] for k, v in full.items()}}


@pytest.mark.parametrize("n,check", [(2, "strict"), (3, "warn"), (4, "off")])
def test_repeated_broadcast_allgather_reduce_scatter_and_barrier_stay_right(n: int, check: str) -> None:
    results = run_ranks(n, _other_collectives, timeout=120, env={"HCOMM_SIM_CHECK": check})
    for it in range(12):
        for r in range(n):
            root, got = results[r]["out"]["bcast"][it]
            np.testing.assert_array_equal(got, _data(root, it, 6, np.float32), err_msg=f"broadcast {it}, rank {r}")
            np.testing.assert_array_equal(results[r]["out"]["gather"][it],
                                          np.concatenate([_data(q, it, 3, np.float32) for q in range(n)]))
            total = sum(_data(q, it, 2 * n, np.int32) for q in range(n))
            np.testing.assert_array_equal(results[r]["out"]["rs"][it], total[2 * r:2 * r + 2])
        np.testing.assert_array_equal(results[r]["out"]["queued"][0], _data(0, 39, 6, np.float32))
        np.testing.assert_array_equal(results[r]["out"]["queued"][1],
                                      np.concatenate([_data(q, 11, 3, np.float32) for q in range(n)]))
    for r in range(n):   # repeats were served from the kept task lists: at most one full call per signature and parity
        full = results[r]["full"]
        assert full["HcclBroadcast"] <= min(2 * 2 * n, 8), full    # 2 buffers x n roots x 2 parities, of 12 calls
        assert full["HcclAllGather"] <= 2 and full["HcclReduceScatter"] <= 2 and full["HcclBarrier"] <= 2, full


def _stream_per_step(rank: int, n: int, root: bytes) -> dict:
    """A new stream per step (native allreduce and a thread acquired with it), destroyed after the step."""
    env = open_rank(rank, n, root)
    lib, comm = env.lib, env.comm
    raw = getattr(lib, "raw", lib)
    state = raw.state
    x = np.zeros(4, np.float32)
    px = env.ptr(x)
    sizes, stale = [], []
    for step in range(12):
        s = ffi.new("aclrtStream *")
        assert lib.aclrtCreateStream(s) == 0
        x[:] = rank + step
        for _ in range(2):                                # both parities: the second call is a repeat
            assert lib.HcclAllReduce(px, px, 4, DataType.FP32, ReduceOp.SUM, comm, s[0]) == 0
            assert lib.aclrtSynchronizeStream(s[0]) == 0
        assert x.tolist() == [float(n * sum(q + step for q in range(n)))] * 4, (step, x.tolist())
        th = ffi.new("ThreadHandle *")
        assert lib.HcclThreadAcquireWithStream(comm, Engine.CPU_TS, s[0], 1, th) == 0
        stale.append(th[0])
        assert lib.aclrtDestroyStream(s[0]) == 0
        sizes.append((len(state.comm(comm).stream_threads), len(state.threads)))
    gone = [int(ffi.cast("uintptr_t", h)) in state.threads for h in stale]
    env.close()
    return {"sizes": sizes, "gone": gone}


def test_a_destroyed_stream_takes_its_threads_with_it() -> None:
    """Threads bound to a stream go with it: a job that makes a stream per step does not grow per step."""
    for r, out in enumerate(run_ranks(2, _stream_per_step, timeout=120)):
        assert len(set(out["sizes"])) == 1, f"rank {r}: the comm kept a thread per destroyed stream: {out['sizes']}"
        assert not any(out["gone"]), f"rank {r}: a destroyed stream's thread handle is still registered"
