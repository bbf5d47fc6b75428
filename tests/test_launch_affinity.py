"""CPU binding of local ranks (hcomm run --bind-to), planned from the launcher's affinity and NUMA nodes."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hcomm_cffi.launch import affinity


def test_parse_cpulist() -> None:
    assert affinity.parse_cpulist("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    with pytest.raises(ValueError, match="'x' is not N or N-M"):
        affinity.parse_cpulist("0,x")


def test_auto_binds_cores_until_oversubscribed() -> None:
    cpus = [0, 1, 2, 3]
    assert affinity.plan("auto", 4, cpus) == [[0], [1], [2], [3]]
    assert affinity.plan("auto", 5, cpus) == [None] * 5          # more ranks than cores: mpirun binds none
    assert affinity.plan("core", 6, cpus) == [[0], [1], [2], [3], [0], [1]]   # asked for: wraps around
    assert affinity.plan("none", 2, cpus) == [None, None]


def test_numa_spreads_ranks_over_nodes(tmp_path: Path) -> None:
    for node, cpus in (("node0", "0-3"), ("node1", "4-7"), ("node2", "")):
        (tmp_path / node).mkdir()
        (tmp_path / node / "cpulist").write_text(cpus + "\n")
    nodes = affinity.numa_nodes([1, 2, 5, 6, 7], root=str(tmp_path))   # only usable cores count
    assert nodes == [[1, 2], [5, 6, 7]]
    assert affinity.plan("numa", 3, [1, 2, 5, 6, 7], nodes) == [[1, 2], [5, 6, 7], [1, 2]]
    assert affinity.numa_nodes([0, 1], root=str(tmp_path / "missing")) == [[0, 1]]
    assert affinity.describe("numa", [5, 6, 7]) == "numa:5-7" and affinity.describe("auto", [3]) == "core:3"


def test_bad_mode_is_named() -> None:
    with pytest.raises(ValueError, match=r"--bind-to='socket'; expected one of auto, core, numa, none"):
        affinity.plan("socket", 2, [0, 1])


SCRIPT = "import os; print('CPUS', sorted(os.sched_getaffinity(0)), os.environ['HCOMM_RUN_BIND'])"


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two usable cores")
def test_hcomm_run_binds_each_rank_to_its_own_core() -> None:
    out = subprocess.run([sys.executable, "-m", "hcomm_cffi", "run", "-n", "2", "--bind-to", "core", "--",
                          sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    cores = sorted(os.sched_getaffinity(0))
    got = {line.split()[0]: line.split(" ", 2)[2] for line in out.stdout.splitlines() if "CPUS" in line}
    assert got == {"[0]": f"[{cores[0]}] core:{cores[0]}", "[1]": f"[{cores[1]}] core:{cores[1]}"}


def test_hcomm_run_none_leaves_affinity_alone() -> None:
    out = subprocess.run([sys.executable, "-m", "hcomm_cffi", "run", "-n", "2", "--bind-to", "none", "--",
                          sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    mine = str(sorted(os.sched_getaffinity(0)))
    assert [line.split(" ", 2)[2] for line in out.stdout.splitlines() if "CPUS" in line] == [f"{mine} none"] * 2


TOPO = """\tNPU0       NPU1       CPU Affinity
NPU0       X          HCCS       {a}
NPU1       HCCS       X          {b}
"""


def test_parse_npu_topo_and_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    from hcomm_cffi import cpus
    text = TOPO.format(a="144-167", b="0")
    assert cpus.parse_npu_topo(text) == {0: set(range(144, 168)), 1: {0}}
    assert cpus.parse_npu_topo("no table here") == {}
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "1,0")        # logical 0 is physical NPU1
    assert cpus.npu_cpu_affinity(0, TOPO.format(a="1", b="0")) == ([0] if 0 in os.sched_getaffinity(0) else None)


PIN = ("import os, hcomm_cffi.api.world as w; got = w.pin_to_device(0); "
       "print('PIN', got, sorted(os.sched_getaffinity(0)))")


def test_cann_init_pins_the_issuing_thread_to_its_device(tmp_path: Path) -> None:
    """A fake npu-smi on PATH says NPU0 is affine to one usable core: the thread is pinned there."""
    core = sorted(os.sched_getaffinity(0))[-1]
    tool = tmp_path / "npu-smi"
    tool.write_text("#!/bin/sh\ncat <<'EOF'\n" + TOPO.format(a=str(core), b="0") + "EOF\n")
    tool.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"}
    env.pop("HCOMM_RUN_BIND", None)
    out = subprocess.run([sys.executable, "-c", PIN], capture_output=True, text=True, env=env, timeout=60)
    assert f"PIN [{core}] [{core}]" in out.stdout, out.stdout + out.stderr
    env["HCOMM_RUN_BIND"] = "core:0"                                 # the launcher bound it: left alone
    out = subprocess.run([sys.executable, "-c", PIN], capture_output=True, text=True, env=env, timeout=60)
    assert "PIN None" in out.stdout, out.stdout + out.stderr
