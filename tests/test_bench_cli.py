"""``hcomm bench`` end to end: real 2-rank runs (files parsed back, the corruption hook counted) and
one-line errors for bad input."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import pytest

from hcomm_cffi.bench import report
from hcomm_cffi.bench.factors import busbw_factor
from hcomm_cffi.cli import main

ROOT = Path(__file__).resolve().parents[1]
_LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                  "RANK_TABLE_FILE", "RANK_ID", "HCOMM_JOB_ID")
_LAUNCHER_PREFIXES = ("OMPI_", "PMI_", "PMIX_", "TORCHELASTIC_", "HCOMM_RUN_", "MPI_LOCAL", "HCOMM_BENCH_")


def _clean_env(**extra: str) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in _LAUNCHER_VARS and not k.startswith(_LAUNCHER_PREFIXES)}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")
    env["HCOMM_SIM_CHECK"] = "off"     # what benchmark runs use; the checker is exercised by the sim tests
    env.update(extra)
    return env


def _bench(*args: str, timeout: float = 60, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hcomm_cffi", "bench", *args], capture_output=True, text=True,
                          env=_clean_env(**env), cwd=str(ROOT), timeout=timeout)


def _rows(stdout: str) -> List[List[str]]:
    return [line.split() for line in stdout.splitlines() if line.strip() and not line.startswith("#")]


@pytest.fixture
def no_launcher(monkeypatch):
    for k in list(os.environ):
        if k in _LAUNCHER_VARS or k.startswith(_LAUNCHER_PREFIXES):
            monkeypatch.delenv(k)


def test_two_ranks_json_csv_round_trip(tmp_path) -> None:
    js, cs = tmp_path / "r.json", tmp_path / "r.csv"
    out = _bench("--op", "allreduce", "-b", "8", "-e", "64K", "-f", "64", "-n", "3", "-w", "1", "-N", "2",
                 "--json", str(js), "--csv", str(cs))
    assert out.returncode == 0, out.stderr
    rows = _rows(out.stdout)
    assert [r[0] for r in rows] == ["8", "512", "32768"]
    assert all(r[2:5] == ["float", "sum", "-1"] and r[-1] == "0" for r in rows)
    assert "HCOMM_SIM_CHECK=off" in out.stdout
    doc = report.read_json(str(js))
    assert doc["config"]["nranks"] == 2 and doc["config"]["iters"] == 3 and doc["config"]["op"] == "allreduce"
    assert doc["environment"]["backend"] == "sim" and doc["environment"]["variables"]["HCOMM_SIM_CHECK"] == "off"
    assert "numpy" in doc["environment"]["versions"]
    res = doc["results"]
    assert [r["size"] for r in res] == [8, 512, 32768] and [r["count"] for r in res] == [2, 128, 8192]
    for r, row in zip(res, rows):
        assert len(r["time_us_ranks"]) == 2 and r["time_us"] == max(r["time_us_ranks"]) > 0
        assert r["algbw"] == pytest.approx(r["size"] / r["time_us"] / 1e3)
        assert r["busbw"] == pytest.approx(r["algbw"] * busbw_factor("allreduce", 2))
        assert r["wrong"] == 0 and r["wrong_ranks"] == [0, 0] and r["check"] == "on"
        assert float(row[5]) == pytest.approx(r["time_us"], abs=0.006)
        assert r["model_us"] > 0
    csv_rows = report.read_csv(str(cs))
    assert [(c["size"], c["wrong"], c["nranks"], c["backend"]) for c in csv_rows] == \
        [(r["size"], 0, 2, "sim") for r in res]
    assert [c["time_us"] for c in csv_rows] == [r["time_us"] for r in res]


def test_several_algorithms_one_plot_line_each(tmp_path) -> None:
    pytest.importorskip("matplotlib")
    from hcomm_cffi.bench.ops import comm_api_available

    if not comm_api_available():
        pytest.skip("the Comm API (hcomm_cffi.api) is not in this build")
    js, png = tmp_path / "m.json", tmp_path / "m.png"
    out = _bench("-b", "1K", "-e", "64K", "-f", "64", "-n", "2", "-w", "1", "-N", "2", "--algo", "native,mesh",
                 "--json", str(js), "--plot", str(png))
    assert out.returncode == 0, out.stderr
    assert "algorithm native" in out.stdout and "algorithm mesh" in out.stdout
    doc = report.read_json(str(js))
    assert doc["config"]["algorithms"] == ["native", "mesh"]
    assert [(r["algorithm"], r["size"], r["wrong"]) for r in doc["results"]] == \
        [("native", 1024, 0), ("native", 65536, 0), ("mesh", 1024, 0), ("mesh", 65536, 0)]
    assert doc["environment"]["paths"] == {"native": "binding/native", "mesh": "comm-api"}
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_corruption_hook_is_counted_and_fails_the_run() -> None:
    out = _bench("--op", "allreduce", "-b", "1K", "-e", "4K", "-f", "4", "-n", "2", "-w", "1", "-N", "2",
                 HCOMM_BENCH_CORRUPT="1:5")
    assert out.returncode == 1, out.stdout + out.stderr
    rows = _rows(out.stdout)
    assert [r[-1] for r in rows] == ["5", "5"]        # rank 1's 5 bad inputs reach 5 outputs on every rank
    assert "FAILED" in out.stdout


def test_sendrecv_and_check_off_three_ranks() -> None:
    out = _bench("--op", "sendrecv", "-b", "4K", "-e", "4K", "-n", "2", "-w", "1", "-N", "3", "-d", "int32", "-c", "0")
    assert out.returncode == 0, out.stderr
    (row,) = _rows(out.stdout)
    assert row[:5] == ["4096", "1024", "int32", "none", "-1"] and row[-1] == "N/A"


@pytest.mark.parametrize("args, message", [
    (["-b", "abc"], "-b/--minbytes='abc' is not a size"),
    (["-b", "1M", "-e", "1K"], "is below -b/--minbytes"),
    (["-b", "8", "-e", "64", "-f", "1"], "-f/--stepfactor=1; expected a factor > 1.0"),
    (["-b", "8", "-e", "64", "-f", "x"], "-f/--stepfactor 'x'"),
    (["-b", "8", "-e", "64", "-i", "0"], "repeat -b forever"),
    (["-n", "0"], "-n/--iters 0: expected an integer >= 1"),
    (["-w", "-1"], "-w/--warmup_iters -1"),
    (["-c", "2"], "-c/--check 2: expected 0 or 1"),
    (["-d", "complex64"], "-d/--datatype 'complex64'"),
    (["-d", "int128"], "-d/--datatype 'int128'"),
    (["-o", "mean"], "-o/--redop 'mean': expected sum, prod, max, min or avg"),
    (["-o", "avg", "-d", "int8"], "-o avg -d int8: the average of int8 values is not one"),
    (["--op", "gather"], "--op='gather' is not a benchmarked operation"),
    (["--op", "broadcast", "-r", "2", "-N", "2"], "-r/--root=2; expected a rank in [0, 2)"),
    (["--op", "sendrecv", "-N", "1"], "needs at least 2 ranks"),
    (["-N", "0"], "-N/--ranks 0"),
    (["--timeout", "0"], "--timeout '0'"),
    (["--algo", "bogus"], "--algo 'bogus'"),
    (["--algo", "native,bogus"], "--algo 'native,bogus'"),
    (["--algo", ","], "--algo ','"),
    (["--algo", "tree", "--op", "alltoall"], "--algo tree --op alltoall on 2 local ranks"),
    (["--json", "/nonexistent-dir/x.json"], "does not exist"),
    (["--csv", "/"], "is a directory"),
])
def test_errors_are_one_line(no_launcher, capsys, args, message) -> None:
    assert main(["bench", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("hcomm bench: error: "), err
    assert message in err


def test_plot_needs_matplotlib(no_launcher, capsys, monkeypatch, tmp_path) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main(["bench", "--plot", str(tmp_path / "x.png")]) == 2
    assert "pip install matplotlib" in capsys.readouterr().err


def test_inside_a_job_only_rank_0_reports(monkeypatch, no_launcher, capsys) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29999")
    monkeypatch.setenv("RANK", "0")
    assert main(["bench", "-N", "4"]) == 2
    assert "-N/--ranks 4 but this job has 2 ranks" in capsys.readouterr().err
    monkeypatch.setenv("RANK", "1")
    assert main(["bench", "-N", "4"]) == 2
    assert capsys.readouterr().err == ""


def test_no_traceback_through_the_real_entry_point() -> None:
    out = _bench("-b", "1Q")
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == ["hcomm bench: error: -b/--minbytes='1Q' is not a size; expected "
                                               "bytes, optionally with K, M or G (e.g. 8, 64K, 256M)"]
