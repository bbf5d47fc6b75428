"""ACL graphs from C on the emulated CANN install: tests/clients/graph_replay.cc (the shape of hcomm's
examples/02_aclgraphs demo) built with the compile line of hcomm's examples/01_communicators Makefile and run
under ``mpirun -n 4`` with the strict checker."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any, List

import pytest

from cann_install import child_env, install  # noqa: F401  (install is a fixture)

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
# libochao-huawei/hcomm@8958adbf:examples/01_communicators/01_one_device_per_process/Makefile:21-40:
#   g++ $(CXXFLAGS) $(SOURCES) $(INCS) $(LIBS), LIBS = -L$(ASCEND_LIB_DIR) -lhccl -lascendcl -L$(MPI_LIB_DIR) -lmpi
CXXFLAGS = ["-std=c++17", "-Werror", "-fstack-protector-strong", "-fPIE", "-pie", "-O2", "-s", "-Wl,-z,relro",
            "-Wl,-z,now", "-Wl,-z,noexecstack", "-Wl,--copy-dt-needed-entries"]


def _mpi_dirs(flag: str) -> List[str]:
    """Open MPI's include or library directories (``mpicc --showme:incdirs`` / ``libdirs``)."""
    out = subprocess.run(["mpicc", f"--showme:{flag}"], capture_output=True, text=True, timeout=30)
    return out.stdout.split() if out.returncode == 0 else []


def test_c_program_captures_and_replays_under_mpirun(install: Any, tmp_path: Path) -> None:  # noqa: F811
    cxx, mpirun = shutil.which("g++"), shutil.which("mpirun")
    if cxx is None or mpirun is None or shutil.which("mpicc") is None:
        pytest.skip("needs g++ and Open MPI (bash scripts/setup-test-env.sh installs them)")
    exe = tmp_path / "graph_replay"
    cmd = [cxx, *CXXFLAGS, str(REPO / "tests" / "clients" / "graph_replay.cc"), f"-I{install.include_dir}",
           *[f"-I{d}" for d in _mpi_dirs("incdirs")], f"-L{install.lib_dir}", "-lhccl", "-lascendcl",
           *[f"-L{d}" for d in _mpi_dirs("libdirs")], "-lmpi", "-o", str(exe)]
    env = child_env(install, str(REPO), HCOMM_SIM_CHECK="strict")
    built = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert built.returncode == 0, built.stderr
    extra = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    proc = subprocess.run([mpirun, *extra, "--oversubscribe", "-n", "4", str(exe)], capture_output=True, text=True,
                          timeout=240, env=env)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    for rank in range(4):
        assert f"rank {rank}: graphs OK" in proc.stdout, proc.stdout
