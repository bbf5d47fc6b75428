"""Loading CANN without set_env.sh: fake install trees of real shared libraries shaped like the vendor's.

The vendor's libhcomm.so needs libhccl_alg.so, libhccl_plf.so, libhccl_v2.so, libacl_rt.so,
libc_sec.so and libunified_dlog.so with no RPATH (copied here from the vendor's hcomm.cmake link
list), and libhccl.so needs libhcomm.so and libhccl_compat.so.  The trees below are built with
``cc`` the same way, so a plain dlopen of libhcomm.so by path fails exactly as on a server where
set_env.sh was not sourced.  Every dlopen runs in a subprocess: a library loaded once stays
loaded and would satisfy the next tree's dependency by soname.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from hcomm_cffi.lib import choose_backend, load
from hcomm_cffi.lib.deps import elf_needed, walk
from hcomm_cffi.lib.loader import LibraryLoadError, find_libraries, load_error_message

REPO = Path(__file__).resolve().parents[1]
CC = shutil.which("cc") or shutil.which("gcc")
needs_cc = pytest.mark.skipif(CC is None, reason="no C compiler (cc/gcc) to build the fake CANN libraries")

# soname -> (C source, libraries it links against); order: dependencies first
SOURCES = {
    "libc_sec.so": ("int sec_value(void) { return 40; }", []),
    "libunified_dlog.so": ("int dlog_value(void) { return 0; }", []),
    "libhccl_plf.so": ("int sec_value(void);\nint plf_value(void) { return sec_value() + 1; }", ["c_sec"]),
    "libhccl_alg.so": ("int plf_value(void);\nint alg_value(void) { return plf_value() + 1; }", ["hccl_plf"]),
    "libhccl_v2.so": ("int v2_value(void) { return 0; }", []),
    "libacl_rt.so": ("int aclrtSetDevice(int d) { return d == 0 ? 0 : 107001; }", ["c_sec"]),
    "libhcomm.so": ("#include <stdint.h>\nint alg_value(void);\n"
                    "int HcclGetRankId(void *comm, uint32_t *rank) { *rank = (uint32_t)alg_value(); return 0; }",
                    ["hccl_alg", "hccl_plf", "hccl_v2", "acl_rt", "c_sec", "unified_dlog"]),
    "libhccl_compat.so": ("int HcclCommMemReg(void) { return -1; }", ["acl_rt", "unified_dlog"]),
    "libhccl.so": ("int HcclBarrier(void *comm, void *stream) { return 0; }",
                   ["hcomm", "hccl_compat", "acl_rt", "c_sec", "unified_dlog"]),
}
HCOMM_NEEDS = ["libhccl_alg.so", "libhccl_plf.so", "libhccl_v2.so", "libacl_rt.so", "libc_sec.so", "libunified_dlog.so"]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A <prefix>/lib64 with every fake library compiled (no RPATH, SONAME set, --no-as-needed)."""
    if CC is None:
        pytest.skip("no C compiler (cc/gcc) to build the fake CANN libraries")
    lib64 = tmp_path_factory.mktemp("cann") / "lib64"
    lib64.mkdir()
    for soname, (source, links) in SOURCES.items():
        src = lib64.parent / (soname + ".c")
        src.write_text(source + "\n")
        cmd = [CC, "-shared", "-fPIC", "-o", str(lib64 / soname), f"-Wl,-soname,{soname}", str(src),
               "-Wl,--no-as-needed", f"-L{lib64}", f"-Wl,-rpath-link,{lib64}"] + [f"-l{name}" for name in links]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            pytest.skip(f"cc cannot build shared libraries here: {proc.stderr.strip()[:300]}")
    return lib64


def install(built: Path, root: Path, drop: tuple = ()) -> Path:
    """A copy of the built tree under ``root``/cann/lib64 without the sonames in ``drop``; returns lib64."""
    lib64 = root / "cann" / "lib64"
    lib64.mkdir(parents=True)
    for soname in SOURCES:
        if soname not in drop:
            shutil.copy2(built / soname, lib64 / soname)
    return lib64


