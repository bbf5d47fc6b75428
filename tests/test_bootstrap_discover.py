"""discover(): argument handling, WorldSpec, and the channel chosen per launcher (one process per rank)."""
from __future__ import annotations

import json
import os
import socket
import sys
import types

import pytest
from multiproc import run_ranks

import hcomm_cffi.bootstrap as bootstrap
from hcomm_cffi.bootstrap import BootstrapError, EnvError, RendezvousTimeout, WorldSpec, discover, release_claims

LAUNCHER_VARS = ("HCOMM_RUN_ID", "HCOMM_RUN_JOB_DIR", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                 "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID", "OMPI_COMM_WORLD_RANK", "PMI_RANK",
                 "RANK_TABLE_FILE", "RANK_ID", "HCOMM_JOB_ID", "HCOMM_RENDEZVOUS", "HCOMM_RENDEZVOUS_DIR",
                 "HCOMM_MASTER_ADDR", "HCOMM_MASTER_PORT")


class FakeBinding:
    """Counts get_root_info calls; the blob names the process that made it."""

    def __init__(self) -> None:
        self.calls = 0

    def get_root_info(self) -> bytes:
        self.calls += 1
        return f"root of pid {os.getpid()}".encode().ljust(4108, b"\0")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in LAUNCHER_VARS:
        monkeypatch.setenv(name, "")  # records the original, so variables discover() sets are undone too
        monkeypatch.delenv(name)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_plain_process_is_a_one_rank_world():
    binding = FakeBinding()
    spec = discover(binding)
    assert (spec.rank, spec.size, spec.local_rank, spec.local_size, spec.source) == (0, 1, 0, 1, "explicit")
    assert spec.root_info.startswith(b"root of pid") and spec.ranktable is None and binding.calls == 1
    assert "root_info" not in repr(spec)  # 4 KiB of bytes stay out of reprs


def test_explicit_root_info_needs_no_exchange():
    blob = b"x" * 4108
    binding = FakeBinding()
    spec = discover(binding, rank=3, world_size=4, root_info=blob)
    assert (spec.rank, spec.size, spec.source, spec.root_info) == (3, 4, "explicit", blob)
    assert spec.job_id.startswith("rootinfo-") and binding.calls == 0
    assert discover(binding, rank=0, world_size=4, root_info=blob).job_id == spec.job_id  # same on every rank


@pytest.mark.parametrize("kwargs, message", [
    (dict(rank=-1, world_size=2), "rank=-1; expected an int >= 0"),
    (dict(rank=2, world_size=2), "rank=2 is not below world_size=2"),
    (dict(rank=0, world_size=0), "world_size=0; expected an int >= 1"),
    (dict(rank=True, world_size=2), "rank=True"),
    (dict(rank=1), "pass both rank and world_size"),
    (dict(rank=0, world_size=2, root_info=b"abc"), "root_info is 3 bytes; expected 4108"),
    (dict(timeout=0), "timeout=0; expected a number of seconds > 0"),
])
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        discover(FakeBinding(), **kwargs)


def test_explicit_without_any_channel_says_what_to_set():
    with pytest.raises(BootstrapError, match="HCOMM_JOB_ID.*HCOMM_MASTER_ADDR"):
        discover(FakeBinding(), rank=1, world_size=2, timeout=1)


def test_bad_connect_timeout_and_channel_variables(monkeypatch):
    monkeypatch.setenv("HCCL_CONNECT_TIMEOUT", "soon")
    with pytest.raises(EnvError, match="HCCL_CONNECT_TIMEOUT='soon'"):
        discover(FakeBinding(), rank=0, world_size=2)
    monkeypatch.setenv("HCCL_CONNECT_TIMEOUT", "5")
    monkeypatch.setenv("HCOMM_RENDEZVOUS", "carrier-pigeon")
    monkeypatch.setenv("HCOMM_JOB_ID", "j")
    with pytest.raises(EnvError, match="HCOMM_RENDEZVOUS='carrier-pigeon' is not a rendezvous channel; expected one of file, tcp, torch, mpi"):
        discover(FakeBinding(), rank=0, world_size=2)


