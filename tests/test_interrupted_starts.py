"""An exception at an exact point of a nonblocking call: past its launch, or in its completion's host step (issue 46.9).

A started call (``async_op``, ``stream=``, ``irecv``, ``isend``, a persistent request's ``start``)
whose start is cut short after its work was launched hands back no Request: the caller cannot wait
for it, and the queued work would run later, pairing with the peer's next step (the random alarms of
tests/test_interrupted_streams.py showed it: rank 0 received its step k+1 value plus rank 1's step
k).  So such an exception breaks the communicator, as one in a blocking call's wait does.

Deterministic: rank 1 raises KeyboardInterrupt from a trace function at the return of the
package's function that launched the call and made its Pending (or Request) -- under the call lock,
before the lock's release and the Request's making, where an alarm's handler can run.  Rank 1's
communicator must then say it is broken and refuse the retry; rank 0's matching call must fail
naming rank 1, or complete with exactly its own call's data (never another step's).

The completion of an ``irecv`` or an ``op='avg'`` request ends on the host, when ``wait()`` sees it
done (the message's checks; the sum divided by the size).  Cut short there, a later wait makes the
repeatable step again (the irecv returns its buffer, checked) and refuses what cannot be repeated
(the division in place: the result is not valid), never handing back the undivided sum or None.
"""
from __future__ import annotations

import sys
from typing import Any, Dict

import numpy as np
import pytest

from multiproc import run_ranks

COUNT = 1024

#: kind -> the package function (file tail, name) whose return is past the launch, with the start's work queued
LAUNCHED_AT = {kind: ("api/engine.py", "_launch") for kind in ("async_op", "stream", "persistent", "irecv", "isend")}
#: op='avg': the sum launched and its Request made, cut short while the division is attached to it
LAUNCHED_AT["avg"] = ("api/requests.py", "then")


def _interrupt(filename: str, name: str, at: str) -> None:
    """Raise KeyboardInterrupt (once) as the next call of ``name`` in ``filename`` begins (``at`` 'call') or returns
    ('return'), as an alarm handler run there does."""
    def tracer(frame: Any, event: str, arg: Any) -> Any:
        code = frame.f_code
        if code.co_name == name and code.co_filename.endswith(filename):
            if event == at:
                sys.settrace(None)
                raise KeyboardInterrupt(f"injected at the {at} of {name}")
            return tracer
        return None
    sys.settrace(tracer)


def _start(kind: str, comm: Any, stream: Any, persistent: Any, x: np.ndarray, y: np.ndarray) -> Any:
    """Rank ``comm.rank``'s nonblocking start of ``kind`` (p2p: rank 1 receives from / sends to rank 0)."""
    if kind == "async_op":
        return comm.allreduce(x, out=y, algorithm="ring", async_op=True)
    if kind == "stream":
        return comm.allreduce(x, out=y, algorithm="ring", stream=stream)
    if kind == "avg":
        return comm.allreduce(x, "avg", out=y, algorithm="ring", async_op=True)
    if kind == "persistent":
        persistent.start()
        return persistent
    recv = (kind == "irecv") == (comm.rank == 1)
    return comm.irecv(y, 1 - comm.rank) if recv else comm.isend(x, 1 - comm.rank)


def body(rank: int, n: int, root: bytes, kind: str) -> Dict[str, Any]:
    import hcomm_cffi as hcomm

    hcomm.init(rank=rank, world_size=n, root_info=root)
    report: Dict[str, Any] = {}
    try:
        comm = hcomm.Comm("starts")
        stream = hcomm.Stream() if kind == "stream" else None
        x = np.full(COUNT, float(rank + 1), np.float32)
        y = np.zeros(COUNT, np.float32)
        persistent = comm.allreduce_init(x, out=y, algorithm="ring") if kind == "persistent" else None
        _start(kind, comm, stream, persistent, x, y).wait()      # a first one, whole: the path is warm
        if rank == 1:
            _interrupt(*LAUNCHED_AT[kind], "return")
            try:
                _start(kind, comm, stream, persistent, x, y)
                report["interrupted"] = False
            except KeyboardInterrupt:
                report["interrupted"] = True
            finally:
                sys.settrace(None)
            report["repr"] = repr(comm)
            try:
                _start(kind, comm, stream, persistent, x, y).wait()
                report["retry"] = "accepted"
            except Exception as exc:        # noqa: BLE001 -- checked by the test
                report["retry"] = f"{type(exc).__name__}: {exc}"
        else:
            y[:] = np.nan
            try:
                _start(kind, comm, stream, persistent, x, y).wait()
                report["peer"] = f"completed with {sorted(set(y.tolist()))[:4]}"
            except Exception as exc:        # noqa: BLE001 -- checked by the test
                report["peer"] = f"{type(exc).__name__}: {exc}"
        if stream is not None:
            try:
                stream.close()
            except Exception:               # noqa: BLE001 -- the abandoned work's failure, reported above
                pass
        try:
            comm.destroy()
        except Exception:                   # noqa: BLE001 -- a broken communicator's leftovers
            pass
    finally:
        hcomm.finalize()
    return report


