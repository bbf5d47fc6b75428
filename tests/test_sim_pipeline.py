"""The emulator's pipelined native collectives (broadcast, allgather, reduce-scatter) match NumPy.

They move data in pieces of ``PIECE_BYTES`` (or of a parity region when the HCCL buffer is small,
1/16 of it) over two alternating regions, which allreduce shares in region-sized chunks: these
tests put counts on both sides of the piece boundaries (allreduce too), use every root and the
in-place forms, and queue collectives of every kind back to back
(no synchronisation between them) so that the notifies and regions handed from one call to the
next are exercised, all under the strict checker (the tests' default).
"""
from __future__ import annotations

from typing import List, Tuple

import numpy as np
import pytest

from hcomm_cffi.enums import DataType, ReduceOp
from hcomm_cffi.sim.native import PIECE_BYTES
from multiproc import run_ranks
from simhelp import RankEnv, open_rank

#: NumPy storage of each tested type (bf16 as its raw 16 bits)
STORAGE = {DataType.FP32: np.float32, DataType.BFP16: np.uint16, DataType.INT8: np.int8, DataType.INT32: np.int32}
SMALL_REGION = (1 << 20) // 8     # HCCL_BUFFSIZE=1: a parity region is 1/8 of the 1 MiB half, smaller than a piece