def test_worldspec_validation():
    blob = b"\0" * 4108
    with pytest.raises(ValueError, match="rank=4 size=4"):
        WorldSpec(4, 4, 0, 1, blob, None, "explicit", "j")
    with pytest.raises(ValueError, match="local_rank=2 local_size=2"):
        WorldSpec(0, 4, 2, 2, blob, None, "explicit", "j")
    with pytest.raises(ValueError, match="exactly one of root_info and ranktable"):
        WorldSpec(0, 4, 0, 1, blob, "/rt.json", "explicit", "j")
    with pytest.raises(ValueError, match="source='pbs'"):      # slurm is a known source since Slurm support
        WorldSpec(0, 4, 0, 1, blob, None, "pbs", "j")


def test_channel_choice(monkeypatch):
    choose = bootstrap._choose_channel
    assert choose("hcomm-run") == "file"
    assert choose("torchrun") == "tcp"  # torch.distributed not initialised (and never imported for this)
    fake_dist = types.SimpleNamespace(is_available=lambda: True, is_initialized=lambda: True)
    monkeypatch.setitem(sys.modules, "torch.distributed", fake_dist)
    assert choose("torchrun") == "torch"
    monkeypatch.setattr(bootstrap.importlib.util, "find_spec", lambda name: object())
    assert choose("mpirun") == "mpi"
    monkeypatch.setattr(bootstrap.importlib.util, "find_spec", lambda name: None)
    assert choose("mpirun") == "file"
    assert choose("explicit") == "file"
    monkeypatch.setenv("HCOMM_MASTER_ADDR", "127.0.0.1")
    assert choose("explicit") == "tcp"
    monkeypatch.setenv("HCOMM_RENDEZVOUS", "MPI")
    assert choose("hcomm-run") == "mpi"


def test_file_rendezvous_refuses_several_hosts_without_a_shared_dir(monkeypatch):
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "1")
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "4")
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2")
    monkeypatch.setenv("HCOMM_JOB_ID", "multi")
    monkeypatch.setenv("HCOMM_RENDEZVOUS", "file")
    with pytest.raises(BootstrapError, match="span several hosts.*HCOMM_RENDEZVOUS_DIR"):
        discover(FakeBinding(), timeout=1)


def test_ranktable_needs_no_exchange(tmp_path, monkeypatch):
    table = {"status": "completed", "version": "1.0", "server_count": "1", "server_list": [
        {"server_id": "s", "device": [{"device_id": str(d), "rank_id": str(d)} for d in range(2)]}]}
    path = tmp_path / "rt.json"
    path.write_text(json.dumps(table))
    monkeypatch.setenv("RANK_TABLE_FILE", str(path))
    monkeypatch.setenv("RANK_ID", "1")
    binding = FakeBinding()
    spec = discover(binding)
    assert (spec.rank, spec.size, spec.local_rank, spec.source) == (1, 2, 1, "ranktable")
    assert spec.ranktable == str(path) and spec.root_info is None and binding.calls == 0
    assert os.environ["HCOMM_JOB_ID"] == spec.job_id  # the emulator mixes it into ranktable comm ids


@pytest.mark.parametrize("emulator", [False, True])
def test_ranktable_job_secret_is_exchanged_only_for_the_emulator(tmp_path, monkeypatch, emulator):
    """The backend contract decides: CANN never reads a job secret; the emulator's ranks exchange one (here rank 0
    never comes, so rank 1 times out naming it)."""
    from dataclasses import replace

    from hcomm_cffi.lib.contract import CANN

    table = {"status": "completed", "version": "1.0", "server_count": "1", "server_list": [
        {"server_id": "s", "device": [{"device_id": str(d), "rank_id": str(d)} for d in range(2)]}]}
    (tmp_path / "rt.json").write_text(json.dumps(table))
    monkeypatch.setenv("RANK_TABLE_FILE", str(tmp_path / "rt.json"))
    monkeypatch.setenv("RANK_ID", "1")
    monkeypatch.setenv("HCOMM_RENDEZVOUS_DIR", str(tmp_path))
    monkeypatch.delenv("HCOMM_JOB_SECRET", raising=False)
    binding = FakeBinding()
    binding.lib = types.SimpleNamespace(capabilities=replace(CANN, emulator=emulator))
    if emulator:
        with pytest.raises(RendezvousTimeout, match=r"rank\(s\) 0 of 2 did not arrive"):
            discover(binding, timeout=1)
        release_claims()
    else:
        assert discover(binding).ranktable == str(tmp_path / "rt.json") and "HCOMM_JOB_SECRET" not in os.environ
    assert binding.calls == 0


