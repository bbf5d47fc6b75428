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


def _table(n, series, memcpy=None):
    """series: name -> (busbw per size, time per size) for the sizes 8, 64K, 64M; memcpy: GB/s per size."""
    return {"op": "allreduce", "nranks": n, "sizes": [8, 65536, 64 << 20],
            "series": {name: _rows(*values) for name, values in series.items()},
            "local": {"memcpy": memcpy} if memcpy else {}}


def test_target_verdicts() -> None:
    """Issue 43's targets: native vs Open MPI (8-byte time, busbw at 64K..4M, 64 MiB against 2.5x Open MPI or the
    memcpy bound), ring/mesh against native on 4 ranks, auto against the best algorithm; PASS or MISS."""
    t = _table(4, {"hcomm-sim/native": ([0.001, 4.0, 6.0], [9.0, 16.0, 11000.0]),
                   "hcomm-sim/auto": ([0.001, 4.0, 6.0], [11.0, 16.0, 11000.0]),
                   "hcomm-sim/ring": ([0.001, 1.0, 5.8], [30.0, 40.0, 11500.0]),
                   "hcomm-sim/mesh": ([0.001, 1.0, 5.8], [20.0, 12.0, 11500.0]),
                   "hcomm-sim/defaults": ([0.001, 4.0, 6.0], [18.0, 16.0, 11000.0]),
                   "openmpi": ([0.01, 3.0, 7.0], [2.0, 20.0, 9000.0])}, memcpy=[1.0, 5.0, 14.0])
    lines = _module().targets([t], ["native", "auto", "defaults", "ring", "mesh"], cpus=2)
    assert "allreduce n=4    8: native time <= 1.5x Open MPI (9.0 vs 2.0 us, 4.50x): MISS" in lines
    assert "allreduce n=4  64K: native busbw >= Open MPI (4.000 vs 3.000 GB/s, 1.33x): PASS" in lines
    # the bound: memcpy 14 GB/s x min(4 ranks, 2 cores) / 4 = 7 GB/s; 6 is 86 % of it
    assert ("allreduce n=4  64M: native busbw >= 2.5x Open MPI or >= 80% of the memcpy bound (6.00 GB/s, 0.86x "
            "Open MPI, 86% of the memcpy bound 7.00 GB/s): PASS") in lines
    assert "allreduce n=4    8: ring time <= 3x native (30.0 vs 9.0 us, 3.33x): MISS" in lines
    assert "allreduce n=4    8: mesh time <= 3x native (20.0 vs 9.0 us, 2.22x): PASS" in lines
    assert "allreduce n=4    8: auto <= 1.3x the best algorithm, native (11.0 vs 9.0 us, 1.22x): PASS" in lines
    assert "allreduce n=4  64K: auto <= 1.3x the best algorithm, mesh (16.0 vs 12.0 us, 1.33x): MISS" in lines
    assert "allreduce n=4    8: the defaults (both checks on) <= 1.5x both off (18.0 vs 11.0 us, 1.64x): MISS" in lines
    assert not any(" 8: native busbw" in line for line in lines)     # the bandwidth goals start at 64 KiB
    eight = _table(8, {"hcomm-sim/native": ([0.001, 1.0, 2.0], [3.9, 16.0, 11000.0]),
                       "openmpi": ([0.01, 3.0, 7.0], [2.0, 20.0, 9000.0])})
    lines = _module().targets([eight], ["native"], cpus=2)
    assert "allreduce n=8    8: native time <= 2x Open MPI (3.9 vs 2.0 us, 1.95x): PASS" in lines
    assert not any("64K: native busbw" in line for line in lines)    # 64 KiB..4 MiB: 2 and 4 ranks
    assert "allreduce n=8  64M: native busbw >= 2.5x Open MPI or >= 80% of the memcpy bound (2.00 GB/s, 0.29x " \
           "Open MPI): MISS" in lines


def test_memcpy_bound() -> None:
    """memcpy GB/s x min(n, cores) / n: the ranks share the cores; x (n-1)/n for the out-of-place allgather."""
    bound = _module().memcpy_bound
    t = _table(2, {}, memcpy=[1.0, 5.0, 10.0])
    assert bound(t, 2, 2) == 10.0 and bound(t, 2, 1) == 5.0
    assert bound(_table(8, {}, memcpy=[1.0, 5.0, 10.0]), 2, 2) == 2.5
    assert bound(_table(2, {}), 2, 2) is None
    gather = dict(_table(4, {}, memcpy=[1.0, 5.0, 10.0]), op="allgather")   # out of place: + its own block
    assert bound(gather, 2, 2) == 10.0 * 2 / 4 * 3 / 4


def test_unknown_library_is_refused() -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--libraries", "openmpi,mpich"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2 and "--libraries 'openmpi,mpich': mpich unknown" in proc.stderr


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