def clean_env(tmp_path: Path, extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ASCEND", "HCOMM", "HCCL")) and k not in ("LD_LIBRARY_PATH", "PYTHONPATH")}
    env.update({"PYTHONPATH": str(REPO), "HOME": str(tmp_path)})
    env.update(extra or {})
    return env


LOAD_ERROR = "from hcomm_cffi.lib import load\ntry:\n    load()\nexcept ImportError as e:\n" \
             "    print(type(e).__name__); print(e)\n"


def load_error_lines(env: Dict[str, str], cwd: Path) -> List[str]:
    """Run load() in a fresh process; the exception's class name, then its message lines."""
    proc = run_py(LOAD_ERROR, env, cwd)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def run_py(code: str, env: Dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True, text=True, timeout=120)


RANK_ID = """
from hcomm_cffi._ffi import ffi
from hcomm_cffi.lib import load, backend_reason
lib = load()
rank = ffi.new("uint32_t *")
print(lib.HcclGetRankId(ffi.NULL, rank), rank[0], lib.HcclBarrier(ffi.NULL, ffi.NULL))
print(backend_reason())
"""


@needs_cc
def test_fake_tree_is_shaped_like_the_vendor(built: Path) -> None:
    assert list(elf_needed(str(built / "libhcomm.so"))) == HCOMM_NEEDS + ["libc.so.6"]     # cc adds libc
    assert "libhccl_compat.so" in elf_needed(str(built / "libhccl.so"))
    deps = walk(str(built / "libhcomm.so"), lambda name: name == "libc.so.6", {})
    assert deps.missing == []
    order = [os.path.basename(p) for p in deps.preload]
    assert sorted(order) == sorted(HCOMM_NEEDS)
    for lib, dep in (("libhccl_alg.so", "libhccl_plf.so"), ("libhccl_plf.so", "libc_sec.so"),
                     ("libacl_rt.so", "libc_sec.so")):
        assert order.index(dep) < order.index(lib), (dep, lib, order)
    # a system library (here: all of them) is never opened by path
    assert walk(str(built / "libhcomm.so"), lambda name: True, {}) == ([], [])
    assert elf_needed(str(built.parent / "libhcomm.so.c")) == ()      # not ELF


@needs_cc
def test_plain_dlopen_fails_but_load_preloads_the_dependencies(built: Path, tmp_path: Path) -> None:
    lib64 = install(built, tmp_path)
    env = clean_env(tmp_path, {"HCOMM_CANN_LIB_DIR": str(lib64)})
    plain = run_py(f"from hcomm_cffi._ffi import ffi; ffi.dlopen({str(lib64 / 'libhcomm.so')!r})", env, tmp_path)
    assert plain.returncode != 0 and "libhccl_alg.so" in plain.stderr     # the vendor's problem, reproduced
    proc = run_py(RANK_ID, env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    first, reason = proc.stdout.splitlines()
    assert first == "0 42 0"            # HcclGetRankId ran through libhccl_alg -> libhccl_plf -> libc_sec
    assert reason == f"cann: HCOMM_BACKEND unset and the CANN libraries were found: {lib64 / 'libhcomm.so'}"


@needs_cc
def test_hccl_so_path_is_honoured(built: Path, tmp_path: Path) -> None:
    lib64 = install(built, tmp_path)
    renamed = lib64 / "libhccl.so.8"
    (lib64 / "libhccl.so").rename(renamed)
    env = clean_env(tmp_path, {"HCCL_SO_PATH": str(renamed)})
    found = find_libraries(env, lambda s: None)
    assert found["hccl"].path == str(renamed) and found["hccl"].found_in == "$HCCL_SO_PATH"
    assert found["hcomm"].path == str(lib64 / "libhcomm.so")
    proc = run_py(RANK_ID, env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == "0 42 0"


@needs_cc
def test_missing_dependency_names_it_and_the_fix(built: Path, tmp_path: Path) -> None:
    lib64 = install(built, tmp_path, drop=("libhccl_plf.so",))
    env = clean_env(tmp_path, {"ASCEND_HOME_PATH": str(lib64.parent)})
    lines = load_error_lines(env, tmp_path)
    assert lines[0] == "LibraryLoadError"
    assert lines[1].startswith(f"libhcomm.so was found at {lib64 / 'libhcomm.so'} but cannot be loaded: it needs "
                               f"libhccl_plf.so, which is neither in {lib64} nor known to the dynamic loader (dlopen: ")
    assert lines[2] == ("To fix: export LD_LIBRARY_PATH=<the directory holding libhccl_plf.so>:$LD_LIBRARY_PATH "
                        "before starting Python; to run on the emulator instead, set HCOMM_BACKEND=sim.")
    # the file elsewhere in the install and a set_env.sh beside it: the exact commands
    plugin = lib64 / "plugin" / "opskernel"
    plugin.mkdir(parents=True)
    shutil.copy2(built / "libhccl_plf.so", plugin / "libhccl_plf.so")
    (lib64.parent / "set_env.sh").write_text(f"export LD_LIBRARY_PATH={lib64}:{plugin}:$LD_LIBRARY_PATH\n")
    lines = load_error_lines(env, tmp_path)
    assert lines[2] == (f"To fix: source {lib64.parent / 'set_env.sh'} or export LD_LIBRARY_PATH={plugin}:"
                        "$LD_LIBRARY_PATH before starting Python; to run on the emulator instead, set HCOMM_BACKEND=sim.")
    # and doing what it says works
    env["LD_LIBRARY_PATH"] = str(plugin)
    proc = run_py(RANK_ID, env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == "0 42 0"


def test_unloadable_files_raise_not_the_emulator(tmp_path: Path) -> None:
    lib64 = tmp_path / "cann" / "lib64"
    lib64.mkdir(parents=True)
    for name in ("libhcomm.so", "libhccl.so", "libacl_rt.so"):
        (lib64 / name).write_bytes(b"not a library")
    env = clean_env(tmp_path, {"HCOMM_CANN_LIB_DIR": str(lib64)})
    lines = load_error_lines(env, tmp_path)
    assert lines[0] == "LibraryLoadError"
    assert lines[1].startswith(f"libhcomm.so was found at {lib64 / 'libhcomm.so'} but cannot be loaded (dlopen: ")
    assert lines[2] == (f"To fix: export LD_LIBRARY_PATH={lib64}:$LD_LIBRARY_PATH before starting Python; "
                        "to run on the emulator instead, set HCOMM_BACKEND=sim.")


def test_partial_or_explicit_installs_choose_cann_and_say_why(tmp_path: Path) -> None:
    lib64 = tmp_path / "p" / "lib64"
    lib64.mkdir(parents=True)
    (lib64 / "libhcomm.so").write_bytes(b"")
    env = {"HOME": str(tmp_path), "ASCEND_HOME_PATH": str(lib64.parent)}
    choice = choose_backend(environ=env)
    assert choice.name == "cann"
    assert choice.reason == (f"HCOMM_BACKEND unset and CANN libraries found ({lib64 / 'libhcomm.so'}), but "
                             "libhccl.so, libacl_rt.so missing: loading will fail (HCOMM_BACKEND=sim runs the emulator)")
    choice = choose_backend(environ={"HOME": str(tmp_path), "HCCL_SO_PATH": "/nowhere/libhccl.so"})
    assert choice.name == "cann" and choice.reason.startswith("HCOMM_BACKEND unset and HCCL_SO_PATH=/nowhere/libhccl.so set")


def test_load_error_message_without_missing_names() -> None:
    text = load_error_message("/opt/x/lib64/libacl_rt.so", "wrong ELF class", [])
    assert text == ("libacl_rt.so was found at /opt/x/lib64/libacl_rt.so but cannot be loaded (dlopen: wrong ELF class).\n"
                    "To fix: export LD_LIBRARY_PATH=/opt/x/lib64:$LD_LIBRARY_PATH before starting Python; "
                    "to run on the emulator instead, set HCOMM_BACKEND=sim.")
    assert issubclass(LibraryLoadError, ImportError)


@needs_cc
def test_info_lists_dependencies_and_what_is_missing(built: Path, tmp_path: Path) -> None:
    lib64 = install(built, tmp_path, drop=("libhccl_v2.so",))
    env = clean_env(tmp_path, {"ASCEND_HOME_PATH": str(lib64.parent)})
    proc = subprocess.run([sys.executable, "-m", "hcomm_cffi", "info", "--json"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    needs = info["libraries"]["hcomm"]["needs"]
    assert sorted(needs) == sorted(HCOMM_NEEDS + ["libc.so.6"])
    assert needs["libhccl_v2.so"] is None and needs["libhccl_alg.so"] == "same directory"
    assert needs["libc.so.6"] == "dynamic loader"
    assert info["environment"]["HCCL_SO_PATH"] is None
    text = subprocess.run([sys.executable, "-m", "hcomm_cffi", "info"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120).stdout
    assert "libhccl_v2.so (MISSING)" in text and "libc_sec.so (same directory)" in text
