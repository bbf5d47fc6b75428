"""benchmarks/compare_allreduce.py: the iteration plan, the target verdicts, and a small real run."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "compare_allreduce.py"


def _module():
    spec = importlib.util.spec_from_file_location("compare_allreduce", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_iteration_plan() -> None:
    plan = _module().iteration_plan
    assert plan(8, 200e6, None) == (2000, 200)
    assert plan(64 << 20, 200e6, None) == (10, 2)
    assert plan(4 << 20, 200e6, None) == (47, 4)
    assert plan(8, 200e6, 3) == (3, 2)


def _rows(busbw, times):
    return [{"size": s, "time_us": t, "busbw": b} for s, t, b in zip((8, 65536, 64 << 20), times, busbw)]


def _table(n, series):
    """series: name -> (busbw per size, time per size) for the sizes 8, 64K, 64M."""
    return {"op": "allreduce", "nranks": n, "sizes": [8, 65536, 64 << 20],
            "series": {name: _rows(*values) for name, values in series.items()}}


def test_target_verdicts() -> None:
    """Issue 16's targets: native vs Open MPI (busbw from 64 KiB, 8-byte time), 64 MiB on 2 ranks, the Comm API's
    overhead, and ring/mesh against native; each line ends in ok or MISS."""
    t = _table(2, {"hcomm-sim/native": ([0.001, 4.0, 6.0], [9.0, 16.0, 11000.0]),
                   "hcomm-sim/auto": ([0.001, 4.0, 6.0], [11.0, 16.0, 11000.0]),
                   "hcomm-sim/ring": ([0.001, 1.0, 5.8], [30.0, 40.0, 11500.0]),
                   "hcomm-sim/defaults": ([0.001, 4.0, 6.0], [18.0, 16.0, 11000.0]),
                   "openmpi": ([0.01, 3.0, 7.0], [2.0, 20.0, 9000.0])})
    lines = _module().targets([t], ["native", "auto", "defaults", "ring"])
    assert "allreduce n=2  64K: native busbw >= Open MPI (4.000 vs 3.000 GB/s, 1.33x): ok" in lines
    assert "allreduce n=2  64M: native busbw >= Open MPI (6.000 vs 7.000 GB/s, 0.86x): MISS" in lines
    assert "allreduce n=2    8: native time <= 3x Open MPI (9.0 vs 2.0 us, 4.5x): MISS" in lines
    assert "allreduce n=2  64M: native busbw >= 3.5 GB/s and >= 2.5x Open MPI (6.00 GB/s, 0.86x): MISS" in lines
    assert "allreduce n=2    8: the Comm API (auto) adds <= 30% to native (11.0 vs 9.0 us, +22%): ok" in lines
    assert "allreduce n=2    8: ring time <= 2x native (30.0 vs 9.0 us, 3.33x): MISS" in lines
    assert "allreduce n=2    8: auto <= 1.5x native (11.0 vs 9.0 us, 1.22x): ok" in lines
    assert "allreduce n=2    8: the defaults (both checks on) <= 1.5x both off (18.0 vs 11.0 us, 1.64x): MISS" in lines
    assert "allreduce n=2  64M: ring within 10% of native (11500 vs 11000 us, 1.05x): ok" in lines
    assert not any(" 8: native busbw" in line for line in lines)     # the bandwidth goals start at 64 KiB


def test_small_run_emulator_and_local(tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    out_json = tmp_path / "c.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--ranks", "2", "--sizes", "8,64K", "--iters", "3",
                           "--ops", "allreduce,allgather", "--libraries", "local", "--json", str(out_json)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "HCOMM_SIM_CHECK=off" in proc.stdout
    doc = json.loads(out_json.read_text())
    assert [t["op"] for t in doc["tables"]] == ["allreduce", "allgather"]
    for table in doc["tables"]:
        assert sorted(table["series"]) == ["hcomm-sim/native"]              # gloo and Open MPI not asked for
        rows = table["series"]["hcomm-sim/native"]
        assert all(r["wrong"] == 0 and r["busbw"] > 0 for r in rows)
        assert len(table["local"]["memcpy"]) == 2 and table["model"][1]["time_us"] > 0
    assert [r["size"] for r in doc["tables"][0]["series"]["hcomm-sim/native"]] == [8, 65536]
