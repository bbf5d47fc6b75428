"""A started operation completes once, by one mechanism (api/requests.py's ``Pending``), however it is waited for.

- A send/recv's completion closes its flight record once: a wait made again after its host step was cut short
  (an alarm's handler in the receive's checks) must not mark done the record that now holds the ring's slot.
- A stream-ordered request whose :class:`~hcomm_cffi.Stream` was closed completed (``close`` waits for the stream):
  its wait returns its result, it does not fail the communicator by waiting on a destroyed stream.
- A stream-ordered send/recv never waited for is let finish by destroy, as a stream-ordered collective is.
- A lane runs in order: a wait that sees a send complete completes (closes the records of) those posted before it.
"""
from __future__ import annotations

import sys
from typing import Any, Dict, List

import numpy as np

from multiproc import run_ranks


def _record_states(name: str) -> List[str]:
    from hcomm_cffi import flight
    ring = next(r for r in flight.recorders() if r.snapshot()["comm"] == name)
    return [rec["state"] for rec in ring.snapshot()["records"]]


def _interrupt_call(filename: str, name: str) -> None:
    """KeyboardInterrupt (once) as the next call of ``name`` in ``filename`` begins (an alarm handler's place)."""
    def tracer(frame: Any, event: str, arg: Any) -> Any:
        code = frame.f_code
        if code.co_name == name and code.co_filename.endswith(filename):
            if event == "call":
                sys.settrace(None)
                raise KeyboardInterrupt(f"injected at the call of {name}")
            return tracer
        return None
    sys.settrace(tracer)


def _rewait_body(rank: int, n: int, root: bytes) -> Dict[str, Any]:
    import hcomm_cffi as hcomm

    w = hcomm.init(rank=rank, world_size=n, root_info=root)
    report: Dict[str, Any] = {}
    try:
        x = np.full(64, float(rank + 1), np.float32)
        buf = np.zeros(64, np.float32)
        if rank == 0:
            w.send(x, 1)
            w.allreduce(x, async_op=True).wait()
        else:
            req = w.irecv(buf, 0)
            _interrupt_call("api/point_to_point.py", "_check_header")
            try:
                req.wait()
            except KeyboardInterrupt:
                report["first"] = "interrupted"
            finally:
                sys.settrace(None)
            started = w.allreduce(x, async_op=True)      # the ring's one slot is its record now, not yet waited for
            report["before"] = _record_states("world")
            got = req.wait()                             # the receive's host step again: its record was closed
            report["received"] = sorted(set(np.asarray(got).tolist()))
            report["after"] = _record_states("world")
            started.wait()
            report["waited"] = _record_states("world")
    finally:
        hcomm.finalize()
    return report


def test_a_receive_waited_again_closes_its_record_once() -> None:
    _, r1 = run_ranks(2, _rewait_body, timeout=60, env={"HCOMM_FR_SIZE": "1", "HCCL_EXEC_TIMEOUT": "20"})
    assert r1["first"] == "interrupted" and r1["received"] == [1.0], r1
    assert r1["before"] == r1["after"] == ["running"], f"the allreduce's record was closed by the receive's wait: {r1}"
    assert r1["waited"] == ["done"], r1


def _closed_stream_body(rank: int, n: int, root: bytes) -> List[Any]:
    import hcomm_cffi as hcomm

    w = hcomm.init(rank=rank, world_size=n, root_info=root)
    try:
        s = hcomm.Stream()
        x = np.full(16, float(rank + 1), np.float32)
        req = w.allreduce(x, stream=s)
        s.close()                                        # waits for the allreduce
        got = req.wait(30)
        after = w.allreduce(np.ones(4, np.float32))      # the communicator is fine
        return [float(got[0]), float(after[0]), repr(w).endswith("broken>")]
    finally:
        hcomm.finalize()


def test_a_request_whose_stream_was_closed_completed() -> None:
    assert run_ranks(2, _closed_stream_body, timeout=60, env={"HCCL_EXEC_TIMEOUT": "20"}) == [[3.0, 2.0, False]] * 2


def _unwaited_stream_p2p_body(rank: int, n: int, root: bytes) -> List[Any]:
    import warnings

    import hcomm_cffi as hcomm

    w = hcomm.init(rank=rank, world_size=n, root_info=root)
    s = hcomm.Stream()
    x = np.full(16, float(rank + 1), np.float32)
    try:
        if rank == 0:
            w.send(x, 1, stream=s)                       # never waited for: destroy lets it finish
        else:
            w.recv(x, 0, stream=s)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            hcomm.finalize()
        closed = "closed"
        try:
            s.close()
        except Exception as exc:                         # noqa: BLE001 -- checked by the test
            closed = f"{type(exc).__name__}: {exc}"
        return [float(x[0]), closed, [str(m.message) for m in caught]]
    finally:
        hcomm.finalize()


def test_destroy_lets_an_unwaited_stream_ordered_send_recv_finish() -> None:
    got = run_ranks(2, _unwaited_stream_p2p_body, timeout=60, env={"HCCL_EXEC_TIMEOUT": "10"})
    assert got == [[1.0, "closed", []], [1.0, "closed", []]], got


def _lane_order_body(rank: int, n: int, root: bytes) -> Dict[str, Any]:
    import hcomm_cffi as hcomm

    w = hcomm.init(rank=rank, world_size=n, root_info=root)
    report: Dict[str, Any] = {}
    try:
        x, y = np.full(8, 1.0, np.float32), np.full(8, 2.0, np.float32)
        if rank == 0:
            first, second = w.isend(x, 1), w.isend(y, 1)
            second.wait(30)                  # the lane ran in order: the first send completed too
            report["after second"] = _record_states("world")
            first.wait(30)
            report["after first"] = _record_states("world")
        else:
            w.recv(x, 0)
            w.recv(y, 0)
            report["got"] = [float(x[0]), float(y[0])]
    finally:
        hcomm.finalize()
    return report


def test_a_lane_wait_completes_what_the_lane_ran_before_it() -> None:
    r0, r1 = run_ranks(2, _lane_order_body, timeout=60, env={"HCCL_EXEC_TIMEOUT": "20"})
    assert r1["got"] == [1.0, 2.0], r1
    assert r0 == {"after second": ["done", "done"], "after first": ["done", "done"]}, r0
