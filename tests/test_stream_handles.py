"""``stream=`` arguments become one ``aclrtStream`` object per stream: the library recognises a stream by identity first.

The emulator (as a cheap cache) and any caller that compares handle objects see the same object for a
``hcomm_cffi.Stream`` whether it is given as the Stream or as its ``handle``; an address (torch_npu's
``npu_stream``) is cast, NULL and non-streams are refused before anything reaches the library.
"""
from __future__ import annotations

import pytest

import hcomm_cffi as hcomm
from hcomm_cffi._ffi import ffi
from hcomm_cffi.api.streams import stream_handle


def test_a_stream_and_its_handle_give_the_same_object() -> None:
    s = hcomm.Stream()
    try:
        assert stream_handle(s) is s.handle
        assert stream_handle(s.handle) is s.handle
        by_address = stream_handle(s.npu_stream)        # what torch_npu hands over: an int
        assert by_address is not s.handle and int(ffi.cast("uintptr_t", by_address)) == s.npu_stream
    finally:
        s.close()


def test_what_is_not_a_stream_is_refused() -> None:
    with pytest.raises(ValueError, match="stream is NULL"):
        stream_handle(ffi.NULL)
    for bad in ("x", 0, -5, True, 1.5):
        with pytest.raises(TypeError, match="expected an aclrtStream handle"):
            stream_handle(bad)
    s = hcomm.Stream()
    s.close()
    with pytest.raises(Exception, match="closed|destroyed"):
        stream_handle(s)


def _close_right_away(rank: int, n: int, root: bytes) -> float:
    """Rank 0 replays a graph and closes its stream at once; rank 1 replays later."""
    import time

    import numpy as np

    w = hcomm.init(rank=rank, world_size=n, root_info=root)
    try:
        s = hcomm.Stream()
        y = np.full(8, rank + 1.0, np.float32)
        g = hcomm.Graph("closing")
        with hcomm.graph(g, stream=s):
            w.allreduce(y, algorithm="ring", stream=s)
        if rank == 1:
            time.sleep(0.3)                   # its part comes after rank 0 closed
        g.replay()
        s.close()                            # waits for it: a dropped part would leave rank 1 waiting
        g.reset()
        return float(y[0])
    finally:
        hcomm.finalize()


def test_close_waits_for_the_queued_work() -> None:
    from multiproc import run_ranks

    assert run_ranks(2, _close_right_away, timeout=60, env={"HCCL_EXEC_TIMEOUT": "10"}) == [3.0, 3.0]


def _stream_closed_then_another(rank: int, n: int, root: bytes) -> list:
    """A stream-ordered allreduce on s1, s1 closed, then one on s2 (never waited for) and finalize."""
    import warnings

    import numpy as np

    w = hcomm.init(rank=rank, world_size=n, root_info=root)
    got = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            for k in range(3):
                s = hcomm.Stream()
                y = np.full(8, rank + 1.0 + k, np.float32)
                req = w.allreduce(y, algorithm="ring", stream=s)
                if k < 2:
                    req.wait(30)
                    s.close()         # the communicator must forget it: the next call orders after it otherwise
                else:
                    s.synchronize()   # the last is never waited for; its stream closed before finalize
                    s.close()
                got.append(float(y[0]))
        finally:
            hcomm.finalize()
    return got + [str(m.message) for m in caught if issubclass(m.category, RuntimeWarning)]


def test_a_closed_stream_is_forgotten_by_the_communicators_it_served() -> None:
    from multiproc import run_ranks

    assert run_ranks(2, _stream_closed_then_another, timeout=60, env={"HCCL_EXEC_TIMEOUT": "10"}) == \
        [[3.0, 5.0, 7.0], [3.0, 5.0, 7.0]]
