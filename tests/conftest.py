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
    from hcomm_cffi.sim.shm import SHM_DIR, list_segments, owner_alive, sweep_stale

    before = set(list_segments())
    yield
    # a segment whose owner is dead was left behind; live owners belong to other, concurrent runs
    leaked = sorted(n for n in set(list_segments()) - before if not owner_alive(os.path.join(SHM_DIR, n)))
    if leaked:
        sweep_stale()
        pytest.fail(f"shared-memory segments left in /dev/shm: {leaked}")


@pytest.fixture(scope="session", autouse=True)
def session_temp_dir(tmp_path_factory):
    """TMPDIR for everything the tests start: torchrun's log directories, the flight records ``hcomm run`` keeps of
    a failed job, Open MPI's session files.  They land in one directory of the machine's temp dir, removed when the
    session ends, where every run used to add its own.  It is world-writable and sticky as the temp dir itself: the
    tests that play another user squat there too."""
    import shutil
    import tempfile

    import multiprocessing.util

    tmp_path_factory.getbasetemp()     # pytest's own directories stay where they were (it keeps the last three)
    multiprocessing.util.get_temp_dir()   # and multiprocessing's, which it removes itself at exit
    path = tempfile.mkdtemp(prefix="hcomm-tests-")
    os.chmod(path, 0o1777)
    old = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = path
    tempfile.tempdir = None            # this process reads TMPDIR again: the tests compare paths with their programs'
    yield path
    if old is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = old
    tempfile.tempdir = None
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def shm():
    """A private HCOMM_SIM_SHM_DIR for a launched job; the job must leave it empty."""
    import shutil

    from test_launch_helpers import private_shm_dir

    path = private_shm_dir()
    yield path
    left = os.listdir(path)
    shutil.rmtree(path, ignore_errors=True)
    assert left == [], f"segments left behind: {left}"


@pytest.fixture(scope="session", autouse=True)
def npu_extension_built():
    """Build the emulated npu device's extension once, before any test, when torch is there.

    ``hcomm run`` switches the device on for its ranks (hcomm_cffi/npu), so a torch program it starts loads the
    extension at ``import torch``; its first build (about 20 s, more under load) must not count against one
    test's timeout.  It is cached per user: later sessions find it built.
    """
    import importlib.util
    import subprocess

    if importlib.util.find_spec("torch") is None:
        return
    from hcomm_cffi.npu import build

    try:
        built = build.is_built()
    except RuntimeError:       # no usable cache directory: the npu tests say so
        return
    if not built:   # a failed build fails the npu tests themselves, with its message; not every test
        try:
            subprocess.run([sys.executable, "-c", "from hcomm_cffi.npu import build; build.load()"],
                           capture_output=True, text=True, timeout=900)
        except subprocess.TimeoutExpired:
            pass
