"""One call path: a cached call is validated as a fresh one, torch tensors are cached too, every operation ends in observe.

Each rank warms a call up until the fast path serves it (api/buffers.py), then makes the
spellings a fresh call refuses -- a bool or float root, ``op=False`` / ``0.0`` after ``op=0``, an
``out=`` viewed as another dtype -- and checks that the error is the one a fresh communicator
raises for the same call, and that nothing was written.  A torch tensor repeated is served from
the cache as an ndarray is.  With ``HCOMM_TRACE`` every started operation (``i*``, ``isend`` /
``irecv``, ``wait_all``, persistent starts) is closed in the trace by the time it completed.
"""
from __future__ import annotations

import glob
import json
import os
from fractions import Fraction
from typing import Any, Callable, Dict, List, Tuple

import numpy as np
import pytest

from algohelp import count_issues
from multiproc import run_ranks


def _refusal(fn: Callable[[], Any]) -> Tuple[str, str]:
    """(exception type, message) of a call that must fail."""
    try:
        fn()
    except (TypeError, ValueError) as exc:
        return type(exc).__name__, str(exc)
    raise AssertionError("the call was accepted")


def validation_body(rank: int, n: int, root_info: bytes, algo: str) -> Dict[str, Any]:
    import hcomm_cffi as hcomm
    w = hcomm.init(rank=rank, world_size=n, root_info=root_info)
    fresh = hcomm.Comm("fresh")                  # nothing cached: what every refusal must equal
    seen: Dict[str, Any] = {}
    try:
        x = np.arange(8, dtype=np.float32) + rank
        out = np.zeros(8, np.float32)
        for _ in range(3):                       # cached: served by the fast path from the second call on
            w.broadcast(x, root=1, algorithm=algo)
            w.allreduce(x, op=0, out=out, algorithm=algo)
        entries = len(w._engine.cache.fast)
        before_x, before_out = x.copy(), out.copy()
        calls: List[Tuple[str, Callable[[Any], Any]]] = [
            ("root=True", lambda c: c.broadcast(x, True, algorithm=algo)),
            ("root=1.0", lambda c: c.broadcast(x, 1.0, algorithm=algo)),
            ("root=1+0j", lambda c: c.broadcast(x, 1 + 0j, algorithm=algo)),
            ("root=Fraction(1)", lambda c: c.broadcast(x, Fraction(1), algorithm=algo)),
            ("reduce root=True", lambda c: c.reduce(x, True, out=out, algorithm=algo)),
            ("root=None", lambda c: c.broadcast(x, None, algorithm=algo)),
            ("op=None", lambda c: c.allreduce(x, op=None, out=out, algorithm=algo)),
            ("op=False", lambda c: c.allreduce(x, op=False, out=out, algorithm=algo)),
            ("op=0.0", lambda c: c.allreduce(x, op=0.0, out=out, algorithm=algo)),
            ("op='summ'", lambda c: c.allreduce(x, op="summ", out=out, algorithm=algo)),
            ("out as int32", lambda c: c.allreduce(x, op=0, out=out.view(np.int32), algorithm=algo)),
            ("out as uint8", lambda c: c.allreduce(x, op=0, out=out.view(np.uint8), algorithm=algo)),
            ("x as int32", lambda c: c.allreduce(x.view(np.int32), op=0, out=out, algorithm=algo)),
            ("algorithm='rnig'", lambda c: c.allreduce(x, op=0, out=out, algorithm="rnig")),
        ]
        for label, call in calls:
            cached, first = _refusal(lambda: call(w)), _refusal(lambda: call(fresh))
            assert cached == first, (label, cached, first)
            np.testing.assert_array_equal(x, before_x, err_msg=label)        # a refused call writes nothing
            np.testing.assert_array_equal(out, before_out, err_msg=label)
        seen["entries_unchanged"] = len(w._engine.cache.fast) == entries
        w.broadcast(x, np.int64(1), algorithm=algo)  # what a fresh call accepts, the cache accepts: right data
        np.testing.assert_array_equal(x, np.arange(8, dtype=np.float32) + 1)
        seen["refusals"] = len(calls)
        return seen
    finally:
        fresh.destroy()
        hcomm.finalize()


@pytest.mark.parametrize("algo", ["native", "ring"])
def test_a_cached_call_refuses_what_a_fresh_call_refuses(algo: str) -> None:
    for seen in run_ranks(2, validation_body, algo, timeout=120):
        assert seen == {"entries_unchanged": True, "refusals": 14}


def torch_body(rank: int, n: int, root_info: bytes) -> Dict[str, Any]:
    import torch

    import hcomm_cffi as hcomm
    w = hcomm.init(rank=rank, world_size=n, root_info=root_info)
    issued = count_issues("ring")
    full = [0]
    run = w._engine.run

    def counted(c: Any) -> str:
        full[0] += 1
        return run(c)
    w._engine.run = counted                  # type: ignore[method-assign]
    try:
        t = torch.zeros(6, dtype=torch.float32)
        out = torch.empty(6, dtype=torch.float32)
        for step in range(4):
            t.fill_(rank + step)
            assert w.allreduce(t, algorithm="ring") is t
            assert torch.equal(t, torch.full((6,), float(sum(r + step for r in range(n)))))
            assert w.allreduce(t, out=out, algorithm="ring") is out
        entries = len(w._engine.cache.fast)
        with pytest.raises(ValueError, match="dtype"):           # out= viewed as another dtype: refused
            w.allreduce(t, out=out.view(torch.int32), algorithm="ring")
        with pytest.raises(ValueError, match="not contiguous"):  # a non-contiguous view of a cached tensor
            w.allreduce(torch.zeros(3, 4)[:, 1], algorithm="ring")
        return {"entries": entries, "issued": issued[0], "full": full[0]}
    finally:
        hcomm.finalize()


