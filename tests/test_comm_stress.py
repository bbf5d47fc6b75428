"""A long random mix of collectives, algorithms, sizes and point-to-point on one communicator.

Interleavings are where buffer reuse and binary-notify bugs hide (native and channel algorithms
sharing a communicator, eager and rendezvous messages between collectives); the strict checker
watches every step.  The sequence is seeded, so a failure names a reproducible step.
"""
from __future__ import annotations

import random

import numpy as np
import pytest

from multiproc import run_ranks

ALGOS = ["ring", "mesh", "tree", "native", "auto"]
DT = [np.float32, np.int32, np.float16, np.int8]

def body(rank: int, n: int, root: bytes, seed: int, steps: int) -> str:
    import hcomm_cffi as hcomm
    w = hcomm.init(rank=rank, world_size=n, root_info=root)
    rng = random.Random(seed)   # same sequence on every rank
    try:
        for step in range(steps):
            kind = rng.choice(["allreduce", "broadcast", "allgather", "reduce_scatter", "p2p", "barrier", "alltoall", "reduce"])
            algo = rng.choice(ALGOS)
            count = rng.choice([0, 1, 7, 1000, 65537, 300000, 1 << 20])
            dt = rng.choice(DT)
            if kind == "allreduce":
                op = rng.choice(["sum", "max", "min"])
                x = ((np.arange(count) + rank) % 5).astype(dt)
                w.allreduce(x, op=op, algorithm=algo)
                ref = [((np.arange(count) + r) % 5).astype(dt) for r in range(n)]
                exp = {"sum": np.sum, "max": np.max, "min": np.min}[op](np.stack(ref), axis=0).astype(dt) if count else x
                assert np.array_equal(x, exp), (step, kind, algo, count, dt, op)
            elif kind == "broadcast":
                r0 = rng.randrange(n)
                x = (np.arange(count) % 7).astype(dt) if rank == r0 else np.zeros(count, dt)
                w.broadcast(x, root=r0, algorithm=algo)
                assert np.array_equal(x, (np.arange(count) % 7).astype(dt)), (step, kind, algo)
            elif kind == "allgather":
                x = np.full(count, rank, dt)
                out = w.allgather(x, algorithm=algo if algo != "tree" else "ring")
                assert np.array_equal(np.asarray(out).reshape(n, -1) if count else np.asarray(out), np.repeat(np.arange(n, dtype=dt), count).reshape(n, count)) or count == 0, (step, kind)
            elif kind == "reduce_scatter":
                blk = max(1, count // n)
                x = np.ones(blk * n, dt)
                out = np.zeros(blk, dt)
                w.reduce_scatter(x, out=out, algorithm=algo if algo != "tree" else "ring")
                assert (out == n).all(), (step, kind, algo)
            elif kind == "alltoall":
                blk = max(1, count // n)
                x = np.repeat(np.arange(n, dtype=np.int32) + 10 * rank, blk)
                out = w.alltoall(x, algorithm=rng.choice(["ring", "mesh", "native", "auto"]))
                exp = np.repeat(10 * np.arange(n, dtype=np.int32) + rank, blk)
                assert np.array_equal(np.asarray(out).ravel(), exp), (step, kind)
            elif kind == "reduce":
                r0 = rng.randrange(n)
                x = np.ones(count, np.float32)
                out = np.zeros(count, np.float32)
                w.reduce(x, root=r0, out=out, algorithm=algo)
                if rank == r0:
                    assert (out == n).all(), (step, kind, algo)
            elif kind == "p2p":
                x = np.full(count, rank, dt)
                y = np.zeros(count, dt)
                req = w.irecv(y, (rank - 1) % n)
                w.send(x, (rank + 1) % n)
                req.wait(30)
                assert (y == (rank - 1) % n).all(), (step, kind)
            else:
                w.barrier()
        return f"ok {step + 1} steps"
    finally:
        hcomm.finalize()



@pytest.mark.parametrize("n,seed", [(3, 1), (4, 2)])
def test_random_mix_of_operations(n: int, seed: int) -> None:
    assert run_ranks(n, body, seed, 120, timeout=300, env={"HCCL_BUFFSIZE": "2"}) == ["ok 120 steps"] * n
