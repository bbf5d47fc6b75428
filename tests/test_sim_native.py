"""The vendor collectives (HcclAllReduce, HcclSend, ...) on the emulator match NumPy."""
from __future__ import annotations

import numpy as np
import pytest

from hcomm_cffi._ffi import ffi
from hcomm_cffi.enums import DataType, ReduceOp, SendRecvType
from multiproc import run_ranks
from simhelp import open_rank

NP = {DataType.INT8: np.int8, DataType.INT32: np.int32, DataType.INT64: np.int64, DataType.FP16: np.float16,
      DataType.FP32: np.float32, DataType.FP64: np.float64, DataType.UINT8: np.uint8}
REF = {ReduceOp.SUM: np.add, ReduceOp.PROD: np.multiply, ReduceOp.MAX: np.maximum, ReduceOp.MIN: np.minimum}


def _data(rank: int, count: int, np_t: type, salt: int = 0) -> np.ndarray:
    return ((np.arange(count) * (rank + 3) + salt) % 7 + 1).astype(np_t)


def _collectives(rank: int, n: int, root_info: bytes, count: int) -> dict:
    env = open_rank(rank, n, root_info)
    b, c, s = env.b, env.comm, env.stream
    out = {}
    for dt, np_t in NP.items():
        for op in ReduceOp:
            if op == ReduceOp.RESERVED or (op == ReduceOp.PROD and dt in (DataType.INT8, DataType.FP16)):
                continue
            x = _data(rank, count, np_t)
            y = np.zeros_like(x)
            b.all_reduce(env.ptr(x), env.ptr(y), count, dt, op, c, s)
            b.synchronize_stream(s)
            out[("allreduce", dt.name, op.name)] = y
    x = _data(rank, count, np.float32, salt=5)
    y = np.zeros(count * n, np.float32)
    b.all_gather(env.ptr(x), env.ptr(y), count, DataType.FP32, c, s)
    big = _data(rank, count * n, np.int32, salt=1)
    rs = np.zeros(count, np.int32)
    b.reduce_scatter(env.ptr(big), env.ptr(rs), count, DataType.INT32, ReduceOp.SUM, c, s)
    a2a = np.zeros(count * n, np.int32)
    b.all_to_all(env.ptr(big), count, DataType.INT32, env.ptr(a2a), count, DataType.INT32, c, s)
    root = n - 1
    bc = _data(rank, count, np.float64, salt=9) if rank == root else np.zeros(count, np.float64)
    b.broadcast(env.ptr(bc), count, DataType.FP64, root, c, s)
    red = np.zeros(count, np.int64)
    b.reduce(env.ptr(_data(rank, count, np.int64)), env.ptr(red), count, DataType.INT64, ReduceOp.MAX, root, c, s)
    b.barrier(c, s)
    b.synchronize_stream(s)
    out.update(allgather=y, reduce_scatter=rs, alltoall=a2a, broadcast=bc, reduce=red)
    # point to point: a ring of sends and receives in one batch call, then a plain send/recv pair
    right, left = (rank + 1) % n, (rank - 1) % n
    send = _data(rank, count, np.int32, salt=2)
    recv = np.zeros(count, np.int32)
    items = ffi.new("HcclSendRecvItem[2]")
    items[0].sendRecvType, items[0].buf, items[0].count = SendRecvType.SEND, env.ptr(send), count
    items[0].dataType, items[0].remoteRank = DataType.INT32, right
    items[1].sendRecvType, items[1].buf, items[1].count = SendRecvType.RECV, env.ptr(recv), count
    items[1].dataType, items[1].remoteRank = DataType.INT32, left
    b.batch_send_recv(items, 2, c, s)
    b.synchronize_stream(s)
    out["batch_send_recv"] = recv
    if rank == 0:
        b.send(env.ptr(send), count, DataType.INT32, n - 1, c, s)
    elif rank == n - 1:
        got = np.zeros(count, np.int32)
        b.recv(env.ptr(got), count, DataType.INT32, 0, c, s)
        out["recv"] = got
    b.synchronize_stream(s)
    env.close()
    return out


