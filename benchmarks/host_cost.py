"""Host cost of issuing tasks on the CANN path: µs of Python per task, issued vs replayed, against a C library that does nothing.

    python benchmarks/host_cost.py                 # ring and mesh allreduce on 8 ranks (rank 0's tasks)
    python benchmarks/host_cost.py --ranks 4,8,16 --sizes 8,1M

The benchmark compiles a shared library whose ``Hcomm*`` data-plane functions return 0 (a C
compiler is needed), opens it with ``ffi.dlopen`` exactly as ``lib/cann.py`` opens CANN, and
drives :class:`~hcomm_cffi.binding.Binding` with it: every figure is the cost of this package's
Python plus cffi's call overhead, the part the host pays per task on an Ascend server.  For each
algorithm it measures, per collective and per task:

* ``issue``: the algorithm's Python code records the tasks (``IssueContext`` over a ``TaskBatch``)
  and the batch is launched — what every call cost before schedules were replayed;
* ``replay``: the recorded schedule launched again, the same buffers (``Schedule.bind``'s fast path);
* ``replay*``: the schedule with new buffer addresses patched in.

The target (issue 16): replaying costs at most 1 µs per task.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from hcomm_cffi._ffi import ffi  # noqa: E402
from hcomm_cffi.algorithms import CollectiveCall, IssueContext, resolve  # noqa: E402
from hcomm_cffi.algorithms.replay import capture  # noqa: E402
from hcomm_cffi.algorithms.tasks import TaskBatch  # noqa: E402
from hcomm_cffi.binding import Binding  # noqa: E402
from hcomm_cffi.bench.sizes import format_size, parse_size  # noqa: E402
from hcomm_cffi.enums import DataType  # noqa: E402
from hcomm_cffi.plan import Topology  # noqa: E402
from hcomm_cffi.resources import Resources  # noqa: E402

#: the C functions a schedule calls (old-style definitions: any arguments, return 0 = HCCL_SUCCESS)
NOOP_FUNCTIONS = ("HcommLocalCopyOnThread", "HcommLocalReduceOnThread", "HcommWriteOnThread", "HcommReadOnThread",
                  "HcommChannelNotifyRecordOnThread", "HcommChannelNotifyWaitOnThread",
                  "HcommThreadNotifyRecordOnThread", "HcommThreadNotifyWaitOnThread", "HcommBatchModeStart",
                  "HcommBatchModeEnd")
TARGET_US_PER_TASK = 1.0


def build_noop_library(folder: str) -> str:
    """Compile libhcomm_noop.so into ``folder``; returns its path (RuntimeError without a compiler)."""
    cc = shutil.which(os.environ.get("CC", "cc"))
    if cc is None:
        raise RuntimeError("no C compiler (cc) on PATH: this benchmark compiles a do-nothing library")
    src = os.path.join(folder, "noop.c")
    with open(src, "w") as fh:
        fh.write("/* every function does nothing and succeeds */\n")
        fh.writelines(f"int {name}() {{ return 0; }}\n" for name in NOOP_FUNCTIONS)
    out = os.path.join(folder, "libhcomm_noop.so")
    subprocess.run([cc, "-O2", "-shared", "-fPIC", "-std=gnu99", "-w", "-o", out, src], check=True)
    return out


def _resources(rank: int, n: int, threads: int, buffer_bytes: int, keep: List[Any]) -> Resources:
    """Rank ``rank``'s resources with handles that mean nothing and HCCL buffers that are real memory."""
    from hcomm_cffi.plan import rank_resources

    bufs = [np.zeros(buffer_bytes, np.uint8) for _ in range(n)]
    keep.extend(bufs)
    ptr = [ffi.cast("char *", ffi.from_buffer(b)) for b in bufs]
    peers = [p for p in range(n) if p != rank]
    return Resources(rank_resources(rank, "bench", (0,) * threads, ()), 1, list(range(2, threads + 1)),
                     {p: 1000 + p for p in peers}, {p: (ptr[p], buffer_bytes) for p in peers}, ptr[rank],
                     buffer_bytes)


