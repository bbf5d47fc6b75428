"""Where the time of one blocking 8-byte ``Comm.allreduce`` goes, step by step (issue 21's profile).

    hcomm run -n 2 -- python benchmarks/profile_call.py [--iters 5000] [--algorithm auto]
    HCOMM_SIM_CHECK=off HCOMM_CHECK_COLLECTIVES=0 hcomm run -n 2 -- python benchmarks/profile_call.py

After a warm-up (so the call is served by the fast path: ``api/op.py`` ``key_of``), every rank runs
the steps of ``Comm.allreduce`` (``op.collective``) and ``Engine.call`` one by one with a clock read between them -- the
usability check, the ``Call`` and its validated op and algorithm, the fast-call key and lookup, the
flight record, the launch-order announcement, the launch, ``running``, the stream
synchronisation, ``done`` -- then times the plain call the same number of times, and then the floor, three
times: the bound batch launched and waited for alone (what the binding's own call costs) and with the flight
record and the announcement every call keeps (their cost is the bookkeeping, as a ratio to the library call), the
two in alternating blocks of calls, each the median of its blocks (:data:`BLOCK`).  Rank 0 prints µs per call
for each step, both totals and the floor.  It reaches into the communicator's internals on purpose: it profiles
them, and the step list must follow ``Engine.call`` when that changes.  The launch includes waiting for the peers, which run the same loop; the checkers are as the environment sets
them (the defaults unless told otherwise).
"""
from __future__ import annotations

import argparse
import statistics
import time
from typing import Any, List, Tuple

import numpy as np

import hcomm_cffi.api as api
from hcomm_cffi.algorithms import registry
from hcomm_cffi.api import observe
from hcomm_cffi.api.op import Call, key_of, reduce_op as op_arg

STEPS = ("check + Call + args", "key + lookup", "flight issue", "announce", "launch (+ wait)", "running", "synchronize",
         "done")


#: calls per block of the floor measurement: the bare and the kept loops alternate block by block, and each is the
#: median of its blocks, so both see the same load (a machine shared with other work drifts, and stalls a block
#: now and then, by more than the bookkeeping costs)
BLOCK = 50


def _floor(world: api.Comm, entry: Any, iters: int) -> Tuple[float, float]:
    """µs per call of the bound batch launched and waited for alone, and with the flight record (its call site
    included) and the launch-order announcement every call makes: the least a blocking call can cost here.
    The two loops run in alternating blocks of BLOCK calls; each figure is the median of its blocks."""
    issuer = world._engine
    port, stream, batch = issuer.state, issuer.targets.own.stream, entry.bound[0].batch
    sync = issuer.b.synchronize_stream
    clock = time.perf_counter
    bare: List[float] = []
    kept: List[float] = []
    world.barrier()
    for _ in range(max(1, iters // BLOCK)):
        start = clock()
        for _ in range(BLOCK):
            batch.launch()
            sync(stream)
        middle = clock()
        for _ in range(BLOCK):
            issuer.state.seq += 1
            slot = observe.issue(port, issuer.state.seq, entry.record, entry.fixed)
            issuer.announce(entry.record)
            batch.launch()
            observe.running(port, slot)
            sync(stream)
            observe.done(port, slot, "allreduce", issuer.state.seq)
        end = clock()
        bare.append(middle - start)
        kept.append(end - middle)
    return statistics.median(bare) / BLOCK * 1e6, statistics.median(kept) / BLOCK * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=5000)
    ap.add_argument("--algorithm", default="auto")
    args = ap.parse_args()
    world = api.init()
    x, y = np.ones(2, np.float32), np.zeros(2, np.float32)
    for _ in range(300):
        world.allreduce(x, "sum", out=y, algorithm=args.algorithm)
    world.barrier()
    issuer = world._engine
    port = issuer.state
    key = key_of("allreduce", x, False, y, (op_arg("sum"), args.algorithm, 0))
    fast = issuer.cache.fast.get(key)
    if fast is None or len(fast.bound) != 1:
        raise SystemExit(f"the call is not served by the fast path without a handshake here ({fast}); nothing to "
                         "profile")
    clock = time.perf_counter_ns
    spent = [0] * len(STEPS)
    for _ in range(args.iters):
        t0 = clock()
        port.check_usable("allreduce")           # what op.collective does, then the result
        c = Call("allreduce", args.algorithm)
        c.op = op_arg("sum")
        registry.check_algorithm(args.algorithm)
        c.result = y
        t1 = clock()
        entry = issuer.cache.fast.get(key_of("allreduce", x, False, y, (c.op, c.algorithm, c.root)))
        t2 = clock()
        issuer.state.seq += 1
        slot = observe.issue(port, issuer.state.seq, entry.record, entry.fixed)
        t3 = clock()
        issuer.announce(entry.record)
        t3a = clock()
        target = issuer.targets.own
        issuer.targets.order(target)
        entry.bound[0].batch.launch()
        t4 = clock()
        observe.running(port, slot)
        t5 = clock()
        issuer.b.synchronize_stream(target.stream)
        t6 = clock()
        observe.done(port, slot, "allreduce", issuer.state.seq)
        t7 = clock()
        for i, (a, b) in enumerate(((t0, t1), (t1, t2), (t2, t3), (t3, t3a), (t3a, t4), (t4, t5), (t5, t6), (t6, t7))):
            spent[i] += b - a
    world.barrier()
    start = time.perf_counter()
    for _ in range(args.iters):
        world.allreduce(x, "sum", out=y, algorithm=args.algorithm)
    plain = (time.perf_counter() - start) / args.iters * 1e6
    floors = [_floor(world, fast, args.iters) for _ in range(3)]   # three measurements (the machine may be loaded)
    if world.get_rank() == 0:
        print(f"# blocking 8-byte allreduce, algorithm={args.algorithm} ({fast.algorithm}), {world.get_size()} ranks, "
              f"µs per call on rank 0, {args.iters} calls")
        for name, ns in zip(STEPS, spent):
            print(f"{name:>16s} {ns / args.iters / 1e3:7.2f}")
        print(f"{'sum of steps':>16s} {sum(spent) / args.iters / 1e3:7.2f}")
        print(f"{'plain call':>16s} {plain:7.2f}")
        for k, (bare, floor) in enumerate(floors, 1):
            print(f"# {k}: the bound batch alone (launch + synchronize: the binding's call) {bare:.2f}; with what every "
                  f"call keeps (flight record and call site, launch-order announcement) {floor:.2f}: bookkeeping "
                  f"{(floor - bare) / bare:.2f}x the library call (target <= 0.5); the plain call {plain / bare:.2f}x")
    world.barrier()
    api.finalize()


if __name__ == "__main__":
    main()
