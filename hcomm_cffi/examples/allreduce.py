"""Allreduce across every rank of the job, with a result a person can check.

Run it with any launcher::

    hcomm run -n 4 -- python -m hcomm_cffi.examples.allreduce
    torchrun --nproc-per-node 4 -m hcomm_cffi.examples.allreduce
    mpirun -n 4 python -m hcomm_cffi.examples.allreduce

Rank r contributes ``r + 1`` in every element, so after a sum-allreduce every element on every rank
must be ``1 + 2 + ... + N = N (N + 1) / 2``.  Each rank prints its line; rank 0 then prints a summary
(how many ranks agree, backend, launcher).  The exit status is 0 only if this rank saw the right sum.

This version drives the C functions through the binding (HcclCommInitRootInfo + HcclAllReduce on a
stream, device buffers via aclrtMalloc/aclrtMemcpy), so it runs unchanged on Ascend and on the emulator.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import List, Optional

import numpy as np

from .._ffi import ffi
from ..binding import Binding, get_binding
from ..bootstrap import WorldSpec, discover
from ..enums import DataType, MemcpyKind, ReduceOp

__all__ = ["main", "allreduce_sum"]


def _say(line: str) -> None:
    """One write per line, flushed: launchers that forward output (mpirun) then never split it."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _device_for(spec: WorldSpec, binding: Binding) -> int:
    return spec.local_rank % max(1, binding.get_device_count())


def allreduce_sum(binding: Binding, comm: object, stream: object, host: np.ndarray) -> np.ndarray:
    """Sum-allreduce a float32 host array through device memory; returns the result as a new array."""
    nbytes = host.nbytes
    send = binding.malloc(nbytes)
    recv = binding.malloc(nbytes)
    try:
        binding.memcpy(send, nbytes, ffi.from_buffer(host), nbytes, MemcpyKind.HOST_TO_DEVICE)
        binding.all_reduce(send, recv, host.size, DataType.FP32, ReduceOp.SUM, comm, stream)
        binding.synchronize_stream(stream)
        out = np.empty_like(host)
        binding.memcpy(ffi.from_buffer(out), nbytes, recv, nbytes, MemcpyKind.DEVICE_TO_HOST)
        return out
    finally:
        binding.free(send)
        binding.free(recv)


def main(argv: Optional[List[str]] = None) -> int:
    """Run the example on this rank; 0 when the result is right."""
    parser = argparse.ArgumentParser(prog="python -m hcomm_cffi.examples.allreduce", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=8, help="elements per rank (default 8)")
    args = parser.parse_args(argv)
    if args.count < 1:
        parser.error(f"--count={args.count}; expected at least 1")

    binding = get_binding()
    spec = discover(binding)
    binding.acl_init()
    device = _device_for(spec, binding)
    binding.set_device(device)
    if spec.ranktable is not None:
        comm = binding.comm_init_cluster_info(spec.ranktable, spec.rank)
    else:
        assert spec.root_info is not None
        comm = binding.comm_init_root_info(spec.size, spec.root_info, spec.rank)
    stream = binding.create_stream()
    try:
        rank, size = spec.rank, spec.size
        x = np.full(args.count, rank + 1, dtype=np.float32)
        y = allreduce_sum(binding, comm, stream, x)
        expected = size * (size + 1) / 2
        ok = bool(np.all(y == expected))
        shown = f"{y[0]:.1f} on every element" if np.all(y == y[0]) else f"{y.tolist()}"
        _say(f"rank {rank}/{size}: allreduce(sum of rank+1) = {shown} (expected {expected:.1f}) "
             f"{'OK' if ok else 'WRONG'}")
        # one more allreduce counts the ranks that got it right, so rank 0 can vouch for everyone
        agree = allreduce_sum(binding, comm, stream, np.array([1.0 if ok else 0.0], dtype=np.float32))
        if rank == 0:
            backend = os.environ.get("HCOMM_BACKEND") or type(binding.lib).__name__
            good = int(agree[0])
            _say(f"allreduce: {good}/{size} ranks OK ({'PASS' if good == size else 'FAIL'}); backend {backend}, "
                 f"launcher {spec.source}, job {spec.job_id}, {args.count} x float32")
    finally:
        binding.destroy_stream(stream)
        binding.comm_destroy(comm)
        binding.reset_device(device)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
