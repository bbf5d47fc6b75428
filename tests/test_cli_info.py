"""``hcomm info`` run as a subprocess, without CANN and with a fake CANN tree."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional

import pytest

REPO = Path(__file__).resolve().parents[1]
SYSTEM_CANN = any(os.path.exists(p) for p in (
    "/usr/local/Ascend/cann/lib64", "/usr/local/Ascend/ascend-toolkit/latest/lib64", "/usr/local/Ascend/latest/lib64",
))


def run_info(tmp_path: Path, args: List[str], extra: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ASCEND", "HCOMM", "HCCL")) and k not in ("LD_LIBRARY_PATH", "PYTHONPATH")}
    env.update({"PYTHONPATH": str(REPO), "HOME": str(tmp_path)})
    env.update(extra or {})
    return subprocess.run([sys.executable, "-m", "hcomm_cffi", "info", *args], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(SYSTEM_CANN, reason="a CANN install under /usr/local/Ascend is present")
def test_info_text_without_cann(tmp_path: Path) -> None:
    proc = run_info(tmp_path, [])
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith("hcomm_cffi 0.1.0\n")
    assert "backend: sim (HCOMM_BACKEND unset and no CANN installation was found" in out
    assert "libhcomm.so: not found; searched:" in out
    assert "    - $ASCEND_HOME_PATH/lib64 (not set)" in out
    assert "HCOMM_BACKEND=(unset)" in out and "HCCL_BUFFSIZE=(unset)" in out
    assert "cffi " in out and "numpy " in out and "torch " in out


@pytest.mark.skipif(SYSTEM_CANN, reason="a CANN install under /usr/local/Ascend is present")
def test_info_json_without_cann(tmp_path: Path) -> None:
    proc = run_info(tmp_path, ["--json"], {"HCCL_EXEC_TIMEOUT": "600"})
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["hcomm_cffi"] == "0.1.0"
    assert info["backend"]["name"] == "sim" and "HCOMM_BACKEND unset" in info["backend"]["reason"]
    assert set(info["libraries"]) == {"hcomm", "hccl", "acl"}
    assert info["libraries"]["hcomm"]["path"] is None
    assert "$HCOMM_CANN_LIB_DIR (not set)" in info["libraries"]["hcomm"]["searched"]
    assert info["environment"]["HCCL_EXEC_TIMEOUT"] == "600"
    assert info["environment"]["HCOMM_BACKEND"] is None
    assert info["python"]["version"] == ".".join(map(str, sys.version_info[:3]))
    assert "numpy" in info["packages"] and "torch" in info["packages"]


def test_info_with_fake_cann_tree_reads_version(tmp_path: Path) -> None:
    prefix = tmp_path / "cann"
    lib64 = prefix / "lib64"
    lib64.mkdir(parents=True)
    for name in ("libhcomm.so", "libhccl.so", "libascendcl.so"):
        (lib64 / name).write_bytes(b"")
    (prefix / "version.info").write_text("Version=8.5.0\nversion_dir=8.5\n")
    proc = run_info(tmp_path, ["--json"], {"ASCEND_HOME_PATH": str(prefix)})
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["backend"]["name"] == "cann"
    assert info["libraries"]["acl"]["path"] == str(lib64 / "libascendcl.so")
    assert info["libraries"]["hcomm"]["version"] == "8.5.0"
    assert info["libraries"]["hcomm"]["found_in"] == "$ASCEND_HOME_PATH/lib64"
    text = run_info(tmp_path, [], {"ASCEND_HOME_PATH": str(prefix)}).stdout
    assert f"libhcomm.so: {lib64 / 'libhcomm.so'} (version 8.5.0, via $ASCEND_HOME_PATH/lib64)" in text


def test_info_with_forced_and_invalid_backend(tmp_path: Path) -> None:
    proc = run_info(tmp_path, [], {"HCOMM_BACKEND": "sim"})
    assert proc.returncode == 0 and "backend: sim (HCOMM_BACKEND=sim)" in proc.stdout
    proc = run_info(tmp_path, [], {"HCOMM_BACKEND": "gpu"})
    assert proc.returncode == 0, proc.stderr
    assert "backend: invalid (HCOMM_BACKEND='gpu' is not a backend; expected one of sim, cann)" in proc.stdout
