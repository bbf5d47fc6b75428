"""The package ships py.typed: mypy, configured by pyproject.toml's [tool.mypy], finds no error in it."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _mypy(request: pytest.FixtureRequest, *paths: str) -> "subprocess.CompletedProcess[str]":
    pytest.importorskip("mypy.api", reason="mypy is not installed; pip install -e '.[test]' brings it")
    # A child process, not mypy.api.run here: mypy's command line exits without freeing its memory,
    # while in this process the freeing would add 10-25 s to the end of the test session (measured).
    # pytest's cache directory keeps mypy's cache between runs: ~20 s cold, ~1 s warm.
    args = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), "--show-error-codes"]
    cache = getattr(request.config, "cache", None)   # None under -p no:cacheprovider
    if cache is not None:
        args += ["--cache-dir", str(cache.mkdir("mypy"))]
    return subprocess.run(args + list(paths), cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_mypy_reports_no_error_in_the_package(request: pytest.FixtureRequest) -> None:
    run = _mypy(request, str(ROOT / "hcomm_cffi"))
    errors = [line for line in run.stdout.splitlines() if ": error:" in line]
    assert run.returncode == 0 and not errors, (
        f"mypy exited {run.returncode} with {len(errors)} error(s) in hcomm_cffi:\n{run.stdout}{run.stderr}")


USER_CODE = """
import numpy as np
import hcomm_cffi as hcomm
from hcomm_cffi import errors
from hcomm_cffi.binding import get_binding

b = get_binding()
reveal_type(b.get_rank_id)
reveal_type(b.channel_acquire)
b.get_rank_id()
b.thread_acquire(None, 0, "two", 1)
b.no_such_function()
try:
    b.malloc(64)
except errors.HcclTimeoutError as exc:
    reveal_type(exc)
    t: TimeoutError = exc
except errors.AclRtNoDeviceError as exc:
    a: errors.AclError = exc
reveal_type(hcomm.Comm)
reveal_type(hcomm.HcclCommConfigInit)
"""


def test_mypy_sees_every_binding_method_error_class_and_public_name(request: pytest.FixtureRequest,
                                                                    tmp_path: Path) -> None:
    """What an IDE and mypy see from user code: the C functions' signatures, real error classes, the lazy names."""
    user = tmp_path / "user_code.py"
    user.write_text(USER_CODE)
    run = _mypy(request, str(user))
    out = run.stdout + run.stderr
    # by file name: for an unchanged module mypy's cache replays its messages with the path it had then
    lines = {int(m.group(1)): line for line in out.splitlines() if (m := re.match(r".*user_code\.py:(\d+): ", line))}
    assert 'Revealed type is "def (comm: Any) -> int"' in lines[8], out
    assert 'Revealed type is "def (comm: Any, engine: int, descs: Any, n: int | None =) -> list[int]"' in lines[9], out
    assert 'Missing positional argument "comm" in call to "get_rank_id"' in lines[10], out
    assert 'Argument 3 to "thread_acquire" of "BindingMethods" has incompatible type "str"' in lines[11], out
    assert '"Binding" has no attribute "no_such_function"' in lines[12], out
    assert 'Revealed type is "hcomm_cffi.errors.HcclTimeoutError"' in lines[16], out
    assert lines[20].endswith('-> hcomm_cffi.api.comm.Comm"'), out        # the lazy names are not Any
    assert 'Revealed type is "def (config: Any)' in lines[21], out
    errors_seen = [n for n, line in lines.items() if ": error:" in line]
    assert errors_seen == [10, 11, 12], out
