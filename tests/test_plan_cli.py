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


def test_json_output() -> None:
    out = _run("--servers", "2", "--devices", "8", "--algo", "hierarchical", "--size", "64M", "--json",
               "--buffsize-mb", "200", "--platform", "doc")
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert (d["threads"], d["n_channels"], d["channel_notifies"], d["thread_notifies"]) == (7, 8, 16, 12)
    assert d["platform"] == "doc"
    assert d["size_bytes"] == 64 << 20 and d["buffer_fits"] is True
    # the A2 profile (the default): intra mesh allreduce template 8 threads, 3 notifies per channel
    d = json.loads(_run("--servers", "2", "--devices", "8", "--algo", "hierarchical", "--json").stdout)
    assert (d["platform"], d["threads"], d["n_channels"], d["channel_notifies"]) == ("a2", 8, 8, 24)
    assert "ins_temp_all_reduce_mesh_1D_one_shot.cc" in d["source"]


def test_buffer_size_defaults_to_hccl_buffsize(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without --buffsize-mb the plan models the buffer a job started here gets (HCCL_BUFFSIZE), not 200 MiB."""
    monkeypatch.setenv("HCCL_BUFFSIZE", "8")
    d = json.loads(_run("--ranks", "4", "--algo", "ring", "--size", "64M", "--json").stdout)
    assert (d["buffer_half_bytes"], d["buffer_fits"], d["pieces"]) == (8 << 20, False, 8)
    monkeypatch.setenv("HCCL_BUFFSIZE", "abc")
    out = _run("--ranks", "4")
    assert out.returncode == 2 and "HCCL_BUFFSIZE='abc'" in out.stderr


def test_auto_json_carries_explanation() -> None:
    d = json.loads(_run("--ranks", "8", "--json").stdout)
    assert d["algorithm"] in ("ring", "mesh", "tree", "nhr")
    assert "hierarchical: invalid" in d["explanation"]


def test_compare_table() -> None:
    out = _run("--servers", "4", "--devices", "8", "--compare", "--op", "alltoall")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.split()[:1] == ["algorithm"])   # under the title
    assert lines[-2].startswith("resources: profile a2") and lines[-1].startswith("columns:")
    names = [line.split()[0] for line in lines[head + 1:-2]]
    assert names == ["ring", "mesh", "tree", "nhr", "hierarchical", "nb", "ahc", "alltoall_pairwise", "double_ring"]
    assert "invalid" in next(line for line in lines if line.startswith("double_ring"))   # an A3 topology
    assert "invalid" in next(line for line in lines if line.startswith("tree"))
    assert sum("fastest" in line for line in lines) == 1


def test_compare_json() -> None:
    out = _run("--ranks", "4", "--compare", "--json", "--op", "broadcast", "--root", "2")
    rows = json.loads(out.stdout)
    assert [r["algorithm"] for r in rows][:5] == ["ring", "mesh", "tree", "nhr", "hierarchical"]
    assert rows[4]["valid"] is False and "more than one server" in rows[4]["reason"]


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
