"""When a communicator has more ranks than the host has cores, the native collectives' staged schedules stage whole
parity regions per handshake, not cache-sized pieces (sim/native.py ``SHARED_PIECE_BYTES``): ranks that cannot run
at once overlap nothing, and every piece costs a handshake round.  The bytes stay right either way.  (From
``DIRECT_FROM`` bytes the calls are direct, one pass without staging; the test raises it to reach the staged
schedules at 4 MiB, as a communicator whose HCCL buffer is too small for a direct call does.)"""
from __future__ import annotations

from typing import Any, Dict

from multiproc import run_ranks

COUNT = 1 << 20          # 4 MiB of float32: 8 pieces of 512 KiB, or one region-sized piece


def body(rank: int, n: int, root_info: bytes, cores: int) -> Dict[str, Any]:
    import numpy as np

    from hcomm_cffi._ffi import ffi
    from hcomm_cffi.enums import DataType, MemcpyKind, ReduceOp
    from hcomm_cffi.sim import native, runtime
    from hcomm_cffi.sim.tasks import C_RECORD
    from simhelp import open_rank

    runtime.CORES = cores
    native.DIRECT_FROM = 1 << 62
    env = open_rank(rank, n, root_info)
    b = env.b
    nbytes = COUNT * 4
    host = (np.arange(COUNT, dtype=np.float32) % 251) + rank
    send, recv = b.malloc(nbytes), b.malloc(nbytes)
    records = {"n": 0}
    real_launch = runtime.EXECUTOR.launch

    def counting_launch(queue: Any, tasks: Any) -> None:
        records["n"] += sum(1 for t in tasks if t[0] == C_RECORD)
        real_launch(queue, tasks)

    runtime.EXECUTOR.launch = counting_launch      # type: ignore[method-assign]
    out: Dict[str, Any] = {}
    try:
        fp32, add = int(DataType.FP32), int(ReduceOp.SUM)
        for op in ("broadcast", "reduce_scatter", "allgather"):
            b.memcpy(send, nbytes, ffi.from_buffer(host), nbytes, MemcpyKind.HOST_TO_DEVICE)
            records["n"] = 0
            if op == "broadcast":
                b.broadcast(send, COUNT, fp32, 0, env.comm, env.stream)
                got_ptr, got_count = send, COUNT
                want = (np.arange(COUNT, dtype=np.float32) % 251)
            elif op == "reduce_scatter":
                b.reduce_scatter(send, recv, COUNT // n, fp32, add, env.comm, env.stream)
                got_ptr, got_count = recv, COUNT // n
                block = slice(rank * (COUNT // n), (rank + 1) * (COUNT // n))
                want = sum((np.arange(COUNT, dtype=np.float32) % 251)[block] + r for r in range(n))
            else:
                b.all_gather(send, recv, COUNT // n, fp32, env.comm, env.stream)
                got_ptr, got_count = recv, COUNT
                want = np.concatenate([(np.arange(COUNT // n, dtype=np.float32) % 251) + r for r in range(n)])
            b.synchronize_stream(env.stream)
            got = np.empty(got_count, np.float32)
            b.memcpy(ffi.from_buffer(got), got_count * 4, got_ptr, got_count * 4, MemcpyKind.DEVICE_TO_HOST)
            out[op] = (records["n"], bool(np.array_equal(got, want)))
        return out
    finally:
        del runtime.EXECUTOR.launch
        b.free(send)
        b.free(recv)
        env.close()


def test_ranks_sharing_cores_stage_whole_regions_and_get_the_same_bytes() -> None:
    shared = run_ranks(2, body, 1, timeout=120)           # 2 ranks on 1 core
    own = run_ranks(2, body, 64, timeout=120)             # a core each
    for op in ("broadcast", "reduce_scatter", "allgather"):
        for rank in range(2):
            assert shared[rank][op][1] and own[rank][op][1], (op, rank, shared[rank], own[rank])
        # a handshake (one record to the peer) per piece: 8 pieces of 512 KiB with a core each, one when sharing
        assert shared[0][op][0] < own[0][op][0], (op, shared[0][op], own[0][op])
