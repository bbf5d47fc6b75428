"""The emulator's acquisition ledger: every thread, channel and HCCL buffer its C functions hand out.

Recorded by the emulator's own entry points (``HcclThreadAcquire``, ``HcclThreadAcquireWithStream``,
``HcclChannelAcquire``, communicator creation), so it sees the same acquisitions whoever calls them:
the package's algorithms from Python, or a C program through the emulated CANN libraries.  A plan
(``hcomm plan``) is checked against it: what was planned is what the C functions were asked for.

Only what is newly created is recorded: a channel the emulator reuses (same peer, engine and
protocol) or a stream's existing thread adds nothing; notifies added to a stream's thread are a
``"notify"`` record.  The package tags its own acquisitions with :func:`tagged` (``"algorithm:ring"``,
``"comm:overhead"``, ...); a C caller's are untagged (``""``).  With ``HCOMM_SIM_LEDGER=<dir>`` the
records are also kept in ``<dir>/ledger-<pid>.json`` (rewritten on every acquisition, since an
embedded interpreter is never finalised, and at exit), so a test can compare a C program's
acquisitions with a plan.
"""
from __future__ import annotations

import atexit
import contextlib
import dataclasses
import json
import os
import threading
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional

from .. import files, settings
from .errors import HcclResult, SimError

__all__ = ["Acquisition", "KINDS", "record", "acquisitions", "clear", "tagged", "current_purpose", "dump",
           "ledger_path", "load"]

#: what a record counts: threads (``notifies`` per thread), channels (``notifies`` per channel), the HCCL
#: buffer (``count`` bytes), or notifies added to an existing thread (``count`` notifies)
KINDS = ("thread", "channel", "buffer", "notify")


@dataclass(frozen=True)
class Acquisition:
    """One acquisition through the emulator's C functions.

    ``count`` is threads or channels made by the call (bytes for ``"buffer"``, notifies for ``"notify"``);
    ``notifies`` is per thread / per channel.  ``engine`` is the CommEngine name the caller asked for
    (``"CPU_TS"``, ``"AICPU_TS"``, ...; ``""`` for the buffer).  ``peers`` lists a channel record's remote ranks.
    """

    comm: str
    kind: str
    engine: str
    count: int
    notifies: int
    purpose: str = ""
    rank: int = -1
    peers: tuple = ()
    function: str = ""

    def as_dict(self) -> Dict[str, object]:
        """A JSON-ready dict (``peers`` as a list)."""
        d = dataclasses.asdict(self)
        d["peers"] = list(self.peers)
        return d


_LOCK = threading.Lock()
_DUMP_LOCK = threading.Lock()
_RECORDS: List[Acquisition] = []
_PURPOSE = threading.local()


def current_purpose() -> str:
    """The tag the calling thread gave its acquisitions (``""`` when untagged: a C caller)."""
    return getattr(_PURPOSE, "value", "")


@contextlib.contextmanager
def tagged(purpose: str) -> Iterator[None]:
    """Acquisitions made by this thread inside the block carry ``purpose`` (nested blocks: the innermost)."""
    before = current_purpose()
    _PURPOSE.value = purpose
    try:
        yield
    finally:
        _PURPOSE.value = before


def record(comm: str, kind: str, engine: str, count: int, notifies: int, *, rank: int = -1,
           peers: "tuple[int, ...]" = (), function: str = "") -> Acquisition:
    """Add one record (called by the emulator's entry points once the acquisition succeeded)."""
    if kind not in KINDS:
        raise ValueError(f"kind={kind!r}; expected one of {KINDS}")
    entry = Acquisition(comm, kind, engine, int(count), int(notifies), current_purpose(), int(rank),
                        tuple(int(p) for p in peers), function)
    with _LOCK:
        _RECORDS.append(entry)
    dump()
    return entry


def acquisitions(comm: Optional[str] = None) -> List[Acquisition]:
    """Every record of this process in order, or those of the communicator named ``comm``."""
    with _LOCK:
        return [a for a in _RECORDS if comm is None or a.comm == comm]


def clear() -> None:
    """Forget every record (tests between cases); the dump file, if any, is rewritten empty."""
    with _LOCK:
        _RECORDS.clear()
    dump()


def ledger_path() -> Optional[str]:
    """``<HCOMM_SIM_LEDGER>/ledger-<pid>.json``, or None when the setting is unset."""
    directory = settings.value("HCOMM_SIM_LEDGER")
    return None if directory is None else os.path.join(directory, f"ledger-{os.getpid()}.json")


def check_dir() -> None:
    """SimError naming HCOMM_SIM_LEDGER when it is set to a directory the ledger cannot be written in (checked when a
    communicator is created, before anything is recorded)."""
    directory = settings.value("HCOMM_SIM_LEDGER")
    if directory is not None:
        try:
            files.checked_dir(directory, "HCOMM_SIM_LEDGER")
        except files.UnsafePath as exc:
            raise SimError(HcclResult.E_PARA, str(exc)) from None


def dump(path: Optional[str] = None) -> Optional[str]:
    """Write the records as JSON (atomically) to ``path`` or :func:`ledger_path`; the path written, or None
    (neither: nothing is written)."""
    target = path or ledger_path()
    if target is None:
        return None
    with _DUMP_LOCK:        # one writer at a time: a later snapshot never lands before an earlier one
        with _LOCK:
            data = {"pid": os.getpid(), "acquisitions": [a.as_dict() for a in _RECORDS]}
        where = os.path.dirname(os.path.abspath(target))
        files.checked_dir(where, "HCOMM_SIM_LEDGER" if path is None else "ledger directory")
        files.write_atomically(target, json.dumps(data, indent=1))
    return target


def load(path: str) -> List[Acquisition]:
    """The records of a dump file (as written by :func:`dump`)."""
    with open(path) as f:
        data = json.load(f)
    return [Acquisition(**{**a, "peers": tuple(a.get("peers", ()))}) for a in data["acquisitions"]]


def _dump_at_exit() -> None:
    try:
        dump()
    except Exception:
        pass


def _after_fork() -> None:
    """A forked child starts with an empty ledger of its own (its parent's acquisitions are not its)."""
    global _LOCK, _DUMP_LOCK
    _LOCK = threading.Lock()
    _DUMP_LOCK = threading.Lock()
    _RECORDS.clear()


atexit.register(_dump_at_exit)
os.register_at_fork(after_in_child=_after_fork)
