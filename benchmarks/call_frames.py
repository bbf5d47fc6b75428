"""Python frames of the package one repeated call passes (issue 42's measure): the 4th identical call, counted
with ``sys.setprofile``.

    hcomm run -n 2 -- python benchmarks/call_frames.py

Every rank makes each call four times; the fourth is profiled: each ``call`` event whose code is a file of
``hcomm_cffi`` counts as one frame (C functions and other packages' frames are not counted).  Rank 0 prints,
per call, the frames, the number of distinct files and the deepest package frame, then the files by frames.
Targets of issue 42: a 1 KiB ``allreduce`` at most 45 frames, a 1 KiB ``send`` at most 100.
"""
from __future__ import annotations

import collections
import os
import sys
from types import FrameType
from typing import Any, Callable, Counter, Dict, List, Tuple

import numpy as np

import hcomm_cffi
import hcomm_cffi.api as api

PKG = os.path.dirname(hcomm_cffi.__file__)
TARGETS = {"allreduce": 45, "send": 100}


def _count(call: Callable[[], Any]) -> Tuple[int, Counter[str], int]:
    """(package frames, frames per file (per function with HCOMM_FRAMES_BY=function), deepest package frame) of
    one ``call()``."""
    files: Counter[str] = collections.Counter()
    by_function = os.environ.get("HCOMM_FRAMES_BY") == "function"
    depth = [0, 0]

    def prof(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            depth[0] += 1
            fname = frame.f_code.co_filename
            if fname.startswith(PKG):
                where = os.path.relpath(fname, PKG)
                files[f"{where}:{frame.f_code.co_name}" if by_function else where] += 1
                depth[1] = max(depth[1], depth[0])
        elif event == "return":
            depth[0] -= 1

    sys.setprofile(prof)
    try:
        call()
    finally:
        sys.setprofile(None)
    return sum(files.values()), files, depth[1]


def main() -> None:
    world = api.init()
    rank, size = world.get_rank(), world.get_size()
    x = np.ones(256, np.float32)            # 1 KiB
    buf = np.zeros(256, np.float32)
    peer = 1 - rank if size == 2 else (rank + 1) % size
    calls: Dict[str, Callable[[], Any]] = {
        "allreduce": lambda: world.allreduce(x),
        "send": (lambda: world.send(x, peer)) if rank == 0 else (lambda: world.recv(buf, 0)),
    }
    results: List[Tuple[str, int, Counter[str], int]] = []
    for name, call in calls.items():
        for _ in range(3):
            call()
            world.barrier()
        frames, files, depth = _count(call)
        world.barrier()
        results.append((name, frames, files, depth))
    if rank == 0:
        for name, frames, files, depth in results:
            target = TARGETS.get(name)
            print(f"{name:>10s}: {frames} package frames in {len({f.split(':')[0] for f in files})} files, deepest at {depth}"
                  + (f" (target <= {target}: {'ok' if frames <= target else 'over'})" if target else ""))
            print("            " + ", ".join(f"{f} {n}" for f, n in files.most_common()))
    world.barrier()
    api.finalize()


if __name__ == "__main__":
    main()
