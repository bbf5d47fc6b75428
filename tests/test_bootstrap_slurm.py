"""Slurm's srun in the bootstrap: SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID / SLURM_TASKS_PER_NODE."""
from __future__ import annotations

import pytest

from hcomm_cffi.bootstrap import EnvError, detect


def test_slurm_is_detected_with_local_size_from_tasks_per_node() -> None:
    env = {"SLURM_PROCID": "5", "SLURM_NTASKS": "7", "SLURM_LOCALID": "1", "SLURM_NODEID": "3",
           "SLURM_TASKS_PER_NODE": "2(x2),1,2", "SLURM_JOB_ID": "991", "SLURM_STEP_ID": "0"}
    got = detect(env)
    assert got is not None and (got.source, got.rank, got.size, got.local_rank, got.local_size, got.job_id) == \
        ("slurm", 5, 7, 1, 2, "slurm-991.0")
    assert detect({**env, "SLURM_NODEID": "2"}).local_size == 1
    assert detect({"SLURM_PROCID": "0", "SLURM_NTASKS": "2"}).local_size == 2   # nothing about nodes: one node


def test_mpirun_and_torchrun_win_over_slurm() -> None:
    slurm = {"SLURM_PROCID": "1", "SLURM_NTASKS": "2"}
    assert detect({**slurm, "PMI_RANK": "1", "PMI_SIZE": "2"}).source == "mpirun"
    assert detect({**slurm, "RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "29500"}).source \
        == "torchrun"


@pytest.mark.parametrize("env, text", [
    ({"SLURM_PROCID": "2", "SLURM_NTASKS": "2"}, r"SLURM_PROCID=2 .*SLURM_NTASKS=2"),
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_TASKS_PER_NODE": "two"}, r"SLURM_TASKS_PER_NODE='two'"),
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_TASKS_PER_NODE": "2", "SLURM_NODEID": "1"},
     r"SLURM_NODEID=1 but SLURM_TASKS_PER_NODE='2' lists 1 nodes"),
])
def test_bad_slurm_variables_are_named(env: dict, text: str) -> None:
    with pytest.raises(EnvError, match=text):
        detect(env)
