"""Every operation opens and closes exactly one trace entry and one flight record (issue 42), whichever way it came.

Random mixes (hypothesis) of blocking, started, persistent, stream-ordered (``stream=``) and graph-captured
collectives, and of blocking, started, stream-ordered and any-source send/recv, run on a real 2-rank emulated
job with the trace and the flight recorder on.  After each operation completes, each rank checks that the
operation added exactly one flight record of the world communicator and one closed trace slice, and that
nothing is left open (a record not ``done``, an entry of ``trace.open_ops()``).
"""
from __future__ import annotations

from typing import Any, Dict, List, Tuple

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

from multiproc import run_ranks  # noqa: E402

OPERATIONS = ("allreduce", "iallreduce", "persistent", "stream_allreduce", "captured", "send", "isend",
              "stream_send", "irecv_any")


def _records(name: str) -> Tuple[int, List[str]]:
    """(operations recorded so far, states of the records kept) of this rank's ring of communicator ``name``."""
    from hcomm_cffi import flight
    ring = next(r for r in flight.recorders() if r.snapshot()["comm"] == name)
    snap = ring.snapshot()
    return snap["recorded"], [rec["state"] for rec in snap["records"]]


def _trace_slices(name: str) -> int:
    from hcomm_cffi import trace
    return sum(1 for ev in trace.events() if ev.get("cat") == "op" and ev["args"].get("comm") == name)


def body(rank: int, n: int, root_info: bytes, ops: List[str]) -> List[str]:
    import hcomm_cffi as hcomm
    from hcomm_cffi import trace
    w = hcomm.init(rank=rank, world_size=n, root_info=root_info)
    problems: List[str] = []
    try:
        s = hcomm.Stream()
        x = np.arange(16, dtype=np.float32) + rank
        buf = np.zeros(16, np.float32)
        persistent = w.allreduce_init(np.ones(8, np.float32))
        peer = 1 - rank
        for k, op in enumerate(ops):
            before, _ = _records("world")
            slices = _trace_slices("world")
            if op == "allreduce":
                w.allreduce(x)
            elif op == "iallreduce":
                w.iallreduce(x).wait()
            elif op == "persistent":
                persistent.start()
                persistent.wait()
            elif op == "stream_allreduce":
                w.allreduce(x, stream=s).wait()
            elif op == "captured":
                g = hcomm.Graph(f"g{k}")
                with hcomm.graph(g, stream=s):
                    w.allreduce(x, stream=s)
                g.replay()
                s.synchronize()
                g.reset()
            elif op == "send":
                w.send(x, peer) if rank == 0 else w.recv(buf, peer)
            elif op == "isend":
                (w.isend(x, peer) if rank == 0 else w.irecv(buf, peer)).wait()
            elif op == "stream_send":
                (w.send(x, peer, stream=s) if rank == 0 else w.recv(buf, peer, stream=s)).wait()
            elif op == "irecv_any":
                if rank == 0:
                    w.send(x, peer)
                else:
                    req = w.irecv_any(buf)
                    req.wait()
            after, states = _records("world")
            opened = trace.open_ops()
            got = (after - before, _trace_slices("world") - slices)
            if got != (1, 1) or opened or any(state != "done" for state in states):
                problems.append(f"#{k} {op}: {got[0]} flight record(s), {got[1]} trace slice(s); open trace "
                                f"entries {opened}; record states {sorted(set(states))}")
        s.close()
    finally:
        hcomm.finalize()
    return problems


@pytest.mark.slow
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(st.sampled_from(OPERATIONS), min_size=4, max_size=10))
def test_every_operation_opens_and_closes_one_trace_entry_and_one_flight_record(ops: List[str], tmp_path: Any,
                                                                                 monkeypatch: Any) -> None:
    env: Dict[str, str] = {"HCOMM_TRACE": str(tmp_path / "trace"), "HCOMM_FR_SIZE": "64"}
    got = run_ranks(2, body, ops, timeout=240, env=env)
    assert got == [[], []], f"operations {ops}:\n" + "\n".join(f"rank {r}: {p}" for r, ps in enumerate(got) for p in ps)


@pytest.mark.slow
def test_every_kind_of_operation_opens_and_closes_one_of_each(tmp_path: Any) -> None:
    """Each kind once, in one job (what the random mixes sample from)."""
    env = {"HCOMM_TRACE": str(tmp_path / "trace"), "HCOMM_FR_SIZE": "64"}
    got = run_ranks(2, body, list(OPERATIONS), timeout=240, env=env)
    assert got == [[], []], "\n".join(f"rank {r}: {p}" for r, ps in enumerate(got) for p in ps)