@pytest.mark.parametrize("n,count", [(2, 1000), (3, 333), (4, 1)])
def test_native_collectives_match_numpy(n: int, count: int) -> None:
    results = run_ranks(n, _collectives, count, timeout=120)
    for dt, np_t in NP.items():
        for op in ReduceOp:
            key = ("allreduce", dt.name, op.name)
            if key not in results[0]:
                continue
            expected = _data(0, count, np_t)
            for r in range(1, n):
                expected = REF[op](expected, _data(r, count, np_t)).astype(np_t)
            for rank in range(n):
                np.testing.assert_array_equal(results[rank][key], expected, err_msg=f"{key} rank {rank}")
    gathered = np.concatenate([_data(r, count, np.float32, salt=5) for r in range(n)])
    bigs = [_data(r, count * n, np.int32, salt=1) for r in range(n)]
    for rank, res in enumerate(results):
        np.testing.assert_array_equal(res["allgather"], gathered)
        np.testing.assert_array_equal(res["reduce_scatter"], sum(bg[rank * count:(rank + 1) * count] for bg in bigs))
        np.testing.assert_array_equal(res["alltoall"], np.concatenate([bg[rank * count:(rank + 1) * count] for bg in bigs]))
        np.testing.assert_array_equal(res["broadcast"], _data(n - 1, count, np.float64, salt=9))
        np.testing.assert_array_equal(res["batch_send_recv"], _data((rank - 1) % n, count, np.int32, salt=2))
    expected_max = np.max([_data(r, count, np.int64) for r in range(n)], axis=0)
    np.testing.assert_array_equal(results[n - 1]["reduce"], expected_max)
    np.testing.assert_array_equal(results[n - 1]["recv"], _data(0, count, np.int32, salt=2))


def _chunked(rank: int, n: int, root_info: bytes) -> tuple:
    env = open_rank(rank, n, root_info)
    count = 3 * (1 << 20) // 4 + 7          # 3 MiB of fp32: more than the 1 MiB input half
    x = np.full(count, rank + 1, np.float32)
    y = np.zeros_like(x)
    env.b.all_reduce(env.ptr(x), env.ptr(y), count, DataType.FP32, ReduceOp.SUM, env.comm, env.stream)
    z = np.zeros(count, np.float32) if rank else np.arange(count, dtype=np.float32)
    env.b.broadcast(env.ptr(z), count, DataType.FP32, 0, env.comm, env.stream)
    env.b.synchronize_stream(env.stream)
    env.close()
    return bool((y == sum(range(1, n + 1))).all()), bool(np.array_equal(z, np.arange(count, dtype=np.float32)))


def test_messages_larger_than_the_hccl_buffer_are_chunked() -> None:
    results = run_ranks(3, _chunked, timeout=120, env={"HCCL_BUFFSIZE": "1"})
    assert results == [(True, True)] * 3


def _two_shot(rank: int, n: int, root_info: bytes) -> bool:
    env = open_rank(rank, n, root_info)
    ok = True
    for count in (300_001, 65_537 * 3 + 2):              # above the two-shot threshold, odd block split
        x = ((np.arange(count) + rank) % 11).astype(np.int32)
        y = np.zeros_like(x)
        env.b.all_reduce(env.ptr(x), env.ptr(y), count, DataType.INT32, ReduceOp.SUM, env.comm, env.stream)
        env.b.synchronize_stream(env.stream)
        expected = sum(((np.arange(count) + r) % 11).astype(np.int32) for r in range(n))
        ok = ok and bool(np.array_equal(y, expected))
    env.close()
    return ok


@pytest.mark.parametrize("n,buffsize", [(3, "8"), (4, "1")])
def test_two_shot_allreduce_on_three_or_more_ranks(n: int, buffsize: str) -> None:
    assert run_ranks(n, _two_shot, timeout=120, env={"HCCL_BUFFSIZE": buffsize}) == [True] * n


