"""Every thread's Python stack of a live rank, taken on request by whoever writes a stall report.

A rank that never arrived at a collective is somewhere in its own code: in ``time.sleep``, in a
C extension, in a loop.  :func:`install` (called with the first flight recorder that has a
directory) registers :mod:`faulthandler` for ``SIGUSR2`` (only where the signal has no handler of
the program's own) writing into ``<dir>/<job>.rank<R>.stacks``: faulthandler dumps from its C
signal handler, so the rank answers wherever it is, even inside C code that never returns to
Python.  :func:`request` (the launcher, or the rank writing a report under torchrun) signals a
rank that has that file open, waits up to REQUEST_S for the dump, and keeps it as
``<job>.rank<R>.stack.json`` (threads, frames, the time taken): :func:`read` gives it to the
report, so ``hcomm doctor`` shows the same stack again.  The log file goes with the process's
last flight recorder (:func:`uninstall`).
"""
from __future__ import annotations

import faulthandler
import json
import os
import re
import signal
import time
from typing import Any, Dict, List, Optional, Tuple

from . import files

__all__ = ["install", "uninstall", "request", "read", "STACK_SIGNAL", "LOG_SUFFIX", "SNAPSHOT_SUFFIX", "REQUEST_S"]

STACK_SIGNAL = signal.SIGUSR2
LOG_SUFFIX = ".stacks"
SNAPSHOT_SUFFIX = ".stack.json"
REQUEST_S = 3.0                 # most seconds a report waits for one rank's stacks (a loaded machine)
_SETTLE_S = 0.05                # the dump is complete when the log stopped growing for this long
_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-f]+) \(most recent call first\):$")
_FRAME = re.compile(r'^  File "(.*)", line (\d+) in (.*)$')
_state: Dict[str, Any] = {"fd": None, "path": None}


def _log_path(where: str, job: str, world_rank: int) -> str:
    return os.path.join(where, f"{job}.rank{world_rank}{LOG_SUFFIX}")


def install(where: str, job: str, world_rank: int) -> None:
    """Let a report ask this process for its stacks (once per process; not where SIGUSR2 has a handler already)."""
    if _state["fd"] is not None or signal.getsignal(STACK_SIGNAL) not in (signal.SIG_DFL, None):
        return
    path = _log_path(where, job, world_rank)
    try:
        fd = files.create_file(path, replace=True, read=False)   # its only writer is this process: no O_APPEND needed
    except (OSError, files.UnsafePath):
        return                  # no log, no answer: a report then shows no stacks of this rank
    try:
        faulthandler.register(STACK_SIGNAL, file=fd, all_threads=True, chain=False)
    except (RuntimeError, ValueError, OSError):
        os.close(fd)
        os.unlink(path)
        return
    _state["fd"], _state["path"] = fd, path


def uninstall() -> None:
    """Stop answering (the process's last flight recorder closed): the handler and the log go."""
    fd, path = _state["fd"], _state["path"]
    if fd is None:
        return
    _state["fd"] = _state["path"] = None
    try:                        # the log first: a report checks it is open before it signals (see request)
        os.unlink(path)
    except FileNotFoundError:
        pass
    os.close(fd)
    faulthandler.unregister(STACK_SIGNAL)


def _holds(pid: int, path: str) -> bool:
    """Process ``pid`` has ``path`` open (so it is the rank that installed the handler, not a reused pid)."""
    fd_dir = f"/proc/{pid}/fd"
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return False
    real = os.path.realpath(path)
    for name in names:
        try:
            if os.readlink(os.path.join(fd_dir, name)) == real:
                return True
        except OSError:
            continue
    return False


def _parse(text: str) -> List[Dict[str, Any]]:
    """faulthandler's dump as threads, each with its frames outermost first; the main thread (the one threading's
    ``_bootstrap`` did not start) comes first."""
    threads: List[Dict[str, Any]] = []
    for line in text.splitlines():
        head = _THREAD.match(line)
        if head:
            threads.append({"thread": head.group(2), "frames": []})
            continue
        frame = _FRAME.match(line)
        if frame and threads:
            threads[-1]["frames"].append([frame.group(1), int(frame.group(2)), frame.group(3)])
    for t in threads:
        t["frames"].reverse()
        bottom: List[Any] = t["frames"][0] if t["frames"] else ["", 0, ""]
        t["main"] = not (str(bottom[0]).endswith("threading.py") and bottom[2] == "_bootstrap")
    threads.sort(key=lambda t: not t["main"])
    return threads


def request(where: str, job: str, world_rank: int, pid: int, timeout: float = REQUEST_S) -> Optional[str]:
    """Ask rank ``world_rank`` (process ``pid``) for its stacks now: the snapshot's path, or None if it cannot
    answer."""
    log = _log_path(where, job, world_rank)
    if pid <= 0 or not _holds(pid, log):
        return None
    start = os.path.getsize(log)
    os.kill(pid, STACK_SIGNAL)
    taken = time.time()
    deadline = time.monotonic() + timeout
    size, since = start, time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.01)
        now_size = os.path.getsize(log)
        if now_size != size:
            size, since = now_size, time.monotonic()
        elif size > start and time.monotonic() - since >= _SETTLE_S:
            break
    if size <= start:
        return None
    with open(log, "rb") as f:
        f.seek(start)
        text = f.read(size - start).decode("utf-8", "replace")
    path = os.path.join(where, f"{job}.rank{world_rank}{SNAPSHOT_SUFFIX}")
    return files.write_atomically(path, json.dumps({"world_rank": world_rank, "pid": pid, "time": taken,
                                                    "threads": _parse(text)}), 0o600)


def read(where: str, job: str, world_rank: int) -> Optional[Tuple[float, List[Dict[str, Any]]]]:
    """(time taken, threads) of the rank's last snapshot, or None."""
    try:
        with open(os.path.join(where, f"{job}.rank{world_rank}{SNAPSHOT_SUFFIX}"), encoding="utf-8") as f:
            doc = json.load(f)
        return float(doc["time"]), list(doc["threads"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
