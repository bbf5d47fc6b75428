"""Clients nobody on this project would write against the emulator run unchanged on the emulated CANN install.

* a ctypes client in the style of vllm-ascend's wrapper (tests/clients/ctypes_hccl.py): only libhccl.so
  from HCCL_SO_PATH, its functions declared in a table and resolved on that one handle;
* pyhccl from the package index (pybind11; its own calls), skipped when it is not installed;
* a C++ program in the shape of the vendor's samples (tests/clients/threads_collectives.cc: one process,
  one host thread per device, every collective) built with their Makefile's exact compile line;
* the install's own start-up: after ``import torch``, with another python3 first on PATH, and a failed
  start that every call reports.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest

from cann_install import child_env, install  # noqa: F401  (install is a fixture)

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
CLIENTS = REPO / "tests" / "clients"
# hicann/hccl@09300b70df9a:examples/02_collectives/01_allreduce/Makefile:16-37 (every sample's Makefile has it):
#   g++ $(CXXFLAGS) $(SOURCES) $(INCS) $(LIBS) -o ${TARGET}, LIBS = -L$(ASCEND_LIB_DIR) -lhccl -lascendcl
VENDOR_CXXFLAGS = ["-std=c++14", "-Werror", "-fstack-protector-strong", "-fPIE", "-pie", "-O2", "-s",
                   "-Wl,-z,relro", "-Wl,-z,now", "-Wl,-z,noexecstack", "-Wl,--copy-dt-needed-entries"]
HCCL_E_INTERNAL = 4
ACL_ERROR_RT_INTERNAL_ERROR = 507000


def _env(install: Any, **extra: str) -> Dict[str, str]:
    return child_env(install, str(REPO), **extra)


def _run_ranks(argv: List[str], n: int, env: Dict[str, str], tmp_path: Path, timeout: float = 240) -> List[Any]:
    """Start ``argv RANK N ROOTFILE`` once per rank; every rank's JSON line, or a failure with its output."""
    root_file = str(tmp_path / "root_info")
    procs = [subprocess.Popen([*argv[:2], str(rank), str(n), root_file, *argv[2:]], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for rank in range(n)]
    outputs = []
    try:
        for proc in procs:
            stdout, stderr = proc.communicate(timeout=timeout)
            outputs.append((proc.returncode, stdout, stderr))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for rank, (code, stdout, stderr) in enumerate(outputs):
        assert code == 0, f"rank {rank} exited {code}:\n{stdout}\n{stderr}"
    return [json.loads(stdout.strip().splitlines()[-1]) for _, stdout, _ in outputs]


def _client(install: Any, tmp_path: Path, script: str, n: int, torch_first: bool, **env: str) -> List[Any]:
    """Every rank's results of client ``script`` (``--torch``: it imports torch before its first call)."""
    import importlib.util

    if torch_first and importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed (pip install -e '.[torch]')")
    argv = [sys.executable, str(CLIENTS / script)] + (["--torch"] if torch_first else [])
    return _run_ranks(argv, n, _env(install, **env), tmp_path)


# ---------------------------------------------------------------------------------------------
# the libraries' dependencies

def test_libhccl_depends_on_libhcomm_and_libacl_rt_as_cann(install: Any) -> None:
    """A dlsym on libhccl.so's handle finds libhcomm.so's and libacl_rt.so's functions (the vendor's DT_NEEDED)."""
    readelf = shutil.which("readelf")
    if readelf is not None:
        needed = {}
        for name in ("libhccl.so", "libascendcl.so"):
            text = subprocess.run([readelf, "-d", os.path.join(install.lib_dir, name)], capture_output=True,
                                  text=True, timeout=30).stdout
            needed[name] = {line.split("[")[1].rstrip("]") for line in text.splitlines() if "(NEEDED)" in line}
        assert {"libhcomm.so", "libacl_rt.so"} <= needed["libhccl.so"]
        assert "libacl_rt.so" in needed["libascendcl.so"]
    code = ("import ctypes, sys; lib = ctypes.CDLL(sys.argv[1]); f = lib.HcclGetErrorString; "
            "f.restype = ctypes.c_char_p; print(f(4).decode(), bool(lib.HcclGetRootInfo), bool(lib.aclrtSetDevice)); "
            "m = lib.aclGetRecentErrMsg; m.restype = ctypes.c_char_p; "
            "print(lib.HcclGetRootInfoScalable(None), lib.HcommCcuKernelLaunch(), m().decode())")
    proc = subprocess.run([sys.executable, "-c", code, os.path.join(install.lib_dir, "libhccl.so")],
                          capture_output=True, text=True, timeout=120, env=_env(install))
    assert proc.returncode == 0, proc.stderr
    first, stubs = proc.stdout.splitlines()
    assert first.split() == ["internal", "error", "True", "True"]
    # a function of the current vendor headers the emulator lacks is a stub: HCCL_E_NOT_SUPPORT, named
    assert stubs.startswith("5 5 HcommCcuKernelLaunch is not implemented by the hcomm_cffi emulator"), stubs


# ---------------------------------------------------------------------------------------------
# a ctypes client that loads only libhccl.so

def _expected(n: int, rank: int, per: int, base: int) -> Dict[str, List[float]]:
    count = per * n
    xs = [[float(r * base + i) for i in range(count)] for r in range(n)]
    return {
        "allreduce": [sum(x[i] for x in xs) for i in range(count)],
        "allgather": [v for x in xs for v in x[:per]],
        "ring": xs[(rank - 1) % n],
    }


@pytest.mark.parametrize("n,torch_first", [(2, False), (4, True)])
def test_ctypes_client_loading_only_libhccl(install: Any, tmp_path: Path, n: int, torch_first: bool) -> None:
    results = _client(install, tmp_path, "ctypes_hccl.py", n, torch_first,
                      HCCL_SO_PATH=os.path.join(install.lib_dir, "libhccl.so"))
    for rank, out in enumerate(results):
        want = _expected(n, rank, 8, 100)
        assert out["allreduce"] == want["allreduce"] and out["allgather"] == want["allgather"]
        assert out["ring"] == want["ring"]
        assert out["broadcast"] == [float((n - 1) * 100 + i) for i in range(8 * n)]
        assert out["reduce_scatter"] == [float((n - 1) * 100 + rank * 8 + i) for i in range(8)]
        assert out["size"] == n and out["error string"] == "internal error"


# ---------------------------------------------------------------------------------------------
# pyhccl from the package index

@pytest.mark.parametrize("n,torch_first", [(2, True), (4, False), (4, True)])
def test_pyhccl_runs_its_own_calls(install: Any, tmp_path: Path, n: int, torch_first: bool) -> None:
    pytest.importorskip("pyhccl", reason="pyhccl is not installed (the test extra: pip install -e '.[test]')")
    results = _client(install, tmp_path, "pyhccl_client.py", n, torch_first,
                      PYHCCL_LIBRARY=os.path.join(install.lib_dir, "libhccl.so"))
    for rank, out in enumerate(results):
        want = _expected(n, rank, 4, 10)
        assert out["rank"] == rank and out["size"] == n and out["by name"] and out["in group"]
        assert out["allreduce"] == want["allreduce"] and out["allgather"] == want["allgather"]
        assert out["ring"] == want["ring"]


# ---------------------------------------------------------------------------------------------
# C++ in the vendor samples' shape, built with their Makefile's compile line

@pytest.fixture(scope="module")
def threads_program(install: Any, tmp_path_factory: Any) -> str:
    cxx = shutil.which("g++")
    if cxx is None:
        pytest.skip("no g++ here: the vendor samples' Makefile compiles with g++")
    out = tmp_path_factory.mktemp("vendor_style") / "threads_collectives"
    cmd = [cxx, *VENDOR_CXXFLAGS, str(CLIENTS / "threads_collectives.cc"), f"-I{install.include_dir}",
           f"-L{install.lib_dir}", "-lhccl", "-lascendcl", "-o", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=_env(install))
    assert proc.returncode == 0, proc.stderr
    return str(out)


@pytest.mark.parametrize("devices,runs", [(2, 2), (4, 4), (8, 3)])
def test_one_thread_per_device_every_collective(install: Any, threads_program: str, devices: int, runs: int) -> None:
    """Several ranks in one process, each destroying its communicator while others still poll; repeated."""
    env = _env(install, HCOMM_SIM_DEVICE_COUNT=str(devices), HCOMM_SIM_CHECK="strict")
    for run in range(runs):
        proc = subprocess.run([threads_program, "3"], capture_output=True, text=True, timeout=300, env=env)
        assert proc.returncode == 0, f"run {run}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        for rank in range(devices):
            assert f"rank {rank}: all collectives OK x 3" in proc.stdout


# ---------------------------------------------------------------------------------------------
# the header: what C++ clients of the vendor headers expect

def test_vendor_include_paths_acl_codes_and_cpp_constants(install: Any, tmp_path: Path) -> None:
    cxx = shutil.which("g++")
    if cxx is None:
        pytest.skip("no g++ here")
    src = tmp_path / "client.cc"
    src.write_text(
        "#include <hccl/hccl.h>\n#include <hccl/hcomm_primitives.h>\n#include <hccl/hccl_res_expt.h>\n"
        "#include <hccl/hccl_rank_graph.h>\n#include <hcomm/hcomm_primitives.h>\n#include <acl/acl_rt.h>\n"
        "#include <acl/error_codes/rt_error_codes.h>\n#include <ccu/ccu_launch.h>\n"
        "namespace mine { constexpr unsigned HCCL_ROOT_INFO_BYTES = 7; constexpr unsigned COMM_NAME_MAX_LENGTH = 9; }\n"
        "static_assert(ACL_SUCCESS == 0 && ACL_ERROR_RT_INTERNAL_ERROR == 507000, \"acl codes\");\n"
        "static_assert(ACL_ERROR_INVALID_PARAM == 100000 && ACL_ERROR_RT_STREAM_SYNC_TIMEOUT == 507046, \"codes\");\n"
        "static_assert(HCCL_ROOT_INFO_BYTES == 4108 && mine::HCCL_ROOT_INFO_BYTES == 7, \"const objects\");\n"
        "int main() { char root[HCCL_ROOT_INFO_BYTES];\n"
        "             return (int)sizeof root - 4108 + mine::COMM_NAME_MAX_LENGTH - 9; }\n")
    proc = subprocess.run([cxx, "-std=c++14", "-Wall", "-Werror", f"-I{install.include_dir}", "-o",
                           str(tmp_path / "client"), str(src)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


# ---------------------------------------------------------------------------------------------
# starting the embedded interpreter

C_PROBE = """\
#include <hccl/hccl.h>
#include <acl/acl.h>
#include <stdio.h>
int main(void) {
    uint32_t n = 0;
    HcclRootInfo root;
    int acl = aclrtGetDeviceCount(&n);
    int set = aclrtSetDevice(0);
    int hccl = HcclGetRootInfo(&root);
    const char *why = aclGetRecentErrMsg();
    printf("acl=%d set=%d hccl=%d devices=%u why=%s\\n", acl, set, hccl, n, why ? why : "(none)");
    return 0;
}
"""


def _probe(install: Any, tmp_path: Path) -> str:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler here")
    (tmp_path / "probe.c").write_text(C_PROBE)
    exe = tmp_path / "probe"
    subprocess.run([cc, f"-I{install.include_dir}", str(tmp_path / "probe.c"), f"-L{install.lib_dir}", "-lhccl",
                    "-lhcomm", "-lacl_rt", "-o", str(exe)], check=True, capture_output=True, timeout=120)
    return str(exe)


def test_c_program_starts_the_installs_python_whatever_is_on_path(install: Any, tmp_path: Path) -> None:
    """Another python3 first on PATH and another Python's packages on PYTHONPATH do not reach the interpreter."""
    exe = _probe(install, tmp_path)
    other_bin = tmp_path / "other-bin"
    other_bin.mkdir()
    other = next((p for p in ("/usr/bin/python3", "/usr/local/bin/python3") if os.path.exists(p)
                  and os.path.realpath(p) != os.path.realpath(sys.executable)), None)
    if other is not None:
        os.symlink(other, other_bin / "python3")
    else:                                   # a python3 that cannot run anything
        (other_bin / "python3").write_text("#!/bin/sh\nexit 1\n")
        (other_bin / "python3").chmod(0o755)
    broken = tmp_path / "other-site" / "numpy"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('the numpy of another Python')\n")
    env = _env(install)
    env["PATH"] = f"{other_bin}{os.pathsep}{env['PATH']}"
    env["PYTHONPATH"] = f"{tmp_path / 'other-site'}{os.pathsep}{env['PYTHONPATH']}"
    proc = subprocess.run([exe], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "acl=0 set=0 hccl=0 devices=" in proc.stdout, proc.stdout + proc.stderr


def test_a_failed_start_makes_every_call_fail_naming_the_cause(tmp_path: Path) -> None:
    """An install whose emulator cannot start answers every call with an error code and the reason, never 0."""
    from hcomm_cffi.cannlib.build import BuildError, check_toolchain

    try:
        check_toolchain()
    except BuildError as exc:
        pytest.skip(f"cannot build the emulated CANN libraries here: {exc}")
    package = tmp_path / "pkg"
    shutil.copytree(REPO / "hcomm_cffi", package / "hcomm_cffi", ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path / "cann"
    env = dict(os.environ, PYTHONPATH=str(package))
    subprocess.run([sys.executable, "-m", "hcomm_cffi", "sim", "build-libs", "--out", str(out)], check=True,
                   capture_output=True, timeout=300, env=env, cwd=str(tmp_path))      # the copy builds it
    # the package the install imports is damaged after the build
    (package / "hcomm_cffi" / "cannlib" / "embedded.py").write_text("raise ImportError('damaged on purpose')\n")

    class Built:
        root = str(out)
        lib_dir = str(out / "lib64")
        include_dir = str(out / "include")

    exe = _probe(Built, tmp_path)
    run_env = child_env(Built, str(package))
    proc = subprocess.run([exe], capture_output=True, text=True, timeout=120, env=run_env)
    assert proc.returncode == 0, proc.stderr
    assert f"acl={ACL_ERROR_RT_INTERNAL_ERROR} set={ACL_ERROR_RT_INTERNAL_ERROR} hccl={HCCL_E_INTERNAL}" in proc.stdout
    assert "why=the emulator did not start: ImportError: damaged on purpose" in proc.stdout
    assert "HcclGetRootInfo returns 4: the emulator did not start: ImportError: damaged on purpose" in proc.stderr


# ---------------------------------------------------------------------------------------------
# a custom operator's host side

def test_custom_op_host_side_under_the_default_checker(install: Any, tmp_path: Path) -> None:
    """Exported threads, an engine context, and a launch notify recorded while the rank goes idle (warn mode
    reports it and leaves it for the kernel's wait: it used to be cleared, and the kernel waited forever)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler here")
    exe = tmp_path / "custom_op_host"
    subprocess.run([cc, "-std=c11", "-Wall", "-Werror", f"-I{install.include_dir}", str(CLIENTS / "custom_op_host.c"),
                    f"-L{install.lib_dir}", "-lhcomm", "-lhccl", "-lacl_rt", "-o", str(exe)], check=True,
                   capture_output=True, timeout=120)
    proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120,
                          env=_env(install, HCOMM_SIM_CHECK="warn", HCCL_EXEC_TIMEOUT="20"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "custom op OK" in proc.stdout
    assert "thread notify 0 was recorded but never waited on" in proc.stderr      # reported, not cleared
