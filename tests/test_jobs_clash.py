"""Two jobs started at the same time never join each other's communicators (issue 25 item 1).

Each run starts two 2-rank jobs at once that share everything that could name a job: the same ranktable
(RANK_TABLE_FILE + RANK_ID, no launcher) with the same or no HCOMM_JOB_ID, or the same HCOMM_RUN_JOB_DIR
with no, the same or different HCOMM_JOB_SECRETs, or the same MASTER_ADDR:MASTER_PORT.  Job A reduces 1s,
job B 100s, so a mixed communicator gives a wrong sum (the worker asserts every one).  Every rank must either get its own job's sums or fail; a wrong sum without an error is
a silent corruption and fails the test.  Runs per scenario: HCOMM_TEST_CLASH_RUNS (default 6).
"""
from __future__ import annotations

import collections
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Dict, List, Tuple

import pytest

from test_jobs_isolation import RANKTABLE_WORKER as WORKER, _ranktable
from test_launch_helpers import private_shm_dir
from test_reliability_secret import _two_free_ports

pytestmark = pytest.mark.slow

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNS = int(os.environ.get("HCOMM_TEST_CLASH_RUNS", "6"))


def _base_env(shm: str, tmp: str) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HCOMM_", "OMPI_", "PMI_", "SLURM_", "TORCHELASTIC_", "RANK", "MASTER_"))
           and k not in ("WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")}
    env.update({"HCOMM_BACKEND": "sim", "HCOMM_SIM_SHM_DIR": shm, "HCCL_CONNECT_TIMEOUT": "20",
                "HCCL_EXEC_TIMEOUT": "20", "HCCL_BUFFSIZE": "8", "PYTHONPATH": REPO, "TMPDIR": tmp})
    return env


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


def _one_run(scenario: str, tmp: str) -> List[Tuple[int, int, int, str, str]]:
    """Both jobs at once; (job, rank, exit code, last line, output) per process."""
    shm = private_shm_dir()
    table, worker, job_dir = os.path.join(tmp, "rt.json"), os.path.join(tmp, "worker.py"), os.path.join(tmp, "job")
    os.makedirs(job_dir, mode=0o700, exist_ok=True)
    _ranktable(table)
    with open(worker, "w") as fh:
        fh.write(WORKER)
    base = _base_env(shm, tmp)
    port = _two_free_ports()
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
            out.append((job, rank, p.returncode, lines[-1] if lines else "", text))
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
            for job, rank, code, last, text in _one_run(scenario, tmp):
                expect = f"rank {rank} sum {3.0 if job == 0 else 300.0}"
                if code == 0:
                    if last != expect:
                        wrong.append((run, job, rank, last))
                    outcomes["own data"] += 1
                elif "AssertionError" in text:        # the worker's check of every allreduce
                    wrong.append((run, job, rank, last))
                else:
                    outcomes["clash" if "two jobs share" in last or "another job" in last else f"failed: {last[:150]}"] += 1
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"{scenario}: {RUNS} runs, {dict(outcomes)}")
    assert wrong == [], f"silent corruption in {scenario}: {wrong}"
    if scenario == "jobdir-own-secrets":     # different secrets: never in each other's way
        assert outcomes["own data"] == 4 * RUNS, dict(outcomes)
