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
import re
import struct
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from .enums import DataType, ReduceOp
from .flight import DUMP_SUFFIX, RING_SUFFIX, pid_alive, read_ring

__all__ = ["report", "load", "analyse", "describe_op", "RankView"]

_FIELDS = (("count", "count"), ("dtype", "dtype"), ("redop", "reduce op"), ("peer", "root"),
           ("algorithm", "algorithm"))
_OPEN = ("issued", "running", "failed")


@dataclass
class RankView:
    """What is known of one rank of one communicator: its records, where they came from and how the rank ended."""

    rank: int
    records: List[Dict[str, Any]]
    dumped: bool                   # a JSON dump (the rank was alive to write it)
    reason: str = ""
    pid: int = 0
    world_rank: int = -1
    end: str = "live"              # from its ring: live, finalised (communicator destroyed) or exited (without it)
    end_time: Optional[float] = None
    end_why: str = ""
    alive: Optional[bool] = None   # its process exists (checked for a live ring only; None: unknown)
    exit: str = ""                 # what the launcher saw ("exited with code 1"), when it says
    collectives: Dict[int, Dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.collectives = {r["seq"]: r for r in self.records if r["algorithm"] != "p2p"}

    def current(self) -> Optional[Dict[str, Any]]:
        """The first operation not done (where the rank is), else its last one."""
        for r in self.records:
            if r["state"] in _OPEN:
                return r
        return self.records[-1] if self.records else None

    @property
    def killed(self) -> bool:
        """Its ring is still live but its process is gone: killed (SIGKILL, OOM) or stopped by a signal."""
        return self.end == "live" and self.alive is False

    def status(self) -> str:
        """How the rank ended, as a reader says it: 'finalised cleanly', 'raised X; exited with code 1', 'alive', ..."""
        kind = self.end_why.split(":", 1)[0]
        if self.end == "finalised":
            failed = any(r["state"] == "failed" for r in self.records)
            how = ("finalised after its failure (destroyed the communicator)" if failed else
                   "finalised cleanly (destroyed the communicator)")
        elif self.end == "exited" and self.end_why.startswith("signal "):
            return self.exit or f"stopped by {self.end_why[7:]}"
        elif self.end == "exited":
            how = f"raised {kind}" if kind else "ended without destroying the communicator"
            return f"{how}; {self.exit}" if self.exit else how + " and exited"
        elif self.killed:
            return f"gone: {self.exit}" if self.exit else "gone: killed (its process ended without an exit record)"
        else:
            how = f"alive (pid {self.pid})" if self.alive else "state unknown (its process is not on this machine)"
        return f"{how}; {self.exit}" if self.exit else how


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
    if rec["op"] == "replay":     # an ACL graph replay (api/graphs.py): the algorithm field is the graph's name
        return (f"replay #{rec['seq']} of ACL graph {rec['algorithm']!r} ({rec['count']} captured operation"
                f"{'s' if rec['count'] != 1 else ''}, {_size(rec['nbytes'])})")
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


def load(directory: str, exits: Optional[Dict[int, str]] = None, job: Optional[str] = None
         ) -> Tuple[str, Dict[str, Dict[int, RankView]], Dict[str, int]]:
    """(job, comm name -> rank -> view, comm name -> size) of job ``job`` (default: the newest) in ``directory``.

    A rank's records come from its ring file when there is one (it is newer than any dump), else from its
    dump; ``exits``: world rank -> what a launcher saw of its end.
    """
    if not os.path.isdir(directory):
        raise ValueError(f"{directory!r} is not a directory; expected a flight recorder directory (HCOMM_FR_DIR)")
    dumps = sorted(glob.glob(os.path.join(directory, "*" + DUMP_SUFFIX)), key=os.path.getmtime)
    rings = sorted(glob.glob(os.path.join(directory, "*" + RING_SUFFIX)), key=os.path.getmtime)
    if not dumps and not rings:
        raise ValueError(f"{directory!r} holds no flight recorder files (*{DUMP_SUFFIX}, *{RING_SUFFIX}); expected "
                         "the HCOMM_FR_DIR of a job that timed out, lost a peer or got SIGUSR1")
    docs = [_read_dump(path) for path in dumps]
    snaps = []
    unreadable: List[str] = []
    for path in rings:
        try:
            snaps.append(read_ring(path))
        except OSError:                    # removed meanwhile (the job is still running)
            continue
        except (ValueError, KeyError, TypeError, struct.error) as exc:   # half-written meanwhile, or not a ring
            unreadable.append(f"{path} is not a flight recorder ring ({type(exc).__name__}: {exc}); expected the "
                              f"*{RING_SUFFIX} file a rank of an hcomm job writes; remove it from {directory!r}")
    if not docs and not snaps:
        raise ValueError(unreadable[0] if unreadable else
                         f"{directory!r}: its flight recorder files went away while being read")
    if job is None:
        job = docs[-1]["job"] if docs else snaps[-1]["job"]     # the newest file's job
    views: Dict[str, Dict[int, RankView]] = {}
    sizes: Dict[str, int] = {}
    said = exits or {}
    for snap in snaps:
        if snap["job"] != job:
            continue
        sizes[snap["comm"]] = snap["size"]
        views.setdefault(snap["comm"], {})[snap["rank"]] = RankView(
            snap["rank"], snap["records"], False, "", snap["pid"], snap["world_rank"], snap["end"], snap["end_time"],
            snap["end_why"], pid_alive(snap["pid"]) if snap["end"] == "live" else False,
            said.get(snap["world_rank"], ""))
    for doc in docs:
        if doc["job"] != job:
            continue
        for snap in doc["comms"]:
            sizes.setdefault(snap["comm"], snap["size"])
            view = views.setdefault(snap["comm"], {}).get(snap["rank"])
            if view is None:
                view = views[snap["comm"]][snap["rank"]] = RankView(
                    snap["rank"], snap["records"], True, pid=doc.get("pid", 0), world_rank=snap["world_rank"],
                    end=snap.get("end", "live"), alive=pid_alive(doc.get("pid", 0)),
                    exit=said.get(snap["world_rank"], ""))
            view.dumped, view.reason = True, doc.get("reason", "")
    return job, views, sizes


def idle_for(views: Dict[int, RankView], now: float) -> Optional[float]:
    """Seconds since any rank of a communicator last made progress, when a rank still alive is inside an operation
    (None: nothing is waiting)."""
    waiting = False
    latest = 0.0
    for v in views.values():
        for rec in v.records:
            latest = max(latest, rec["t_issued"], rec["t_running"] or 0.0, rec["t_done"] or 0.0)
        latest = max(latest, v.end_time or 0.0)
        cur = v.current()
        if cur is not None and cur["state"] in ("issued", "running") and v.end == "live" and v.alive:
            waiting = True
    return now - latest if waiting and latest else None


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


def _stuck(views: Dict[int, RankView], now: float) -> List[str]:
    """Who waits in the latest collective a rank is stuck in, for how long, and who never entered it."""
    open_seqs = [cur["seq"] for cur in (v.current() for v in views.values())
                 if cur is not None and cur["state"] in _OPEN and cur["algorithm"] != "p2p"]
    if not open_seqs:
        return []
    target = max(open_seqs)
    lines = []
    waiting = sorted(r for r, v in views.items() if target in v.collectives
                     and v.collectives[target]["state"] in ("issued", "running") and not v.killed)
    if waiting:
        since = min(v.collectives[target]["t_issued"] for r, v in views.items() if r in waiting)
        lines.append(f"{_ranks(waiting)} {'have' if len(waiting) > 1 else 'has'} waited {now - since:.1f} s in "
                     f"{describe_op(views[waiting[0]].collectives[target])}")
    for r, v in sorted(views.items()):
        last = max(v.collectives) if v.collectives else 0
        if last < target:
            was = "none"
            if last:
                rec = v.collectives[last]
                was = describe_op(rec) + f", {rec['state']}"
                if rec["state"] == "done" and rec["t_done"]:
                    was += f" {now - rec['t_done']:.1f} s ago"
            lines.append(f"rank {r} never entered collective #{target} (its last collective: {was}); now: "
                         f"{v.status()}")
    return lines


def _gone(r: int, v: RankView) -> str:
    cur = v.current()
    last = f"{describe_op(cur)}, {cur['state']}" if cur is not None else "none recorded"
    return f"rank {r} is gone (killed: no dump, its process ended without an exit record); its last operation: {last}"


def analyse(comm: str, size: int, views: Dict[int, RankView], now: Optional[float] = None) -> List[str]:
    """The report lines of one communicator."""
    now = time.time() if now is None else now
    dumped = sorted(r for r, v in views.items() if v.dumped)
    lines = [f"communicator {comm!r} ({size} ranks): dumps from {_ranks(dumped) if dumped else 'no rank'}"
             + ("" if len(dumped) == len(views) else f", live records of {_ranks(sorted(views))}")]
    findings = _first_mismatch(views) + _stuck(views, now)
    for r in range(size):
        v = views.get(r)
        if v is None:
            findings.append(f"rank {r} left no flight record (it never created this communicator, or wrote "
                            "elsewhere)")
        elif v.killed and not v.dumped:
            findings.append(_gone(r, v))
    lines += [f"  {f}" for f in findings] or ["  no divergence found: every rank recorded the same collectives"]
    lines.append("  where each rank is:")
    for r, v in sorted(views.items()):
        cur = v.current()
        if cur is None:
            lines.append(f"    rank {r}: no operation recorded; {v.status()}")
            continue
        since = cur["t_running"] or cur["t_issued"]
        age = f" for {(cur['t_done'] or now) - since:.1f} s" if cur["state"] in _OPEN else ""
        lines.append(f"    rank {r}: {describe_op(cur)} {cur['state']}{age}; {v.status()}")
    return lines


def report(directory: str, exits: Optional[Dict[int, str]] = None, now: Optional[float] = None,
           job: Optional[str] = None) -> str:
    """The desync report of job ``job`` (default: the newest) whose flight recorder files are in ``directory``.

    ``exits``: world rank -> how a launcher saw it end (``hcomm run`` passes it).
    """
    job, views, sizes = load(directory, exits, job)
    now = time.time() if now is None else now
    lines = [f"flight recorder of job {job} ({directory})"]
    reasons = sorted({(r, v.reason) for vs in views.values() for r, v in vs.items() if v.dumped and v.reason})
    for comm in sorted(views, key=lambda c: (c != "world", c)):
        lines += analyse(comm, sizes[comm], views[comm], now)
    if reasons:
        lines.append("why each rank dumped:")
        said: Dict[str, List[int]] = {}
        first: Dict[str, str] = {}
        for r, why in reasons:
            key = re.sub(rf"\brank {r} (of|thread)\b", r"rank * \1", why)   # one failure seen from each rank: once
            if r not in said.setdefault(key, []):
                said[key].append(r)
                first.setdefault(key, why)
        for key, rs in said.items():
            why = first[key]
            lines.append(f"  {_ranks(rs)}: {why if len(why) <= 400 else why[:397] + '...'}")
    return "\n".join(lines)


def stalled(directory: str, threshold: float, now: Optional[float] = None, job: Optional[str] = None
            ) -> Dict[str, float]:
    """Communicators of job ``job`` (default: the newest) in ``directory`` on which no rank made progress for
    ``threshold`` seconds while a live rank waits in an operation: comm name -> seconds without progress."""
    try:
        _job, views, _sizes = load(directory, job=job)
    except (ValueError, OSError):
        return {}
    now = time.time() if now is None else now
    idle = {comm: idle_for(vs, now) for comm, vs in views.items()}
    return {comm: t for comm, t in idle.items() if t is not None and t >= threshold}