def test_torch_tensors_take_the_fast_path() -> None:
    pytest.importorskip("torch")
    for seen in run_ranks(2, torch_body, timeout=120):
        # one entry per call shape; the algorithm issued once each; only the first call of each took the full path
        # (ring has the signature handshake: the first call binds both of its parities, so the second is cached too)
        assert seen == {"entries": 2, "issued": 2, "full": 2}


def trace_body(rank: int, n: int, root_info: bytes, tdir: str) -> Dict[str, Any]:
    import hcomm_cffi as hcomm
    from hcomm_cffi import trace
    w = hcomm.init(rank=rank, world_size=n, root_info=root_info)
    try:
        x = np.ones(16, np.float32)
        reqs = [w.iallreduce(x, algorithm="ring"), w.ibroadcast(x.copy(), 0), w.iallgather(x)]
        for r in reqs:
            r.wait()
        peer = 1 - rank
        inbox = np.empty(16, np.float32)
        hcomm.wait_all([w.isend(x, peer), w.irecv(inbox, peer), w.iallreduce(x, algorithm="native")])
        for _ in range(3):
            w.allreduce(x, algorithm="ring")     # blocking, then from the fast path
        p = w.allreduce_init(x, algorithm="ring")
        for _ in range(3):
            p.start()
            p.wait()
        q = w.allgather_init(x)
        q.start()
        while not q.test():
            pass
        w.barrier()
        still_open = trace.open_ops()
        ops = sorted(e["name"] for e in trace.events() if e.get("cat") == "op")
        return {"open": still_open, "ops": ops}
    finally:
        hcomm.finalize()


def test_every_started_operation_is_closed_in_the_trace(tmp_path: Any) -> None:
    tdir = str(tmp_path / "trace")
    seen = run_ranks(2, trace_body, tdir, timeout=120, env={"HCOMM_TRACE": tdir})
    for rank, got in enumerate(seen):
        assert got["open"] == [], got
        peer = 1 - rank
        # 3 started + 1 in wait_all, 3 blocking, 3 persistent allreduce starts, 1 persistent allgather, the barrier
        assert len([o for o in got["ops"] if o.startswith(("allreduce", "broadcast", "allgather", "barrier"))]) == 12
        assert f"send to {peer} #0" in got["ops"] and f"recv from {peer} #0" in got["ops"], got["ops"]
    files = glob.glob(os.path.join(tdir, "*.trace.json"))
    assert len(files) == 2
    for path in files:
        with open(path) as fh:
            events = json.load(fh)["traceEvents"]
        assert len([e for e in events if e.get("cat") == "op"]) == 14


def torch_trace_body(rank: int, n: int, root_info: bytes, port: int) -> Dict[str, Any]:
    import datetime

    import torch
    import torch.distributed as dist

    import hcomm_cffi.torch  # noqa: F401
    from hcomm_cffi import trace
    dist.init_process_group("hcomm", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=n,
                            timeout=datetime.timedelta(seconds=60))
    try:
        t = torch.ones(8)
        works = [dist.all_reduce(t, async_op=True), dist.broadcast(t, 0, async_op=True)]
        peer = 1 - rank
        inbox = torch.empty(8)
        works += [dist.isend(t, peer), dist.irecv(inbox, peer)]
        for w in works:
            w.wait()
        fut = dist.all_reduce(t, async_op=True).get_future()   # completed by the backend's progress thread
        fut.wait()
        dist.all_reduce(t)                                      # blocking (the fast path from the second on)
        dist.all_reduce(t)
        dist.barrier()
        return {"open": trace.open_ops(), "ops": len([e for e in trace.events() if e.get("cat") == "op"])}
    finally:
        dist.destroy_process_group()


def test_every_torch_work_is_closed_in_the_trace(tmp_path: Any) -> None:
    pytest.importorskip("torch")
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tdir = str(tmp_path / "trace")
    for got in run_ranks(2, torch_trace_body, port, timeout=120, env={"HCOMM_TRACE": tdir}):
        assert got["open"] == [], got
        # 5 collectives, 4 messages (a send is a header and the tensor), the barrier; the creation-time ops too
        assert got["ops"] >= 10, got


def failed_trace_body(rank: int, n: int, root_info: bytes) -> Dict[str, Any]:
    import hcomm_cffi as hcomm
    from hcomm_cffi import trace
    w = hcomm.init(rank=rank, world_size=n, root_info=root_info)
    try:
        x = np.ones(8, np.float32)
        w.allreduce(x, "sum", algorithm="ring")
        # the ranks disagree on the op: both fail.  Rank 0 repeats a known call, so its mismatch is found by the
        # call's own handshake (the operation was issued: it closes as failed); rank 1's new op is refused by the
        # agreement a new call signature runs before any resource is acquired (nothing was issued)
        with pytest.raises(hcomm.CollectiveMismatchError):
            w.allreduce(x, "max" if rank else "sum", algorithm="ring")
        failed = [e["name"] for e in trace.events() if e.get("cat") == "op" and e["args"].get("failed")]
        return {"open": trace.open_ops(), "failed": failed}
    finally:
        hcomm.finalize()


def test_a_failed_operation_is_closed_in_the_trace_as_failed(tmp_path: Any) -> None:
    tdir = str(tmp_path / "trace")
    got0, got1 = run_ranks(2, failed_trace_body, timeout=120, env={"HCOMM_TRACE": tdir})
    assert got0["open"] == [] and got0["failed"] == ["allreduce #2"], got0
    assert got1["open"] == [] and got1["failed"] == [], got1