@pytest.mark.parametrize("kind", sorted(LAUNCHED_AT))
def test_an_exception_after_a_nonblocking_launch_breaks_the_communicator(kind: str) -> None:
    r0, r1 = run_ranks(2, body, kind, timeout=60, env={"HCCL_EXEC_TIMEOUT": "20", "HCOMM_SIM_CHECK": "warn"})
    assert r1["interrupted"], f"{kind}: the injected exception never left the start ({r1})"
    assert r1["repr"].endswith("broken>"), f"{kind}: usable after a start cut short past its launch: {r1}; {r0}"
    assert r1["retry"].startswith("CommError") and "interrupted" in r1["retry"], f"{kind}: rank 1's retry: {r1}"
    # rank 0 fails naming rank 1, or completed with exactly its call's data: what rank 1 launched may have run whole
    # before the interrupt (the emulator advances queued work inside library calls; irecv: rank 0 sends)
    if kind != "irecv":
        whole = {"isend": "completed with [2.0]", "avg": "completed with [1.5]"}.get(kind, "completed with [3.0]")
        assert "rank 1" in r0["peer"] or r0["peer"] == whole, f"{kind}: rank 0: {r0['peer']}"


#: kind -> (the package function of the completion's host step whose start the interrupt cuts short; the value a
#: later wait on rank 1 must return, unless it refuses with a CommError saying the result is not valid)
COMPLETED_AT = {
    "avg": (("api/average.py", "_average"), 2.0),
    "irecv": (("api/point_to_point.py", "_check_header"), 1.0),
}


def completion_body(rank: int, n: int, root: bytes, kind: str) -> Dict[str, Any]:
    import hcomm_cffi as hcomm

    hcomm.init(rank=rank, world_size=n, root_info=root)
    report: Dict[str, Any] = {}
    try:
        comm = hcomm.Comm("completion")
        x = np.full(COUNT, float(2 * rank + 1), np.float32)      # 1 and 3: the average is 2, the sum 4
        if kind == "avg":
            req = comm.allreduce(x, op="avg", async_op=True)
        else:
            req = comm.irecv(x, 0) if rank == 1 else comm.isend(x, 1)
        if rank == 1:
            _interrupt(*COMPLETED_AT[kind][0], "call")
            try:
                req.wait()
                report["first"] = "returned"
            except KeyboardInterrupt:
                report["first"] = "interrupted"
            finally:
                sys.settrace(None)
        try:
            got = req.wait()
            report["second"] = f"returned {None if got is None else sorted(set(np.asarray(got).tolist()))}"
        except Exception as exc:        # noqa: BLE001 -- checked by the test
            report["second"] = f"{type(exc).__name__}: {exc}"
        report["x"] = sorted(set(x.tolist()))
        comm.destroy()
    finally:
        hcomm.finalize()
    return report


@pytest.mark.parametrize("kind", sorted(COMPLETED_AT))
def test_a_completion_cut_short_is_made_again_or_refused_never_returned_half_made(kind: str) -> None:
    r0, r1 = run_ranks(2, completion_body, kind, timeout=60, env={"HCCL_EXEC_TIMEOUT": "20"})
    value = COMPLETED_AT[kind][1]
    if kind == "avg":
        assert r0["second"] == f"returned [{value}]", r0
    assert r1["first"] == "interrupted", r1
    refused = kind == "avg" and r1["second"].startswith("CommError") and "not valid" in r1["second"]
    assert (r1["second"] == f"returned [{value}]" and r1["x"] == [value]) or refused, r1
