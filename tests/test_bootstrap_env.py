"""Launcher detection from the environment (hcomm_cffi.bootstrap.env): order, values, errors."""
from __future__ import annotations

import json

import pytest

from hcomm_cffi.bootstrap.env import EnvError, connect_timeout, detect, safe_job_id

HCOMM_RUN = {"HCOMM_RUN_ID": "abc", "HCOMM_RUN_JOB_DIR": "/tmp/x", "RANK": "2", "WORLD_SIZE": "4",
             "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "4"}
TORCHRUN = {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4", "MASTER_ADDR": "10.0.0.1",
            "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "run-7"}
OMPI = {"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "6", "OMPI_COMM_WORLD_LOCAL_RANK": "0",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "3", "PMIX_NAMESPACE": "12345"}
MPICH = {"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"}


def test_plain_process_has_no_launcher():
    assert detect({}) is None
    assert detect({"RANK": "0"}) is None  # RANK alone is not a launcher


def test_hcomm_run():
    env = detect(HCOMM_RUN)
    assert (env.source, env.rank, env.size, env.local_rank, env.local_size) == ("hcomm-run", 2, 4, 2, 4)
    assert env.job_id == "abc" and env.job_dir == "/tmp/x" and env.ranktable is None


def test_hcomm_run_wins_over_torchrun_and_mpi():
    env = detect({**TORCHRUN, **OMPI, **HCOMM_RUN})
    assert env.source == "hcomm-run" and env.rank == 2


def test_torchrun_values_and_job_id():
    env = detect(TORCHRUN)
    assert (env.source, env.rank, env.size, env.local_rank, env.local_size) == ("torchrun", 5, 8, 1, 4)
    assert (env.master_addr, env.master_port) == ("10.0.0.1", 29500)
    assert env.job_id == "torchrun-run-7"


def test_torchrun_default_run_id_uses_master_address():
    env = detect({**TORCHRUN, "TORCHELASTIC_RUN_ID": "none"})
    assert env.job_id == "torchrun-10.0.0.1-29500"


def test_manual_env_setup_counts_as_torchrun():
    env = detect({"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1234"})
    assert env.source == "torchrun" and (env.local_rank, env.local_size) == (1, 2)


def test_hcomm_job_id_overrides_launcher_id():
    assert detect({**TORCHRUN, "HCOMM_JOB_ID": "my job/1"}).job_id == "my-job-1"
    assert detect({**OMPI, "HCOMM_JOB_ID": "j"}).job_id == "j"


def test_open_mpi():
    env = detect(OMPI)
    assert (env.source, env.rank, env.size, env.local_rank, env.local_size) == ("mpirun", 3, 6, 0, 3)
    assert env.job_id == "mpi-12345"


def test_mpich_hydra():
    env = detect(MPICH)
    assert (env.source, env.rank, env.size, env.local_rank, env.local_size) == ("mpirun", 1, 2, 1, 2)
    assert env.job_id == ""  # unknown: the file rendezvous then asks for HCOMM_JOB_ID


def test_torchrun_wins_over_mpi():
    assert detect({**OMPI, **TORCHRUN}).source == "torchrun"


@pytest.mark.parametrize("env, names", [
    ({**TORCHRUN, "RANK": "x"}, ["RANK", "'x'", "integer"]),
    ({**TORCHRUN, "RANK": "8"}, ["RANK=8", "WORLD_SIZE=8"]),
    ({**TORCHRUN, "WORLD_SIZE": "0"}, ["WORLD_SIZE", "out of range", ">= 1"]),
    ({**TORCHRUN, "MASTER_PORT": "70000"}, ["MASTER_PORT", "65535"]),
    ({**OMPI, "OMPI_COMM_WORLD_SIZE": ""}, ["OMPI_COMM_WORLD_SIZE", "not set"]),
    ({**HCOMM_RUN, "LOCAL_RANK": "-1"}, ["LOCAL_RANK", "-1"]),
])
def test_bad_values_name_the_variable(env, names):
    with pytest.raises(EnvError) as info:
        detect(env)
    for name in names:
        assert name in str(info.value)


def _ranktable(tmp_path, ranks_per_server=(2, 2)):
    servers, rank = [], 0
    for s, count in enumerate(ranks_per_server):
        devices = []
        for d in range(count):
            devices.append({"device_id": str(d), "device_ip": f"10.0.{s}.{d}", "rank_id": str(rank)})
            rank += 1
        servers.append({"server_id": f"srv{s}", "device": devices})
    table = {"status": "completed", "version": "1.0", "server_count": str(len(servers)), "server_list": servers}
    path = tmp_path / "rt.json"
    path.write_text(json.dumps(table))
    return str(path)


def test_ranktable_alone(tmp_path):
    path = _ranktable(tmp_path)
    env = detect({"RANK_TABLE_FILE": path, "RANK_ID": "3"})
    assert (env.source, env.rank, env.size, env.local_rank, env.local_size) == ("ranktable", 3, 4, 1, 2)
    assert env.ranktable == path


def test_ranktable_rank_must_be_known_and_listed(tmp_path):
    path = _ranktable(tmp_path)
    with pytest.raises(EnvError, match="RANK_ID nor RANK"):
        detect({"RANK_TABLE_FILE": path})
    with pytest.raises(EnvError, match="RANK_ID=4"):
        detect({"RANK_TABLE_FILE": path, "RANK_ID": "4"})


def test_ranktable_under_a_launcher_keeps_the_launcher(tmp_path):
    path = _ranktable(tmp_path)
    env = detect({**HCOMM_RUN, "RANK_TABLE_FILE": path})
    assert env.source == "hcomm-run" and env.ranktable == path


def test_connect_timeout():
    assert connect_timeout({}) == 120.0
    assert connect_timeout({"HCCL_CONNECT_TIMEOUT": "2.5"}) == 2.5
    with pytest.raises(EnvError, match="HCCL_CONNECT_TIMEOUT='soon'"):
        connect_timeout({"HCCL_CONNECT_TIMEOUT": "soon"})
    with pytest.raises(EnvError, match="> 0"):
        connect_timeout({"HCCL_CONNECT_TIMEOUT": "0"})


def test_safe_job_id():
    assert safe_job_id("a b/c..d") == "a-b-c..d"
    assert safe_job_id("///") == "job"
    assert len(safe_job_id("x" * 500)) == 96
