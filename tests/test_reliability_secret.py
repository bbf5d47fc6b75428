"""Ranktable jobs under torchrun-like launchers exchange a random job secret: same ranktable and job id, own data."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from typing import Dict, List

from test_jobs_isolation import RANKTABLE_WORKER, _ranktable

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _two_free_ports() -> int:
    """A port p with p and p + 1 free (torchrun's store, and this package's TCP store on MASTER_PORT+1)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port >= 65535:
            continue
        with socket.socket() as s2:
            try:
                s2.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise RuntimeError("no two consecutive free ports")


def _torchrun_env(rank: int, port: int, table: str, shm: str) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HCOMM_", "OMPI_", "PMI_", "SLURM_"))}
    env.update({"RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": "2",
                "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "TORCHELASTIC_RUN_ID": "same",
                "HCOMM_JOB_ID": "same", "RANK_TABLE_FILE": table, "HCOMM_SIM_SHM_DIR": shm,
                "HCOMM_BACKEND": "sim", "HCCL_CONNECT_TIMEOUT": "60", "PYTHONPATH": REPO})
    return env


def test_two_torchrun_jobs_with_the_same_ranktable_and_job_id_keep_their_own_data(tmp_path, shm):
    table, worker = str(tmp_path / "rt.json"), str(tmp_path / "worker.py")
    _ranktable(table)
    with open(worker, "w") as fh:
        fh.write(RANKTABLE_WORKER + "print('secret', len(os.environ['HCOMM_JOB_SECRET']), flush=True)\n")
    procs: List[subprocess.Popen] = []
    try:
        for scale in ("1", "100"):
            port = _two_free_ports()
            for rank in range(2):
                procs.append(subprocess.Popen([sys.executable, worker, scale], env=_torchrun_env(rank, port, table, shm),
                                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
    for i, (p, (out, err)) in enumerate(zip(procs, outs)):
        total = 3.0 if i < 2 else 300.0
        assert p.returncode == 0, err
        assert f"rank {i % 2} sum {total}" in out and "secret 32" in out, (out, err)

