"""The desync report: read every rank's flight recorder (dumps and rings) and say where the ranks diverged.

Input is a directory of :mod:`hcomm_cffi.flight` files: ``<job>.rank<R>.json`` dumps (written on a
timeout, a peer's death, SIGUSR1 or ``dump_flight_recorder()``) and ``*.ring`` files (the live
rings; one whose rank wrote no dump is what a killed rank left).  Per communicator it finds

* the first collective whose name differs between ranks: ``ranks 0,1,3 are in allreduce #18
  (4 MiB fp32, op sum); rank 2 is in broadcast #18 (4 MiB fp32, root 0)``;
* the first one whose arguments differ: ``ranks disagree on the count of allreduce #17: 1024 on
  0,1,3 vs 2048 on 2``;
* ranks that never entered the collective the others are stuck in, and ranks that are gone
  (no dump) with their last operation;

then one line per rank with the operation it was in and its state.  Used by ``hcomm doctor`` and
by ``hcomm run`` when a job fails.
"""
from __future__ import annotations

import glob
import json
import os
import struct
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from .enums import DataType, ReduceOp
from .flight import DUMP_SUFFIX, RING_SUFFIX, read_ring

__all__ = ["report", "load", "analyse", "describe_op", "RankView"]

_FIELDS = (("count", "count"), ("dtype", "dtype"), ("redop", "reduce op"), ("peer", "root"),
           ("algorithm", "algorithm"))
_OPEN = ("issued", "running", "failed")


@dataclass
class RankView:
    """What is known of one rank of one communicator: its records and where they came from."""

    rank: int
    records: List[Dict[str, Any]]
    dumped: bool                   # a JSON dump (the rank was alive to write it) vs only its ring file
    reason: str = ""
    pid: int = 0
    collectives: Dict[int, Dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.collectives = {r["seq"]: r for r in self.records if r["algorithm"] != "p2p"}

    def current(self) -> Optional[Dict[str, Any]]:
        """The first operation not done (where the rank is), else its last one."""
        for r in self.records:
            if r["state"] in _OPEN:
                return r
        return self.records[-1] if self.records else None


def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << (shift - 4)) == 0:
            return f"{n / (1 << shift):g} {unit}"
    return f"{n} B"


def _dtype(code: int) -> str:
    try:
        return DataType(code).name.lower()
    except ValueError:
        return f"dtype {code}"


def _value(rec: Dict[str, Any], key: str) -> str:
    """A record's field as a reader says it."""
    v = rec[key]
    if key == "dtype":
        return _dtype(v)
    if key == "redop":
        try:
            return ReduceOp(v).name.lower() if v >= 0 else "none"
        except ValueError:
            return f"op {v}"
    return str(v)


def describe_op(rec: Dict[str, Any]) -> str:
    """'allreduce #18 (4 MiB fp32, op sum)', 'broadcast #18 (16 B fp32, root 0)', 'send #3 (64 B fp32 to rank 1)'."""
    parts = [f"{_size(rec['nbytes'])} {_dtype(rec['dtype'])}"]
    if rec["algorithm"] == "p2p":
        parts[0] += (" to" if rec["op"].startswith("send") else " from") + f" rank {rec['peer']}"
        return f"{rec['op']} #{rec['seq']} ({parts[0]})"
    if rec["redop"] >= 0:
        parts.append(f"op {_value(rec, 'redop')}")
    if rec["peer"] >= 0:
        parts.append(f"root {rec['peer']}")
    return f"{rec['op']} #{rec['seq']} ({', '.join(parts)})"


def _ranks(rs: List[int]) -> str:
    return ("rank " if len(rs) == 1 else "ranks ") + ",".join(map(str, rs))