def _v_variants(rank: int, n: int, root_info: bytes) -> dict:
    env = open_rank(rank, n, root_info)
    b, c, s = env.b, env.comm, env.stream
    counts = [300_000 + 7 * r for r in range(n)]            # uneven, and more than one round at 1 MiB
    displs = [sum(counts[:r]) + 5 * r for r in range(n)]     # with gaps between blocks
    u64 = lambda values: np.array(values, np.uint64)          # noqa: E731
    out = {}
    # scatter from the last rank
    root = n - 1
    blocks = np.arange(n * 1000, dtype=np.int32) if rank == root else np.zeros(0, np.int32)
    got = np.zeros(1000, np.int32)
    b.scatter(env.ptr(blocks) if rank == root else ffi.NULL, env.ptr(got), 1000, DataType.INT32, root, c, s)
    # allgatherv
    mine = np.full(counts[rank], rank + 1, np.float32)
    gathered = np.full(displs[-1] + counts[-1], -1, np.float32)
    cnt, dsp = u64(counts), u64(displs)
    b.all_gather_v(env.ptr(mine), counts[rank], env.ptr(gathered), env.ptr(cnt), env.ptr(dsp), DataType.FP32, c, s)
    # reduce_scatter_v (same counts/displs on every rank)
    src = np.zeros(displs[-1] + counts[-1], np.int32)
    for q in range(n):
        src[displs[q]:displs[q] + counts[q]] = (q + 1) * (rank + 1)
    rs = np.zeros(counts[rank], np.int32)
    b.reduce_scatter_v(env.ptr(src), env.ptr(cnt), env.ptr(dsp), env.ptr(rs), counts[rank], DataType.INT32,
                       ReduceOp.SUM, c, s)
    # alltoallvc: rank i sends (i + j + 1) * 1000 elements to rank j, valued 100 * i + j
    matrix = u64([(i + j + 1) * 1000 for i in range(n) for j in range(n)])
    send = np.concatenate([np.full((rank + j + 1) * 1000, 100 * rank + j, np.int32) for j in range(n)])
    recv = np.zeros(sum((i + rank + 1) * 1000 for i in range(n)), np.int32)
    b.all_to_all_vc(env.ptr(send), env.ptr(matrix), DataType.INT32, env.ptr(recv), DataType.INT32, c, s)
    # alltoallv: the same exchange, described by counts and displacements (with gaps) instead of a matrix
    scounts = [(rank + j + 1) * 1000 for j in range(n)]
    rcounts = [(i + rank + 1) * 1000 for i in range(n)]
    sdispls = [sum(scounts[:j]) for j in range(n)]
    rdispls = [sum(rcounts[:i]) + 3 * i for i in range(n)]
    recv_v = np.full(rdispls[-1] + rcounts[-1], -1, np.int32)
    sc, sd, rc, rd = u64(scounts), u64(sdispls), u64(rcounts), u64(rdispls)
    b.all_to_all_v(env.ptr(send), env.ptr(sc), env.ptr(sd), DataType.INT32, env.ptr(recv_v), env.ptr(rc),
                   env.ptr(rd), DataType.INT32, c, s)
    b.synchronize_stream(s)
    out.update(scatter=got, allgatherv=gathered, reduce_scatter_v=rs, alltoallvc=recv, counts=counts, displs=displs,
               alltoallv=[recv_v[rdispls[i]:rdispls[i] + rcounts[i]] for i in range(n)])
    env.close()
    return out


def test_scatter_and_v_variants() -> None:
    n = 3
    results = run_ranks(n, _v_variants, timeout=120, env={"HCCL_BUFFSIZE": "1"})
    counts, displs = results[0]["counts"], results[0]["displs"]
    for rank, res in enumerate(results):
        np.testing.assert_array_equal(res["scatter"], np.arange(rank * 1000, (rank + 1) * 1000, dtype=np.int32))
        g = res["allgatherv"]
        for r in range(n):
            assert (g[displs[r]:displs[r] + counts[r]] == r + 1).all()
        gaps = np.ones(g.size, bool)
        for r in range(n):
            gaps[displs[r]:displs[r] + counts[r]] = False
        assert (g[gaps] == -1).all()                          # nothing written outside the blocks
        assert (res["reduce_scatter_v"] == (rank + 1) * sum(r + 1 for r in range(n))).all()
        expected = np.concatenate([np.full((i + rank + 1) * 1000, 100 * i + rank, np.int32) for i in range(n)])
        np.testing.assert_array_equal(res["alltoallvc"], expected)
        for i, part in enumerate(res["alltoallv"]):
            np.testing.assert_array_equal(part, np.full((i + rank + 1) * 1000, 100 * i + rank, np.int32))
