"""Build the wheel in a fresh venv, check it is pure Python with the generated cffi module, install and import it."""
from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path


from srccopy import copy_sources


def run(cmd: list, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    # without PYTHONPATH: a checkout on it (how the suite runs a worktree) would shadow the installed wheel
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def test_wheel_builds_installs_and_imports(tmp_path: Path) -> None:
    # Build from a copy so the build never writes into the checkout (build/, egg-info, generated module).
    src = copy_sources(tmp_path / "src")

    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)], tmp_path)
    py = venv / "bin" / "python"
    dist = tmp_path / "dist"
    run([str(py), "-m", "pip", "wheel", "--no-deps", "-w", str(dist), str(src)], tmp_path)

    wheels = list(dist.glob("*.whl"))
    assert len(wheels) == 1, wheels
    wheel = wheels[0]
    assert wheel.name.startswith("hcomm_cffi-0.1.0-") and wheel.name.endswith("py3-none-any.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for required in ("hcomm_cffi/_hcomm_ffi.py", "hcomm_cffi/py.typed", "hcomm_cffi/binding.py",
                     "hcomm_cffi/lib/loader.py", "hcomm_cffi/cli/info.py", "hcomm/__init__.py",
                     "hcomm_cffi/npu/csrc/npu_device.cpp", "hcomm_cffi_npu.pth"):
        assert required in names, required
    entry_points = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/entry_points.txt")))
    assert "[torch.backends]\nhcomm_emulated_npu = hcomm_cffi.npu:autoload" in entry_points.decode(), entry_points
    assert not any(n.endswith(".so") for n in names)

    run([str(py), "-m", "pip", "install", "--no-deps", str(wheel)], tmp_path)
    run([str(py), "-m", "pip", "install", "cffi", "numpy"], tmp_path)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    code = (
        "import hcomm_cffi, hcomm_cffi._hcomm_ffi as m, hcomm_cffi.binding, hcomm_cffi.initializers as i, hcomm;"
        "assert hcomm is hcomm_cffi;"
        "from hcomm_cffi._ffi import ffi;"
        "assert ffi is m.ffi and ffi.sizeof('HcclCommConfig') == 2248;"
        "assert 'site-packages' in hcomm_cffi.__file__, hcomm_cffi.__file__;"
        # the .pth ran at start (its finder is on sys.meta_path) and finds no torch_npu without the switch
        "import sys, importlib.util;"
        "assert any(type(f).__name__ == 'HcommEmulatedTorchNpuFinder' for f in sys.meta_path), sys.meta_path;"
        "assert importlib.util.find_spec('torch_npu') is None;"
        "print(len(bytes(ffi.buffer(i.comm_config_init()))))"
    )
    proc = run([str(py), "-c", code], outside)
    assert proc.stdout.strip() == "2248"
    proc = run([str(py), "-m", "hcomm_cffi", "info", "--json"], outside)
    assert '"hcomm_cffi": "0.1.0"' in proc.stdout
