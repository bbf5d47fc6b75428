"""The package ships py.typed: mypy, configured by pyproject.toml's [tool.mypy], finds no error in it."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_mypy_reports_no_error_in_the_package(request: pytest.FixtureRequest) -> None:
    pytest.importorskip("mypy.api", reason="mypy is not installed; pip install -e '.[test]' brings it")
    # A child process, not mypy.api.run here: mypy's command line exits without freeing its memory,
    # while in this process the freeing would add 10-25 s to the end of the test session (measured).
    # pytest's cache directory keeps mypy's cache between runs: ~20 s cold, ~1 s warm.
    args = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), "--show-error-codes"]
    if request.config.cache is not None:
        args += ["--cache-dir", str(request.config.cache.mkdir("mypy"))]
    run = subprocess.run(args + [str(ROOT / "hcomm_cffi")], cwd=ROOT, capture_output=True, text=True, timeout=300)
    errors = [line for line in run.stdout.splitlines() if ": error:" in line]
    assert run.returncode == 0 and not errors, (
        f"mypy exited {run.returncode} with {len(errors)} error(s) in hcomm_cffi:\n{run.stdout}{run.stderr}")
