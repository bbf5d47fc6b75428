"""A rank that dies: its DDP peer raises naming it (no SIGSEGV), and no way of ending a rank leaves /dev/shm segments.

DDP's reducer reads each bucket's Future in C++; a failure handed over with Python's
``Future.set_exception`` is a *value* there, and the survivor died of SIGSEGV (13 of 14 runs) leaving
8 segments.  Run under plain env:// and under torchrun, in a private HCOMM_SIM_SHM_DIR that must end empty.
"""
from __future__ import annotations

import importlib.util
import multiprocessing as mp
import os
import re
import socket
import sys
import time

import pytest
from test_launch_helpers import start

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")]

DDP_DIES = r'''
import os, signal, sys, time
import torch
import torch.distributed as dist
import hcomm_cffi.torch  # noqa: F401
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group(backend="hcomm")
rank = dist.get_rank()
torch.set_num_threads(1)
torch.manual_seed(0)
ddp = DDP(torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1)), bucket_cap_mb=0.01)
x = torch.randn(8, 64)
for step in range(200):
    if rank == 1 and step == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    start = time.monotonic()
    try:
        ddp(x).pow(2).mean().backward()
    except Exception as exc:
        print(f"RAISED after {time.monotonic() - start:.2f} s at step {step}: {type(exc).__name__}: {exc}", flush=True)
        sys.exit(7)
print("NO ERROR", flush=True)
'''


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _raised(out: str, err: str) -> float:
    """The survivor's report: it raised naming the dead rank 1; the seconds it took."""
    m = re.search(r"RAISED after ([0-9.]+) s at step (\d+): (\w+): (.*)", out)
    assert m, out + err
    assert "rank 1" in m.group(4) and "gone" in m.group(4), m.group(4)
    return float(m.group(1))


def test_ddp_survivor_raises_naming_the_dead_rank_under_plain_env(shm: str, tmp_path) -> None:
    script = tmp_path / "ddp_dies.py"
    script.write_text(DDP_DIES)
    env = {"HCOMM_SIM_SHM_DIR": shm, "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(_port()), "WORLD_SIZE": "2"}
    procs = [start([sys.executable, str(script)], {**env, "RANK": str(r), "LOCAL_RANK": str(r)}) for r in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert procs[1].returncode == -9, outs[1]
    assert procs[0].returncode == 7, (procs[0].returncode, outs[0])   # -11 (SIGSEGV) before the fix
    assert _raised(*outs[0]) < 10.0


@pytest.mark.parametrize("monitor", ["6", "0.1"])
def test_ddp_survivor_under_torchrun(monitor: str, shm: str, tmp_path) -> None:
    """With the agent slow to notice (it looks every 6 s from the workers' start; with 3 s its first look came right
    after rank 1's death once, before the survivor's 0.1 s liveness check), the survivor raises first; with its default it may SIGTERM the
    survivor first, which then still leaves nothing behind."""
    script = tmp_path / "ddp_dies.py"
    script.write_text(DDP_DIES)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "--monitor-interval", monitor, str(script)]
    p = start(cmd, {"HCOMM_SIM_SHM_DIR": shm, "OMP_NUM_THREADS": "1"})
    out, err = p.communicate(timeout=180)
    assert p.returncode != 0 and "SIGSEGV" not in err and "exitcode  : -11" not in err, err
    if monitor == "6":
        assert _raised(out, err) < 10.0
    else:
        assert "RAISED" in out or "(SIGTERM)" in err, out + err


def _mp_rank(rank: int, n: int, root: bytes, how: str) -> None:
    import numpy as np
    from hcomm_cffi.api import world
    comm = world.init(rank=rank, world_size=n, root_info=root)
    x = np.ones(4, np.float32)
    comm.allreduce(x)
    assert x.tolist() == [2.0] * 4
    if how == "raise":
        raise RuntimeError("the rank fails without finalize()")
    if how == "exit":
        sys.exit(3)


@pytest.mark.parametrize("method", ["fork", "forkserver"])
def test_multiprocessing_ranks_that_never_finalize_leave_nothing(method: str, shm: str, monkeypatch) -> None:
    from multiproc import make_root_info
    monkeypatch.setenv("HCOMM_SIM_SHM_DIR", shm)
    ctx = mp.get_context(method)
    for how, code in (("return", 0), ("raise", 1), ("exit", 3)):
        root = make_root_info()
        procs = [ctx.Process(target=_mp_rank, args=(r, 2, root, how)) for r in range(2)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
        assert [p.exitcode for p in procs] == [code, code], how
        assert os.listdir(shm) == [], (method, how, os.listdir(shm))


SIGTERMED = r'''
import os, signal, sys, time
import numpy as np
from hcomm_cffi.api import world
comm = world.init()
x = np.ones(4, np.float32)
comm.allreduce(x)
print("ready", flush=True)
time.sleep(60)
'''


def test_sigterm_leaves_nothing_and_still_ends_the_rank_by_sigterm(shm: str, tmp_path) -> None:
    """What torchrun and ``hcomm run`` do to the survivors of a failed rank."""
    from test_launch_helpers import launcher  # noqa: F401  (same environment rules as the launcher tests)
    script = tmp_path / "sigtermed.py"
    script.write_text(SIGTERMED)
    env = {"HCOMM_SIM_SHM_DIR": shm, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_port()), "WORLD_SIZE": "2"}
    procs = [start([sys.executable, str(script)], {**env, "RANK": str(r), "LOCAL_RANK": str(r)}) for r in range(2)]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    # the segments' names are unlinked once every rank mapped everyone (the memory goes with the last process
    # that maps it): that the ranks hold segments of this directory shows in their mappings instead
    for p in procs:
        with open(f"/proc/{p.pid}/maps") as maps:
            assert any(shm + "/" in line for line in maps), f"rank pid {p.pid} maps no segment of {shm}"
    for p in procs:
        p.terminate()
    for p in procs:
        p.communicate(timeout=30)
    assert [p.returncode for p in procs] == [-15, -15]
    end = time.monotonic() + 5
    while os.listdir(shm) and time.monotonic() < end:
        time.sleep(0.05)
    assert os.listdir(shm) == []
