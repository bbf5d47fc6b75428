"""Host time of one ACL graph replay of a captured ring allreduce against one eager library allreduce (issue 31).

    hcomm run -n 4 -- python benchmarks/graph_replay.py [--sizes 8,1K,64K] [--iters 200] [--rounds 5]

Both are stream-ordered launches on the same user stream (``hcomm_cffi.Stream``), timed from the call to its
return; the stream is then synchronised outside the timed part, so the figure is what the host pays to
launch, not the collective's run time:

* ``eager``: ``Binding.all_reduce`` on the stream (the library's own allreduce, HcclAllReduce: the reference);
* ``replay``: ``Graph.replay()`` of ``Comm.allreduce(x, algorithm="ring", stream=s)`` captured once — on 4
  ranks the ring is 2(N-1) = 6 steps of writes, records and waits on several threads, all in ONE launch
  (aclmdlRIExecuteAsync), flight record included;
* for context, ``eager ring``: the same ``Comm.allreduce(..., stream=s)`` issued each time (its replayed
  schedule launched call by call from Python: what the graph saves).

The two alternate call by call, every rank the same number of times; rank 0 prints the median of each round's
calls, the best round of each, the ratio replay / eager and the target (<= 1.5x).  Checkers off (set here
unless the environment says otherwise): the figures are the launch path, not the checker's.  On the
emulator a launch also runs what is runnable before returning (the executor is cooperative), so both
figures include some task execution; the ratio is the meaningful number.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Dict, List, Tuple

os.environ.setdefault("HCOMM_SIM_CHECK", "off")
os.environ.setdefault("HCOMM_CHECK_COLLECTIVES", "0")

import numpy as np  # noqa: E402

import hcomm_cffi as hcomm  # noqa: E402
from hcomm_cffi._ffi import ffi  # noqa: E402
from hcomm_cffi.bench.sizes import format_size, parse_size  # noqa: E402
from hcomm_cffi.enums import DataType, ReduceOp  # noqa: E402

TARGET = 1.5


def _round(world: hcomm.Comm, s: hcomm.Stream, g: hcomm.Graph, x: np.ndarray,
           iters: int) -> Tuple[float, float, float]:
    """Median µs of ``iters`` eager launches, replays and eager ring launches, alternating."""
    b = world.binding
    ptr = ffi.cast("char *", ffi.from_buffer(x))
    count, dtype, op = x.size, int(DataType.FP32), int(ReduceOp.SUM)
    handle, stream = world.handle, s.handle
    eager: List[float] = []
    replay: List[float] = []
    ring: List[float] = []
    world.barrier()
    for _ in range(iters):
        t0 = time.perf_counter()
        b.all_reduce(ptr, ptr, count, dtype, op, handle, stream)
        t1 = time.perf_counter()
        s.synchronize()
        t2 = time.perf_counter()
        g.replay()
        t3 = time.perf_counter()
        s.synchronize()
        t4 = time.perf_counter()
        req = world.allreduce(x, algorithm="ring", stream=s)
        t5 = time.perf_counter()
        s.synchronize()
        req.wait()
        eager.append(t1 - t0)
        replay.append(t3 - t2)
        ring.append(t5 - t4)
    return statistics.median(eager) * 1e6, statistics.median(replay) * 1e6, statistics.median(ring) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="8,1K,64K", help="message sizes (default 8,1K,64K)")
    parser.add_argument("--iters", type=int, default=200, help="calls of each per round (default 200)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds; the best of each counts (default 5)")
    args = parser.parse_args()
    world = hcomm.init()
    s = hcomm.Stream()
    best: Dict[int, Tuple[float, float, float]] = {}
    for nbytes in [parse_size(v) for v in args.sizes.split(",")]:
        x = np.ones(max(1, nbytes // 4), np.float32)
        g = hcomm.Graph(f"ring{nbytes}")
        world.allreduce(x, algorithm="ring", stream=s).wait()      # warm: resources, schedule, signature row
        with hcomm.graph(g, stream=s):
            world.allreduce(x, algorithm="ring", stream=s)
        _round(world, s, g, x, max(5, args.iters // 10))          # warm-up round
        rounds = [_round(world, s, g, x, args.iters) for _ in range(args.rounds)]
        best[nbytes] = (min(r[0] for r in rounds), min(r[1] for r in rounds), min(r[2] for r in rounds))
        g.reset()
    if world.rank == 0:
        print(f"host time of one launch, µs (median per round, best of {args.rounds}), {world.size} ranks, "
              f"HCOMM_SIM_CHECK={os.environ.get('HCOMM_SIM_CHECK')}")
        print("| size | eager HcclAllReduce | replay of captured ring | replay / eager | eager ring (issued) |")
        print("|---|---|---|---|---|")
        for nbytes, (e, r, ring) in best.items():
            print(f"| {format_size(nbytes)} | {e:.1f} | {r:.1f} | {r / e:.2f}x | {ring:.1f} |")
        worst = max(r / e for e, r, _ in best.values())
        print(f"target: replay <= {TARGET}x eager: {'ok' if worst <= TARGET else 'MISSED'} (worst {worst:.2f}x)")
    s.close()
    hcomm.finalize()


if __name__ == "__main__":
    main()
