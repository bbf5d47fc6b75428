"""A library collective never uses a peer's earlier data when the ranks' handshakes fall out of step.

Each chunk a rank stages for HcclAllReduce, HcclBroadcast, HcclAllGather and HcclReduceScatter ends with its
number, which every rank counts alike; after the handshake a rank checks the number of every peer whose
staging it reads.  Here rank 0 leaves a stale record of the collective's handshake in rank 1's notify (as a
record never taken would be) and stages its next chunk late: rank 1 then passes its wait at once, and
without the check used what rank 0's staging held then -- an allreduce returned 20 instead of 20 + 10,
silently.  It must fail instead, naming both chunk numbers.
"""
from __future__ import annotations

import multiprocessing
import time
from typing import Any, Callable, Dict

import numpy as np
import pytest

from multiproc import run_ranks



def _call(world: Any, coll: str, value: float) -> Callable[[], Any]:
    """The collective with every rank's input ``value`` (broadcast: from rank 0); returns a thunk."""
    x = np.full(4, value, np.float32)
    if coll == "allreduce":
        return lambda: world.allreduce(x, algorithm="native").tolist()
    if coll == "broadcast":
        return lambda: world.broadcast(x, 0, algorithm="native").tolist()
    if coll == "allgather":
        return lambda: world.allgather(x, algorithm="native").tolist()
    return lambda: world.reduce_scatter(np.full(8, value, np.float32), algorithm="native").tolist()


def body(rank: int, n: int, root_info: bytes, coll: str, gate: Any) -> Dict[str, Any]:
    import hcomm_cffi as hcomm
    from hcomm_cffi.sim.library import _STATE
    from hcomm_cffi.sim.native import _SIG_KINDS, PARITY   # the parity handshakes' notifies; the signature kinds
    from hcomm_cffi.sim.notifies import VALUES

    world = hcomm.init(rank=rank, world_size=n, root_info=root_info)
    try:
        _call(world, coll, rank + 1)()                    # the channels, parities and signature exist
        if rank == 0:
            sc = _STATE.comm(world.handle)
            ch = sc.native.channels[1]
            idx = PARITY + (sc.native.seq & 1)            # the notify of the next chunk's handshake
            value = next(v for v, f in sc.native.signatures.items() if f[1] == _SIG_KINDS.index(coll))
            at = ch.remote_base + idx                     # a record of this collective, never taken:
            ch.remote_words[at + VALUES] = value          # its value, then one more record (sim/notifies.py)
            ch.remote_words[at] += 1
            ch.ring_peer()
        gate.wait(30)
        call = _call(world, coll, 10 if rank == 0 else 20)
        if rank == 0:
            time.sleep(0.5)                               # rank 1 reads rank 0's staging first
        try:
            return {"result": call()}
        except Exception as exc:                           # noqa: BLE001 -- checked by the test
            return {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        hcomm.finalize()


@pytest.mark.parametrize("coll", ["allreduce", "broadcast", "allgather", "reduce_scatter"])
def test_a_stale_handshake_fails_the_call_instead_of_using_a_peers_earlier_data(coll: str) -> None:
    gate = multiprocessing.get_context("fork").Barrier(2)
    r0, r1 = run_ranks(2, body, coll, gate, timeout=60, env={"HCCL_EXEC_TIMEOUT": "10"})
    assert "error" in r1, f"{coll}: rank 1 returned {r1.get('result')} (rank 0's earlier data used silently)"
    assert "fell out of step" in r1["error"] and "rank 0's staging holds" in r1["error"], r1["error"]
    if "error" in r0:                                      # rank 0 may finish (it read rank 1's data in time)
        assert "rank 1" in r0["error"], r0["error"]
