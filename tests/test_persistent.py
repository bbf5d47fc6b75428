"""Persistent collectives (MPI-4 ``MPI_Allreduce_init`` & co, mpi4py's ``Allreduce_init``): bound once, started often.

Every rank makes persistent allreduce, broadcast, allgather, reduce_scatter and alltoall requests
on fixed buffers, starts each several times with new contents and checks the results against
NumPy under the strict checker; the algorithm's issue() ran once per request.  A start while
active, and a start after the buffer changed dtype, shape or address, are clear errors that move
nothing; a request survives its communicator's cache starting over (it binds again); arguments
are refused at the init exactly as the blocking call refuses them.
"""
from __future__ import annotations

from typing import Any, Dict

import numpy as np
import pytest

from algohelp import count_issues
from multiproc import run_ranks


def _vals(rank: int, step: int, count: int) -> np.ndarray:
    return (np.arange(count) % 5 + 2 * rank + step).astype(np.float32)


def body(rank: int, n: int, root_info: bytes, algo: str) -> Dict[str, Any]:
    import hcomm_cffi as hcomm
    from hcomm_cffi.api.errors import CommError
    w = hcomm.init(rank=rank, world_size=n, root_info=root_info)
    issued = count_issues(algo) if algo != "auto" else [0]
    ranks = range(n)
    seen: Dict[str, Any] = {}
    try:
        x = np.empty(4 * n, np.float32)
        out = np.empty(4 * n, np.float32)
        gathered = np.empty((n, 4 * n), np.float32)
        block = np.empty(4, np.float32)
        exchanged = np.empty(4 * n, np.float32)
        reqs = {
            "allreduce": w.allreduce_init(x, "max", out=out, algorithm=algo),
            "broadcast": w.broadcast_init(x, root=n - 1, algorithm=algo),
            "allgather": w.allgather_init(x, out=gathered, algorithm=algo),
            "reduce_scatter": w.reduce_scatter_init(x, out=block, algorithm=algo),
            "alltoall": w.alltoall_init(x, out=exchanged, algorithm=algo),
        }
        seen["issued_at_init"] = issued[0]
        for step in range(3):
            x[:] = _vals(rank, step, 4 * n)
            reqs["allreduce"].start()
            assert reqs["allreduce"].wait() is out
            np.testing.assert_array_equal(out, _vals(n - 1, step, 4 * n))
            reqs["allgather"].start()
            while not reqs["allgather"].test():
                pass
            np.testing.assert_array_equal(gathered, np.stack([_vals(r, step, 4 * n) for r in ranks]))
            reqs["reduce_scatter"].start()
            assert reqs["reduce_scatter"].wait() is block
            np.testing.assert_array_equal(block, sum(_vals(r, step, 4 * n) for r in ranks)[4 * rank:4 * rank + 4])
            reqs["alltoall"].start()
            reqs["alltoall"].wait()
            np.testing.assert_array_equal(exchanged, np.concatenate(
                [_vals(r, step, 4 * n)[4 * rank:4 * rank + 4] for r in ranks]))
            reqs["broadcast"].start()
            assert reqs["broadcast"].wait() is x
            np.testing.assert_array_equal(x, _vals(n - 1, step, 4 * n))
            w.allreduce(np.ones(3, np.float32), algorithm="mesh")   # other calls between the starts
        seen["issued_after_starts"] = issued[0]
        red = w.reduce_init(x, root=0, op="sum", out=out, algorithm=algo)   # MPI_Reduce_init: the root's out
        for step in range(2):
            x[:] = _vals(rank, step, 4 * n)
            out[:] = -1
            red.start()
            got = red.wait()
            if rank == 0:
                assert got is out
                np.testing.assert_array_equal(out, sum(_vals(r, step, 4 * n) for r in ranks))
            else:
                assert got is None and (out == -1).all()
        r = reqs["allreduce"]
        assert r.wait() is out and not r.active             # an inactive request's wait returns at once
        r.start()
        with pytest.raises(CommError, match="still active"):
            r.start()
        r.wait()

        out[:] = -1
        out.dtype = np.int32                                 # same address and bytes, another dtype
        with pytest.raises(ValueError, match=r"out is now 16 bytes of int32|out is now \d+ bytes of int32"):
            r.start()
        out.dtype = np.float32
        assert not r.active and (out == -1).all()            # refused: nothing launched, nothing written
        x.shape = (n, 4)                                     # same memory, another shape
        with pytest.raises(ValueError, match="shape"):
            r.start()
        x.shape = (4 * n,)
        out.flags.writeable = False                          # a written buffer made read-only: as a fresh call says
        with pytest.raises(ValueError, match="read-only"):
            r.start()
        out.flags.writeable = True

        try:
            import torch
        except ImportError:
            torch = None
        if torch is not None:                                # a tensor given other storage: another address
            t = torch.full((4 * n,), float(rank))
            tr = w.allreduce_init(t, algorithm=algo)
            tr.start()
            tr.wait()
            assert t.tolist() == [float(sum(ranks))] * (4 * n)
            t.set_(torch.zeros(4 * n))
            with pytest.raises(ValueError, match="at the init it was"):
                tr.start()
            assert not tr.active and t.tolist() == [0.0] * (4 * n)

        w._engine.forget_resources()                         # the cache starts over: the request binds again
        x[:] = _vals(rank, 7, 4 * n)
        r.start()
        r.wait()
        np.testing.assert_array_equal(out, _vals(n - 1, 7, 4 * n))

        for bad, kind in ((lambda: w.allreduce_init(x, op=False), ValueError),
                          (lambda: w.broadcast_init(x, root=True), TypeError),
                          (lambda: w.allreduce_init(x, out=out.view(np.int32)), ValueError),
                          (lambda: w.alltoall_init(np.ones(4 * n + 1, np.float32)), ValueError)):
            with pytest.raises(kind):
                bad()
        return seen
    finally:
        hcomm.finalize()


@pytest.mark.parametrize("algo", ["ring", "native"])
def test_persistent_collectives_bind_once_and_refuse_changed_buffers(algo: str) -> None:
    for seen in run_ranks(2, body, algo, timeout=180, env={"HCOMM_SIM_CHECK": "strict"}):
        assert seen["issued_at_init"] == 5                   # each request issued its schedule at the init
        assert seen["issued_after_starts"] == 5              # and never again
