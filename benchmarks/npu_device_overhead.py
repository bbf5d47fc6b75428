"""What an operation costs on the emulated npu device against the same operation on CPU (one thread).

    HCOMM_EMULATE_NPU=1 python benchmarks/npu_device_overhead.py [--iters 2000]

(the torch.backends entry point must be installed: ``pip install -e .``).  Per row: microseconds per call of
an out-of-place op (allocates its result: the device's block cache, then one copy into device memory), an
in-place op (the CPU kernel on the device memory itself), and a 16 MiB in-place op (where the kernel's own
memory traffic dominates).  The difference is the device's per-call cost: the guard asking the emulator's
aclrtGetDevice, the CPU stand-ins of the arguments, the dispatch.
"""
from __future__ import annotations

import argparse
import time
from typing import Callable


def per_call_us(fn: Callable[[], object], iters: int) -> float:
    for _ in range(min(100, iters)):
        fn()
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - start) / iters * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iters", type=int, default=2000)
    args = parser.parse_args()
    import torch

    if not hasattr(torch, "npu"):
        raise SystemExit("no torch.npu: run with HCOMM_EMULATE_NPU=1 and the package installed (pip install -e .)")
    torch.set_num_threads(1)
    print(f"{'device':8} {'x + y (64)':>12} {'x.add_(y)':>12} {'16 MiB mul_':>14}")
    for dev in ("cpu", "npu"):
        x, y = torch.ones(64, device=dev), torch.ones(64, device=dev)
        big = torch.ones(1 << 22, device=dev)
        out_of_place = per_call_us(lambda: x + y, args.iters)
        in_place = per_call_us(lambda: x.add_(y), args.iters)
        large = per_call_us(lambda: big.mul_(1.0), max(10, args.iters // 100))
        print(f"{dev:8} {out_of_place:10.1f}us {in_place:10.1f}us {large:12.1f}us")


if __name__ == "__main__":
    main()
