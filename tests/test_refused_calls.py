"""A refused call moves nothing (issue 25 item 3): bad timeouts and peers are rejected before anything is posted.

Rank 0 sends three numbered messages; rank 1 makes refused receives between real ones and must still get
1, 2, 3 in order.  Rank 0 also makes refused sends, which must deliver nothing (rank 1 would otherwise
receive an extra message and see 99 instead of 2).
"""
from __future__ import annotations

import math
from typing import Any, List

import numpy as np
import pytest

from multiproc import run_ranks

BAD_TIMEOUTS = (-1, -0.5, math.nan, math.inf, -math.inf, "1", True)


def _refused(call: Any) -> str:
    try:
        call()
    except (ValueError, TypeError) as exc:
        return str(exc)
    raise AssertionError("the call was accepted")


def stream_body(rank: int, n: int, root_info: bytes) -> List[Any]:
    import hcomm_cffi as hcomm
    w = hcomm.init(rank=rank, world_size=n, root_info=root_info)
    texts: List[str] = []
    try:
        if rank == 0:
            w.send(np.full(4, 1.0), dst=1)
            for bad in BAD_TIMEOUTS:               # refused sends must not deliver
                texts.append(_refused(lambda: w.send(np.full(4, 99.0), dst=1, timeout=bad)))
                texts.append(_refused(lambda: w.send_multi([np.full(4, 99.0)], dst=1, timeout=bad)))
            texts.append(_refused(lambda: w.send(np.full(4, 99.0), dst=5)))
            w.send(np.full(4, 2.0), dst=1)
            w.send(np.full(4, 3.0), dst=1)
            return texts
        got = []
        got.append(float(w.recv(np.empty(4), src=0)[0]))
        for bad in BAD_TIMEOUTS:                   # refused receives must not consume
            texts.append(_refused(lambda: w.recv(np.empty(4), src=0, timeout=bad)))
            texts.append(_refused(lambda: w.recv_multi([np.empty(4)], src=0, timeout=bad)))
        texts.append(_refused(lambda: w.recv(np.empty(4), src=-3)))
        req = w.irecv(np.empty(4), src=0)
        for bad in BAD_TIMEOUTS:                   # a refused wait leaves the request pending, not lost
            texts.append(_refused(lambda: req.wait(bad)))
            texts.append(_refused(lambda: hcomm.wait_all([req], timeout=bad)))
        got.append(float(req.wait(30)[0]))
        got.append(float(w.recv(np.empty(4), src=0, timeout=30)[0]))
        return [got, texts]
    finally:
        hcomm.finalize()


def test_refused_sends_and_receives_leave_the_message_stream_intact() -> None:
    sender, (got, texts) = run_ranks(2, stream_body, timeout=90)
    assert got == [1.0, 2.0, 3.0]
    for text in sender + texts:
        assert ("timeout=" in text and "expected None (no limit) or a finite number of seconds >= 0" in text) \
            or "dst=5" in text or "src=-3" in text, text


@pytest.mark.parametrize("bad", [math.nan, math.inf, -1])
def test_comm_timeout_must_be_finite(bad: float) -> None:
    from hcomm_cffi.api.comm import _exec_timeout

    with pytest.raises(ValueError, match=r"timeout=.*expected a finite number of seconds >= 0"):
        _exec_timeout(bad)
