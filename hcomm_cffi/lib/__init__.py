"""Backend selection: ``load()`` returns the C functions, from CANN (``cann``) or from the emulator (``sim``).

``HCOMM_BACKEND=sim|cann`` forces a backend; unset means ``cann`` when an explicit library path is
set (``HCOMM_CANN_LIB_DIR``, ``HCCL_SO_PATH``) or any CANN library is found, else ``sim``.  There is
no silent fallback: CANN libraries that are found but incomplete or unloadable make ``load()``
raise, naming what is wrong and the fix (``HCOMM_BACKEND=sim`` runs the emulator on purpose).
``backend_reason()`` says which backend runs and why.  Nothing here loads CANN at import time,
so ``import hcomm_cffi`` never fails for lack of it.
"""
from __future__ import annotations

import logging
import os
from typing import Any, Mapping, NamedTuple, Optional

from .. import settings
from .loader import ENV_HCCL_SO_PATH, ENV_LIB_DIR, LibraryLoadError, find_libraries, require_libraries

__all__ = ["load", "choose_backend", "backend_reason", "BackendChoice", "BACKENDS", "ENV_BACKEND", "LibraryLoadError"]

_log = logging.getLogger(__name__)

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


def choose_backend(backend: Optional[str] = None, environ: Optional[Mapping[str, str]] = None) -> BackendChoice:
    """The backend that ``load(backend)`` would use, and the reason, without loading anything."""
    env = os.environ if environ is None else environ
    if backend:
        return BackendChoice(_normalise(backend, "backend"), "requested by the caller")
    requested = settings.value(ENV_BACKEND, env)
    if requested:
        return BackendChoice(requested, f"{ENV_BACKEND}={requested}")
    found = find_libraries(env)
    missing = [s.sonames[0] for s in found.values() if not s.found]
    present = [s.path for s in found.values() if s.path]
    explicit = [f"{var}={env[var]}" for var in (ENV_LIB_DIR, ENV_HCCL_SO_PATH) if env.get(var)]
    if not missing:
        return BackendChoice("cann", f"{ENV_BACKEND} unset and the CANN libraries were found: "
                                     f"{found['hcomm'].path}")
    if explicit or present:
        # asked for (an explicit path) or partly installed: the load error will name what is missing
        why = f"{' and '.join(explicit)} set" if explicit else f"CANN libraries found ({', '.join(present)})"
        return BackendChoice("cann", f"{ENV_BACKEND} unset and {why}, but {', '.join(missing)} missing: "
                                     f"loading will fail (HCOMM_BACKEND=sim runs the emulator)")
    return BackendChoice("sim", f"{ENV_BACKEND} unset and no CANN installation was found: "
                                f"missing {', '.join(missing)}")


_LOADED: Optional[BackendChoice] = None


def backend_reason() -> str:
    """'<backend>: <why>' for the backend ``load()`` chose last in this process, else the one it would choose now."""
    try:
        choice = _LOADED or choose_backend()
    except ValueError as exc:       # an invalid HCOMM_BACKEND value
        return f"invalid: {exc}"
    return f"{choice.name}: {choice.reason}"


def load(backend: Optional[str] = None) -> Any:
    """A new lib object for the selected backend: ``CannLibrary`` or the emulator's ``SimLibrary``."""
    global _LOADED
    choice = choose_backend(backend)
    _LOADED = choice
    _log.info("backend %s (%s)", choice.name, choice.reason)
    if choice.name == "sim":
        from ..sim import SimLibrary  # lazy: the emulator is only imported when used

        if settings.value("HCOMM_SIM_ABI_CHECK"):
            from ..sim.abi_check import AbiCheckedLibrary

            return AbiCheckedLibrary(SimLibrary())  # every call through a C pointer of the declared type
        return SimLibrary()
    from .cann import CannLibrary

    return CannLibrary(require_libraries())