# ---------------------------------------------------------------------------------------------- one process per rank
def _discover_as(rank: int, n: int, _root: bytes, env: dict, timeout: float = 10):
    os.environ.update({k: v.format(rank=rank) for k, v in env.items()})
    binding = FakeBinding()
    spec = discover(binding, timeout=timeout)
    again = discover(binding, timeout=timeout)  # a second bootstrap in the same job uses fresh keys
    release_claims()                            # what exit (or hcomm.finalize) does; forked ranks skip atexit
    return spec.rank, spec.size, spec.local_rank, spec.source, spec.job_id, spec.root_info, again.root_info, binding.calls


def _check_world(results, n, source):
    blobs = {r[5] for r in results}
    assert len(blobs) == 1 and next(iter(blobs)).startswith(b"root of pid")
    assert [r[:4] for r in results] == [(k, n, k, source) for k in range(n)]
    assert len({r[4] for r in results}) == 1  # one job id
    assert [r[7] for r in results] == [2] + [0] * (n - 1)  # only rank 0 made root infos


def test_hcomm_run_env_uses_the_job_dir(tmp_path):
    env = {"HCOMM_RUN_ID": "t1", "HCOMM_RUN_JOB_DIR": str(tmp_path), "RANK": "{rank}", "WORLD_SIZE": "3",
           "LOCAL_RANK": "{rank}", "LOCAL_WORLD_SIZE": "3"}
    results = run_ranks(3, _discover_as, env)
    _check_world(results, 3, "hcomm-run")
    assert os.listdir(tmp_path) == []  # both generations cleaned up by their last rank


def test_torchrun_env_uses_a_tcp_store_on_master_port_plus_one():
    port = _free_port() - 1
    env = {"TORCHELASTIC_RUN_ID": f"t-{os.getpid()}", "RANK": "{rank}", "WORLD_SIZE": "3", "LOCAL_RANK": "{rank}",
           "LOCAL_WORLD_SIZE": "3", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    _check_world(run_ranks(3, _discover_as, env), 3, "torchrun")


def test_mpi_env_file_fallback_keyed_by_job_id(tmp_path):
    env = {"OMPI_COMM_WORLD_RANK": "{rank}", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "{rank}",
           "OMPI_COMM_WORLD_LOCAL_SIZE": "4", "PMIX_NAMESPACE": f"ns{os.getpid()}", "HCOMM_RENDEZVOUS": "file",
           "HCOMM_RENDEZVOUS_DIR": str(tmp_path)}
    _check_world(run_ranks(4, _discover_as, env), 4, "mpirun")
    # the rendezvous directory was removed; what stays is this user's empty private directory (file_store.private_parent)
    left = os.listdir(tmp_path)
    assert len(left) == 1 and left[0].startswith(f"hcomm-{os.getuid()}-private-"), left
    assert os.listdir(tmp_path / left[0]) == []


def test_explicit_ranks_with_hcomm_master_addr():
    def body(rank, n, _root, port):
        os.environ.update(HCOMM_MASTER_ADDR="127.0.0.1", HCOMM_MASTER_PORT=str(port), HCOMM_JOB_ID="exp")
        spec = discover(FakeBinding(), rank=rank, world_size=n, timeout=10)
        return spec.source, spec.root_info

    results = run_ranks(2, body, _free_port())
    assert results[0] == results[1] and results[0][0] == "explicit"


def test_missing_rank_times_out_on_every_rank(tmp_path):
    env = {"HCOMM_RUN_ID": "t2", "HCOMM_RUN_JOB_DIR": str(tmp_path), "RANK": "{rank}", "WORLD_SIZE": "3",
           "HCCL_CONNECT_TIMEOUT": "0.8"}

    def body(rank, n, root):
        if rank == 1:
            return "skipped init"
        os.environ.update({k: v.format(rank=rank) for k, v in env.items()})
        try:
            discover(FakeBinding())
        except RendezvousTimeout as exc:
            return str(exc)
        return "no error"

    results = run_ranks(3, body)
    assert results[1] == "skipped init"
    for text in (results[0], results[2]):
        assert "rank(s) 1 of 3 did not arrive within 0.8 s (HCCL_CONNECT_TIMEOUT=0.8)" in text
        assert "arrived: 0, 2" in text
