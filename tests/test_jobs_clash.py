"""Two jobs started at the same time never join each other's communicators (issue 25 item 1).

Each run starts two 2-rank jobs at once that share everything that could name a job: the same ranktable
(RANK_TABLE_FILE + RANK_ID, no launcher) with the same or no HCOMM_JOB_ID, or the same HCOMM_RUN_JOB_DIR
with no, the same or different HCOMM_JOB_SECRETs.  Job A reduces 1s, job B 100s, so a mixed communicator
gives a wrong sum.  Every rank must either get its own job's sums or fail; a wrong sum without an error is
a silent corruption and fails the test.  Runs per scenario: HCOMM_TEST_CLASH_RUNS (default 6).
"""
from __future__ import annotations

import collections
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from typing import Dict, List, Tuple

import pytest

from test_launch_helpers import private_shm_dir

pytestmark = pytest.mark.slow

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNS = int(os.environ.get("HCOMM_TEST_CLASH_RUNS", "6"))

WORKER = r'''
import os, sys
import numpy as np
from hcomm_cffi._ffi import ffi
from hcomm_cffi.binding import get_binding
from hcomm_cffi.bootstrap import discover
from hcomm_cffi.enums import DataType, ReduceOp
scale = float(sys.argv[1])
b = get_binding()
b.acl_init()
b.set_device(int(os.environ.get("RANK_ID", os.environ.get("RANK", "0"))))
try:
    spec = discover(b)
    if spec.ranktable is not None:
        comm = b.comm_init_cluster_info(spec.ranktable, spec.rank)
    else:
        comm = b.comm_init_root_info(spec.size, spec.root_info, spec.rank)
except Exception as exc:
    print(f"FAILED {type(exc).__name__}: {exc}", flush=True)
    sys.exit(2)
stream = b.create_stream()
try:
    for i in range(20):
        x = np.full(256, scale * (spec.rank + 1), np.float32)
        y = np.zeros_like(x)
        b.all_reduce(ffi.cast("char *", ffi.from_buffer(x)), ffi.cast("char *", ffi.from_buffer(y)), x.size,
                     DataType.FP32, ReduceOp.SUM, comm, stream)
        b.synchronize_stream(stream)
        if not np.all(y == 3 * scale):
            print(f"WRONG step {i}: {float(y[0])} instead of {3 * scale}", flush=True)
            sys.exit(3)
except Exception as exc:
    print(f"FAILED {type(exc).__name__}: {exc}", flush=True)
    sys.exit(2)
print(f"OK {float(y[0])}", flush=True)
b.destroy_stream(stream)
b.comm_destroy(comm)
'''


def _ranktable(path: str) -> None:
    devices = [{"device_id": str(r), "device_ip": f"192.168.1.{r}", "rank_id": str(r)} for r in range(2)]
    with open(path, "w") as fh:
        json.dump({"version": "1.0", "server_count": "1", "status": "completed",
                   "server_list": [{"server_id": "10.0.0.1", "device": devices}]}, fh)


def _base_env(shm: str, tmp: str) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HCOMM_", "OMPI_", "PMI_", "SLURM_", "TORCHELASTIC_", "RANK", "MASTER_"))
           and k not in ("WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")}
    env.update({"HCOMM_BACKEND": "sim", "HCOMM_SIM_SHM_DIR": shm, "HCCL_CONNECT_TIMEOUT": "20",
                "HCCL_EXEC_TIMEOUT": "20", "HCCL_BUFFSIZE": "8", "PYTHONPATH": REPO, "TMPDIR": tmp})
    return env


def _free_port() -> int:
    """A port p with p + 1 free too (the TCP store serves on MASTER_PORT + 1)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        with socket.socket() as s2:
            try:
                s2.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise RuntimeError("no two consecutive free ports")


def _job_env(scenario: str, job: int, rank: int, table: str, job_dir: str, port: int) -> Dict[str, str]:
    if scenario == "tcp-same-master":     # torchrun's env:// by hand, no torch: this package's TCP store
        return {"RANK": str(rank), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    if scenario.startswith("ranktable"):
        env = {"RANK_TABLE_FILE": table, "RANK_ID": str(rank)}
        if scenario == "ranktable-same-job-id":
            env["HCOMM_JOB_ID"] = "same"
        return env
    env = {"HCOMM_RUN_ID": "same", "HCOMM_RUN_JOB_DIR": job_dir, "RANK": str(rank), "WORLD_SIZE": "2",
           "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": "2"}
    if scenario == "jobdir-same-secret":
        env["HCOMM_JOB_SECRET"] = "s" * 32
    elif scenario == "jobdir-own-secrets":
        env["HCOMM_JOB_SECRET"] = f"{job}" * 32
    return env


def _one_run(scenario: str, tmp: str) -> List[Tuple[int, int, int, str]]:
    """Both jobs at once; (job, rank, exit code, last line) per process."""
    shm = private_shm_dir()
    table, worker, job_dir = os.path.join(tmp, "rt.json"), os.path.join(tmp, "worker.py"), os.path.join(tmp, "job")
    os.makedirs(job_dir, mode=0o700, exist_ok=True)
    _ranktable(table)
    with open(worker, "w") as fh:
        fh.write(WORKER)
    base = _base_env(shm, tmp)
    port = _free_port()
    procs = []
    try:
        for rank in (0, 1):     # interleaved: both jobs' ranks start together
            for job, scale in ((0, "1"), (1, "100")):
                procs.append((job, rank, subprocess.Popen(
                    [sys.executable, worker, scale], env={**base, **_job_env(scenario, job, rank, table, job_dir, port)},
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)))
        out = []
        for job, rank, p in procs:
            text, _ = p.communicate(timeout=150)
            lines = [ln for ln in text.splitlines() if ln.strip()]
            out.append((job, rank, p.returncode, lines[-1] if lines else ""))
        return out
    finally:
        for _, _, p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
        left = os.listdir(shm)
        shutil.rmtree(shm, ignore_errors=True)
        assert left == [], f"segments left behind: {left}"


@pytest.mark.parametrize("scenario", ["ranktable-no-job-id", "ranktable-same-job-id", "jobdir-no-secret",
                                      "jobdir-same-secret", "jobdir-own-secrets", "tcp-same-master"])
def test_concurrent_jobs_sharing_a_rendezvous_never_mix(scenario: str) -> None:
    outcomes: collections.Counter = collections.Counter()
    wrong = []
    for run in range(RUNS):
        tmp = tempfile.mkdtemp(prefix="hcomm-clash-")
        try:
            for job, rank, code, last in _one_run(scenario, tmp):
                expect = "OK 3.0" if job == 0 else "OK 300.0"
                if code == 0:
                    if last != expect:
                        wrong.append((run, job, rank, last))
                    outcomes["own data"] += 1
                elif last.startswith("WRONG") or code == 3:
                    wrong.append((run, job, rank, last))
                else:
                    outcomes["clash" if "two jobs share" in last or "another job" in last else f"failed: {last[:150]}"] += 1
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"{scenario}: {RUNS} runs, {dict(outcomes)}")
    assert wrong == [], f"silent corruption in {scenario}: {wrong}"
    if scenario == "jobdir-own-secrets":     # different secrets: never in each other's way
        assert outcomes["own data"] == 4 * RUNS, dict(outcomes)
