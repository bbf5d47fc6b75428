"""The emulated CANN install (``hcomm sim build-libs``): the cann backend, C programs and the loader against it.

The libraries are built once per session into a temporary directory.  The multi-rank tests run
with ``HCOMM_BACKEND=cann`` and ``HCOMM_CANN_LIB_DIR`` pointing at it, so every call goes through
lib/cann.py, real ``dlopen``ed libraries and the C calling convention into the embedded emulator.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import pytest

from cann_install import child_env, install  # noqa: F401  (install is a fixture)
from multiproc import run_ranks

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "c" / "ring_allreduce.c"
COLLECTIVES = ("allreduce", "broadcast", "allgather", "reduce_scatter", "reduce", "alltoall", "barrier")
ALGORITHMS = ("ring", "mesh", "tree", "hierarchical", "native")
ALLTOALL_ALGORITHMS = ("ring", "mesh", "native")        # tree and hierarchical do not implement alltoall
ACL_ERROR_RT_INTERNAL_ERROR = 507000
HCCL_ROOT_INFO_BYTES = 4108


def _cann_env(install: Any) -> Dict[str, str]:
    return {"HCOMM_BACKEND": "cann", "HCOMM_CANN_LIB_DIR": install.lib_dir}


def _child_env(install: Any, **extra: str) -> Dict[str, str]:
    return child_env(install, str(REPO), **extra)


# ---------------------------------------------------------------------------------------------
# the install itself

def test_layout_reuse_and_marker(install: Any) -> None:
    from hcomm_cffi.cannlib.build import build_libs
    from hcomm_cffi.lib.emulated import emulated_install

    for name in ("libhcomm.so", "libhccl.so", "libacl_rt.so", "libascendcl.so", "libhcomm_sim_core.so"):
        assert os.path.isfile(os.path.join(install.lib_dir, name)), name
    assert os.path.isfile(os.path.join(install.include_dir, "hcomm_sim.h"))
    assert os.path.isfile(os.path.join(install.include_dir, "hccl", "hccl.h"))
    text = Path(install.set_env).read_text()
    assert f"export ASCEND_HOME_PATH={install.root}" in text and "LD_LIBRARY_PATH" in text
    marker = emulated_install(os.path.join(install.lib_dir, "libhcomm.so"))
    assert marker is not None and marker["package_version"]
    assert build_libs(install.root).built is False            # up to date: reused, not rebuilt


def test_rebuilt_when_the_package_or_cdef_changes(install: Any, tmp_path: Path) -> None:
    from hcomm_cffi.cannlib.build import build_libs
    from hcomm_cffi.lib.emulated import MARKER_FILE, read_marker

    copy = tmp_path / "cann"
    shutil.copytree(install.root, copy)
    marker = copy / MARKER_FILE
    marker.write_text(marker.read_text().replace("cdef=", "cdef=stale"))
    assert build_libs(str(copy)).built is True
    assert read_marker(str(copy)) == read_marker(install.root)


def test_missing_compiler_and_headers_are_named(monkeypatch: Any, tmp_path: Path) -> None:
    import sysconfig

    from hcomm_cffi.cannlib.build import BuildError, check_toolchain

    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    with pytest.raises(BuildError, match=r"no C compiler: .*no-such-cc.* was not found .* set CC"):
        check_toolchain()
    monkeypatch.delenv("CC")
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler here to get past the compiler check")
    paths = dict(sysconfig.get_paths(), include=str(tmp_path / "include"))
    monkeypatch.setattr(sysconfig, "get_paths", lambda: paths)
    with pytest.raises(BuildError, match=r"no Python headers: .*include/Python.h does not exist; install .*-dev"):
        check_toolchain()


def test_each_library_exports_its_vendor_functions_only(install: Any) -> None:
    """libhccl.so has the collectives, libacl_rt.so the acl* functions, libhcomm.so the rest (as lib/cann.py expects)."""
    out = {}
    for name in ("libhcomm.so", "libhccl.so", "libacl_rt.so"):
        nm = subprocess.run(["nm", "-D", "--defined-only", os.path.join(install.lib_dir, name)], capture_output=True,
                            text=True, timeout=30)
        if nm.returncode != 0:
            pytest.skip(f"nm is not usable here: {nm.stderr.strip()}")
        out[name] = {line.split()[-1] for line in nm.stdout.splitlines() if " T " in line}
    assert {"HcclAllReduce", "HcclBarrier", "HcclSend"} <= out["libhccl.so"]
    assert "HcclAllReduce" not in out["libhcomm.so"] and "aclrtMalloc" not in out["libhcomm.so"]
    assert {"HcclCommInitRootInfo", "HcommWriteOnThread", "HcommSimBootstrapRootInfo"} <= out["libhcomm.so"]
    assert {"aclrtMalloc", "aclrtSynchronizeStream"} <= out["libacl_rt.so"]
    assert "HcclSymWinGetPeerPointer" not in set().union(*out.values())   # device library only, as on CANN


def test_header_initializers_give_the_python_bytes(install: Any, tmp_path: Path) -> None:
    """Every static inline initializer of hcomm_sim.h writes the bytes of hcomm_cffi.initializers (0x5A/0xA5 prefill)."""
    from hcomm_cffi import initializers
    from hcomm_cffi._ffi import ffi
    from hcomm_cffi.cannlib.c_initializers import C_INITIALIZERS, _signature

    calls = []
    for name in C_INITIALIZERS:
        _, _, ctype, _, count = _signature(getattr(initializers, name))
        call = f"{name}(({ctype} *)buf, 2)" if count else f"{name}(({ctype} *)buf)"
        calls.append(f'    for (p = 0; p < 2; p++) {{ memset(buf, p ? 0xA5 : 0x5A, sizeof buf); {call}; '
                     f'dump("{name}", buf, {2 if count else 1} * sizeof({ctype})); }}')
    src = tmp_path / "inits.c"
    src.write_text('#include <hcomm_sim.h>\n#include <stdio.h>\n'
                   'static void dump(const char *n, const unsigned char *b, size_t len) {\n'
                   '    size_t i; printf("%s ", n); for (i = 0; i < len; i++) printf("%02x", b[i]); printf("\\n");\n}\n'
                   'int main(void) {\n    static unsigned char buf[8192]; int p;\n' + "\n".join(calls)
                   + "\n    return 0;\n}\n")
    exe = tmp_path / "inits"
    subprocess.run(["cc", "-std=c11", "-Wall", "-Werror", "-I", install.include_dir, "-o", str(exe), str(src)],
                   check=True, timeout=120)
    lines = subprocess.run([str(exe)], capture_output=True, text=True, check=True, timeout=30).stdout.splitlines()
    expected: List[str] = []
    for name in C_INITIALIZERS:
        _, _, ctype, _, count = _signature(getattr(initializers, name))
        n = 2 if count else 1
        for pattern in (0x5A, 0xA5):
            buf = ffi.new(f"{ctype}[{n}]")
            ffi.memmove(buf, bytes((pattern,)) * ffi.sizeof(buf), ffi.sizeof(buf))
            if count:                 # arrays for the array initializers, a pointer for the single-struct ones
                getattr(initializers, name)(buf, n)
            else:
                getattr(initializers, name)(ffi.cast(f"{ctype} *", buf))
            expected.append(f"{name} {bytes(ffi.buffer(buf)).hex()}")
    assert lines == expected


# ---------------------------------------------------------------------------------------------
# Python over the cann backend: every collective x algorithm, p2p, an error

def _collectives_body(rank: int, n: int, root: bytes) -> Dict[str, Any]:
    import hcomm_cffi as hcomm
    from hcomm_cffi.binding import get_binding
    from hcomm_cffi.lib.cann import CannLibrary

    w = hcomm.init(rank=rank, world_size=n, root_info=root)
    out: Dict[str, Any] = {"lib": type(get_binding().lib).__name__}
    assert isinstance(get_binding().lib, CannLibrary)
    try:
        def x() -> np.ndarray:          # a fresh input for every call (some collectives work in place)
            return (np.arange(12, dtype=np.float32) + 1) * (rank + 1)

        for algo in ALGORITHMS:
            out[f"allreduce/{algo}"] = w.allreduce(x(), algorithm=algo).ravel().tolist()
            out[f"broadcast/{algo}"] = w.broadcast(x(), root=1, algorithm=algo).ravel().tolist()
            out[f"allgather/{algo}"] = w.allgather(x(), algorithm=algo).ravel().tolist()
            out[f"reduce_scatter/{algo}"] = w.reduce_scatter(x(), algorithm=algo).ravel().tolist()
            red = w.reduce(x(), root=0, algorithm=algo)
            out[f"reduce/{algo}"] = red.ravel().tolist() if rank == 0 else None
            if algo in ALLTOALL_ALGORITHMS:
                out[f"alltoall/{algo}"] = w.alltoall(x(), algorithm=algo).ravel().tolist()
            w.barrier(algorithm=algo)
            out[f"barrier/{algo}"] = True
        right, left = (rank + 1) % n, (rank - 1) % n
        req = w.isend(x(), dst=right)
        got = w.recv(np.empty(12, np.float32), src=left)
        req.wait(30)
        out["p2p"] = got.tolist()
    finally:
        hcomm.finalize()
    return out


def test_cann_backend_runs_every_collective_and_algorithm(install: Any) -> None:
    n = 4
    results = run_ranks(n, _collectives_body, timeout=120, env={**_cann_env(install), "HCOMM_TOPOLOGY": "2x2"})
    xs = [(np.arange(12, dtype=np.float32) + 1) * (r + 1) for r in range(n)]
    total = sum(xs)
    for rank, out in enumerate(results):
        assert out["lib"] == "CannLibrary"
        for algo in ALGORITHMS:
            assert out[f"allreduce/{algo}"] == total.tolist(), (rank, algo)
            assert out[f"broadcast/{algo}"] == xs[1].tolist(), (rank, algo)
            assert out[f"allgather/{algo}"] == np.concatenate(xs).tolist(), (rank, algo)
            assert out[f"reduce_scatter/{algo}"] == total[rank * 3:(rank + 1) * 3].tolist(), (rank, algo)
            if rank == 0:
                assert out[f"reduce/{algo}"] == total.tolist(), algo
            if algo in ALLTOALL_ALGORITHMS:
                assert out[f"alltoall/{algo}"] == np.concatenate([x[rank * 3:(rank + 1) * 3] for x in xs]).tolist()
            assert out[f"barrier/{algo}"]
        assert out["p2p"] == xs[(rank - 1) % n].tolist()


def _mismatch_body(rank: int, n: int, root: bytes) -> List[str]:
    """The cann backend (staging, no host tasks): the signature handshake is compared once the call completed."""
    import hcomm_cffi as hcomm

    w = hcomm.init(rank=rank, world_size=n, root_info=root)
    out = []
    try:
        for algo in ("ring", "native"):
            comm = hcomm.Comm(f"mismatch-{algo}")
            try:
                comm.allreduce(np.ones(4 if rank else 8, np.float32), algorithm=algo)
                out.append("no error")
            except hcomm.CollectiveMismatchError as exc:
                out.append(str(exc))
    finally:
        hcomm.finalize()
    return out


def test_cann_backend_catches_mismatched_collectives(install: Any) -> None:
    results = run_ranks(2, _mismatch_body, timeout=120, env={**_cann_env(install), "HCCL_EXEC_TIMEOUT": "10"})
    for rank, msgs in enumerate(results):
        for algo, msg in zip(("ring", "native"), msgs):
            assert msg.startswith(f"rank {rank} of communicator 'mismatch-{algo}': "), msg
            if "ranks disagree on the count" in msg:     # the package's handshake, compared after completion
                assert "count 8 fp32" in msg and "count 4 fp32" in msg, msg
            else:       # a library collective: the emulator's launch-order check names both calls while they wait
                assert "collective mismatch" in msg and "8 x fp32" in msg and "4 x fp32" in msg, msg


def _error_body(rank: int, n: int, root: bytes) -> str:
    from hcomm_cffi._ffi import ffi
    from hcomm_cffi.binding import Binding
    from hcomm_cffi.errors import HcclError
    from hcomm_cffi.lib import load

    b = Binding(load())
    try:
        b.get_rank_size(ffi.NULL)
    except HcclError as exc:
        return str(exc)
    return "no error"


def test_cann_backend_error_names_the_c_function_and_code(install: Any) -> None:
    text = run_ranks(1, _error_body, timeout=60, env=_cann_env(install))[0]
    assert "HcclGetRankSize" in text and "HCCL_E_PTR (2)" in text


# ---------------------------------------------------------------------------------------------
# C programs

@pytest.fixture(scope="session")
def ring_program(install: Any, tmp_path_factory: Any) -> str:
    """examples/c/ring_allreduce.c compiled as its Makefile does (-lhcomm -lhccl -lacl_rt)."""
    out = tmp_path_factory.mktemp("c_example")
    proc = subprocess.run(["cc", "-O2", "-Wall", "-Wextra", "-Werror", "-std=c11", "-I", install.include_dir,
                           "-o", str(out / "ring_allreduce"), str(EXAMPLE), "-L", install.lib_dir, "-lhcomm", "-lhccl",
                           "-lacl_rt"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return str(out / "ring_allreduce")


def _hcomm_run(install: Any, n: int, argv: List[str], **env: str) -> "subprocess.CompletedProcess[str]":
    cmd = [sys.executable, "-m", "hcomm_cffi", "run", "-n", str(n), "--timeout", "60", "--", *argv]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=_child_env(install, **env))


@pytest.mark.parametrize("n", [2, 4])
def test_c_ring_allreduce_under_hcomm_run(install: Any, ring_program: str, n: int) -> None:
    # HCOMM_BACKEND=cann must not route the embedded emulator back into the libraries (re-entrancy)
    proc = _hcomm_run(install, n, [ring_program, "10000"], HCOMM_SIM_CHECK="strict", HCOMM_BACKEND="cann")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for rank in range(n):
        assert f"rank {rank}: ring allreduce of 10000 floats on {n} ranks OK" in proc.stdout


def test_c_schedule_error_is_reported_by_the_strict_checker(install: Any, ring_program: str) -> None:
    proc = _hcomm_run(install, 2, [ring_program, "1000", "--bad-schedule"], HCOMM_SIM_CHECK="strict")
    assert proc.returncode != 0
    assert f"aclrtSynchronizeStream(stream) failed with code {ACL_ERROR_RT_INTERNAL_ERROR}" in proc.stderr
    assert "checker:" in proc.stderr and "recorded but never waited on" in proc.stderr


def test_example_compiles_as_cplusplus(install: Any, tmp_path: Path) -> None:
    """The generated header is usable from C++ (extern "C", enum returns of the inline initializers)."""
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler here")
    proc = subprocess.run([cxx, "-x", "c++", "-Wall", "-Wextra", "-Werror", "-I", install.include_dir, "-o",
                           str(tmp_path / "ring_cpp"), str(EXAMPLE), "-L", install.lib_dir, "-lhcomm", "-lhccl",
                           "-lacl_rt"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_makefile_builds_the_example(install: Any, tmp_path: Path) -> None:
    work = tmp_path / "c"
    shutil.copytree(EXAMPLE.parent, work, ignore=shutil.ignore_patterns("ring_allreduce"))
    proc = subprocess.run(["make", "-C", str(work)], capture_output=True, text=True, timeout=120,
                          env=_child_env(install))
    assert proc.returncode == 0, proc.stderr
    assert (work / "ring_allreduce").is_file()
    bare = dict(_child_env(install))
    bare.pop("ASCEND_HOME_PATH")
    proc = subprocess.run(["make", "-C", str(work), "clean", "all"], capture_output=True, text=True, timeout=60,
                          env=bare)
    assert proc.returncode != 0 and "source <install>/set_env.sh" in proc.stderr


# ---------------------------------------------------------------------------------------------
# the loader against the real install

def test_without_set_env_the_error_says_to_source_it(install: Any, tmp_path: Path) -> None:
    from hcomm_cffi.errors import LibraryNotFoundError
    from hcomm_cffi.lib.loader import require_libraries

    env = {"HOME": str(tmp_path), "HCOMM_BACKEND": "cann"}
    with pytest.raises(LibraryNotFoundError) as err:
        require_libraries(env, loader_lookup=lambda soname: None)
    text = str(err.value)
    assert "libhcomm.so" in text and "set_env.sh" in text and "HCOMM_CANN_LIB_DIR" in text
    # sourcing it (what set_env.sh exports) is the fix
    env["ASCEND_HOME_PATH"] = install.root
    assert require_libraries(env, loader_lookup=lambda soname: None)["hcomm"] == os.path.join(install.lib_dir,
                                                                                               "libhcomm.so")


def test_library_missing_from_lib64_is_named_with_the_fix(install: Any, tmp_path: Path) -> None:
    from hcomm_cffi.errors import LibraryNotFoundError
    from hcomm_cffi.lib.loader import require_libraries

    broken = tmp_path / "cann"
    shutil.copytree(install.root, broken)
    os.unlink(broken / "lib64" / "libhccl.so")
    env = {"HOME": str(tmp_path), "HCOMM_CANN_LIB_DIR": str(broken / "lib64")}
    with pytest.raises(LibraryNotFoundError) as err:
        require_libraries(env, loader_lookup=lambda soname: None)
    text = str(err.value)
    assert "libhccl.so" in text and str(broken / "lib64") in text
    assert "libhcomm.so" not in text.split("\n")[0]            # only the missing one is named as missing
    assert "set_env.sh" in text and "HCOMM_CANN_LIB_DIR" in text


def _load_in_child(lib_dir: str) -> str:
    from hcomm_cffi.lib.cann import CannLibrary
    from hcomm_cffi.lib.loader import require_libraries

    try:
        CannLibrary(require_libraries({"HCOMM_CANN_LIB_DIR": lib_dir, "HOME": "/nonexistent"},
                                      loader_lookup=lambda soname: None))
    except (OSError, ImportError) as exc:      # LibraryLoadError is an ImportError
        return str(exc)
    return "loaded"


def test_missing_dependency_is_named_with_the_fix(install: Any, tmp_path: Path) -> None:
    broken = tmp_path / "cann"
    shutil.copytree(install.root, broken)
    os.unlink(broken / "lib64" / "libhcomm_sim_core.so")     # libhcomm.so's DT_NEEDED
    text = run_ranks(1, lambda rank, n, root: _load_in_child(str(broken / "lib64")), timeout=60)[0]
    assert f"cannot load {broken / 'lib64' / 'libhcomm.so'}" in text
    assert "libhcomm_sim_core.so: cannot open shared object file" in text
    assert f"hcomm sim build-libs --out {broken} --force" in text


def test_hcomm_info_says_the_libraries_are_emulated(install: Any) -> None:
    proc = subprocess.run([sys.executable, "-m", "hcomm_cffi", "info"], capture_output=True, text=True, timeout=60,
                          env=_child_env(install))
    assert proc.returncode == 0, proc.stderr
    assert "backend: cann" in proc.stdout
    assert f"libhcomm.so: {install.lib_dir}/libhcomm.so (EMULATED by hcomm_cffi" in proc.stdout
