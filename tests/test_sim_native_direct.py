"""The direct schedules of the native collectives (sim/native.py ``direct``, sim/peer_memory.py): large messages
move where their operands are.  Every dtype and op, counts not divisible by the ranks, 3 and 8 ranks, operands in
aclrtMalloc memory (mapped by the peers), in NumPy memory (staged), mixed between ranks, in place, and in the HCCL
buffer: the bytes equal NumPy's, reduced in rank order (bf16 through float32, rounded to nearest even each step)."""
from __future__ import annotations

import os
import subprocess
import sys
from typing import Any, Dict, List, Tuple

import numpy as np
import pytest

from hcomm_cffi._ffi import ffi
from hcomm_cffi.binding import Binding
from hcomm_cffi.enums import DataType, ReduceOp
from hcomm_cffi.lib import load
from hcomm_cffi.sim import native, peer_memory
from multiproc import run_ranks
from simhelp import RankEnv, open_rank

pytestmark = pytest.mark.slow

NP = {DataType.INT8: np.int8, DataType.INT16: np.int16, DataType.INT32: np.int32, DataType.INT64: np.int64,
      DataType.UINT8: np.uint8, DataType.UINT16: np.uint16, DataType.UINT32: np.uint32, DataType.UINT64: np.uint64,
      DataType.FP16: np.float16, DataType.FP32: np.float32, DataType.FP64: np.float64, DataType.BFP16: np.uint16}
REF = {ReduceOp.SUM: np.add, ReduceOp.PROD: np.multiply, ReduceOp.MAX: np.maximum, ReduceOp.MIN: np.minimum}
COUNT = 300_007                    # odd: blocks of 3, 4 and 8 ranks are uneven; >= 256 KiB for every dtype
# The direct schedules take calls from native.DIRECT_FROM (1 MiB); from 256 KiB here, so that one count reaches them
# for every dtype and still fits the tests' 8 MiB HCCL buffer (fp64: 2.4 MB)
DIRECT_FROM = 256 << 10


def _open(rank: int, n: int, root: bytes) -> RankEnv:
    """This rank's communicator, the direct schedules taken from DIRECT_FROM bytes."""
    native.DIRECT_FROM = DIRECT_FROM
    return open_rank(rank, n, root)


