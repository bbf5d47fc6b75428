"""Test-wide settings: the emulator backend, its strict checker, short timeouts, no leaked segments."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HCOMM_BACKEND", "sim")
os.environ.setdefault("HCOMM_SIM_CHECK", "strict")
os.environ.setdefault("HCOMM_SIM_ABI_CHECK", "1")  # calls go through C pointers of the declared types
os.environ.setdefault("HCCL_CONNECT_TIMEOUT", "30")
os.environ.setdefault("HCCL_EXEC_TIMEOUT", "60")
os.environ.setdefault("HCCL_BUFFSIZE", "8")  # 2 x 8 MiB per rank keeps tests light

sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(autouse=True)
def no_leaked_segments():
    """Fail a test that leaves this package's shared-memory segments in /dev/shm."""
    from hcomm_cffi.sim.shm import list_segments, sweep_stale

    before = set(list_segments())
    yield
    leaked = sorted(set(list_segments()) - before)
    if leaked:
        sweep_stale()
        pytest.fail(f"shared-memory segments left in /dev/shm: {leaked}")