def _time(fn: Callable[[], Any], seconds: float = 0.3) -> float:
    """Best-of-5 mean time of ``fn`` in µs (each round runs ``fn`` for about ``seconds``)."""
    fn()
    reps = 1
    while True:
        t = time.perf_counter()
        for _ in range(reps):
            fn()
        if time.perf_counter() - t > seconds / 5 or reps > 1 << 16:
            break
        reps *= 4
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(reps):
            fn()
        best = min(best, (time.perf_counter() - t) / reps)
    return best * 1e6


def measure(binding: Binding, algo: str, n: int, nbytes: int, buffer_bytes: int) -> Dict[str, float]:
    """Issue / replay / replay-with-new-buffers costs of rank 0 of an ``n``-rank allreduce of ``nbytes``."""
    keep: List[Any] = []
    alg = resolve(algo)
    topo = Topology.single_server(n)
    threads = max(1, n - 1) if algo == "mesh" else 2
    res = _resources(0, n, threads, buffer_bytes, keep)
    count = max(1, nbytes // 4)
    data = [np.ones(count, np.float32) for _ in range(2)]
    ptrs = [ffi.cast("char *", ffi.from_buffer(d)) for d in data]

    def issue(ptr: Any) -> TaskBatch:
        batch = TaskBatch(binding)
        ctx = IssueContext(batch, res, rank=0, size=n, topology=topo, timeout_s=60, dtype=DataType.FP32)
        alg.issue(ctx, CollectiveCall("allreduce", ptr, ptr, count, DataType.FP32))
        return batch

    first = issue(ptrs[0])
    tasks = len(first)
    schedule = capture(first, [(ptrs[0], nbytes), (ptrs[0], nbytes), (None, 0)])
    flip = [0]

    def replay_new() -> None:
        flip[0] ^= 1
        p = ptrs[flip[0]]
        schedule.bind(binding, [(p, nbytes), (p, nbytes), (None, 0)]).launch()

    return {"tasks": tasks,
            "issue": _time(lambda: issue(ptrs[0]).launch()),
            "replay": _time(lambda: schedule.bind(binding, [(ptrs[0], nbytes), (ptrs[0], nbytes),
                                                            (None, 0)]).launch()),
            "replay_new": _time(replay_new),
            "call": _time(lambda: binding.local_copy(1, ptrs[1], ptrs[0], 4))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", default="8", help="communicator sizes (default 8)")
    ap.add_argument("--sizes", default="8,1M", help="allreduce sizes (default 8,1M)")
    ap.add_argument("--algos", default="ring,mesh", help="algorithms (default ring,mesh)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="hcomm-noop-") as folder:
        try:
            path = build_noop_library(folder)
        except (RuntimeError, subprocess.CalledProcessError) as exc:
            print(f"skipped: {exc}")
            return 0
        binding = Binding(ffi.dlopen(path))
        print("host cost on the CANN path (a do-nothing C library): µs per collective and per task, rank 0")
        print(f"{'algorithm':>9} {'ranks':>5} {'size':>6} {'tasks':>6} {'issue':>9} {'/task':>6} {'replay':>9} "
              f"{'/task':>6} {'replay*':>9} {'/task':>6}  target <= {TARGET_US_PER_TASK:g} µs/task replayed")
        worst = 0.0
        one_call = 0.0
        for algo in args.algos.split(","):
            for n in (int(v) for v in args.ranks.split(",")):
                for size in (parse_size(v) for v in args.sizes.split(",")):
                    m = measure(binding, algo, n, size, 16 << 20)
                    t = m["tasks"]
                    worst = max(worst, m["replay_new"] / t)
                    one_call = m["call"]
                    print(f"{algo:>9} {n:>5} {format_size(size):>6} {t:>6} {m['issue']:>9.1f} {m['issue'] / t:>6.2f} "
                          f"{m['replay']:>9.1f} {m['replay'] / t:>6.2f} {m['replay_new']:>9.1f} "
                          f"{m['replay_new'] / t:>6.2f}")
        print(f"one Binding call into the library: {one_call:.2f} µs")
        print(f"replayed, new buffers: {worst:.2f} µs per task at worst -> "
              f"{'ok' if worst <= TARGET_US_PER_TASK else 'MISS'} (target <= {TARGET_US_PER_TASK:g})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
