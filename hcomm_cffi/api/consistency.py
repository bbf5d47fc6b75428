"""Collective signatures compared across ranks before any data moves: a mismatch raises on every rank.

Every collective of a communicator carries a signature — sequence number, collective, count,
dtype, reduce op, root, algorithm, output count — and, when the check is on, the ranks allgather
their signatures (one small library allgather of ``SIG_WORDS`` int64 per rank) before the
algorithm issues anything.  Every rank then sees every other rank's call, so all of them raise
the same :class:`CollectiveMismatchError` naming the ranks and both values, at once, instead of a
hang or silently wrong data (a broadcast whose counts differ zero-fills the tail; ring on one rank
and mesh on another corrupts).  On by default on the emulator; on CANN with
``HCOMM_CHECK_COLLECTIVES=1`` (like torch's ``TORCH_DISTRIBUTED_DEBUG=DETAIL``).
"""
from __future__ import annotations

import zlib
from functools import lru_cache
from typing import Dict, List, Optional, Sequence

import numpy as np

from ..algorithms import registry
from ..algorithms.interface import COLLECTIVES, REDUCING, ROOTED, CollectiveCall
from ..enums import DataType, ReduceOp
from .errors import CommError

__all__ = ["SIG_WORDS", "CollectiveMismatchError", "signature", "describe", "compare"]

SIG_WORDS = 8
_SEQ, _COLL, _COUNT, _DTYPE, _OP, _ROOT, _ALGO, _OUT = range(SIG_WORDS)
_NAMES: Dict[int, str] = {}
_FIELDS = {_COUNT: "count", _DTYPE: "dtype", _OP: "reduce op", _ROOT: "root", _ALGO: "algorithm",
           _OUT: "output count"}


class CollectiveMismatchError(CommError, ValueError):
    """Ranks called different collectives, or the same one with different arguments, at the same point."""


@lru_cache(maxsize=1)
def _known_names() -> None:
    """Names other ranks may send: the collectives and the registered algorithms (others print as hex)."""
    for name in COLLECTIVES + registry.names():
        _id(name)


def _id(name: str) -> int:
    key = zlib.crc32(name.encode())
    _NAMES[key] = name
    return key


def signature(seq: int, call: CollectiveCall, algorithm: str) -> np.ndarray:
    """The ``SIG_WORDS`` int64 words of one call (op and root only where they mean something)."""
    return np.array([seq, _id(call.coll), call.count, int(call.dtype),
                     int(call.op) if call.coll in REDUCING else -1, call.root if call.coll in ROOTED else -1,
                     _id(algorithm), -1 if call.recv_count is None else call.recv_count], np.int64)


def describe(row: Sequence[int]) -> str:
    """'allreduce #18 (count 1024 fp32, op sum, algorithm ring)'."""
    _known_names()
    name = _NAMES.get(int(row[_COLL]), f"collective 0x{int(row[_COLL]):08x}")
    try:
        dtype = DataType(int(row[_DTYPE])).name.lower()
    except ValueError:
        dtype = f"dtype {int(row[_DTYPE])}"
    parts = [f"count {int(row[_COUNT])} {dtype}"]
    if row[_OP] >= 0:
        parts.append(f"op {ReduceOp(int(row[_OP])).name.lower()}")
    if row[_ROOT] >= 0:
        parts.append(f"root {int(row[_ROOT])}")
    if row[_OUT] >= 0:
        parts.append(f"output count {int(row[_OUT])}")
    algo = _NAMES.get(int(row[_ALGO]), f"0x{int(row[_ALGO]):08x}")
    parts.append(f"algorithm {algo}")
    return f"{name} #{int(row[_SEQ])} ({', '.join(parts)})"


def _ranks(ranks: List[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ",".join(map(str, ranks))


def compare(rows: np.ndarray, rank: int, comm: str) -> Optional[str]:
    """None when every rank's row is the same, else the message (identical on every rank)."""
    groups: Dict[bytes, List[int]] = {}
    for r in range(rows.shape[0]):
        groups.setdefault(rows[r].tobytes(), []).append(r)
    if len(groups) == 1:
        return None
    ordered = sorted(groups.values(), key=lambda rs: (-len(rs), rs[0]))
    calls = "; ".join(f"{_ranks(rs)} {'call' if len(rs) > 1 else 'calls'} {describe(rows[rs[0]])}" for rs in ordered)
    differ = [f for f in range(SIG_WORDS) if len(set(rows[:, f].tolist())) > 1]
    if _SEQ in differ or _COLL in differ:
        what = "the collective they are in"
    else:
        name = _NAMES.get(int(rows[0, _COLL]), "a collective")
        what = f"the {' and '.join(_FIELDS[f] for f in differ)} of {name} #{int(rows[0, _SEQ])}"
    return (f"rank {rank} of communicator {comm!r}: ranks disagree on {what}: {calls}. Every rank must make the "
            "same collective calls in the same order with the same count, dtype, op, root and algorithm")
