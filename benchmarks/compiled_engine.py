"""The executor's cost per launch of an 8-byte native allreduce's task list, Python engine vs compiled engine.

    PYTHONPATH=$PWD python benchmarks/compiled_engine.py --iters 20000

One process, no peer: the list (LocalCopy, the chunk stamp, ChannelNotifyRecord, ChannelNotifyWait, the stamp
check, a 2-float Reduce) runs on a channel to itself (tests/test_sim_compiled_engine.py's world), so every wait
finds its record and the figure is the executor alone, without scheduling: CPU µs per launch (process time, which
a loaded machine disturbs less than wall time), the engines alternated ``--rounds`` times.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

from hcomm_cffi.enums import DataType, ReduceOp  # noqa: E402
from hcomm_cffi.sim import compiled  # noqa: E402
import test_sim_compiled_engine as world_of  # noqa: E402

STEPS = [("copy", 0, 64, 8, False), ("stamp_write", 0), ("record", 0, world_of.SIGS[1]),
         ("wait", 0, world_of.SIGS[1]), ("stamp_check", [0]), ("ufunc", 256, 512, 2, DataType.FP32, ReduceOp.SUM,
                                                                False)]


def per_launch(engine: str, iters: int) -> float:
    """CPU µs per launch of STEPS on ``engine``."""
    world = world_of._World(bytes(world_of.DATA), [], [0] * world_of.STAMP_WORDS, "off")
    task_list = tuple(world.task(s) for s in STEPS)
    program = compiled.compile_tasks(task_list) if engine == "compiled" else None
    if engine == "compiled" and program is None:
        raise SystemExit(f"no compiled engine: {compiled.engine_status()}")
    world.queue.stamps.extend(range(iters))
    launch = world.executor.launch
    queue = world.queue
    t0 = time.process_time()
    for _ in range(iters):
        launch(queue, task_list, program=program)
    spent = time.process_time() - t0
    assert queue.executed == iters * len(STEPS) and queue.error is None, (queue.executed, queue.error)
    return spent / iters * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iters", type=int, default=20000, help="launches per measurement")
    parser.add_argument("--rounds", type=int, default=3, help="measurements per engine, alternated")
    args = parser.parse_args()
    best = {"python": float("inf"), "compiled": float("inf")}
    for _ in range(args.rounds):
        for engine in best:
            best[engine] = min(best[engine], per_launch(engine, args.iters))
    print(f"# executor CPU µs per launch of a 6-task 8-byte allreduce list (best of {args.rounds}); "
          f"engine: {compiled.engine_status()}")
    for engine, us in best.items():
        print(f"{engine:>10s} {us:7.2f}")
    print(f"{'ratio':>10s} {best['python'] / best['compiled']:7.2f}x")


if __name__ == "__main__":
    main()
