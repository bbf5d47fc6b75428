"""Time the planner at 65,536 ranks (512 servers x 128 devices) for every algorithm.

Run: ``python benchmarks/bench_plan.py [--servers 512 --devices 128 --op allreduce --size 64M]``.
Plans are role-based, so the cost is O(roles + channels of one example rank), not O(N^2).
"""
from __future__ import annotations

import argparse
import time
from typing import List, Optional

from hcomm_cffi.plan import ALGORITHMS, InvalidAlgorithm, Topology, make_plan


def main(argv: Optional[List[str]] = None) -> int:
    """Print one row per algorithm: planning time, roles, channels, modelled time."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--servers", type=int, default=512)
    ap.add_argument("--devices", type=int, default=128)
    ap.add_argument("--op", default="allreduce")
    ap.add_argument("--size", default="64M")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    topo = Topology.from_shape(args.servers, args.devices)
    print(f"topology {args.servers} x {args.devices} = {topo.n_ranks} ranks built in "
          f"{(time.perf_counter() - t0) * 1e3:.1f} ms; {args.op} of {args.size}")
    print(f"{'algorithm':<13} {'plan (ms)':>10} {'rank 0 (ms)':>12} {'roles':>6} {'channels':>9} "
          f"{'modelled (us)':>14}")
    for algo in ALGORITHMS + ("auto",):
        t0 = time.perf_counter()
        try:
            plan = make_plan(args.op, topo, args.size, algo)
        except InvalidAlgorithm as exc:
            print(f"{algo:<13} invalid: {exc}")
            continue
        t1 = time.perf_counter()
        res = plan.resources_for(0)
        t2 = time.perf_counter()
        name = algo if algo != "auto" else f"auto->{plan.algorithm}"
        print(f"{name:<13} {(t1 - t0) * 1e3:>10.1f} {(t2 - t1) * 1e3:>12.1f} {len(plan.roles):>6} "
              f"{len(res.channels):>9} {plan.modelled_time_us:>14.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
