"""``python -m hcomm_cffi plan`` through a real subprocess: table, --json, --compare, errors."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data"


def _run(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "hcomm_cffi", "plan", *args], capture_output=True,
                          text=True, env=env, cwd=str(ROOT), timeout=120)


def test_table_for_the_seed() -> None:
    out = _run("--ranks", "4", "--algo", "ring", "--platform", "doc")
    assert out.returncode == 0, out.stderr
    assert "algorithm ring" in out.stdout
    row = next(line for line in out.stdout.splitlines() if line.startswith("ring "))
    # role, ranks, threads, notifies/thread, thread notifies, host, channels, channel notifies, total
    assert row.split()[:9] == ["ring", "4", "2", "2", "2", "1", "2", "4", "7"]


@pytest.mark.parametrize("algo,figures", [("ring", (2, 4, 2)), ("mesh", (3, 6, 3))])
def test_default_is_the_package_algorithm_as_it_runs_here(algo: str, figures: tuple) -> None:
    """No --platform: the package's algorithm, whose figures on 1x4 are the seed's (text headline and JSON)."""
    out = _run("--ranks", "4", "--algo", algo)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith(f"the package's {algo}, as it runs here")
    row = next(line for line in lines if line.startswith(f"{algo} "))
    t, ntf, ch = figures
    assert (int(row.split()[2]), int(row.split()[7]), int(row.split()[6])) == (t, ntf, ch)
    assert any(line.startswith("communicator overhead") and "3 channel(s) x 6 notifies, engine CPU_TS" in line
               for line in lines)
    d = json.loads(_run("--ranks", "4", "--algo", algo, "--json").stdout)
    assert (d["threads"], d["channel_notifies"], d["n_channels"]) == figures
    assert d["plan_of"] == "package" and d["what"].startswith(f"the package's {algo}, as it runs here")
    assert d["overhead"] == [{"purpose": "comm:channels", "kind": "channel", "engine": "CPU_TS", "count": 3, "notifies": 6},
                             {"purpose": "comm:signature", "kind": "thread", "engine": "CPU_TS", "count": 1, "notifies": 1},
                             {"purpose": "comm:p2p", "kind": "thread", "engine": "CPU_TS", "count": 1, "notifies": 1,
                              "per": "peer and direction a send/recv uses"}]
    assert (d["derived"]["threads"], d["derived"]["notifies"], d["derived"]["channels"]) == figures


def test_native_is_the_vendors_executor_by_platform_and_mode() -> None:
    d = json.loads(_run("--ranks", "8", "--algo", "native", "--engine", "cpu", "--json").stdout)
    assert d["plan_of"] == "vendor" and d["platform"] == "a2" and d["algorithm"] == "mesh"
    assert d["what"] == ("the vendor's mesh executor on Atlas A2 (910B), host expansion: the legacy executors "
                         "(hcomm src/legacy/ascend910)")
    assert "alg_configurator.cc:389-409" in d["explanation"] and d["threads"] == 8
    d = json.loads(_run("--ranks", "8", "--algo", "native", "--platform", "950", "--json").stdout)
    assert "the AI CPU templates" in d["what"] and "template/aicpu" in d["source"]
    d = json.loads(_run("--ranks", "8", "--algo", "native", "--engine", "aiv", "--json").stdout)
    assert d["what"].startswith("the vendor's mesh executor on Atlas A2 (910B), AIV expansion") and d["threads"] == 1
    out = _run("--ranks", "8", "--algo", "native", "--engine", "ccu")
    assert out.returncode == 2 and "CCU expansion exists on Ascend 950 only" in out.stderr


def test_json_output() -> None:
    out = _run("--servers", "2", "--devices", "8", "--algo", "hierarchical", "--size", "64M", "--json",
               "--buffsize-mb", "200", "--platform", "doc")
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert (d["threads"], d["n_channels"], d["channel_notifies"], d["thread_notifies"]) == (7, 8, 16, 12)
    assert d["platform"] == "doc"
    assert d["size_bytes"] == 64 << 20 and d["buffer_fits"] is True
    # A2: the legacy mesh executor at level 0 (devices - 1 streams) + NHR between servers, 3 notifies per channel
    d = json.loads(_run("--servers", "2", "--devices", "8", "--algo", "hierarchical", "--platform", "a2", "--json").stdout)
    assert (d["platform"], d["threads"], d["n_channels"], d["channel_notifies"]) == ("a2", 7, 8, 24)
    assert "coll_all_reduce_mesh_executor.cc" in d["source"]


def test_buffer_size_defaults_to_hccl_buffsize(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without --buffsize-mb the plan models the buffer a job started here gets (HCCL_BUFFSIZE), not 200 MiB."""
    monkeypatch.setenv("HCCL_BUFFSIZE", "8")
    d = json.loads(_run("--ranks", "4", "--algo", "ring", "--size", "64M", "--json").stdout)
    assert (d["buffer_half_bytes"], d["buffer_fits"], d["pieces"]) == (8 << 20, False, 8)
    monkeypatch.setenv("HCCL_BUFFSIZE", "abc")
    out = _run("--ranks", "4")
    assert out.returncode == 2 and "HCCL_BUFFSIZE='abc'" in out.stderr


