"""Root-info exchange over a key-value store: rank 0 publishes the 4108-byte blob, every rank registers and waits.

Protocol (:func:`exchange_root_info`), under ``<namespace>/``: ``arrived/<rank>`` from every rank,
``root_info`` (or ``error``) from rank 0, then every rank waits until all ranks arrived and the root info
is there; ranks > 0 then write ``left/<rank>``, and rank 0 (which may host the store) returns once all
have left, deleting the namespace's keys.  A rank that times out names the ranks that never arrived.
"""
from __future__ import annotations

import os
import socket
import threading
import time
from typing import Any, Callable, Dict, Optional, Sequence

from ..enums import HCCL_ROOT_INFO_BYTES
from .errors import BootstrapError, RendezvousTimeout, StoreUnavailable, format_ranks
from .kvstore import KeyValueStore

__all__ = ["exchange_root_info", "next_generation", "timeout_error"]

_GENERATIONS: Dict[str, int] = {}
_GEN_LOCK = threading.Lock()


def next_generation(job_id: str) -> int:
    """0, 1, 2, ... per job id in this process: the n-th bootstrap of a job uses its own keys.

    Every rank must bootstrap the same number of times in the same order (as every collective call).
    """
    with _GEN_LOCK:
        gen = _GENERATIONS.get(job_id, 0)
        _GENERATIONS[job_id] = gen + 1
        return gen


def timeout_error(what: str, missing: Sequence[int], size: int, timeout: float, timeout_src: str,
                   extra: str = "") -> RendezvousTimeout:
    arrived = [r for r in range(size) if r not in set(missing)]
    msg = (f"bootstrap rendezvous: rank(s) {format_ranks(missing)} of {size} did not arrive within "
           f"{timeout:g} s ({timeout_src}) at the {what}"
           f"{'; arrived: ' + format_ranks(arrived) if arrived else '; no rank arrived'}{extra}. "
           "Every rank must call hcomm.init() / bootstrap.discover() the same number of times; "
           "look for a rank that crashed, hangs before init, or took another code path "
           "(raise HCCL_CONNECT_TIMEOUT if it is only slow)")
    return RendezvousTimeout(msg, missing, arrived)


def _until(deadline: float, op: Callable[[], Any]) -> Any:
    """Run ``op`` until it stops raising StoreUnavailable or the deadline passes (then re-raise)."""
    delay = 0.01
    while True:
        try:
            return op()
        except StoreUnavailable:
            if time.monotonic() >= deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.25)


def exchange_root_info(store: KeyValueStore, rank: int, size: int, make_root_info: Callable[[], bytes],
                       timeout: float, namespace: str, timeout_src: str = "HCCL_CONNECT_TIMEOUT") -> bytes:
    """Register this rank, publish (rank 0) or fetch the root info, and wait for every rank.

    Returns the root info once all ``size`` ranks have arrived.  Raises RendezvousTimeout naming the
    missing ranks after ``timeout`` seconds, BootstrapError if rank 0 failed to make the root info.
    """
    deadline = time.monotonic() + timeout
    ns = namespace.strip("/")
    arrived_key = f"{ns}/arrived/{{}}".format
    try:
        _until(deadline, lambda: store.set(arrived_key(rank), f"{socket.gethostname()} pid {os.getpid()}".encode()))
    except StoreUnavailable:
        raise timeout_error(store.description, [0] if rank else [], size, timeout, timeout_src,
                             extra=" (rank 0 never served the store)") from None
    blob: Optional[bytes] = None
    if rank == 0:
        try:
            blob = bytes(make_root_info())
            if len(blob) != HCCL_ROOT_INFO_BYTES:
                raise BootstrapError(f"the root info is {len(blob)} bytes; expected {HCCL_ROOT_INFO_BYTES}")
        except Exception as exc:
            store.set(f"{ns}/error", f"{type(exc).__name__}: {exc}".encode())  # the others fail fast
            raise
        store.set(f"{ns}/root_info", blob)
    waiting = [arrived_key(r) for r in range(size)]
    delay = 0.002
    while True:
        try:
            waiting = store.missing(waiting)
            if blob is None:
                blob = store.get(f"{ns}/root_info")
                if blob is None:
                    err = store.get(f"{ns}/error")
                    if err is not None:
                        raise BootstrapError(f"rank 0 could not create the root info: {err.decode(errors='replace')}")
        except StoreUnavailable:
            if time.monotonic() >= deadline:
                raise timeout_error(store.description, [0], size, timeout, timeout_src,
                                     extra=" (the store went away)") from None
        else:
            if not waiting and blob is not None:
                break
        if time.monotonic() >= deadline:
            missing = sorted(int(k.rsplit("/", 1)[1]) for k in waiting)
            extra = "" if missing or blob is not None else " (rank 0 arrived but never published the root info)"
            raise timeout_error(store.description, missing or [0], size, timeout, timeout_src, extra)
        time.sleep(delay)
        delay = min(delay * 1.5, 0.05)
    if len(blob) != HCCL_ROOT_INFO_BYTES:
        raise BootstrapError(f"the root info in the {store.description} is {len(blob)} bytes; "
                             f"expected {HCCL_ROOT_INFO_BYTES}")
    _leave(store, ns, rank, size, deadline)
    return blob


def _leave(store: KeyValueStore, ns: str, rank: int, size: int, deadline: float) -> None:
    """Ranks > 0 mark themselves done; rank 0 waits for them, then deletes the generation's keys.

    Rank 0 may host the store (TCP server, torch's store), so it must not go away before every rank
    has read the root info.  A rank that never leaves only costs rank 0 the rest of the deadline.
    """
    try:
        if rank:
            store.set(f"{ns}/left/{rank}", b"")
            return
        waiting = [f"{ns}/left/{r}" for r in range(1, size)]
        delay = 0.002
        while waiting and time.monotonic() < deadline:
            waiting = store.missing(waiting)
            if waiting:
                time.sleep(delay)
                delay = min(delay * 1.5, 0.05)
        if not waiting:
            store.delete_prefix(ns)
    except BootstrapError:
        pass
