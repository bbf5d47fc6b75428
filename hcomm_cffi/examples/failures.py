"""Four ways a job goes wrong, to see what hcomm tells you about each (docs/guide/failures.md).

Every rank makes three agreeing allreduces of 1024 fp32; then rank 1 misbehaves at collective #4::

    hcomm run -n 4 -- python -m hcomm_cffi.examples.failures mismatch   # rank 1 calls broadcast, the others allreduce
    hcomm run -n 4 -- python -m hcomm_cffi.examples.failures straggler  # rank 1 finalises and exits 0
    hcomm run -n 4 -- python -m hcomm_cffi.examples.failures absent     # rank 1 stays alive but never arrives
    hcomm run -n 4 -- python -m hcomm_cffi.examples.failures killed     # rank 1 is killed (SIGKILL)

Any launcher works (torchrun, mpirun, plain env://; set ``HCOMM_FR_DIR`` there for the report of
all ranks).  ``absent`` waits for ``--sleep`` seconds (default an hour): the stall report comes after
``HCOMM_STUCK_REPORT_S`` (default 60 s) while the job keeps waiting.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from typing import List, Optional

import numpy as np

from .. import api

__all__ = ["main", "MODES", "BAD_RANK"]

MODES = ("mismatch", "straggler", "absent", "killed")
BAD_RANK = 1


def main(argv: Optional[List[str]] = None) -> int:
    """Run one scenario on this rank."""
    parser = argparse.ArgumentParser(prog="python -m hcomm_cffi.examples.failures", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=MODES)
    parser.add_argument("--sleep", type=float, default=3600.0, help="seconds rank 1 stays away in 'absent'")
    args = parser.parse_args(argv)
    world = api.init()
    rank = world.get_rank()
    if world.get_size() <= BAD_RANK:
        parser.error(f"{world.get_size()} rank(s); expected at least {BAD_RANK + 1} (rank {BAD_RANK} misbehaves)")
    x = np.ones(1024, np.float32)
    for _ in range(3):
        world.allreduce(x)
    print(f"rank {rank}: 3 allreduces done", flush=True)
    if rank == BAD_RANK:
        if args.mode == "mismatch":
            world.broadcast(x, root=0)
        elif args.mode == "straggler":
            api.finalize()
            return 0
        elif args.mode == "absent":
            time.sleep(args.sleep)
        elif args.mode == "killed":
            os.kill(os.getpid(), signal.SIGKILL)
    else:
        world.allreduce(x)
    api.finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
