"""One SIGTERM handler for the whole package: every hook the package needs on SIGTERM runs, then the process dies of it.

A launcher stopping a job (torchrun after one rank failed, ``hcomm run``) sends SIGTERM.  Several parts of
the package must act then: the flight recorder dumps its rings (:mod:`hcomm_cffi.flight`), the emulator
unlinks its segments (:mod:`hcomm_cffi.sim.shm`).  Each installing its own handler only "where the
action is still the default" let the first one silently win and the others never run, so they register
here instead.  The handler is installed (from the main thread) only while SIGTERM has its default
action: a handler of the program's own is left alone.  After the hooks, the default action is restored
and SIGTERM re-raised, so the launcher sees the same exit status as without them.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any, Callable, List

__all__ = ["add_hook"]

_HOOKS: List[Callable[[], None]] = []


def add_hook(hook: Callable[[], None]) -> None:
    """Run ``hook`` on SIGTERM before the process dies of it (once per hook; in the order added).

    Installs the package's handler when SIGTERM still has its default action and this is the main thread.
    """
    if hook not in _HOOKS:
        _HOOKS.append(hook)
    if threading.current_thread() is threading.main_thread() and \
            signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        signal.signal(signal.SIGTERM, _on_sigterm)


def _on_sigterm(signum: int, frame: Any) -> None:
    """Run every hook (a failing one never keeps the others or the death from happening), then die of SIGTERM."""
    try:
        for hook in list(_HOOKS):
            try:
                hook()
            except Exception as exc:      # noqa: BLE001 - nothing may keep SIGTERM from ending the process
                try:
                    sys.stderr.write(f"hcomm: SIGTERM: {getattr(hook, '__qualname__', hook)}: {exc}\n")
                except Exception:         # noqa: BLE001 - stderr itself may be gone
                    pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
