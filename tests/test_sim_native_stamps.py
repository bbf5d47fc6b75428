"""A library allreduce never reduces a peer's earlier data when the ranks' handshakes fall out of step.

Each chunk a rank stages for HcclAllReduce ends with its number, which every rank counts alike; the
reducing rank checks every peer's number after the handshake.  Here rank 0 leaves a stale record of the
allreduce's handshake in rank 1's notify (as a record never taken would be) and stages its next chunk late:
rank 1 then passes its wait at once, and without the check reduced what rank 0's staging held then -- silently
returning 20 instead of 20 + 10.  It must fail instead, naming both chunk numbers.
"""
from __future__ import annotations

import multiprocessing
import time
from typing import Any, Dict

import numpy as np

from multiproc import run_ranks

PARITY = 4          # sim/native.py: the notifies 4 and 5 carry the parity handshakes of the symmetric chunks


def body(rank: int, n: int, root_info: bytes, gate: Any) -> Dict[str, Any]:
    import hcomm_cffi as hcomm
    from hcomm_cffi.sim.library import _STATE

    world = hcomm.init(rank=rank, world_size=n, root_info=root_info)
    try:
        x = np.full(4, rank + 1, np.float32)
        world.allreduce(x, algorithm="native")            # 1 + 2 = 3 on both: the channels and parities exist
        assert np.all(x == 3), x
        if rank == 0:
            sc = _STATE.comm(world._port.handle)
            ch = sc.native.channels[1]
            idx = PARITY + (sc.native.seq & 1)            # the notify of the next chunk's handshake
            signed = ch.remote_words[ch.remote_base + (PARITY + 1 - (sc.native.seq & 1))]   # cleared by now
            assert signed == 0
            value = next(v for v, f in sc.native.signatures.items() if f[1] == 0)          # the allreduce's
            ch.remote_words[ch.remote_base + idx] = value # a record of this call's kind, never taken
            ch.ring_peer()
        gate.wait(30)
        y = np.full(4, 10 if rank == 0 else 20, np.float32)
        if rank == 0:
            time.sleep(0.5)                               # rank 1 reaches the reduction first
        try:
            world.allreduce(y, algorithm="native")
            return {"result": y.tolist()}
        except Exception as exc:                           # noqa: BLE001 -- checked by the test
            return {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        hcomm.finalize()


def test_a_stale_handshake_fails_the_call_instead_of_reducing_a_peers_earlier_data() -> None:
    gate = multiprocessing.get_context("fork").Barrier(2)
    r0, r1 = run_ranks(2, body, gate, timeout=60, env={"HCCL_EXEC_TIMEOUT": "10"})
    assert "error" in r1, f"rank 1 returned {r1.get('result')} (rank 0's earlier data reduced silently)"
    assert "fell out of step" in r1["error"] and "rank 0's staging holds no chunk yet" in r1["error"], r1["error"]
    if "result" in r0:                                     # rank 0 reduced the right data, or failed naming rank 1
        assert r0["result"] == [30.0] * 4, r0
    else:
        assert "rank 1" in r0["error"], r0["error"]
