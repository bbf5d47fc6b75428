"""Allreduce across every rank of the job, with a result a person can check.

Run it with any launcher::

    hcomm run -n 4 -- python -m hcomm_cffi.examples.allreduce
    torchrun --nproc-per-node 4 -m hcomm_cffi.examples.allreduce
    mpirun -n 4 python -m hcomm_cffi.examples.allreduce

Rank r contributes ``r + 1`` in every element, so after a sum-allreduce every element on every rank
must be ``1 + 2 + ... + N = N (N + 1) / 2``.  Each rank prints its line; rank 0 then prints a summary
(how many ranks agree, backend, launcher).  The exit status is 0 only if this rank saw the right sum.

It uses the Comm API (``hcomm.init()`` finds rank, world and the rendezvous from the launcher;
``algorithm="auto"`` by default, ``--algorithm ring|mesh|tree|native`` to pick one), so the same
script runs on Ascend and on the emulator.
"""
from __future__ import annotations

import argparse
import sys
from typing import List, Optional

import numpy as np

from .. import api

__all__ = ["main"]


def _say(line: str) -> None:
    """One write per line, flushed: launchers that forward output (mpirun) then never split it."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main(argv: Optional[List[str]] = None) -> int:
    """Run the example on this rank; 0 when the result is right."""
    parser = argparse.ArgumentParser(prog="python -m hcomm_cffi.examples.allreduce", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=8, help="elements per rank (default 8)")
    parser.add_argument("--algorithm", default="auto", help="auto (default), ring, mesh, tree, native, ...")
    args = parser.parse_args(argv)
    if args.count < 1:
        parser.error(f"--count={args.count}; expected at least 1")

    parser_algorithm = args.algorithm
    world = api.init()
    try:
        rank, size = world.get_rank(), world.get_size()
        x = np.full(args.count, rank + 1, dtype=np.float32)
        world.allreduce(x, algorithm=parser_algorithm)
        expected = size * (size + 1) / 2
        ok = bool(np.all(x == expected))
        shown = f"{x[0]:.1f} on every element" if np.all(x == x[0]) else f"{x.tolist()}"
        _say(f"rank {rank}/{size}: allreduce(sum of rank+1) = {shown} (expected {expected:.1f}) "
             f"{'OK' if ok else 'WRONG'}")
        # one more allreduce counts the ranks that got it right, so rank 0 can vouch for everyone
        agree = world.allreduce(np.array([1 if ok else 0], dtype=np.int32))
        if rank == 0:
            spec = api.world.bootstrap_spec()
            backend = getattr(world.binding.lib, "backend_name", "cann")     # sim or cann, as hcomm info says
            good = int(agree[0])
            _say(f"allreduce: {good}/{size} ranks OK ({'PASS' if good == size else 'FAIL'}); backend {backend}, "
                 f"launcher {spec.source if spec else 'explicit'}, job {spec.job_id if spec else '-'}, "
                 f"{args.count} x float32, algorithm {parser_algorithm}")
    finally:
        api.finalize()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
