"""CANN library discovery on fake install trees, the not-found message, backend selection and CannLibrary."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from hcomm_cffi import lib as lib_pkg
from hcomm_cffi.errors import LibraryNotFoundError, MissingSymbolError
from hcomm_cffi.lib import choose_backend, load
from hcomm_cffi.lib import loader
from hcomm_cffi.lib.cann import CannLibrary, library_for
from hcomm_cffi.lib.loader import find_libraries, find_library, require_libraries

REPO = Path(__file__).resolve().parents[1]
SYSTEM_CANN = any(os.path.exists(p) for p in (
    "/usr/local/Ascend/cann/lib64", "/usr/local/Ascend/ascend-toolkit/latest/lib64", "/usr/local/Ascend/latest/lib64",
))
needs_no_system_cann = pytest.mark.skipif(SYSTEM_CANN, reason="a CANN install under /usr/local/Ascend is present")

ALL = ("libhcomm.so", "libhccl.so", "libacl_rt.so")


def no_loader(soname: str) -> Optional[str]:
    return None


def make_tree(root: Path, names: tuple = ALL) -> Path:
    """A fake <prefix>/lib64 holding empty files with the given names; returns lib64."""
    lib64 = root / "lib64"
    lib64.mkdir(parents=True, exist_ok=True)
    for name in names:
        (lib64 / name).write_bytes(b"")
    return lib64


@pytest.fixture
def home(tmp_path: Path) -> Path:
    h = tmp_path / "home"
    h.mkdir()
    return h


def paths(env: Dict[str, str]) -> Dict[str, Optional[str]]:
    return {k: v.path for k, v in find_libraries(env, no_loader).items()}


@needs_no_system_cann
def test_precedence_order(tmp_path: Path, home: Path) -> None:
    override = make_tree(tmp_path / "override")
    ascend_home = make_tree(tmp_path / "ascend_home")
    toolkit = make_tree(tmp_path / "toolkit")
    opp_prefix = make_tree(tmp_path / "opp_prefix")
    home_cann = make_tree(home / "Ascend" / "cann")
    ld_dir = tmp_path / "ld"
    ld_dir.mkdir()
    for name in ALL:
        (ld_dir / name).write_bytes(b"")
    env = {
        "HCOMM_CANN_LIB_DIR": str(override),
        "ASCEND_HOME_PATH": str(tmp_path / "ascend_home"),
        "ASCEND_TOOLKIT_HOME": str(tmp_path / "toolkit"),
        "ASCEND_OPP_PATH": str(tmp_path / "opp_prefix" / "opp"),
        "HOME": str(home),
        "LD_LIBRARY_PATH": f"/nonexistent:{ld_dir}",
    }
    order = [("HCOMM_CANN_LIB_DIR", override), ("ASCEND_HOME_PATH", ascend_home),
             ("ASCEND_TOOLKIT_HOME", toolkit), ("ASCEND_OPP_PATH", opp_prefix), ("HOME", home_cann)]
    for var, expected_dir in order:
        found = paths(env)
        assert found == {"hcomm": str(expected_dir / "libhcomm.so"), "hccl": str(expected_dir / "libhccl.so"),
                         "acl": str(expected_dir / "libacl_rt.so")}, var
        if var == "HOME":
            env["HOME"] = str(tmp_path / "empty_home")
        else:
            del env[var]
    assert paths(env)["hcomm"] == str(ld_dir / "libhcomm.so")
    del env["LD_LIBRARY_PATH"]
    assert paths(env) == {"hcomm": None, "hccl": None, "acl": None}


@needs_no_system_cann
def test_home_prefixes_in_order(home: Path) -> None:
    latest = make_tree(home / "Ascend" / "latest")
    toolkit = make_tree(home / "Ascend" / "ascend-toolkit" / "latest")
    env = {"HOME": str(home)}
    assert paths(env)["hccl"] == str(toolkit / "libhccl.so")
    (toolkit / "libhccl.so").unlink()
    assert paths(env)["hccl"] == str(latest / "libhccl.so")
    assert find_library("hccl", env, no_loader).found_in == "$HOME/Ascend/latest/lib64"


def test_override_wins_per_library(tmp_path: Path, home: Path) -> None:
    override = make_tree(tmp_path / "o", ("libhcomm.so",))
    full = make_tree(tmp_path / "full")
    env = {"HCOMM_CANN_LIB_DIR": str(override), "ASCEND_HOME_PATH": str(tmp_path / "full"), "HOME": str(home)}
    found = paths(env)
    assert found["hcomm"] == str(override / "libhcomm.so")
    assert found["hccl"] == str(full / "libhccl.so")


def test_acl_prefers_acl_rt_then_ascendcl(tmp_path: Path, home: Path) -> None:
    lib64 = make_tree(tmp_path / "p", ("libhcomm.so", "libhccl.so", "libascendcl.so"))
    env = {"ASCEND_HOME_PATH": str(tmp_path / "p"), "HOME": str(home)}
    assert paths(env)["acl"] == str(lib64 / "libascendcl.so")
    (lib64 / "libacl_rt.so").write_bytes(b"")
    assert paths(env)["acl"] == str(lib64 / "libacl_rt.so")


@needs_no_system_cann
def test_compat_library_is_never_a_candidate(tmp_path: Path, home: Path) -> None:
    lib64 = make_tree(tmp_path / "p", ("libhccl_compat.so",))
    env = {"ASCEND_HOME_PATH": str(tmp_path / "p"), "HOME": str(home)}
    assert paths(env) == {"hcomm": None, "hccl": None, "acl": None}
    assert find_library("hccl", env, lambda s: str(lib64 / "libhccl_compat.so")).path is None


@needs_no_system_cann
def test_directories_are_not_libraries(tmp_path: Path, home: Path) -> None:
    (tmp_path / "p" / "lib64" / "libhcomm.so").mkdir(parents=True)
    env = {"ASCEND_HOME_PATH": str(tmp_path / "p"), "HOME": str(home)}
    assert find_library("hcomm", env, no_loader).path is None


@needs_no_system_cann
def test_dynamic_loader_fallback(home: Path) -> None:
    result = find_library("hcomm", {"HOME": str(home)}, lambda s: "libhcomm.so" if s == "libhcomm.so" else None)
    assert result.path == "libhcomm.so" and result.found_in == "dynamic loader"
    assert result.searched[-1] == loader.DYNAMIC_LOADER


@needs_no_system_cann
def test_not_found_message_exact_text(tmp_path: Path) -> None:
    home = tmp_path / "h"
    env = {"ASCEND_HOME_PATH": "/opt/cann", "ASCEND_OPP_PATH": "/opt/cann8/opp/", "HOME": str(home),
           "LD_LIBRARY_PATH": "/x/lib"}
    with pytest.raises(LibraryNotFoundError) as info:
        require_libraries(env, no_loader)
    places = [
        "$HCOMM_CANN_LIB_DIR (not set)",
        "$HCCL_SO_PATH (not set)",
        "/opt/cann/lib64 ($ASCEND_HOME_PATH/lib64)",
        "$ASCEND_TOOLKIT_HOME/lib64 (not set)",
        "/opt/cann8/lib64 (dirname($ASCEND_OPP_PATH)/lib64)",
        "/usr/local/Ascend/cann/lib64",
        "/usr/local/Ascend/ascend-toolkit/latest/lib64",
        "/usr/local/Ascend/latest/lib64",
        f"{home}/Ascend/cann/lib64 ($HOME/Ascend/cann/lib64)",
        f"{home}/Ascend/ascend-toolkit/latest/lib64 ($HOME/Ascend/ascend-toolkit/latest/lib64)",
        f"{home}/Ascend/latest/lib64 ($HOME/Ascend/latest/lib64)",
        "/x/lib ($LD_LIBRARY_PATH entry)",
        "the dynamic loader's cache (/etc/ld.so.cache and default directories)",
    ]
    lines: List[str] = ["CANN libraries not found: libhcomm.so, libhccl.so, libacl_rt.so or libascendcl.so."]
    for names in ("libhcomm.so", "libhccl.so", "libacl_rt.so / libascendcl.so"):
        lines.append(f"Searched for {names} in:")
        lines.extend(f"  - {p}" for p in places)
    lines.append(
        "To fix: source the CANN environment (source /usr/local/Ascend/cann/set_env.sh, or the "
        "set_env.sh of your install), or set HCOMM_CANN_LIB_DIR to the directory holding "
        "libhcomm.so, or run on the emulator with HCOMM_BACKEND=sim."
    )
    assert str(info.value) == "\n".join(lines)
    assert isinstance(info.value, ImportError)


def test_not_found_lists_only_missing_libraries(tmp_path: Path, home: Path) -> None:
    make_tree(tmp_path / "p", ("libhcomm.so", "libacl_rt.so"))
    env = {"ASCEND_HOME_PATH": str(tmp_path / "p"), "HOME": str(home)}
    if SYSTEM_CANN:
        pytest.skip("a CANN install under /usr/local/Ascend is present")
    with pytest.raises(LibraryNotFoundError) as info:
        require_libraries(env, no_loader)
    text = str(info.value)
    assert text.startswith("CANN libraries not found: libhccl.so.\nSearched for libhccl.so in:\n")
    assert "libhcomm.so in:" not in text


def test_search_report_is_json_friendly(tmp_path: Path, home: Path) -> None:
    make_tree(tmp_path / "p")
    report = find_library("hcomm", {"ASCEND_HOME_PATH": str(tmp_path / "p"), "HOME": str(home)}, no_loader).as_dict()
    assert report["path"] == str(tmp_path / "p" / "lib64" / "libhcomm.so")
    assert report["found_in"] == "$ASCEND_HOME_PATH/lib64"
    assert report["searched"] == ["$HCOMM_CANN_LIB_DIR (not set)", "$HCCL_SO_PATH (not set)",
                                  f"{tmp_path}/p/lib64 ($ASCEND_HOME_PATH/lib64)"]


# ------------------------------------------------------------------ backend selection

def test_backend_from_env_and_argument(tmp_path: Path) -> None:
    assert choose_backend(environ={"HCOMM_BACKEND": "sim"}) == ("sim", "HCOMM_BACKEND=sim")
    assert choose_backend(environ={"HCOMM_BACKEND": " CANN "}).name == "cann"
    assert choose_backend("sim", environ={"HCOMM_BACKEND": "cann"}).name == "sim"
    with pytest.raises(ValueError, match="HCOMM_BACKEND='gpu' is not a backend; expected one of sim, cann"):
        choose_backend(environ={"HCOMM_BACKEND": "gpu"})
    with pytest.raises(ValueError, match="backend='x'"):
        choose_backend("x")


@needs_no_system_cann
def test_backend_auto(tmp_path: Path, home: Path) -> None:
    choice = choose_backend(environ={"HOME": str(home)})
    if choice.name == "cann":
        pytest.skip("CANN found through the dynamic loader on this machine")
    assert choice.name == "sim" and "HCOMM_BACKEND unset" in choice.reason and "libhcomm.so" in choice.reason
    make_tree(tmp_path / "p")
    choice = choose_backend(environ={"HOME": str(home), "HCOMM_CANN_LIB_DIR": str(tmp_path / "p" / "lib64")})
    assert choice.name == "cann" and str(tmp_path / "p" / "lib64" / "libhcomm.so") in choice.reason


def test_load_sim(monkeypatch: pytest.MonkeyPatch) -> None:
    from hcomm_cffi.sim import SimLibrary
    from hcomm_cffi.sim.abi_check import AbiCheckedLibrary

    monkeypatch.delenv("HCOMM_SIM_ABI_CHECK", raising=False)
    assert isinstance(load("sim"), SimLibrary)
    monkeypatch.setenv("HCOMM_SIM_ABI_CHECK", "1")
    checked = load("sim")
    assert isinstance(checked, AbiCheckedLibrary) and isinstance(checked.raw, SimLibrary)


@needs_no_system_cann
def test_load_cann_without_cann_raises(monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    for var in ("HCOMM_CANN_LIB_DIR", "ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME", "ASCEND_OPP_PATH", "LD_LIBRARY_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setattr(loader, "_default_loader_lookup", no_loader)
    with pytest.raises(LibraryNotFoundError, match="HCOMM_BACKEND=sim"):
        load("cann")
    monkeypatch.setenv("HCOMM_BACKEND", "cann")
    with pytest.raises(LibraryNotFoundError):
        load()


def test_import_never_needs_cann(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASCEND", "HCOMM"))}
    env.update({"HCOMM_BACKEND": "cann", "PYTHONPATH": str(REPO), "HOME": str(tmp_path)})
    code = "import hcomm_cffi, hcomm_cffi.lib, hcomm_cffi.binding, hcomm_cffi.errors, hcomm_cffi.initializers"
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


# ------------------------------------------------------------------ CannLibrary

LIBC = "/lib/x86_64-linux-gnu/libc.so.6"


def test_library_routing() -> None:
    for name in ("HcclAllReduce", "HcclBarrier", "HcclBatchSendRecv", "HcclAlltoAll", "HcclSend"):
        assert library_for(name) == "hccl"
    for name in ("aclInit", "aclrtMalloc", "aclGetRecentErrMsg", "aclrtGetSocName"):
        assert library_for(name) == "acl"
    for name in ("HcclGetRankId", "HcclCommInitAll", "HcommWriteOnThread", "HcclThreadAcquire", "HcclGetErrorString"):
        assert library_for(name) == "hcomm"


class FakeHandle:
    """Stands in for a cffi dlopen() library object."""

    def __init__(self, path: str, names: List[str]) -> None:
        self.path = path
        for name in names:
            setattr(self, name, (path, name))


def test_cann_library_resolves_from_the_right_library_and_caches() -> None:
    opened: List[str] = []

    def opener(path: str) -> FakeHandle:
        opened.append(path)
        return FakeHandle(path, ["HcclAllReduce", "HcclBarrier", "aclInit", "HcclGetRankId", "HcommWriteOnThread"])

    cann = CannLibrary({"hcomm": "/c/libhcomm.so", "hccl": "/c/libhccl.so", "acl": "/c/libacl_rt.so"}, dlopen=opener)
    assert opened == ["/c/libhcomm.so", "/c/libhccl.so", "/c/libacl_rt.so"]
    assert cann.HcclAllReduce == ("/c/libhccl.so", "HcclAllReduce")
    assert cann.HcclBarrier == ("/c/libhccl.so", "HcclBarrier")
    assert cann.aclInit == ("/c/libacl_rt.so", "aclInit")
    assert cann.HcommWriteOnThread == ("/c/libhcomm.so", "HcommWriteOnThread")
    assert "HcommWriteOnThread" in vars(cann)          # cached as an instance attribute
    with pytest.raises(MissingSymbolError, match="HcclChannelDestroy .*/c/libhcomm.so"):
        cann.HcclChannelDestroy
    assert getattr(cann, "HcclChannelDestroy", None) is None
    assert cann.paths["acl"] == "/c/libacl_rt.so"


def test_cann_library_refuses_compat_and_incomplete_paths() -> None:
    with pytest.raises(ValueError, match="libhccl_compat.so"):
        CannLibrary({"hcomm": "/a/libhcomm.so", "hccl": "/a/libhccl_compat.so", "acl": "/a/libacl_rt.so"},
                    dlopen=lambda p: None)
    with pytest.raises(ValueError, match="'acl'"):
        CannLibrary({"hcomm": "/a/libhcomm.so", "hccl": "/a/libhccl.so"}, dlopen=lambda p: None)


@pytest.mark.skipif(not os.path.exists(LIBC), reason="glibc path differs on this machine")
def test_real_dlopen_missing_symbol_raises_on_access_not_load() -> None:
    cann = CannLibrary({"hcomm": LIBC, "hccl": LIBC, "acl": LIBC})     # loads fine
    with pytest.raises(AttributeError) as info:
        cann.HcclGetRankId
    assert isinstance(info.value, MissingSymbolError)
    assert "HcclGetRankId" in str(info.value) and LIBC in str(info.value)
    with pytest.raises(MissingSymbolError, match="aclrtMalloc"):
        cann.aclrtMalloc


def test_lib_package_exports() -> None:
    assert set(lib_pkg.BACKENDS) == {"sim", "cann"}
    assert callable(lib_pkg.load) and callable(lib_pkg.choose_backend)
