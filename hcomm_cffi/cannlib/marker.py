"""The file that marks a CANN install as the emulator's: ``<install>/hcomm_sim_version`` (key=value lines).

Read by ``hcomm info`` (which never loads a library) and by the builder to decide whether an
install is current.  A leaf module: it imports nothing from the package.
"""
from __future__ import annotations

import os
from typing import Dict, Mapping, Optional

__all__ = ["MARKER_FILE", "read_marker", "write_marker", "emulated_install"]

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
    with open(os.path.join(install_dir, MARKER_FILE), "w", encoding="utf-8") as handle:
        handle.write(text)


def emulated_install(library_path: str) -> Optional[Dict[str, str]]:
    """The marker of the install holding ``library_path`` (``<install>/lib64/libX.so``), or None for a real CANN."""
    lib_dir = os.path.dirname(os.path.realpath(library_path))
    return read_marker(os.path.dirname(lib_dir))
