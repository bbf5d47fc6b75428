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


def _table(n, sim, gloo, mpi, sim_us):
    def rows(values):
        return [{"size": s, "time_us": t, "busbw": b} for s, t, b in zip((8, 65536, 64 << 20), sim_us, values)]
    return {"nranks": n, "sizes": [8, 65536, 64 << 20],
            "series": {"hcomm-sim/native": rows(sim), "gloo": rows(gloo), "openmpi": rows(mpi)}}


def test_target_verdicts() -> None:
    t = _table(2, [0.001, 4.0, 6.0], [0.0, 0.3, 1.0], [0.01, 3.0, 7.0], [9.0, 16.0, 11000.0])
    lines = _module().targets([t], "native")
    assert "n=2  64K: busbw >= Open MPI: ok (4.000 vs 3.000 GB/s, 1.33x)" in lines
    assert "n=2  64K: busbw >= 10x gloo: ok (4.000 vs 0.300 GB/s, 13.3x)" in lines
    assert "n=2  64M: busbw >= Open MPI: SHORT (6.000 vs 7.000 GB/s, 0.86x)" in lines
    assert "n=2  64M: busbw >= 10x gloo: SHORT (6.000 vs 1.000 GB/s, 6.0x)" in lines
    assert "n=2  64M: busbw >= 5 GB/s: ok (6.000 GB/s)" in lines
    assert "n=2    8: time <= 10 us: ok (9.00 us)" in lines
    assert not any(" 8: busbw" in line for line in lines)          # the bandwidth goals start at 64 KiB


def test_small_run_emulator_and_local(tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    out_json = tmp_path / "c.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--ranks", "2", "--sizes", "8,64K", "--iters", "3",
                           "--libraries", "local", "--json", str(out_json)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "HCOMM_SIM_CHECK=off" in proc.stdout
    doc = json.loads(out_json.read_text())
    (table,) = doc["tables"]
    assert sorted(table["series"]) == ["hcomm-sim/native"]                  # gloo and Open MPI not asked for
    rows = table["series"]["hcomm-sim/native"]
    assert [r["size"] for r in rows] == [8, 65536] and all(r["wrong"] == 0 and r["busbw"] > 0 for r in rows)
    assert len(table["local"]["memcpy"]) == 2 and table["model"][1]["time_us"] > 0
