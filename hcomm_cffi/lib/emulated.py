"""Emulated CANN installs (``hcomm sim build-libs``): their marker file, and starting their interpreter safely.

``<install>/hcomm_sim_version`` (key=value lines) marks an install whose libraries are the
emulator; ``hcomm info`` reads it (without loading anything) and the builder uses it to decide
whether an install is current.  :func:`start_embedded` is what ``CannLibrary`` does right after
dlopening such an install in a Python process.  Imports only :mod:`hcomm_cffi.files` of the package.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Dict, Mapping, Optional

from ..files import write_atomically

__all__ = ["MARKER_FILE", "read_marker", "write_marker", "emulated_install", "start_embedded", "load_failure_message"]

MARKER_FILE = "hcomm_sim_version"


def read_marker(install_dir: str) -> Optional[Dict[str, str]]:
    """The key=value pairs of ``install_dir``'s marker, or None when it is not an emulated install."""
    try:
        with open(os.path.join(install_dir, MARKER_FILE), encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    pairs = (line.partition("=") for line in lines if "=" in line and not line.startswith("#"))
    return {key.strip(): value.strip() for key, _, value in pairs}


def write_marker(install_dir: str, fields: Mapping[str, str]) -> None:
    """Write the marker (last step of a build: its presence means the install is complete)."""
    text = "# hcomm_cffi emulated CANN install: these libraries are the emulator, not CANN\n"
    text += "".join(f"{key}={value}\n" for key, value in fields.items())
    write_atomically(os.path.join(install_dir, MARKER_FILE), text)


def emulated_install(library_path: str) -> Optional[Dict[str, str]]:
    """The marker of the install holding ``library_path`` (``<install>/lib64/libX.so``), or None for a real CANN."""
    lib_dir = os.path.dirname(os.path.realpath(library_path))
    return read_marker(os.path.dirname(lib_dir))


def start_embedded(first_call: Callable[[], Any]) -> None:
    """Run ``first_call`` (any function of the emulated libraries) so the embedded emulator starts now.

    The libraries make their own start safe in any process (after ``import torch`` too, from any
    thread, with a timeout: hcomm_cffi/cannlib/startup.py), so this only moves the start to load time.
    """
    first_call()


def load_failure_message(path: str, exc: BaseException) -> str:
    """The text for a library that exists but does not load (``exc``): the loader's reason and the fix."""
    root = os.path.dirname(os.path.dirname(os.path.realpath(path)))
    if read_marker(root) is not None:
        fix = (f"{root} is an emulated CANN install (hcomm sim build-libs) with a file missing or damaged; "
               f"rebuild it: hcomm sim build-libs --out {root} --force")
    else:
        fix = (f"a library that {os.path.basename(path)} needs is not on the loader's path: source the set_env.sh of "
               f"this CANN install (it puts every lib64 directory on LD_LIBRARY_PATH), then check with: ldd {path}")
    return f"cannot load {path}: {exc}\nTo fix: {fix}"