def test_auto_is_what_the_comm_api_would_run() -> None:
    for size in ("64M", "4K"):                                      # auto runs the library's own at every size
        d = json.loads(_run("--ranks", "8", "--size", size, "--json").stdout)
        assert d["plan_of"] == "vendor" and d["platform"] == "a2", size
    d = json.loads(_run("--ranks", "1", "--size", "64M", "--json").stdout)  # one rank: a local copy
    assert d["plan_of"] == "package" and d["algorithm"] == "ring"


def test_compare_table() -> None:
    out = _run("--servers", "4", "--devices", "8", "--compare", "--op", "alltoall")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "beside the vendor's executors on Atlas A2 (910B), AI CPU expansion" in lines[0]
    head = next(i for i, line in enumerate(lines) if line.split()[:1] == ["algorithm"])
    assert lines[-1].startswith("columns:")
    names = [line.split()[0] for line in lines[head + 1:-1]]
    assert names == ["ring", "mesh", "tree", "nhr", "hierarchical", "nb", "ahc", "alltoall_pairwise", "double_ring",
                     "native"]
    pairwise = next(line for line in lines if line.startswith("alltoall_pairwise")).split()
    assert pairwise[1:4] == ["1", "62", "31"] and pairwise[5:8] == ["1", "93", "31"]   # package 2/ch, vendor 3/ch
    assert "invalid" not in out.stdout and "not a package algorithm" not in out.stdout


def test_compare_json() -> None:
    rows = json.loads(_run("--ranks", "4", "--compare", "--json", "--op", "allreduce").stdout)
    by = {r["algorithm"]: r for r in rows}
    assert (by["ring"]["package"]["threads"], by["ring"]["package"]["channel_notifies"]) == (2, 4)
    assert (by["ring"]["vendor"]["threads"], by["ring"]["vendor"]["channel_notifies"]) == (1, 6)
    assert by["nhr"]["package"] is None and by["nhr"]["vendor"]["platform"] == "a2"
    assert by["native"]["vendor"]["algorithm"] == "mesh" and by["native"]["vendor_what"].startswith("the vendor's mesh")
    assert by["hierarchical"]["package"] is None and "more than one server" in by["hierarchical"]["package_reason"]


def test_ranktable_and_cost_overrides() -> None:
    out = _run("--ranktable", str(DATA / "ranktable_v1_0.json"), "--algo", "mesh", "--json",
               "--bw-gbps", "roce=48", "--alpha-us", "hccs=5")
    d = json.loads(out.stdout)
    assert d["topology"]["n_ranks"] == 8 and d["cost_model"]["roce"]["bw_gbps"] == 48
    assert d["cost_model"]["hccs"]["alpha_us"] == 5


@pytest.mark.parametrize("args,needle", [
    (["--algo", "quantum"], "--algo 'quantum'"),
    (["--ranks", "0"], "--ranks 0"),
    (["--size", "12Q"], "--size '12Q'"),
    (["--ranktable", str(DATA / "ranktable_bad_duplicate_rank.json")], "duplicate rank_id 2"),
    (["--ranktable", str(DATA / "no_such.json")], "cannot read"),
    (["--ranks", "4", "--algo", "hierarchical"], "more than one server"),
    (["--ranks", "4", "--op", "allsum"], "collective 'allsum'"),
    (["--ranks", "4", "--engine", "gpu"], "engine='gpu'"),
    (["--ranks", "4", "--bw-gbps", "nvlink=5"], "--bw-gbps 'nvlink=5'"),
    (["--servers", "2"], "--servers and --devices go together"),
])
def test_errors_are_one_line(args: List[str], needle: str) -> None:
    out = _run(*args)
    assert out.returncode != 0
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert needle in lines[0] and lines[0].startswith("hcomm plan: error:")
