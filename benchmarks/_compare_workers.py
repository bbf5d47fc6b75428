"""Rank-side halves of ``compare_allreduce.py``: the same collective timing loop over three libraries.

    python benchmarks/_compare_workers.py hcomm --op allreduce --sizes 8,65536 --iters 2000,2000 [--algo native]
    python benchmarks/_compare_workers.py gloo  --sizes ...                                          # under hcomm run
    mpirun --mca btl self,vader -n 2 python benchmarks/_compare_workers.py mpi --sizes ...

Per size, on every rank: ``warmup`` untimed operations, a barrier, ``iters`` timed operations (float32;
``size`` bytes as nccl-tests counts them: the vector of allreduce/broadcast, the whole gathered output of
allgather, the whole input of reduce_scatter, so each rank's block is size/n), then the rank's time per
iteration; the reported time is the max over ranks (the slowest).  Rank 0 prints one line ``RESULT {json}`` with ``[{"size", "iters", "time_us",
"wrong"}]`` for the driver.  The hcomm worker reuses ``hcomm bench``'s own runner (value-pattern check
included); gloo reduces zeros in place (so repeated sums stay finite), MPI ones out of place; every
buffer is written before timing (an untouched one reads the kernel's zero page).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

RESULT = "RESULT "


def _loop(step: Callable[[], None], barrier: Callable[[], None], warmup: int, iters: int) -> float:
    """Seconds per iteration of ``step`` on this rank (after warm-up and a barrier)."""
    for _ in range(warmup):
        step()
    barrier()
    start = time.perf_counter()
    for _ in range(iters):
        step()
    return (time.perf_counter() - start) / iters


def _buffers(op: str, size: int, n: int) -> "tuple[int, int]":
    """(send, receive) float32 elements of ``op`` at nccl-tests size ``size`` on ``n`` ranks (hcomm bench's layout)."""
    from hcomm_cffi.bench.sizes import layout
    lay = layout(op, size, 4, n)
    return lay.send_count, lay.recv_count


def run_hcomm(op: str, sizes: List[int], iters: List[int], warmups: List[int], algo: str) -> List[Dict[str, Any]]:
    """The emulator (or CANN) through hcomm bench's runner: native collectives or the Comm API."""
    from hcomm_cffi.bench.ops import open_ops
    from hcomm_cffi.bench.runner import BenchConfig, run_size

    ops = open_ops(algo)
    out = []
    try:
        for size, k, w in zip(sizes, iters, warmups):
            cfg = BenchConfig(op=op, sizes=(size,), iters=k, warmup=w, algorithm=algo)
            res = run_size(ops, cfg, size)
            out.append({"size": res.size, "iters": k, "time_us": res.time_us, "wrong": res.wrong, "rank": ops.rank})
    finally:
        ops.close()
    return out


def run_gloo(op: str, sizes: List[int], iters: List[int], warmups: List[int]) -> List[Dict[str, Any]]:
    """torch.distributed with the gloo backend (TCP), ranks from hcomm run's RANK/WORLD_SIZE/MASTER_*."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, n = dist.get_rank(), dist.get_world_size()
    out = []
    try:
        for size, k, w in zip(sizes, iters, warmups):
            ns, nr = _buffers(op, size, n)
            t, o = torch.zeros(ns, dtype=torch.float32), torch.zeros(max(nr, 1), dtype=torch.float32)
            step = {"allreduce": lambda: dist.all_reduce(t), "broadcast": lambda: dist.broadcast(t, 0),
                    "allgather": lambda: dist.all_gather_into_tensor(o, t),
                    "reduce_scatter": lambda: dist.reduce_scatter_tensor(o, t)}[op]
            sec = _loop(step, dist.barrier, w, k)
            worst = torch.tensor([sec], dtype=torch.float64)
            dist.all_reduce(worst, op=dist.ReduceOp.MAX)
            out.append({"size": max(ns, nr) * 4, "iters": k, "time_us": float(worst[0]) * 1e6, "wrong": None,
                        "rank": rank})
    finally:
        dist.destroy_process_group()
    return out


def run_mpi(op: str, sizes: List[int], iters: List[int], warmups: List[int]) -> List[Dict[str, Any]]:
    """mpi4py over Open MPI (the caller picks the transport, e.g. ``--mca btl self,vader``)."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    out = []
    for size, k, w in zip(sizes, iters, warmups):
        ns, nr = _buffers(op, size, comm.Get_size())
        # written, not np.zeros: untouched calloc pages all map the kernel's one zero page, which
        # stays in cache and flatters every read of the send buffer (allgather 5.2 vs 3.4 GB/s)
        send, recv = np.full(ns, 1.0, np.float32), np.full(max(nr, 1), 1.0, np.float32)
        step = {"allreduce": lambda: comm.Allreduce(send, recv, op=MPI.SUM), "broadcast": lambda: comm.Bcast(send, 0),
                "allgather": lambda: comm.Allgather(send, recv),
                "reduce_scatter": lambda: comm.Reduce_scatter_block(send, recv, op=MPI.SUM)}[op]
        sec = _loop(step, comm.Barrier, w, k)
        worst = comm.allreduce(sec, op=MPI.MAX)
        out.append({"size": max(ns, nr) * 4, "iters": k, "time_us": worst * 1e6, "wrong": None,
                    "rank": comm.Get_rank()})
    return out


def _ints(text: str) -> List[int]:
    return [int(v) for v in text.split(",") if v]


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("library", choices=("hcomm", "gloo", "mpi"))
    parser.add_argument("--sizes", type=_ints, required=True)
    parser.add_argument("--iters", type=_ints, required=True)
    parser.add_argument("--warmup", type=_ints, required=True)
    parser.add_argument("--algo", default="native", help="hcomm only: native, or a Comm API algorithm")
    parser.add_argument("--op", default="allreduce", choices=("allreduce", "broadcast", "allgather", "reduce_scatter"))
    args = parser.parse_args(argv)
    if not len(args.sizes) == len(args.iters) == len(args.warmup):
        parser.error("--sizes, --iters and --warmup need the same number of entries")
    if args.library == "hcomm":
        rows = run_hcomm(args.op, args.sizes, args.iters, args.warmup, args.algo)
    elif args.library == "gloo":
        rows = run_gloo(args.op, args.sizes, args.iters, args.warmup)
    else:
        rows = run_mpi(args.op, args.sizes, args.iters, args.warmup)
    if rows and rows[0]["rank"] == 0:
        print(RESULT + json.dumps([{k: v for k, v in r.items() if k != "rank"} for r in rows]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
