"""Collective signatures: what every rank's call must agree on, and the message naming who disagrees.

Every collective carries a signature -- collective, count, dtype, reduce op, root, algorithm,
output count -- of ``SIG_WORDS`` int64 words (the first is ``SIG_MAGIC``: the slot holds one).
:mod:`.signatures` carries it to every peer in the call's first handshake; :func:`compare` turns
the words every rank sent into the same :class:`CollectiveMismatchError` text on every rank,
naming the ranks and both values (a broadcast whose counts differ would zero-fill the tail; ring
on one rank and mesh on another would corrupt; alltoall blocks that differ would mix).
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

__all__ = ["SIG_WORDS", "SIG_MAGIC", "NOT_ARRIVED", "CollectiveMismatchError", "signature", "describe", "compare"]

SIG_WORDS = 8
SIG_MAGIC = 0x48534947       # "HSIG": word 0 of a signature slot that holds one
NOT_ARRIVED = -1             # the row of a rank this one did not exchange with
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


def signature(call: CollectiveCall, algorithm: str) -> np.ndarray:
    """The ``SIG_WORDS`` int64 words of one call (op and root only where they mean something)."""
    return np.array([SIG_MAGIC, _id(call.coll), call.count, int(call.dtype),
                     int(call.op) if call.coll in REDUCING else -1, call.root if call.coll in ROOTED else -1,
                     _id(algorithm), -1 if call.recv_count is None else call.recv_count], np.int64)


def describe(row: Sequence[int], numbered: bool = True) -> str:
    """'allreduce #18 (count 1024 fp32, op sum, algorithm ring)' ('allreduce (...)' when not ``numbered``)."""
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
    return f"{name}{f' #{int(row[_SEQ])}' if numbered else ''} ({', '.join(parts)})"


def _ranks(ranks: List[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ",".join(map(str, ranks))


def compare(rows: np.ndarray, rank: int, comm: str, seq: int, ranks: Sequence[int] = (),
            graph: Optional[str] = None) -> Optional[str]:
    """None when the rows of this rank and ``ranks`` (default: all) agree, else the message naming who differs.

    Word 0 of a row is SIG_MAGIC when a signature arrived; it is shown as the call's sequence
    number ``seq`` (every rank counts its collectives alike), anything else as no collective.
    ``graph``: the rows are a replay's of a call captured in that ACL graph (no sequence number: the
    replay is the operation, and the graph is named instead).
    """
    rows = rows.copy()
    rows[:, _SEQ] = np.where(rows[:, _SEQ] == SIG_MAGIC, seq, -1)
    members = sorted(set(ranks) | {rank}) if ranks else list(range(rows.shape[0]))
    groups: Dict[bytes, List[int]] = {}
    for r in members:
        groups.setdefault(rows[r].tobytes(), []).append(r)
    if len(groups) == 1:
        return None
    ordered = sorted(groups.values(), key=lambda rs: (-len(rs), rs[0]))
    numbered = graph is None
    calls = "; ".join(f"{_ranks(rs)} {'call' if len(rs) > 1 else 'calls'} {describe(rows[rs[0]], numbered)}"
                      for rs in ordered)
    differ = [f for f in range(SIG_WORDS) if len(set(rows[members, f].tolist())) > 1]
    if _SEQ in differ or _COLL in differ:
        what = "the collective they are in"
    else:
        name = _NAMES.get(int(rows[rank, _COLL]), "a collective")
        what = f"the {' and '.join(_FIELDS[f] for f in differ)} of {name}{f' #{seq}' if numbered else ''}"
    if not numbered:
        what += f" (this rank replays ACL graph {graph!r})"
    return (f"rank {rank} of communicator {comm!r}: ranks disagree on {what}: {calls}. Every rank must make the "
            "same collective calls in the same order with the same count, dtype, op, root and algorithm")
