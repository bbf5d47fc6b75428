"""``hcomm info``: what this installation would run on (backend and why), where CANN is, and the relevant environment.

Never loads CANN and never fails for lack of it: it only looks for files and reads environment
variables and package metadata, so it is the first thing to run when something does not load.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import platform
import sys
from typing import Any, Dict, List, Optional

from .. import __version__
from ..launch import affinity
from ..lib import choose_backend
from ..lib.deps import elf_needed, on_library_path
from ..lib.emulated import emulated_install
from ..lib.loader import find_libraries, is_system_library

__all__ = ["add_parser", "run", "collect", "ENV_VARS"]

ENV_VARS = (
    "HCOMM_BACKEND", "HCOMM_CANN_LIB_DIR", "HCCL_SO_PATH", "ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME",
    "ASCEND_OPP_PATH", "ASCEND_RT_VISIBLE_DEVICES", "ASCEND_DEVICE_ID", "LD_LIBRARY_PATH",
    "HCCL_BUFFSIZE", "HCCL_EXEC_TIMEOUT", "HCCL_CONNECT_TIMEOUT", "HCCL_OP_EXPANSION_MODE",
    "HCCL_ALGO", "HCCL_DETERMINISTIC", "HCCL_IF_IP", "HCCL_SOCKET_IFNAME", "HCCL_IF_BASE_PORT",
    "HCCL_WHITELIST_DISABLE", "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
)

_VERSION_FILES = ("version.info", "ascend_toolkit_install.info", "version.cfg")


def _read_version(library_path: str) -> str:
    """The CANN version next to a library (``<prefix>/version.info`` and friends), else 'unknown'."""
    lib_dir = os.path.dirname(os.path.realpath(library_path))
    prefixes = [os.path.dirname(lib_dir), lib_dir, os.path.dirname(os.path.dirname(lib_dir))]
    for prefix in prefixes:
        for name in _VERSION_FILES:
            candidate = os.path.join(prefix, name)
            try:
                with open(candidate, encoding="utf-8", errors="replace") as handle:
                    for line in handle:
                        key, sep, value = line.partition("=")
                        if sep and key.strip().lower() in ("version", "runtime_version", "package_version"):
                            return value.strip().strip('"') or "unknown"
            except OSError:
                continue
    return "unknown"


def _dependencies(library_path: str) -> Dict[str, Optional[str]]:
    """Each DT_NEEDED soname of a library -> 'same directory', 'dynamic loader', or None when nothing supplies it."""
    lib_dir = os.path.dirname(library_path)
    where: Dict[str, Optional[str]] = {}
    for name in elf_needed(library_path):
        if os.path.isfile(os.path.join(lib_dir, name)):
            where[name] = "same directory"
        else:
            found = is_system_library(name) or on_library_path(name, os.environ) is not None
            where[name] = "dynamic loader" if found else None
    return where


def _package_version(name: str) -> Optional[str]:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def collect() -> Dict[str, Any]:
    """Everything ``hcomm info`` reports, as one JSON-serialisable dict."""
    try:
        choice = choose_backend()
        backend: Dict[str, Any] = {"name": choice.name, "reason": choice.reason}
    except ValueError as exc:       # invalid HCOMM_BACKEND value
        backend = {"name": None, "reason": str(exc)}
    backend["emulator_installed"] = importlib.util.find_spec("hcomm_cffi.sim") is not None
    if backend["emulator_installed"]:
        from ..sim.compiled import engine_status
        backend["emulator_engine"] = engine_status()     # HCOMM_SIM_ENGINE: what runs its data plane, and why

    libraries: Dict[str, Any] = {}
    for key, search in find_libraries().items():
        entry = search.as_dict()
        on_disk = bool(search.path and os.path.isfile(search.path))
        entry["version"] = _read_version(search.path) if search.path and on_disk else None
        entry["emulated"] = emulated_install(search.path) if search.path else None
        entry["needs"] = _dependencies(search.path) if search.path and on_disk else {}
        libraries[key] = entry

    import cffi
    import numpy

    return {
        "hcomm_cffi": __version__,
        "backend": backend,
        "libraries": libraries,
        "environment": {name: os.environ.get(name) for name in ENV_VARS},
        "cpu_binding": affinity.current(),
        "python": {"version": platform.python_version(), "executable": sys.executable,
                   "platform": platform.platform()},
        "packages": {
            "numpy": numpy.__version__,
            "cffi": cffi.__version__,
            "torch": _package_version("torch"),
            "torch_npu": _package_version("torch_npu"),
            "mpi4py": _package_version("mpi4py"),
        },
    }


def _format_text(info: Dict[str, Any]) -> str:
    lines: List[str] = [f"hcomm_cffi {info['hcomm_cffi']}"]
    backend = info["backend"]
    lines.append(f"backend: {backend['name'] or 'invalid'} ({backend['reason']})")
    lines.append(f"emulator: {'installed' if backend['emulator_installed'] else 'not installed'}")
    if backend.get("emulator_engine"):
        lines.append(f"emulator data plane: {backend['emulator_engine']}")
    lines.append("CANN libraries:")
    searched: Optional[List[str]] = None
    for key, lib in info["libraries"].items():
        if lib["path"]:
            version = (f"EMULATED by {lib['emulated'].get('version', 'hcomm_cffi')} (hcomm sim build-libs), not CANN"
                       if lib.get("emulated") else f"version {lib['version'] or 'unknown'}")
            lines.append(f"  {lib['name']}: {lib['path']} ({version}, via {lib['found_in']})")
            if lib["needs"]:
                lines.append("    needs: " + ", ".join(f"{name} ({where or 'MISSING'})"
                                                     for name, where in lib["needs"].items()))
        elif lib["searched"] == searched:
            lines.append(f"  {' / '.join(lib['sonames'])}: not found in the same places")
        else:
            lines.append(f"  {' / '.join(lib['sonames'])}: not found; searched:")
            lines.extend(f"    - {place}" for place in lib["searched"])
            searched = lib["searched"]
    bind = info["cpu_binding"]
    lines.append(f"cpu binding: {bind['launcher']} (cores this process may use: {bind['affinity']})")
    lines.append("environment:")
    for name, value in info["environment"].items():
        lines.append(f"  {name}={value if value is not None else '(unset)'}")
    py = info["python"]
    lines.append(f"python: {py['version']} ({py['executable']}) on {py['platform']}")
    lines.append("packages: " + ", ".join(
        f"{name} {version if version else 'not installed'}" for name, version in info["packages"].items()
    ))
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Print the report (text, or one JSON object with ``--json``); always exit 0."""
    info = collect()
    if getattr(args, "json", False):
        print(json.dumps(info, sort_keys=True))
    else:
        print(_format_text(info))
    return 0


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``hcomm info`` on the top-level subparsers."""
    parser = subparsers.add_parser("info", help="show backend, CANN libraries and environment",
                                   description=__doc__)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    parser.set_defaults(func=run)
    return parser
