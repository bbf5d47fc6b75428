"""DDP training step and 8-byte all_reduce latency: backend gloo vs backend hcomm, on 2 and 4 local ranks.

    python benchmarks/ddp_gloo_vs_hcomm.py [--ranks 2 4] [--steps 20]

Each configuration runs in fresh processes (torch.multiprocessing spawn, TCP rendezvous on
127.0.0.1); the model has ~4 MB of float32 parameters in several DDP buckets.  Prints one table:
ms per training step, µs per 8-byte all_reduce, and the gloo/hcomm ratio.
"""
from __future__ import annotations

import argparse
import datetime
import os
import socket
import time
from typing import Dict, List

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, n: int, backend: str, port: int, steps: int, out: "mp.Queue") -> None:
    os.environ["HCOMM_SIM_CHECK"] = "off"   # benchmark: the emulator's checker off, as hcomm bench does
    torch.set_num_threads(1)
    if backend == "hcomm":
        import hcomm_cffi.torch  # noqa: F401
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=n,
                            timeout=datetime.timedelta(seconds=120))
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 512))
    ddp = DDP(model, bucket_cap_mb=1)           # ~4 MB of parameters: several buckets
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    x = torch.randn(16, 512)
    for i in range(steps + 3):
        if i == 3:
            dist.barrier()
            t0 = time.perf_counter()
        opt.zero_grad()
        ddp(x).pow(2).mean().backward()
        opt.step()
    step_ms = (time.perf_counter() - t0) / steps * 1e3
    t = torch.zeros(2, dtype=torch.float32)     # 8 bytes
    reps = 200
    for _ in range(20):
        dist.all_reduce(t)
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(reps):
        dist.all_reduce(t)
    lat_us = (time.perf_counter() - t0) / reps * 1e6
    if rank == 0:
        out.put((step_ms, lat_us))
    dist.destroy_process_group()


def run(n: int, backend: str, steps: int) -> List[float]:
    """Per-step ms and 8-byte all_reduce µs of rank 0."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = _port()
    procs = [ctx.Process(target=_worker, args=(r, n, backend, port, steps, q)) for r in range(n)]
    for p in procs:
        p.start()
    result = q.get(timeout=600)
    for p in procs:
        p.join(timeout=60)
    return list(result)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    rows: Dict[int, Dict[str, List[float]]] = {}
    for n in args.ranks:
        rows[n] = {b: run(n, b, args.steps) for b in ("gloo", "hcomm")}
    print("| ranks | DDP step gloo | DDP step hcomm | ratio | 8 B all_reduce gloo | 8 B all_reduce hcomm | ratio |")
    print("|---|---|---|---|---|---|---|")
    for n, r in rows.items():
        g, h = r["gloo"], r["hcomm"]
        print(f"| {n} | {g[0]:.1f} ms | {h[0]:.1f} ms | {g[0] / h[0]:.2f}x | {g[1]:.0f} µs | {h[1]:.0f} µs | "
              f"{g[1] / h[1]:.2f}x |")


if __name__ == "__main__":
    main()
