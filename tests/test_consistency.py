"""No separate signature collective, and blocking point-to-point timeouts that name the peer.

(The mismatch cases themselves are in test_signatures.py: the signature travels with the data.)
"""
from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Tuple

import numpy as np
import pytest

from multiproc import run_ranks

def off_body(rank: int, n: int, root_info: bytes) -> int:
    """No signature allgather is made, whatever the setting (counted at the binding): the signature travels in-band."""
    import hcomm_cffi as hcomm
    from hcomm_cffi.binding import get_binding
    b = get_binding()
    calls = []
    real = b.all_gather
    b.all_gather = lambda *a: (calls.append(a), real(*a))[1]  # type: ignore[method-assign]
    w = hcomm.init(rank=rank, world_size=n, root_info=root_info)
    try:
        w.allreduce(np.ones(4, np.float32), algorithm="ring")
        return len(calls)
    finally:
        hcomm.finalize()
        b.all_gather = real  # type: ignore[method-assign]


@pytest.mark.parametrize("check", ["0", "1"])
def test_no_separate_signature_collective(check: str) -> None:
    assert run_ranks(2, off_body, timeout=60, env={"HCOMM_CHECK_COLLECTIVES": check}) == [0, 0]


def blocking_body(rank: int, n: int, root_info: bytes) -> str:
    import hcomm_cffi as hcomm
    w = hcomm.init(rank=rank, world_size=n, root_info=root_info)
    try:
        if rank == 0:
            with pytest.raises(hcomm.CommTimeoutError) as info:
                w.recv(np.empty(4, np.float32), 1, timeout=0.5)   # rank 1 never sends
            with pytest.raises(hcomm.CommError, match="unusable after an earlier failure"):
                w.allreduce(np.ones(1))
            return str(info.value)
        time.sleep(2.0)                   # stay alive past rank 0's timeout (a dead peer is another error)
        return ""
    finally:
        hcomm.finalize()


def test_blocking_recv_timeout_names_the_peer_and_no_request() -> None:
    msg = run_ranks(2, blocking_body, timeout=60)[0]
    assert "recv of 16 bytes from rank 1 did not complete within 0.5 s; check that rank 1 posts the matching send" \
        in msg, msg
    assert "wait again" not in msg
