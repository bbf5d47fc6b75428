"""The root-info exchange of the client scripts: rank 0 writes the 4108 bytes to a file, the others wait for it.

The clients under tests/clients are written as a user of CANN writes them (their own library loading,
their own calls); this file is the only helper they share, standing in for the job launcher's broadcast.
"""
from __future__ import annotations

import os
import time

ROOT_INFO_BYTES = 4108


def publish(path: str, data: bytes) -> None:
    """Write the root info atomically (a reader never sees half of it)."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as handle:
        handle.write(data)
    os.replace(tmp, path)


def wait_for(path: str, timeout: float = 60.0) -> bytes:
    """The root info rank 0 published, or TimeoutError naming the file."""
    limit = time.monotonic() + timeout
    while time.monotonic() < limit:
        try:
            with open(path, "rb") as handle:
                data = handle.read()
            if len(data) == ROOT_INFO_BYTES:
                return data
        except FileNotFoundError:
            pass
        time.sleep(0.02)
    raise TimeoutError(f"no root info in {path} after {timeout} s (did rank 0 start?)")
