"""The package ships py.typed: mypy, configured by pyproject.toml's [tool.mypy], finds no error in it."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Dict

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


QUICKSTART = """
import numpy as np
import hcomm_cffi as hcomm

hcomm.init()
world = hcomm.get_world()
rank, size = world.get_rank(), world.get_size()
x = np.full(8, rank + 1, np.float32)
world.allreduce(x)
req = world.iallreduce(x)
req.wait(30)
world.send(x, dst=(rank + 1) % size)
y = np.empty_like(x)
world.recv(y, src=(rank - 1) % size)
pair = hcomm.Comm("pp", ranks=[0, 1])
half = world.split(color=rank % 2)
z = world.allreduce(x, "max", out=y, algorithm="ring")
reveal_type(z)
p = world.allreduce_init(x, op="sum", algorithm="native")
p.start()
p.wait()
hcomm.finalize()
world.send(x, dst="1")
world.allreduce(x, algorithm="rnig")
world.allreduce(x, op="summ")
world.broadcast_init(x, root=1.0)
"""


def test_a_quickstart_script_type_checks_strictly_and_its_mistakes_do_not(request: pytest.FixtureRequest,
                                                                         tmp_path: Path) -> None:
    """mypy --strict on a user's script in the README Quickstart's shape: the package's names are exported and typed
    (get_world() is a Comm), so a wrong ``dst`` type and misspelt algorithm and op names are errors (issue 33)."""
    user = tmp_path / "quickstart_user.py"
    user.write_text(QUICKSTART)
    # --follow-imports=silent: the package is checked but, as an installed package is, not reported on
    run = _mypy(request, "--strict", "--follow-imports=silent", str(user))
    out = run.stdout + run.stderr
    errors: Dict[int, str] = {}                  # line number -> its first error (notes follow some)
    for line in out.splitlines():
        m = re.match(r".*quickstart_user\.py:(\d+): (error|note): ", line)
        if m and m.group(2) == "error":
            errors.setdefault(int(m.group(1)), line)
    assert sorted(errors) == [23, 24, 25, 26], out
    assert 'Revealed type is "numpy.ndarray' in out, out                   # out='s own type comes back, not Any
    assert '"dst"' in errors[23] and '"str"' in errors[23], out
    assert 'No overload variant of "allreduce"' in errors[24] and 'No overload variant of "allreduce"' in errors[25], out
    assert '"root"' in errors[26] and '"float"' in errors[26], out


def test_the_literal_names_are_the_ones_the_registry_and_the_op_parser_take() -> None:
    """AlgorithmName lists 'auto' and every built-in (no more, no fewer); ReduceOpName every op by a name parsed."""
    from typing import get_args

    from hcomm_cffi.algorithms.interface import AlgorithmName
    from hcomm_cffi.algorithms.registry import BUILTINS
    from hcomm_cffi.enums import ReduceOp, parse_reduce_op
    from hcomm_cffi.types import ReduceOpName

    assert sorted(get_args(AlgorithmName)) == sorted(("auto",) + BUILTINS)
    assert {parse_reduce_op(name) for name in get_args(ReduceOpName)} == {ReduceOp.SUM, ReduceOp.PROD, ReduceOp.MAX,
                                                                          ReduceOp.MIN}
