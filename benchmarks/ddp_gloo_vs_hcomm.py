"""DDP training step and 8-byte all_reduce latency: backend gloo vs backend hcomm vs no communication, 2 and 4 ranks.

    python benchmarks/ddp_gloo_vs_hcomm.py [--ranks 2 4] [--steps 20] [--rounds 5]

One set of processes per rank count (torch.multiprocessing spawn, TCP rendezvous on 127.0.0.1)
runs both backends *interleaved*: the default group is hcomm, a second group over the same ranks
is gloo (``new_group(backend="gloo")``), and each round times both (alternating which goes first),
so load from other processes on the machine hits both alike; the table shows the medians over the
rounds, and as ratio the median of the per-round gloo/hcomm ratios (> 1: hcomm is faster).  The model
has ~4 MB of float32 parameters in several DDP buckets (1 MB).  Each round also times the
compute-only step: the same model, weights, batch and optimizer without DDP, so no gradient is
communicated -- what a step would cost if communication overlapped perfectly with the backward pass,
on the same ranks sharing the same cores.  hcomm/compute is the median per-round ratio of the hcomm
DDP step to it (1.00x = communication is free; the goal is <= 1.15x).  Each rank count runs twice: with
the package's collective signature check (on by default on the emulator: one extra allgather
per collective, see hcomm_cffi/api/consistency.py) and with it off (HCOMM_CHECK_COLLECTIVES=0,
what gloo does).  The emulator's schedule checker is off (HCOMM_SIM_CHECK=off), as hcomm bench
sets it.
"""
from __future__ import annotations

import argparse
import datetime
import os
import socket
import statistics
import time
from typing import Any, Dict, List, Tuple

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

BACKENDS = ("gloo", "hcomm")
COMPUTE = "compute"                   # the same step without DDP: no gradient communication
VARIANTS = BACKENDS + (COMPUTE,)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ddp_ms(ddp: Any, x: torch.Tensor, opt: Any, steps: int) -> float:
    """Milliseconds per training step (forward, backward with the bucket allreduces if DDP, optimizer step)."""
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(steps):
        opt.zero_grad()
        ddp(x).pow(2).mean().backward()
        opt.step()
    return (time.perf_counter() - t0) / steps * 1e3


def _allreduce_us(group: Any, reps: int) -> float:
    """Microseconds per blocking 8-byte all_reduce."""
    t = torch.zeros(2, dtype=torch.float32)
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(reps):
        dist.all_reduce(t, group=group)
    return (time.perf_counter() - t0) / reps * 1e6


def _worker(rank: int, n: int, check: bool, port: int, steps: int, rounds: int, out: "mp.Queue") -> None:
    os.environ["HCOMM_SIM_CHECK"] = "off"   # benchmark: the emulator's checker off, as hcomm bench does
    os.environ["HCOMM_CHECK_COLLECTIVES"] = "1" if check else "0"
    torch.set_num_threads(1)
    import hcomm_cffi.torch  # noqa: F401
    from torch.nn.parallel import DistributedDataParallel as DDP
    dist.init_process_group("hcomm", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=n,
                            timeout=datetime.timedelta(seconds=120))
    groups = {"gloo": dist.new_group(backend="gloo"), "hcomm": None}
    x = torch.randn(16, 512)
    ddps = {}
    for b in VARIANTS:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 512))
        if b != COMPUTE:
            model = DDP(model, bucket_cap_mb=1, process_group=groups[b])   # ~4 MB of parameters: several buckets
        ddps[b] = (model, torch.optim.SGD(model.parameters(), lr=0.01))
        _ddp_ms(ddps[b][0], x, ddps[b][1], 3)                    # warm-up
        if b != COMPUTE:
            _allreduce_us(groups[b], 20)
    times: Dict[str, List[Tuple[float, float]]] = {b: [] for b in VARIANTS}
    for i in range(rounds):
        for b in VARIANTS[i % 3:] + VARIANTS[:i % 3]:   # rotate who goes first: drift cancels
            ddp, opt = ddps[b]
            step = _ddp_ms(ddp, x, opt, steps)
            times[b].append((step, _allreduce_us(groups[b], 200) if b != COMPUTE else float("nan")))
    if rank == 0:
        g, h, c = times["gloo"], times["hcomm"], times[COMPUTE]
        out.put({"gloo": tuple(statistics.median(r[k] for r in g) for k in (0, 1)),
                 "hcomm": tuple(statistics.median(r[k] for r in h) for k in (0, 1)),
                 "ratio": tuple(statistics.median(a[k] / b[k] for a, b in zip(g, h)) for k in (0, 1)),
                 COMPUTE: (statistics.median(r[0] for r in c), float("nan")),
                 "vs_compute": (statistics.median(a[0] / b[0] for a, b in zip(h, c)),
                                statistics.median(a[0] / b[0] for a, b in zip(g, c)))})
    dist.destroy_process_group()


def run(n: int, check: bool, steps: int, rounds: int) -> Dict[str, Tuple[float, float]]:
    """Rank 0's median ms per DDP step and µs per 8-byte all_reduce per backend, the compute-only step, and the
    median per-round ratios (gloo/hcomm; hcomm/compute-only and gloo/compute-only steps)."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = _port()
    procs = [ctx.Process(target=_worker, args=(r, n, check, port, steps, rounds, q)) for r in range(n)]
    for p in procs:
        p.start()
    try:
        return q.get(timeout=900)
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    print("| ranks | signature check | step compute-only | DDP step gloo | DDP step hcomm | gloo/hcomm | "
          "hcomm/compute-only | gloo/compute-only | 8 B all_reduce gloo | 8 B all_reduce hcomm | gloo/hcomm |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for n in args.ranks:
        for check in (True, False):
            r = run(n, check, args.steps, args.rounds)
            g, h, q, c, v = r["gloo"], r["hcomm"], r["ratio"], r[COMPUTE], r["vs_compute"]
            print(f"| {n} | {'on' if check else 'off'} | {c[0]:.1f} ms | {g[0]:.1f} ms | {h[0]:.1f} ms | "
                  f"{q[0]:.2f}x | {v[0]:.2f}x | {v[1]:.2f}x | {g[1]:.0f} µs | {h[1]:.0f} µs | {q[1]:.2f}x |",
                  flush=True)


if __name__ == "__main__":
    main()
