"""The allreduce example under mpirun + mpi4py, and the file rendezvous keyed by the MPI job id."""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys

import pytest
from test_launch_helpers import check_example_output, run_job

MPIRUN = shutil.which("mpirun")
pytestmark = [
    pytest.mark.skipif(MPIRUN is None, reason="mpirun is not installed (apt-get install openmpi-bin libopenmpi-dev)"),
    pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None, reason="mpi4py is not installed (pip install mpi4py)"),
]

MISSING = r'''
import os, sys, time
from mpi4py import MPI
from hcomm_cffi.binding import get_binding
from hcomm_cffi.bootstrap import RendezvousTimeout, discover
if MPI.COMM_WORLD.Get_rank() == 3:
    time.sleep(4)          # never calls init
    sys.exit(0)
try:
    get_binding().set_device(0)         # before the root info, as CANN requires
    discover(get_binding())
    print("no error", flush=True)
except RendezvousTimeout as exc:
    sys.stdout.write(f"caught on {MPI.COMM_WORLD.Get_rank()}: {exc}\n")
    sys.stdout.flush()
'''


def _mpirun(n: int):
    cmd = [MPIRUN, "-n", str(n)]
    version = subprocess.run([MPIRUN, "--version"], capture_output=True, text=True).stdout
    if "Open MPI" in version or "OpenRTE" in version:
        cmd += ["--oversubscribe"] + (["--allow-run-as-root"] if os.geteuid() == 0 else [])
    return cmd


def _run(cmd, env):
    return run_job(cmd, env)


def _check(out: str, n: int) -> None:
    check_example_output(out, n, "mpirun")


@pytest.mark.parametrize("channel", ["mpi", "file"])
def test_mpirun_example(shm, tmp_path, channel):
    env = {"HCOMM_SIM_SHM_DIR": shm, "HCOMM_RENDEZVOUS": channel, "HCOMM_RENDEZVOUS_DIR": str(tmp_path)}
    rc, out, err = _run([*_mpirun(4), sys.executable, "-m", "hcomm_cffi.examples.allreduce"], env)
    assert rc == 0, err
    _check(out, 4)
    # the file rendezvous removes its directory; this user's private parent of rendezvous directories stays, empty
    private = f"hcomm-{os.getuid()}-private-"
    left = [p.name for p in tmp_path.iterdir() if p.name.startswith(f"hcomm-{os.getuid()}") and not p.name.startswith(private)]
    assert left == []
    assert [list(p.iterdir()) for p in tmp_path.iterdir() if p.name.startswith(private)] in ([], [[]])


def test_mpirun_missing_rank_is_named(shm, tmp_path):
    script = tmp_path / "missing.py"
    script.write_text(MISSING)
    env = {"HCOMM_SIM_SHM_DIR": shm, "HCCL_CONNECT_TIMEOUT": "1.5"}
    rc, out, err = _run([*_mpirun(4), sys.executable, str(script)], env)
    assert rc == 0, err
    for r in range(3):
        assert re.search(rf"caught on {r}: .*rank\(s\) 3 of 4 did not arrive within 1.5 s", out), out
