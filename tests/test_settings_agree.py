"""Settings that must agree between ranks are compared when the communicator is created (issue 25 item 5).

Rank 1 of a 2-rank ``hcomm run`` job runs with another value of one variable; both ranks must fail at
init naming the variable, the ranks and both values, within seconds (not after HCCL_EXEC_TIMEOUT, and
not with a misleading collective mismatch).  The emulator's own check (HCCL_BUFFSIZE, HCOMM_SIM_CHECK)
is exercised without the rendezvous, with an explicit root info.
"""
from __future__ import annotations

import sys
import time
from typing import Optional

import pytest

from hcomm_cffi.bootstrap.agreement import disagreement
from multiproc import run_ranks
from test_launch_helpers import launcher, start

pytestmark = pytest.mark.slow

WORKER = r'''
import os, sys
name, value = sys.argv[1], sys.argv[2]
if os.environ["RANK"] == "1":
    if value == "unset":
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
import numpy as np
import hcomm_cffi as hcomm
try:
    w = hcomm.init()
    x = np.ones(1 << 16, np.float32)
    w.allreduce(x)
    print("RESULT", float(x[0]), flush=True)
    hcomm.finalize()
except Exception as exc:
    print("FAILED", type(exc).__name__, exc, flush=True)
    sys.exit(3)
'''

CASES = [  # variable, rank 0's value (job environment), rank 1's value
    ("HCCL_BUFFSIZE", "8", "16"),
    ("HCOMM_STEP_BYTES", "65536", "unset"),
    ("HCOMM_TOPOLOGY", "1x2", "2x1"),
    ("HCOMM_CHECK_COLLECTIVES", "0", "1"),
    ("HCOMM_SIM_CHECK", "off", "strict"),
]


@pytest.mark.parametrize("name,rank0,rank1", CASES)
def test_a_setting_that_differs_between_ranks_fails_init_naming_it(tmp_path, shm, name: str, rank0: str,
                                                                    rank1: str) -> None:
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER)
    t0 = time.monotonic()
    proc = start(launcher(2, sys.executable, str(worker), name, rank1),
                 {"HCOMM_SIM_SHM_DIR": shm, "HCOMM_BACKEND": "sim", name: rank0, "HCCL_EXEC_TIMEOUT": "600"})
    out, err = proc.communicate(timeout=180)
    assert proc.returncode != 0, out
    assert "RESULT" not in out, out
    lines = [ln for ln in out.splitlines() if "FAILED" in ln]
    assert lines, (out, err)
    shown = rank0
    for line in lines:
        assert f"{name} differs between ranks" in line, line
        assert f"{name}={shown}" in line or f"{shown} MiB" in line, line
    assert time.monotonic() - t0 < 120


def _explicit(rank: int, n: int, root: bytes, name: str, value: str) -> Optional[str]:
    import os

    if rank == 1:
        os.environ[name] = value
    import hcomm_cffi as hcomm
    try:
        hcomm.init(rank=rank, world_size=n, root_info=root)
    except Exception as exc:
        return str(exc)
    hcomm.finalize()
    return None


@pytest.mark.parametrize("name,value", [("HCCL_BUFFSIZE", "16"), ("HCOMM_SIM_CHECK", "off")])
def test_the_emulator_compares_buffer_size_and_checker_mode_at_attach(name: str, value: str) -> None:
    texts = run_ranks(2, _explicit, name, value, timeout=90)
    assert all(t is not None and f"{name}" in t and "differs between ranks" in t for t in texts), texts


def test_disagreement_text_groups_ranks() -> None:
    same = {"HCOMM_STEP_BYTES": "65536"}
    assert disagreement({0: same, 1: same}) is None
    text = disagreement({0: same, 1: {"HCOMM_STEP_BYTES": "unset"}, 2: same, 3: same})
    assert text is not None and text.startswith("HCOMM_STEP_BYTES differs between ranks: ranks 0, 2-3 have "
                                                "HCOMM_STEP_BYTES=65536, rank 1 has HCOMM_STEP_BYTES=unset.")