def _data(rank: int, count: int, dt: DataType, salt: int = 0) -> np.ndarray:
    """Operands whose sums need rounding in fp16/bf16 and wrap in the small ints."""
    rng = np.random.default_rng(1000 * rank + salt)
    if dt == DataType.BFP16:     # bf16 bits of random float32s (truncated: exact bf16 values)
        return (rng.standard_normal(count).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    if dt in (DataType.FP16, DataType.FP32, DataType.FP64):
        return (rng.standard_normal(count) * 3).astype(NP[dt])
    return rng.integers(0, 200, count).astype(NP[dt])


def _bf16_step(a: np.ndarray, b: np.ndarray, op: ReduceOp) -> np.ndarray:
    f = REF[op]((a.astype(np.uint32) << 16).view(np.float32), (b.astype(np.uint32) << 16).view(np.float32))
    bits = f.astype(np.float32).view(np.uint32)
    out = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    out[np.isnan(f)] = 0x7FC0
    return out


def _reduce(parts: List[np.ndarray], dt: DataType, op: ReduceOp) -> np.ndarray:
    """The product's order: ((p0 op p1) op p2) ..., each step rounded (bf16 through float32)."""
    acc = parts[0]
    for p in parts[1:]:
        acc = _bf16_step(acc, p, op) if dt == DataType.BFP16 else REF[op](acc, p)
    return acc


class _Memory:
    """Operands of one kind: 'malloc' (aclrtMalloc, the peers map it), 'numpy' (registered, staged), 'hccl' (in
    the communicator's HCCL buffer: staged through checked copies)."""

    def __init__(self, env: RankEnv, kind: str) -> None:
        self.env, self.kind, self.blocks, self.used = env, kind, [], 0

    def array(self, count: int, dtype: Any) -> Tuple[Any, np.ndarray]:
        nbytes = max(1, count * np.dtype(dtype).itemsize)
        if self.kind == "malloc":
            ptr = self.env.b.malloc(nbytes)
            self.blocks.append(ptr)
        elif self.kind == "hccl":
            ptr = self.env.buf + self.used
            self.used += -(-nbytes // 64) * 64
            assert self.used <= self.env.buf_size
        else:
            arr = np.empty(count, dtype)
            return self.env.ptr(arr), arr
        return ptr, np.frombuffer(ffi.buffer(ptr, nbytes), dtype)[:count]

    def close(self) -> None:
        for ptr in self.blocks:
            self.env.b.free(ptr)


def _kind(rank: int, memory: str) -> str:
    return ("numpy" if rank == 0 else "malloc") if memory == "mixed" else memory


def _allreduce_all(rank: int, n: int, root: bytes, memory: str, in_place: bool) -> Dict[Tuple[str, str], bytes]:
    env = _open(rank, n, root)
    mem = _Memory(env, _kind(rank, memory))
    out = {}
    for dt, np_t in NP.items():
        for op in (ReduceOp.SUM, ReduceOp.PROD, ReduceOp.MAX, ReduceOp.MIN):
            sp, x = mem.array(COUNT, np_t)
            x[:] = _data(rank, COUNT, dt)
            rp, y = (sp, x) if in_place else mem.array(COUNT, np_t)
            env.b.all_reduce(sp, rp, COUNT, dt, op, env.comm, env.stream)
            env.b.synchronize_stream(env.stream)
            out[(dt.name, op.name)] = y.tobytes()
            mem.used = 0
    mem.close()
    env.close()
    return out


@pytest.mark.parametrize("n,memory,in_place", [(3, "malloc", False), (3, "numpy", True), (4, "mixed", False),
                                               (2, "hccl", True)])
def test_direct_allreduce_every_dtype_and_op(n: int, memory: str, in_place: bool) -> None:
    results = run_ranks(n, _allreduce_all, memory, in_place, timeout=300)
    for dt in NP:
        for op in (ReduceOp.SUM, ReduceOp.PROD, ReduceOp.MAX, ReduceOp.MIN):
            want = _reduce([_data(r, COUNT, dt) for r in range(n)], dt, op).tobytes()
            for r in range(n):
                assert results[r][(dt.name, op.name)] == want, (dt.name, op.name, r)


def _others(rank: int, n: int, root: bytes, memory: str) -> Dict[str, bytes]:
    env = _open(rank, n, root)
    mem = _Memory(env, _kind(rank, memory))
    b, c, s = env.b, env.comm, env.stream
    out = {}
    count = COUNT // n + 3                          # per-rank block of allgather and reduce-scatter
    # allgather, then in place (my block already where it goes)
    sp, x = mem.array(count, np.float32)
    x[:] = _data(rank, count, DataType.FP32, salt=1)
    rp, y = mem.array(count * n, np.float32)
    b.all_gather(sp, rp, count, DataType.FP32, c, s)
    b.synchronize_stream(s)
    out["allgather"] = y.tobytes()
    rp2, y2 = mem.array(count * n, np.float32)
    y2[rank * count:(rank + 1) * count] = _data(rank, count, DataType.FP32, salt=1)
    b.all_gather(rp2 + rank * count * 4, rp2, count, DataType.FP32, c, s)
    b.synchronize_stream(s)
    out["allgather_in_place"] = y2.tobytes()
    # reduce-scatter of bf16 and int8, then in place (my block of the send buffer is the result)
    for dt in (DataType.BFP16, DataType.INT8):
        sp, x = mem.array(count * n, NP[dt])
        x[:] = _data(rank, count * n, dt, salt=2)
        rp, y = mem.array(count, NP[dt])
        b.reduce_scatter(sp, rp, count, dt, ReduceOp.SUM, c, s)
        b.synchronize_stream(s)
        out[f"reduce_scatter_{dt.name}"] = y.tobytes()
        b.reduce_scatter(sp, sp + rank * count * x.itemsize, count, dt, ReduceOp.SUM, c, s)
        b.synchronize_stream(s)
        out[f"reduce_scatter_{dt.name}_in_place"] = x[rank * count:(rank + 1) * count].tobytes()
    # broadcast from the last rank
    bp, z = mem.array(COUNT, np.int16)
    z[:] = _data(n - 1, COUNT, DataType.INT16, salt=3) if rank == n - 1 else 0
    b.broadcast(bp, COUNT, DataType.INT16, n - 1, c, s)
    b.synchronize_stream(s)
    out["broadcast"] = z.tobytes()
    mem.close()
    env.close()
    return out


@pytest.mark.parametrize("n,memory", [(3, "malloc"), (4, "mixed"), (2, "numpy"), (2, "hccl")])
def test_direct_allgather_reduce_scatter_broadcast(n: int, memory: str) -> None:
    results = run_ranks(n, _others, memory, timeout=300)
    count = COUNT // n + 3
    gathered = np.concatenate([_data(r, count, DataType.FP32, salt=1) for r in range(n)]).tobytes()
    for r in range(n):
        got = results[r]
        assert got["allgather"] == gathered and got["allgather_in_place"] == gathered, r
        for dt in (DataType.BFP16, DataType.INT8):
            full = _reduce([_data(q, count * n, dt, salt=2) for q in range(n)], dt, ReduceOp.SUM)
            want = full[r * count:(r + 1) * count].tobytes()
            assert got[f"reduce_scatter_{dt.name}"] == want, (dt.name, r)
            assert got[f"reduce_scatter_{dt.name}_in_place"] == want, (dt.name, r)
        assert got["broadcast"] == _data(n - 1, COUNT, DataType.INT16, salt=3).tobytes(), r


def _eight(rank: int, n: int, root: bytes) -> bytes:
    env = _open(rank, n, root)
    mem = _Memory(env, "malloc" if rank % 3 else "numpy")
    count = 1_000_003
    sp, x = mem.array(count, np.float16)
    x[:] = _data(rank, count, DataType.FP16)
    rp, y = mem.array(count, np.float16)
    for _ in range(2):                 # the second call finds the peers' blocks mapped already
        env.b.all_reduce(sp, rp, count, DataType.FP16, ReduceOp.SUM, env.comm, env.stream)
    env.b.synchronize_stream(env.stream)
    got = y.tobytes()
    mem.close()
    env.close()
    return got


def test_direct_allreduce_on_eight_ranks() -> None:
    results = run_ranks(8, _eight, timeout=300)
    want = _reduce([_data(r, 1_000_003, DataType.FP16) for r in range(8)], DataType.FP16, ReduceOp.SUM).tobytes()
    assert results == [want] * 8


def _strict_hccl(rank: int, n: int, root: bytes) -> Tuple[bytes, List[str]]:
    env = _open(rank, n, root)
    count = 200_003
    x = np.frombuffer(ffi.buffer(env.buf, count * 4), np.float32)
    x[:] = _data(rank, count, DataType.FP32)
    env.b.all_reduce(env.buf, env.buf, count, DataType.FP32, ReduceOp.SUM, env.comm, env.stream)
    env.b.synchronize_stream(env.stream)
    raw = getattr(env.lib, "raw", env.lib)
    reports = list(raw.state.comm(env.comm).reports)
    got = x.tobytes()
    env.close()
    return got, reports


def test_direct_allreduce_in_the_hccl_buffer_under_strict_checks() -> None:
    results = run_ranks(2, _strict_hccl, timeout=120, env={"HCOMM_SIM_CHECK": "strict"})
    want = _reduce([_data(r, 200_003, DataType.FP32) for r in range(2)], DataType.FP32, ReduceOp.SUM).tobytes()
    assert [r[0] for r in results] == [want, want]
    assert [r[1] for r in results] == [[], []]


_MAP_PEER = """
import sys
from hcomm_cffi.sim.peer_memory import PeerMappings
from hcomm_cffi._ffi import ffi
pid, fd, ino, size, offset = map(int, sys.argv[1:6])
maps = PeerMappings()
at = maps.address(pid, fd, ino, size, 0)
view = ffi.cast("unsigned char *", at + offset)
print(bytes(view[i] for i in range(4)).hex())
view[0] = 0x5A                      # written through the mapping: the owner sees it
maps.close()
"""


def test_acl_malloc_memory_is_mapped_by_another_process() -> None:
    """What the direct schedules stand on: an aclrtMalloc block is memfd-backed, and another process of the same
    user maps it from the published (pid, fd, inode) and reads and writes the owner's bytes."""
    b = Binding(load("sim"))
    b.set_device(0)
    ptr = b.malloc(1 << 20)
    try:
        addr = int(ffi.cast("uintptr_t", ptr))
        found = peer_memory.locate(addr + 4096, 8)
        assert found is not None and found[0] == os.getpid() and found[4] == 4096
        view = ffi.cast("unsigned char *", ptr)
        view[4096:4100] = b"\x01\x02\x03\x04"
        proc = subprocess.run([sys.executable, "-c", _MAP_PEER, *map(str, found)], capture_output=True, text=True,
                              timeout=60, env=dict(os.environ))
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == "01020304"
        assert view[4096] == 0x5A
    finally:
        b.free(ptr)
    assert peer_memory.locate(addr, 8) is None


def _mixed(rank: int, n: int, root: bytes) -> Tuple[List[bool], List[str]]:
    """Direct calls (broadcast from changing roots: the receivers wait for the root only; reduce-scatter, allgather
    and allreduce queued back to back) between staged ones: the bytes are right and no record finds its notify
    still set (the checker's absorbed-record report)."""
    env = _open(rank, n, root)
    mem = _Memory(env, "malloc" if rank != 1 else "numpy")
    b, c, s = env.b, env.comm, env.stream
    big, small = 200_003, 1_001
    bufs = {k: mem.array(big * n, np.int32) for k in ("a", "b", "c")}
    checks = []
    for step in range(3):
        for r in (0, n - 1, 1):
            p, arr = bufs["a"]
            arr[:big] = rank * 1000 + step if rank == r else -1
            b.broadcast(p, big, DataType.INT32, r, c, s)
            sp, sx = bufs["b"]
            sx[:small] = rank + step
            rp, rx = bufs["c"]
            b.all_reduce(sp, rp, small, DataType.INT32, ReduceOp.SUM, c, s)   # staged, one-shot
            b.synchronize_stream(s)
            checks.append(bool((arr[:big] == r * 1000 + step).all())
                          and bool((rx[:small] == sum(range(n)) + n * step).all()))
        sp, sx = bufs["b"]
        sx[:big * n] = rank
        rp, rx = bufs["c"]
        b.reduce_scatter(sp, rp, big, DataType.INT32, ReduceOp.SUM, c, s)
        b.all_gather(rp, sp, big, DataType.INT32, c, s)
        b.all_reduce(sp, sp, big * n, DataType.INT32, ReduceOp.MAX, c, s)
        b.synchronize_stream(s)
        checks.append(bool((sx[:big * n] == sum(range(n))).all()))
    raw = getattr(env.lib, "raw", env.lib)
    reports = list(raw.state.comm(c).reports)
    mem.close()
    env.close()
    return checks, reports


def test_direct_calls_between_staged_ones_and_changing_roots() -> None:
    results = run_ranks(4, _mixed, timeout=300)
    for checks, reports in results:
        assert all(checks) and reports == [], (checks, reports)


def _staged_bytes(rank: int, n: int, root: bytes) -> Dict[str, Tuple[int, bool]]:
    """Bytes of the copy and reduce tasks each collective launches (the staging through the native scratch), and
    whether its result is right."""
    from hcomm_cffi.sim import runtime
    from hcomm_cffi.sim.tasks import task_bytes

    env = _open(rank, n, root)
    mem = _Memory(env, "malloc")
    b, c, s = env.b, env.comm, env.stream
    count = 1 << 18                                  # 1 MiB of int32 (the direct calls fit the tests' HCCL buffer)
    sp, x = mem.array(count, np.int32)
    rp, y = mem.array(count, np.int32)
    launched = {"bytes": 0}
    real_launch = runtime.EXECUTOR.launch

    def counting_launch(queue: Any, tasks: Any) -> None:
        launched["bytes"] += sum(task_bytes(t) for t in tasks)
        real_launch(queue, tasks)

    runtime.EXECUTOR.launch = counting_launch      # type: ignore[method-assign]
    out = {}
    try:
        for op in ("allreduce", "broadcast", "allgather", "reduce_scatter"):
            x[:] = np.arange(count, dtype=np.int32) + rank
            launched["bytes"] = 0
            if op == "allreduce":
                b.all_reduce(sp, rp, count, DataType.INT32, ReduceOp.SUM, c, s)
                want = sum(np.arange(count, dtype=np.int32) + r for r in range(n))
            elif op == "broadcast":
                b.broadcast(sp, count, DataType.INT32, 0, c, s)
                want = np.arange(count, dtype=np.int32)
            elif op == "allgather":
                b.all_gather(sp, rp, count // n, DataType.INT32, c, s)
                want = np.concatenate([np.arange(count // n, dtype=np.int32) + r for r in range(n)])
            else:
                b.reduce_scatter(sp, rp, count // n, DataType.INT32, ReduceOp.SUM, c, s)
                block = slice(rank * (count // n), (rank + 1) * (count // n))
                want = sum(np.arange(count, dtype=np.int32)[block] + r for r in range(n))
            b.synchronize_stream(s)
            got = x if op == "broadcast" else y[:want.size]
            out[op] = (launched["bytes"], bool(np.array_equal(got, want)))
    finally:
        del runtime.EXECUTOR.launch
        mem.close()
        env.close()
    return out


def test_large_calls_on_device_memory_stage_nothing() -> None:
    """The staged schedules copy every operand into the native scratch and out again (a copy task per piece); the
    direct ones, on aclrtMalloc operands, launch no copy or reduce task at all: each byte moves once, in place."""
    for rank, result in enumerate(run_ranks(2, _staged_bytes, timeout=120)):
        for op, (staged, right) in result.items():
            assert right and staged == 0, (rank, op, staged, right)


def test_a_block_that_is_not_the_published_one_is_refused_by_name() -> None:
    """A peer's block whose descriptor no longer names the published memfd (freed and the descriptor reused), or
    that cannot be opened, fails the mapping naming the path and why, instead of mapping other memory."""
    b = Binding(load("sim"))
    b.set_device(0)
    ptr = b.malloc(1 << 20)
    try:
        pid, fd, ino, size, _ = peer_memory.locate(int(ffi.cast("uintptr_t", ptr)), 1)
        maps = peer_memory.PeerMappings()
        with pytest.raises(peer_memory.PeerMapError, match=f"/proc/{pid}/fd/{fd} is not the device memory block"):
            maps.address(pid, fd, ino + 1, size, 0)
        with pytest.raises(peer_memory.PeerMapError, match="cannot open /proc/"):
            maps.address(pid, 1 << 20, ino, size, 0)
        at = maps.address(pid, fd, ino, size, 0)      # the right one maps: the same bytes at another address
        ffi.cast("unsigned char *", ptr)[7] = 0xA5
        assert ffi.cast("unsigned char *", at)[7] == 0xA5 and at != int(ffi.cast("uintptr_t", ptr))
        maps.close()
    finally:
        b.free(ptr)