def _read_dump(path: str) -> Dict[str, Any]:
    """One rank's dump; ValueError naming the file when it is not one (unrelated JSON, a truncated file)."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        if not isinstance(doc, dict) or not isinstance(doc.get("job"), str) or not isinstance(doc.get("comms"), list):
            raise ValueError("it has no 'job' string and 'comms' list")
        for snap in doc["comms"]:
            if not isinstance(snap, dict) or not {"comm", "size", "rank", "records"} <= set(snap):
                raise ValueError("a 'comms' entry lacks comm, size, rank or records")
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"{path} is not a flight recorder dump ({exc}); expected the JSON a rank of an hcomm job "
                         f"writes as *{DUMP_SUFFIX}; remove it from {os.path.dirname(path) or '.'!r}") from None
    return doc


def load(directory: str) -> Tuple[str, Dict[str, Dict[int, RankView]], Dict[str, int]]:
    """(job, comm name -> rank -> view, comm name -> size) of the newest job in ``directory``."""
    if not os.path.isdir(directory):
        raise ValueError(f"{directory!r} is not a directory; expected a flight recorder directory (HCOMM_FR_DIR)")
    dumps = sorted(glob.glob(os.path.join(directory, "*" + DUMP_SUFFIX)), key=os.path.getmtime)
    rings = sorted(glob.glob(os.path.join(directory, "*" + RING_SUFFIX)), key=os.path.getmtime)
    if not dumps and not rings:
        raise ValueError(f"{directory!r} holds no flight recorder files (*{DUMP_SUFFIX}, *{RING_SUFFIX}); expected "
                         "the HCOMM_FR_DIR of a job that timed out, lost a peer or got SIGUSR1")
    docs = [_read_dump(path) for path in dumps]
    snaps = []
    for path in rings:
        try:
            snaps.append(read_ring(path))
        except (ValueError, KeyError, TypeError, struct.error) as exc:
            raise ValueError(f"{path} is not a flight recorder ring ({type(exc).__name__}: {exc}); expected the "
                             f"*{RING_SUFFIX} file a rank of an hcomm job writes; remove it from {directory!r}") from None
    job = (docs[-1]["job"] if docs else snaps[-1]["job"])
    views: Dict[str, Dict[int, RankView]] = {}
    sizes: Dict[str, int] = {}
    for doc in docs:
        if doc["job"] != job:
            continue
        for snap in doc["comms"]:
            sizes[snap["comm"]] = snap["size"]
            views.setdefault(snap["comm"], {})[snap["rank"]] = RankView(snap["rank"], snap["records"], True,
                                                                        doc.get("reason", ""), doc.get("pid", 0))
    for snap in snaps:
        if snap["job"] != job:
            continue
        sizes.setdefault(snap["comm"], snap["size"])
        views.setdefault(snap["comm"], {}).setdefault(snap["rank"], RankView(snap["rank"], snap["records"], False,
                                                                            "", snap["pid"]))
    return job, views, sizes


def _first_mismatch(views: Dict[int, RankView]) -> List[str]:
    """The first collective (by sequence number) on which the ranks that reached it disagree."""
    seqs = sorted({s for v in views.values() for s in v.collectives})
    for seq in seqs:
        here = {r: v.collectives[seq] for r, v in sorted(views.items()) if seq in v.collectives}
        if len(here) < 2:
            continue
        by_op: Dict[str, List[int]] = {}
        for r, rec in here.items():
            by_op.setdefault(rec["op"], []).append(r)
        if len(by_op) > 1:
            groups = sorted(by_op.values(), key=lambda rs: (-len(rs), rs[0]))
            text = []
            for rs in groups:
                rec = here[rs[0]]
                verb = ("are in" if len(rs) > 1 else "is in") if rec["state"] in _OPEN else "called"
                text.append(f"{_ranks(rs)} {verb} {describe_op(rec)}")
            return ["; ".join(text)]
        for key, name in _FIELDS:
            by_val: Dict[str, List[int]] = {}
            for r, rec in here.items():
                by_val.setdefault(_value(rec, key), []).append(r)
            if len(by_val) > 1:
                val_groups = sorted(by_val.items(), key=lambda kv: (-len(kv[1]), kv[1][0]))
                op = next(iter(here.values()))["op"]
                vs = " vs ".join(f"{val} on {','.join(map(str, rs))}" for val, rs in val_groups)
                return [f"ranks disagree on the {name} of {op} #{seq}: {vs}"]
    return []


def _stuck(views: Dict[int, RankView]) -> List[str]:
    """Ranks that never entered the latest collective another rank is stuck in."""
    open_seqs = [cur["seq"] for cur in (v.current() for v in views.values())
                 if cur is not None and cur["state"] in _OPEN and cur["algorithm"] != "p2p"]
    if not open_seqs:
        return []
    target = max(open_seqs)
    lines = []
    for r, v in sorted(views.items()):
        last = max(v.collectives) if v.collectives else 0
        if last < target:
            was = describe_op(v.collectives[last]) + f", {v.collectives[last]['state']}" if last else "none"
            lines.append(f"rank {r} never entered collective #{target} (its last collective: {was})")
    return lines


def analyse(comm: str, size: int, views: Dict[int, RankView], now: Optional[float] = None) -> List[str]:
    """The report lines of one communicator."""
    now = time.time() if now is None else now
    dumped = sorted(r for r, v in views.items() if v.dumped)
    lines = [f"communicator {comm!r} ({size} ranks): dumps from {_ranks(dumped) if dumped else 'no rank'}"]
    findings = _first_mismatch(views) + _stuck(views)
    for r in range(size):
        v = views.get(r)
        if v is None:
            findings.append(f"rank {r} left no flight record (it never created this communicator, or wrote "
                            "elsewhere)")
        elif not v.dumped:
            cur = v.current()
            last = f"{describe_op(cur)}, {cur['state']}" if cur is not None else "none recorded"
            findings.append(f"rank {r} is gone (no dump: killed or exited before writing one); its last "
                            f"operation: {last}")
    lines += [f"  {f}" for f in findings] or ["  no divergence found: every rank recorded the same collectives"]
    lines.append("  where each rank is:")
    for r, v in sorted(views.items()):
        cur = v.current()
        if cur is None:
            lines.append(f"    rank {r}: no operation recorded")
            continue
        since = cur["t_running"] or cur["t_issued"]
        age = f" for {(cur['t_done'] or now) - since:.1f} s" if cur["state"] in _OPEN else ""
        src = "" if v.dumped else " [ring of a dead rank]"
        lines.append(f"    rank {r}: {describe_op(cur)} {cur['state']}{age}{src}")
    return lines


def report(directory: str) -> str:
    """The desync report of the newest job whose flight recorder files are in ``directory``."""
    job, views, sizes = load(directory)
    lines = [f"flight recorder of job {job} ({directory})"]
    reasons = sorted({(r, v.reason) for vs in views.values() for r, v in vs.items() if v.dumped and v.reason})
    for comm in sorted(views, key=lambda c: (c != "world", c)):
        lines += analyse(comm, sizes[comm], views[comm])
    if reasons:
        lines.append("why each rank dumped:")
        seen = set()
        for r, why in reasons:
            if r not in seen:
                seen.add(r)
                lines.append(f"  rank {r}: {why if len(why) <= 300 else why[:297] + '...'}")
    return "\n".join(lines)