def _encode(values: np.ndarray, dt: DataType) -> np.ndarray:
    """Small integers as ``dt`` (exact in every tested type, bf16 included)."""
    if dt == DataType.BFP16:
        return (values.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return values.astype(STORAGE[dt])


def _values(rank: int, count: int, salt: int) -> np.ndarray:
    return (np.arange(count, dtype=np.int64) * (rank + 3) + salt) % 7 + 1


def _counts(piece_bytes: int, esz: int, blocks: int, n: int) -> List[int]:
    """1 element, piece-1, piece, piece+1 and several pieces plus a remainder that is not a multiple of n."""
    p = piece_bytes // (esz * blocks)
    return [1, p - 1, p, p + 1, 3 * p + n + 1]


def _check(failures: List[str], what: str, got: np.ndarray, expected: np.ndarray) -> None:
    if not np.array_equal(got, expected):
        bad = np.flatnonzero(got != expected)
        failures.append(f"{what}: {bad.size} wrong elements, first at {bad[0]} "
                        f"(got {got[bad[0]]}, expected {expected[bad[0]]})")


def _broadcasts(env: RankEnv, dt: DataType, count: int, failures: List[str]) -> None:
    for root in range(env.n):
        data = _encode(_values(root, count, root), dt)
        buf = data.copy() if env.rank == root else np.zeros(count, STORAGE[dt])
        env.b.broadcast(env.ptr(buf), count, dt, root, env.comm, env.stream)
        env.b.synchronize_stream(env.stream)
        _check(failures, f"broadcast {dt.name} count {count} root {root}", buf, data)


def _allgathers(env: RankEnv, dt: DataType, count: int, failures: List[str]) -> None:
    n, rank = env.n, env.rank
    expected = np.concatenate([_encode(_values(r, count, 1), dt) for r in range(n)])
    mine = _encode(_values(rank, count, 1), dt)
    out = np.zeros(n * count, STORAGE[dt])
    env.b.all_gather(env.ptr(mine), env.ptr(out), count, dt, env.comm, env.stream)
    inplace = np.zeros(n * count, STORAGE[dt])
    inplace[rank * count:(rank + 1) * count] = mine
    env.b.all_gather(env.ptr(inplace[rank * count:(rank + 1) * count]), env.ptr(inplace), count, dt, env.comm,
                     env.stream)
    env.b.synchronize_stream(env.stream)
    _check(failures, f"allgather {dt.name} count {count}", out, expected)
    _check(failures, f"allgather in place {dt.name} count {count}", inplace, expected)


def _reduce_scatters(env: RankEnv, dt: DataType, count: int, failures: List[str]) -> None:
    n, rank = env.n, env.rank
    total = sum(_values(r, n * count, 2) for r in range(n))[rank * count:(rank + 1) * count]
    expected = _encode(total, dt)
    send = _encode(_values(rank, n * count, 2), dt)
    out = np.zeros(count, STORAGE[dt])
    env.b.reduce_scatter(env.ptr(send), env.ptr(out), count, dt, ReduceOp.SUM, env.comm, env.stream)
    inplace = send.copy()
    env.b.reduce_scatter(env.ptr(inplace), env.ptr(inplace[rank * count:(rank + 1) * count]), count, dt,
                         ReduceOp.SUM, env.comm, env.stream)
    env.b.synchronize_stream(env.stream)
    _check(failures, f"reduce_scatter {dt.name} count {count}", out, expected)
    _check(failures, f"reduce_scatter in place {dt.name} count {count}", inplace[rank * count:(rank + 1) * count],
           expected)


def _allreduces(env: RankEnv, dt: DataType, count: int, failures: List[str]) -> None:
    expected = _encode(sum(_values(r, count, 3) for r in range(env.n)), dt)
    buf = _encode(_values(env.rank, count, 3), dt)
    out = np.zeros(count, STORAGE[dt])
    env.b.all_reduce(env.ptr(buf), env.ptr(out), count, dt, ReduceOp.SUM, env.comm, env.stream)
    env.b.all_reduce(env.ptr(buf), env.ptr(buf), count, dt, ReduceOp.SUM, env.comm, env.stream)   # in place
    env.b.synchronize_stream(env.stream)
    _check(failures, f"allreduce {dt.name} count {count}", out, expected)
    _check(failures, f"allreduce in place {dt.name} count {count}", buf, expected)


def _around_pieces(rank: int, n: int, root_info: bytes, piece_bytes: int) -> List[str]:
    env = open_rank(rank, n, root_info)
    failures: List[str] = []
    for dt in STORAGE:
        esz = dt.itemsize
        for count in _counts(piece_bytes, esz, 1, n):
            _broadcasts(env, dt, count, failures)
            _allgathers(env, dt, count, failures)
            _allreduces(env, dt, count, failures)
        for count in _counts(piece_bytes, esz, n, n):
            _reduce_scatters(env, dt, count, failures)
    env.close()
    return failures


@pytest.mark.parametrize("n,buffsize,piece_bytes", [(2, "8", PIECE_BYTES), (3, "8", PIECE_BYTES),
                                                    (4, "1", SMALL_REGION)])
def test_sizes_around_the_piece_boundaries_match_numpy(n: int, buffsize: str, piece_bytes: int) -> None:
    results = run_ranks(n, _around_pieces, piece_bytes, timeout=240, env={"HCCL_BUFFSIZE": buffsize})
    assert results == [[]] * n, "\n".join(f for fs in results for f in fs)


def _back_to_back(rank: int, n: int, root_info: bytes) -> List[str]:
    """Every kind of collective queued one after the other, synchronised once at the end, twice over."""
    env = open_rank(rank, n, root_info)
    b, c, s = env.b, env.comm, env.stream
    dt, esz = DataType.INT32, 4
    big = PIECE_BYTES // esz * 2 + 3          # odd piece count on the chunked ops: the parity shifts per call
    checks: List[Tuple[str, np.ndarray, np.ndarray]] = []
    for rnd in range(2):
        for count in (big, 5, PIECE_BYTES // esz):
            salt = 10 * rnd + count % 5
            root = (count + rnd) % n
            bc = _encode(_values(root, count, salt), dt) if rank == root else np.zeros(count, np.int32)
            b.broadcast(env.ptr(bc), count, dt, root, c, s)
            checks.append((f"broadcast root {root} count {count}", bc, _encode(_values(root, count, salt), dt)))
            ag = np.zeros(n * count, np.int32)
            b.all_gather(env.ptr(_encode(_values(rank, count, salt), dt)), env.ptr(ag), count, dt, c, s)
            checks.append((f"allgather count {count}", ag,
                           np.concatenate([_encode(_values(r, count, salt), dt) for r in range(n)])))
            b.barrier(c, s)
            rs = np.zeros(count, np.int32)
            b.reduce_scatter(env.ptr(_encode(_values(rank, n * count, salt), dt)), env.ptr(rs), count, dt,
                             ReduceOp.SUM, c, s)
            checks.append((f"reduce_scatter count {count}", rs,
                           sum(_values(r, n * count, salt) for r in range(n))[rank * count:(rank + 1) * count]))
            ar = np.zeros(count, np.int32)
            b.all_reduce(env.ptr(_encode(_values(rank, count, salt), dt)), env.ptr(ar), count, dt, ReduceOp.MAX,
                         c, s)
            checks.append((f"allreduce count {count}", ar, np.max([_values(r, count, salt) for r in range(n)], axis=0)))
            red = np.zeros(count, np.int32)
            b.reduce(env.ptr(_encode(_values(rank, count, salt), dt)), env.ptr(red), count, dt, ReduceOp.SUM, root,
                     c, s)
            if rank == root:
                checks.append((f"reduce root {root} count {count}", red,
                               sum(_values(r, count, salt) for r in range(n))))
            a2a = np.zeros(n * count, np.int32)
            b.all_to_all(env.ptr(_encode(_values(rank, n * count, salt), dt)), count, dt, env.ptr(a2a), count, dt,
                         c, s)
            checks.append((f"alltoall count {count}", a2a, np.concatenate(
                [_values(r, n * count, salt)[rank * count:(rank + 1) * count] for r in range(n)])))
    b.synchronize_stream(s)
    failures: List[str] = []
    for what, got, expected in checks:
        _check(failures, f"round-trip {what}", got, expected.astype(got.dtype))
    env.close()
    return failures


@pytest.mark.parametrize("n", [2, 3, 4])
def test_collectives_back_to_back_match_numpy(n: int) -> None:
    results = run_ranks(n, _back_to_back, timeout=240)
    assert results == [[]] * n, "\n".join(f for fs in results for f in fs)
