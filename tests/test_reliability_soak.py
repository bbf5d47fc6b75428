"""The soak benchmark (benchmarks/soak.py) runs under hcomm run, reports every rank and judges leaks (short run)."""
from __future__ import annotations

import os
import re
import sys

from test_launch_helpers import launcher, run_job

SOAK = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks", "soak.py")


def test_short_soak_passes_and_reports_every_rank(shm) -> None:
    rc, out, err = run_job(launcher(3, sys.executable, SOAK, "--ops", "150", "--sample", "30",
                                    "--latency-calls", "40"), {"HCOMM_SIM_SHM_DIR": shm})
    assert rc == 0, out + err
    assert "[0] soak: 150 operations on 3 ranks in " in out and "baseline after 15 operations" in out, out
    rows = re.findall(r"^\[0\] +(\d) \|", out, re.M)
    assert rows == ["0", "1", "2"], out
    assert "leak check: PASS on every rank" in out
    m = re.search(r"signature check on ([\d.]+) µs/call, HCOMM_CHECK_COLLECTIVES=0 ([\d.]+) µs/call, ratio ([\d.]+)",
                  out)
    assert m and float(m.group(1)) > 0 and float(m.group(2)) > 0, out


def test_leak_verdict_bounds() -> None:
    """Private RSS past its bound, mappings past theirs, or any fd growth is a leak; the rest is not."""
    import importlib.util

    import numpy as np

    spec = importlib.util.spec_from_file_location("soak", SOAK)
    soak = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(soak)
    mb = 2**20
    #                 private RSS start/end/max, shared start/end, maps start/end, fds start/end/max, ops
    fine = [10 * mb, 40 * mb, 45 * mb, 0, 90 * mb, 300, 316, 24, 24, 30, 100]
    table = np.array([fine,
                      [10 * mb, 43 * mb, 43 * mb, 0, 0, 300, 300, 24, 24, 24, 100],   # RSS +33 MB
                      [10 * mb, 10 * mb, 10 * mb, 0, 0, 300, 317, 24, 24, 24, 100],   # 17 more mappings
                      [10 * mb, 10 * mb, 10 * mb, 0, 0, 300, 300, 24, 25, 25, 100]],  # one more fd
                     np.int64)
    assert soak.leaks(table, 32, 16) == [(1, 33 * mb, 0, 0), (2, 0, 17, 0), (3, 0, 0, 1)]
    assert soak.leaks(table, 64, 32)[0][0] == 3
