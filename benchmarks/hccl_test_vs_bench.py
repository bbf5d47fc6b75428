"""``hcomm bench`` and the vendor's hccl_test on one emulated install: allreduce fp32, the same sizes and ranks.

    python -m hcomm_cffi sim build-libs --out /tmp/cann && source /tmp/cann/set_env.sh
    # hccl_test built outside the repo (README "Running the vendor's hccl_test on the emulator")
    python benchmarks/hccl_test_vs_bench.py --hccl-test /tmp/hccl_test/bin/all_reduce_test [-N 4] [-b 8K] [-e 64M]

Both run allreduce, fp32, sum, sizes -b..-e by -f 2, -n iterations after -w warm-ups, with their result check on,
over the install that ``ASCEND_HOME_PATH`` names, with the same emulator settings (``HCOMM_SIM_CHECK=off`` unless
set: ``hcomm bench``'s default).  hccl_test (under ``mpirun``) calls ``HcclAllReduce`` from C
and prints rank 0's average: the stream time between two events recorded around the timed loop
(``aclrtEventElapsedTime`` / iterations; the loop is queued back to back, no synchronisation between
iterations).  ``hcomm bench --algo native`` calls the same library collective through the Python binding and
prints the slowest rank's average over the host clock, from a barrier before the first issue to the end of the one
wait after the last (issues back to back, as hccl_test's).  The script prints both per size and their ratios; a
ratio above 1 is mostly the per-call host cost of issuing that ``hcomm bench`` includes and the event interval
leaves out (README, "Running the vendor's hccl_test on the emulator").
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from typing import Dict, List, Tuple


def _hccl_test(binary: str, n: int, args: List[str]) -> Dict[int, float]:
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        sys.exit("mpirun not found: install Open MPI (scripts/setup-test-env.sh)")
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    # the emulator's settings hcomm bench uses (it turns the schedule checker off unless HCOMM_SIM_CHECK is set)
    env = dict(os.environ, HCOMM_SIM_CHECK=os.environ.get("HCOMM_SIM_CHECK", "off"))
    exported = [a for name in ("PYTHONPATH", "LD_LIBRARY_PATH", "ASCEND_HOME_PATH", "HCOMM_SIM_CHECK") if name in env
                for a in ("-x", name)]
    proc = subprocess.run([mpirun, *root, "--oversubscribe", "-n", str(n), *exported, binary, *args, "-d", "fp32",
                           "-o", "sum", "-c", "1"], capture_output=True, text=True, timeout=3600, env=env)
    rows = re.findall(r"^(\d+)\s+\|\s*([\d.]+)\s*\|\s*[\d.]+\s*\|\s*(\w+)\s*$", proc.stdout, re.M)
    if proc.returncode != 0 or not rows or any(ok != "success" for _s, _t, ok in rows):
        sys.exit(f"hccl_test failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return {int(size): float(us) for size, us, _ok in rows}


def _hcomm_bench(n: int, args: List[str]) -> Dict[int, Tuple[float, float]]:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "bench.json")
        proc = subprocess.run([sys.executable, "-m", "hcomm_cffi", "bench", "--op", "allreduce", *args, "-d", "fp32",
                               "-o", "sum", "-c", "1", "-N", str(n), "--algo", "native", "--json", out],
                              capture_output=True, text=True, timeout=3600)
        if proc.returncode != 0:
            sys.exit(f"hcomm bench failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        with open(out) as f:
            # (the slowest rank's average, what hcomm bench prints; rank 0's, what hccl_test prints)
            return {int(r["size"]): (float(r["time_us"]), float(r["time_us_ranks"][0])) for r in json.load(f)["results"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hccl-test", required=True, help="path of hccl_test's all_reduce_test")
    p.add_argument("-N", "--ranks", type=int, default=4)
    p.add_argument("-b", default="8K")
    p.add_argument("-e", default="64M")
    p.add_argument("-n", "--iters", type=int, default=20)
    p.add_argument("-w", "--warmup", type=int, default=5)
    a = p.parse_args()
    if not os.environ.get("ASCEND_HOME_PATH"):
        sys.exit("source the emulated install's set_env.sh first (ASCEND_HOME_PATH is not set)")
    sweep = ["-b", a.b, "-e", a.e, "-f", "2", "-n", str(a.iters), "-w", str(a.warmup)]
    vendor = _hccl_test(a.hccl_test, a.ranks, sweep)
    ours = _hcomm_bench(a.ranks, sweep)
    print(f"# allreduce fp32 sum, {a.ranks} ranks, {a.iters} iterations after {a.warmup} warm-ups, "
          f"install {os.environ['ASCEND_HOME_PATH']}")
    print("# hccl_test: rank 0, stream time between the events recorded around the loop; hcomm bench: host clock from a")
    print("# barrier before the first issue to the end of the one wait after the last, the slowest rank (what it")
    print("# prints) and rank 0")
    print(f"{'size (B)':>10} {'hccl_test (us)':>15} {'bench (us)':>11} {'ratio':>6} {'bench rank 0':>13} {'ratio':>6}")
    for size in sorted(set(vendor) & set(ours)):
        slowest, rank0 = ours[size]
        print(f"{size:>10} {vendor[size]:>15.1f} {slowest:>11.1f} {slowest / vendor[size]:>6.2f} {rank0:>13.1f} "
              f"{rank0 / vendor[size]:>6.2f}")


if __name__ == "__main__":
    main()
