"""Bounds checked before anything starts: rank counts (hcomm run -n, hcomm bench -N), ranktables under
hcomm run, plan sizes (issue 12 items 6-8)."""
from __future__ import annotations

import json
import sys
import time

import pytest

from hcomm_cffi.launch.runner import LaunchConfig, LaunchError, max_ranks
from test_launch_helpers import start


def _hcomm(args, env=None, within=30.0):
    began = time.monotonic()
    proc = start([sys.executable, "-m", "hcomm_cffi", *args], env)
    out, err = proc.communicate(timeout=within)
    return proc.returncode, out, err, time.monotonic() - began


def test_default_limit_is_four_per_core_and_at_least_16():
    limit, why = max_ranks({})
    assert limit >= 16 and "per usable CPU core" in why
    assert max_ranks({"HCOMM_MAX_RANKS": "3"}) == (3, "HCOMM_MAX_RANKS=3")
    with pytest.raises(LaunchError, match="HCOMM_MAX_RANKS='lots' is not an integer"):
        max_ranks({"HCOMM_MAX_RANKS": "lots"})


def test_too_many_ranks_is_refused_before_starting_any():
    with pytest.raises(LaunchError, match="999 ranks exceed the limit of .* set HCOMM_MAX_RANKS=999"):
        LaunchConfig(nprocs=999, command=["true"]).validate()
    LaunchConfig(nprocs=3, command=["true"], env={"HCOMM_MAX_RANKS": "3"}).validate()
    with pytest.raises(LaunchError, match="4 ranks exceed the limit of 3 local ranks \\(HCOMM_MAX_RANKS=3\\)"):
        LaunchConfig(nprocs=4, command=["true"], env={"HCOMM_MAX_RANKS": "3"}).validate()


@pytest.mark.parametrize("args", [["run", "-n", "999", "--", "true"],
                                  ["bench", "-N", "999", "-b", "8", "-e", "8"]])
def test_cli_refuses_999_ranks(args):
    rc, out, err, took = _hcomm(args, {"HCOMM_BACKEND": "sim"})
    assert rc == 2 and "999 ranks exceed the limit" in err and "HCOMM_MAX_RANKS" in err, err


def _table(path, n, status=True):
    devices = [{"device_id": str(r), "device_ip": f"192.168.1.{r}", "rank_id": str(r)} for r in range(n)]
    table = {"version": "1.0", "server_count": "1", "server_list": [{"server_id": "10.0.0.1", "device": devices}]}
    if status:
        table["status"] = "completed"
    path.write_text(json.dumps(table))
    return str(path)


def test_ranktable_without_status_is_rejected_under_hcomm_run(tmp_path):
    table = _table(tmp_path / "rt.json", 2, status=False)
    rc, out, err, took = _hcomm(["run", "-n", "2", "--", "true"], {"RANK_TABLE_FILE": table})
    assert rc == 2 and "field 'status' is None; expected \"completed\"" in err, err


def test_ranktable_rank_count_must_match_n_at_once(tmp_path):
    table = _table(tmp_path / "rt8.json", 8)
    rc, out, err, took = _hcomm(["run", "-n", "2", "--", "true"],
                                {"RANK_TABLE_FILE": table, "HCCL_CONNECT_TIMEOUT": "120"})
    assert rc == 2 and "lists 8 ranks but -n/--nprocs=2" in err, err
    assert took < 20  # not the connect timeout


def test_rank_side_check_of_a_ranktable_under_hcomm_run(tmp_path):
    from hcomm_cffi.bootstrap.env import EnvError, detect

    table = _table(tmp_path / "rt8.json", 8)
    env = {"HCOMM_RUN_ID": "x", "HCOMM_RUN_JOB_DIR": str(tmp_path), "RANK": "0", "WORLD_SIZE": "2",
           "RANK_TABLE_FILE": table}
    with pytest.raises(EnvError, match="lists 8 ranks but WORLD_SIZE=2"):
        detect(env)


@pytest.mark.parametrize("args, message", [
    (["--ranks", "100000000000"], "--ranks 100000000000: expected an integer >= 1 and <= 65536"),
    (["--servers", "1000", "--devices", "1000"], "1000000 ranks; expected at most 65536"),
])
def test_plan_size_is_bounded(args, message):
    rc, out, err, took = _hcomm(["plan", *args])
    assert rc == 2 and message in err and "MemoryError" not in err, err
