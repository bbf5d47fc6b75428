"""Steady-state dry run: a schedule that writes into a peer's landing slot without waiting for its ACK.

One piece and one call run fine once, so only the schedule followed by itself shows the reuse;
the dry run rejects it before anything runs (``hcomm plan`` and a Comm's first call), naming rank,
thread, step and peer.  The built-ins and the shipped examples are still accepted.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from hcomm_cffi.algorithms import COLLECTIVES, CollectiveCall, ScheduleError, dry_run, resolve
from hcomm_cffi.algorithms.interface import FunctionAlgorithm
from hcomm_cffi.enums import DataType
from hcomm_cffi.plan import Topology
from multiproc import run_ranks

NO_ACK = '''
from hcomm_cffi.algorithms import DATA, algorithm

@algorithm("{name}", collectives=("alltoall",))
def no_ack(ctx, call):
    n, me, th = ctx.size, ctx.rank, ctx.threads[0]
    nb = call.count * ctx.esz
    right, left = (me + 1) % n, (me - 1) % n
    ctx.put(th, right, 0, call.send, nb)          # no wait for right's ACK
    ctx.record(th, right, DATA)
    ctx.wait(th, left, DATA)
    ctx.copy(th, call.recv, ctx.mine(0), nb)
'''
WORDS = ["in the steady state", "landing slot reused without a handshake", "rank 0, thread 0, step 5",
         "write", "to rank 1", "rank 1, thread 0, step 4 (copy"]


def _no_ack(ctx, call):  # type: ignore[no-untyped-def]
    """NO_ACK's body, unregistered."""
    n, me, th = ctx.size, ctx.rank, ctx.threads[0]
    nb = call.count * ctx.esz
    right, left = (me + 1) % n, (me - 1) % n
    ctx.put(th, right, 0, call.send, nb)
    ctx.record(th, right, 1)
    ctx.wait(th, left, 1)
    ctx.copy(th, call.recv, ctx.mine(0), nb)


def test_dry_run_rejects_the_reuse_only_the_steady_state_shows() -> None:
    with pytest.raises(ScheduleError) as info:
        dry_run(FunctionAlgorithm(_no_ack, "no_ack", None), Topology.single_server(3),
                CollectiveCall("alltoall", 0, 0, 16, DataType.FP32), 1 << 20)
    for w in WORDS:
        assert w in str(info.value), str(info.value)


def test_hcomm_plan_rejects_it(tmp_path: Path) -> None:
    path = tmp_path / "no_ack.py"
    path.write_text(textwrap.dedent(NO_ACK).format(name="no_ack_cli"))
    out = subprocess.run([sys.executable, "-m", "hcomm_cffi", "plan", "--algo", f"{path}:no_ack", "--ranks", "3",
                          "--size", "1K"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    for w in WORDS:
        assert w in out.stderr, out.stderr


def no_ack_body(rank: int, n: int, root_info: bytes, path: str) -> str:
    import hcomm_cffi as hcomm
    w = hcomm.init(rank=rank, world_size=n, root_info=root_info)
    try:
        with pytest.raises(ScheduleError) as info:
            w.alltoall(np.ones(3 * 4, np.float32), algorithm=f"{path}:no_ack")
        y = w.alltoall(np.full(3 * 4, rank, np.float32))       # nothing ran: the communicator still works
        np.testing.assert_array_equal(y, np.repeat(np.arange(n, dtype=np.float32), 4))
        return str(info.value)
    finally:
        hcomm.finalize()


@pytest.mark.slow
def test_the_first_call_rejects_it_on_every_rank(tmp_path: Path) -> None:
    path = tmp_path / "no_ack_comm.py"
    path.write_text(textwrap.dedent(NO_ACK).format(name="no_ack_comm"))
    for msg in run_ranks(3, no_ack_body, str(path), timeout=120):
        for w in WORDS:
            assert w in msg, msg


@pytest.mark.parametrize("name", ["ring", "mesh", "tree", "hierarchical",
                                  "hcomm_cffi.examples.pairwise:pairwise"])
def test_builtins_and_examples_pass_the_steady_state(name: str) -> None:
    topo = Topology.from_shape(2, 2)
    alg = resolve(name)
    checked = 0
    for coll in COLLECTIVES:
        if alg.unsupported(coll, DataType.FP32, None, topo):
            continue
        for count in (40, 100_000):                   # one piece, and many pieces of a small buffer
            dry_run(alg, topo, CollectiveCall(coll, 0, 0, count, DataType.FP32, root=1), 1 << 16, declared=False)
        checked += 1
    assert checked >= 1


def test_neighbor_exchange_example_passes_the_steady_state() -> None:
    alg = resolve("hcomm_cffi.examples.pairwise:neighbor_exchange")
    for n in (2, 3, 4):
        for count in (1, 1000):
            call = CollectiveCall("neighbor_exchange", 0, 0, count, DataType.INT32, recv_count=2 * count)
            dry_run(alg, Topology.single_server(n), call, 1 << 16, declared=False)
