"""HCOMM_SIM_ABI_CHECK=1 works from an installed package: the cdef ships inside it (hcomm_cffi/_cdef.py).

Installs with ``pip install --no-deps --no-build-isolation --target`` (offline: the build
dependencies are the ones this interpreter has) from a copy of the sources, then runs a 1-rank
init + allreduce through C function pointers from a directory holding no source checkout.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from srccopy import copy_sources

SCRIPT = """
import numpy as np
import hcomm_cffi, hcomm_cffi.binding as binding
from hcomm_cffi.sim.abi_check import AbiCheckedLibrary
assert "site-packages" not in hcomm_cffi.__file__ and "{target}" in hcomm_cffi.__file__, hcomm_cffi.__file__
b = binding.get_binding()
assert isinstance(b.lib, AbiCheckedLibrary), type(b.lib)
b.set_device(0)
comm = hcomm_cffi.init(rank=0, world_size=1, root_info=b.get_root_info())
x = np.arange(8, dtype=np.float32)
out = comm.allreduce(x)
assert np.array_equal(out, x), out
comm.destroy()
try:
    b.lib.HcclGetRankId(0, 0)          # an int where a pointer is declared: refused by the C signature
except TypeError as exc:
    print("TypeError", exc)
print("ok")
"""


def test_abi_check_from_installed_package(tmp_path: Path) -> None:
    src = copy_sources(tmp_path / "src")
    target = tmp_path / "target"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
                           "--target", str(target), str(src)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600)
    if proc.returncode != 0:
        pytest.skip(f"pip cannot build the package here: {proc.stderr.strip()[-400:]}")
    assert (target / "hcomm_cffi" / "_cdef.py").is_file() and (target / "hcomm_cffi" / "_hcomm_ffi.py").is_file()
    assert not (target / "build_ffi.py").exists()

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASCEND", "HCOMM", "HCCL"))}
    env.update({"PYTHONPATH": str(target), "HCOMM_SIM_ABI_CHECK": "1", "HCOMM_BACKEND": "sim",
                "HCOMM_SIM_CHECK": "strict", "HCCL_BUFFSIZE": "8", "HOME": str(tmp_path)})
    run = subprocess.run([sys.executable, "-c", SCRIPT.format(target=target)], env=env, cwd=outside,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[-1] == "ok" and lines[0].startswith("TypeError"), lines
