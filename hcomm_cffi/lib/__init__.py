"""Backend selection: ``load()`` returns the C functions, from CANN (``cann``) or from the emulator (``sim``).

``HCOMM_BACKEND=sim|cann`` forces a backend; unset means ``cann`` when the CANN libraries are
found, else ``sim``.  Nothing here loads CANN at import time, so ``import hcomm_cffi`` never
fails for lack of it.
"""
from __future__ import annotations

import os
from typing import Any, Mapping, NamedTuple, Optional

from .. import settings
from .loader import find_libraries, require_libraries

__all__ = ["load", "backend_name", "BackendChoice", "BACKENDS", "ENV_BACKEND"]

ENV_BACKEND = "HCOMM_BACKEND"
BACKENDS = settings.BACKENDS


class BackendChoice(NamedTuple):
    """Which backend ``load()`` would use (``name``: 'sim' or 'cann') and why (``reason``)."""

    name: str
    reason: str


def _normalise(backend: str, source: str) -> str:
    value = backend.strip().lower()
    if value not in BACKENDS:
        raise ValueError(f"{source}={backend!r} is not a backend; expected 'sim' or 'cann'")
    return value


def backend_name(backend: Optional[str] = None, environ: Optional[Mapping[str, str]] = None) -> BackendChoice:
    """The backend that ``load(backend)`` would use, and the reason, without loading anything."""
    env = os.environ if environ is None else environ
    if backend:
        return BackendChoice(_normalise(backend, "backend"), "requested by the caller")
    requested = settings.value(ENV_BACKEND, env)
    if requested:
        return BackendChoice(requested, f"{ENV_BACKEND}={requested}")
    found = find_libraries(env)
    missing = [s.sonames[0] for s in found.values() if not s.found]
    if not missing:
        return BackendChoice("cann", f"{ENV_BACKEND} unset and the CANN libraries were found: "
                                     f"{found['hcomm'].path}")
    return BackendChoice("sim", f"{ENV_BACKEND} unset and no CANN installation was found: "
                                f"missing {', '.join(missing)}")


def load(backend: Optional[str] = None) -> Any:
    """A new lib object for the selected backend: ``CannLibrary`` or the emulator's ``SimLibrary``."""
    choice = backend_name(backend)
    if choice.name == "sim":
        from ..sim import SimLibrary  # lazy: the emulator is only imported when used

        if settings.value("HCOMM_SIM_ABI_CHECK"):
            from ..sim.abi_check import AbiCheckedLibrary

            return AbiCheckedLibrary(SimLibrary())  # every call through a C pointer of the declared type
        return SimLibrary()
    from .cann import CannLibrary

    return CannLibrary(require_libraries())
