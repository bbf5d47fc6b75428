"""8-byte allreduce latency with the flight recorder off, on, and on without the call-site capture, in one run
(issues 14 and 35).

Run with two ranks::

    hcomm run -n 2 -- python benchmarks/bench_flight_recorder.py [--iters 2000] [--rounds 7]

One communicator runs every round; rounds alternate between its flight recorder attached (as
with the default ``HCOMM_FR_SIZE``) and detached (what ``HCOMM_FR_SIZE=0`` gives: every hook sees
no ring), so machine noise hits both alike.  (Two communicators, one per setting, would measure
the emulator's cost of a second communicator instead: a blocked rank with two live
communicators cannot sleep on one doorbell.)  A third setting keeps the ring but records no call
site (``callsite.here`` replaced by a function returning ``b""`` for the round): the difference
is what taking the user's ``file:line`` costs per call.  Rank 0 prints the best round of each
(microseconds per allreduce), the differences and the ratio on/off.
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np

import hcomm_cffi as hcomm
from hcomm_cffi.api import observe

_CAPTURE = observe.callsite.here


def _no_site(skip: int = 2) -> bytes:
    return b""


def _round(comm: hcomm.Comm, ring: object, x: np.ndarray, iters: int, sites: bool = True) -> float:
    comm._state.flight = ring               # the recorder on (the ring) or off (None), as HCOMM_FR_SIZE decides
    observe.callsite.here = _CAPTURE if sites else _no_site      # type: ignore[assignment]
    comm.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        comm.allreduce(x)
    took = (time.perf_counter() - t0) / iters * 1e6
    observe.callsite.here = _CAPTURE                              # type: ignore[assignment]
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=2000, help="allreduces per round (default 2000)")
    parser.add_argument("--rounds", type=int, default=7, help="rounds per setting (default 7)")
    args = parser.parse_args()
    os.environ.pop("HCOMM_FR_SIZE", None)             # the default ring size
    world = hcomm.init()
    ring = world._state.flight
    assert ring is not None, "the flight recorder is on by default"
    x = np.ones(2, np.float32)                       # 8 bytes
    rings = {"off": None, "on": ring, "no site": ring}
    for key in rings:
        _round(world, rings[key], x, 200, key != "no site")   # warm up: algorithm choice, resources, replay
    best = {key: float("inf") for key in rings}
    order = list(rings)
    for r in range(args.rounds):                      # rotate which goes first
        for key in order[r % 3:] + order[:r % 3]:
            best[key] = min(best[key], _round(world, rings[key], x, args.iters, key != "no site"))
    world._state.flight = ring
    if world.rank == 0:
        print(f"8-byte allreduce on {world.size} ranks ({args.rounds} rounds x {args.iters}, best round): "
              f"flight recorder off {best['off']:.2f} us, on {best['on']:.2f} us (of which the call site "
              f"{best['on'] - best['no site']:+.2f} us: on without it {best['no site']:.2f} us), "
              f"difference {best['on'] - best['off']:+.2f} us, ratio on/off {best['on'] / best['off']:.3f}")
    hcomm.finalize()


if __name__ == "__main__":
    main()
