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

then one line per rank with the operation it was in, the user's ``file:line`` of it (the flight
record's call site) and its state; for a live rank that never arrived, its Python stack (every
thread) as last taken by :func:`capture` (:mod:`hcomm_cffi.stacks`); and last, the next step to
take.  Times are as of the newest file of the job (a dump, a rank's end, or the moment a report was
captured: ``<job>.report.json``, which also keeps what the launcher saw of each rank's end), never
as of now, so ``hcomm doctor DIR`` prints the same report every time.  Files that are not the
package's (any other name) are not read.  Used by ``hcomm doctor`` and by ``hcomm run`` when a job
fails or stalls.
"""
from __future__ import annotations

import json
import os
import re
import struct
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from . import files, stacks
from .callsite import is_library, short_path
from .enums import DataType, ReduceOp
from .flight import DUMP_SUFFIX, RING_SUFFIX, pid_alive, read_ring

__all__ = ["report", "load", "analyse", "describe_op", "RankView", "capture", "summary", "as_of", "MARKER_SUFFIX",
           "DUMP_NAME", "owned"]

MARKER_SUFFIX = ".report.json"
#: the name of a rank's dump: ``<job>.rank<R>.json`` (other JSON in the directory is not the package's)
DUMP_NAME = re.compile(r"^(?P<job>[A-Za-z0-9_.-]+)\.rank(?P<rank>\d+)" + re.escape(DUMP_SUFFIX) + "$")
_RING_NAME = re.compile(r"^[A-Za-z0-9_.-]+\.rank\d+\..*\.\d+" + re.escape(RING_SUFFIX) + "$")

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
    dump_time: float = 0.0         # when its dump was written (0: none)
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


def _at(rec: Dict[str, Any]) -> str:
    """' at failures.py:50' (the user's line of the operation), or '' when the record has none."""
    site = rec.get("site") or ""
    return f" at {site}" if site else ""


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
                         f"writes as <job>.rank<R>{DUMP_SUFFIX}") from None
    return doc


def owned(directory: str) -> Tuple[List[str], List[str]]:
    """(dumps, rings) in ``directory`` named as the package names them, oldest first (nothing else is read)."""
    try:
        names = os.listdir(directory)
    except OSError:
        return [], []
    paths = [os.path.join(directory, n) for n in names]

    def by_age(ps: List[str]) -> List[str]:
        stamped = []
        for path in ps:
            try:
                stamped.append((os.path.getmtime(path), path))
            except OSError:                  # removed meanwhile
                continue
        return [p for _, p in sorted(stamped)]
    return (by_age([p for p in paths if DUMP_NAME.match(os.path.basename(p))]),
            by_age([p for p in paths if _RING_NAME.match(os.path.basename(p))]))


def load(directory: str, exits: Optional[Dict[int, str]] = None, job: Optional[str] = None
         ) -> Tuple[str, Dict[str, Dict[int, RankView]], Dict[str, int]]:
    """(job, comm name -> rank -> view, comm name -> size) of job ``job`` (default: the newest) in ``directory``.

    A rank's records come from its ring file when there is one (it is newer than any dump), else from its
    dump; ``exits``: world rank -> what a launcher saw of its end.
    """
    if not os.path.isdir(directory):
        raise ValueError(f"{directory!r} is not a directory; expected a flight recorder directory (HCOMM_FR_DIR)")
    dumps, rings = owned(directory)
    if not dumps and not rings:
        raise ValueError(f"{directory!r} holds no flight recorder files (<job>.rank<R>{DUMP_SUFFIX}, "
                         f"*{RING_SUFFIX}); expected the HCOMM_FR_DIR of a job that timed out, lost a peer or got "
                         "SIGUSR1")
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
                              f"*{RING_SUFFIX} file a rank of an hcomm job writes")
    if not docs and not snaps:
        raise ValueError(unreadable[0] if unreadable else
                         f"{directory!r}: its flight recorder files went away while being read")
    if job is None:
        job = docs[-1]["job"] if docs else snaps[-1]["job"]     # the newest file's job
    views: Dict[str, Dict[int, RankView]] = {}
    sizes: Dict[str, int] = {}
    said = exits if exits is not None else _marker(directory, job).get("exits", {})
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
            view.dump_time = float(doc.get("time") or 0.0)
    return job, views, sizes


def _marker(directory: str, job: str) -> Dict[str, Any]:
    """What the last :func:`capture` of job ``job`` kept: its time and the launcher's view of each rank's end."""
    try:
        with open(os.path.join(directory, f"{job}{MARKER_SUFFIX}"), encoding="utf-8") as f:
            doc = json.load(f)
        return {"time": float(doc["time"]), "exits": {int(k): str(v) for k, v in dict(doc["exits"]).items()}}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def as_of(directory: str, job: str, views: Dict[str, Dict[int, RankView]]) -> float:
    """The time the report is as of: the newest of the job's capture, its dumps, its ranks' ends and its records."""
    latest = float(_marker(directory, job).get("time", 0.0))
    for vs in views.values():
        for v in vs.values():
            latest = max(latest, v.dump_time, v.end_time or 0.0)
            for rec in v.records:
                latest = max(latest, rec["t_issued"], rec["t_running"] or 0.0, rec["t_done"] or 0.0)
    return latest


def _absent(views: Dict[int, RankView]) -> Tuple[int, List[int]]:
    """(the latest collective a rank is stuck in, the ranks that never entered it); (0, []) when none is stuck."""
    open_seqs = [cur["seq"] for cur in (v.current() for v in views.values())
                 if cur is not None and cur["state"] in _OPEN and cur["algorithm"] != "p2p"]
    if not open_seqs:
        return 0, []
    target = max(open_seqs)
    return target, [r for r, v in sorted(views.items()) if (max(v.collectives) if v.collectives else 0) < target]


def capture(directory: str, job: str, exits: Optional[Dict[int, str]] = None) -> None:
    """Before a report: take the stacks of the live ranks that never arrived, and keep the time and ``exits``.

    What :func:`report` then prints, ``hcomm doctor`` prints again from the same files.
    """
    try:
        _job, views, _sizes = load(directory, exits if exits is not None else {}, job)
    except (ValueError, OSError):
        return
    asked = set()
    for vs in views.values():
        _target, absent = _absent(vs)
        for r in absent:
            v = vs[r]
            if v.end == "live" and v.alive and v.world_rank not in asked:
                asked.add(v.world_rank)
                try:
                    stacks.request(directory, job, v.world_rank, v.pid)
                except OSError:          # it ended meanwhile
                    pass
    try:
        ended = {str(k): v for k, v in (exits or {}).items()}
        files.write_atomically(os.path.join(directory, f"{job}{MARKER_SUFFIX}"),
                               json.dumps({"time": time.time(), "exits": ended}), 0o600)
    except OSError:
        pass


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


def _sites(recs: List[Dict[str, Any]]) -> str:
    """' at a.py:5' for records called from one line, ' at a.py:5, b.py:7' from several, '' when none is known."""
    seen = [rec.get("site") or "" for rec in recs]
    unique = [x for i, x in enumerate(seen) if x and x not in seen[:i]]
    return f" at {', '.join(unique)}" if unique else ""


def _first_mismatch(views: Dict[int, RankView]) -> Tuple[List[str], str]:
    """The first collective (by sequence number) on which the ranks that reached it disagree, and the next step."""
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
                text.append(f"{_ranks(rs)} {verb} {describe_op(rec)}{_sites([here[r] for r in rs])}")
            odd = groups[-1]
            step = (f"make {_ranks(odd)} call {here[groups[0][0]]['op']} as collective #{seq}, as "
                    f"{_ranks(groups[0])} do{'es' if len(groups[0]) == 1 else ''} (every rank must call the same "
                    f"collectives in the same order): look at {_ranks(odd)}'s "
                    f"{here[odd[0]]['op']}{_sites([here[r] for r in odd])} first")
            return ["; ".join(text)], step
        for key, name in _FIELDS:
            by_val: Dict[str, List[int]] = {}
            for r, rec in here.items():
                by_val.setdefault(_value(rec, key), []).append(r)
            if len(by_val) > 1:
                val_groups = sorted(by_val.items(), key=lambda kv: (-len(kv[1]), kv[1][0]))
                op = next(iter(here.values()))["op"]
                vs = " vs ".join(f"{val} on {','.join(map(str, rs))}{_sites([here[r] for r in rs])}"
                                 for val, rs in val_groups)
                odd = val_groups[-1][1]
                return ([f"ranks disagree on the {name} of {op} #{seq}: {vs}"],
                        f"make every rank pass the same {name} to {op} #{seq}: {_ranks(odd)} pass"
                        f"{'es' if len(odd) == 1 else ''} {val_groups[-1][0]}{_sites([here[r] for r in odd])}, "
                        f"the others {val_groups[0][0]}")
    return [], ""


def _own_thread(frames: List[List[Any]]) -> bool:
    """A thread of the package itself (a store server, the stall watcher): only its frames and threading's."""
    return any(is_library(f[0]) for f in frames) and all(is_library(f[0]) or f[0].endswith("threading.py")
                                                         for f in frames)


def _stack_lines(directory: str, job: str, v: RankView, now: float) -> List[str]:
    """The rank's Python stack as last taken (every thread, outermost call first), or why there is none."""
    got = stacks.read(directory, job, v.world_rank)
    if got is None:
        if v.end == "live" and v.alive:
            return [f"  rank {v.rank}'s Python stack: not taken (its process did not answer "
                    f"{stacks.STACK_SIGNAL.name}: a handler of the program's own, or no flight directory)"]
        return []
    taken, threads = got
    lines = [f"  rank {v.rank}'s Python stack, taken {max(0.0, now - taken):.1f} s before this report "
             f"({len(threads)} thread{'s' if len(threads) != 1 else ''}, most recent call last):"]
    for t in threads:
        frames = t["frames"]
        if _own_thread(frames):
            inner = [f for f in frames if is_library(f[0])][-1]
            where = f"{short_path(inner[0])}:{inner[1]} in {inner[2]}"
            lines.append(f"    thread {t['thread']}: hcomm_cffi's own ({where})")
            continue
        lines.append(f"    thread {t['thread']}{' (the main thread)' if t.get('main') else ''}:")
        lines += [f"      {short_path(path)}:{line} in {func}" for path, line, func in frames]
        if not frames:
            lines.append("      (no Python frame)")
    return lines


def _innermost_user(directory: str, job: str, v: RankView) -> str:
    """'failures.py:55 in main': the innermost frame outside the library of the rank's first thread (the main one)
    as last taken, if known."""
    got = stacks.read(directory, job, v.world_rank)
    if not got:
        return ""
    for t in got[1]:
        frames = [f for f in t["frames"] if not is_library(f[0])]
        if frames and not _own_thread(t["frames"]):
            return f"{short_path(frames[-1][0])}:{frames[-1][1]} in {frames[-1][2]}"
    return ""


def _stuck(directory: str, job: str, views: Dict[int, RankView], now: float) -> Tuple[List[str], str]:
    """Who waits in the latest collective a rank is stuck in, for how long, who never entered it (with its stack),
    and the next step."""
    target, absent = _absent(views)
    if not target:
        return [], ""
    lines = []
    waiting = sorted(r for r, v in views.items() if target in v.collectives
                     and v.collectives[target]["state"] in ("issued", "running") and not v.killed)
    called = [v.collectives[target] for v in views.values() if target in v.collectives]
    if waiting:
        since = min(v.collectives[target]["t_issued"] for r, v in views.items() if r in waiting)
        lines.append(f"{_ranks(waiting)} {'have' if len(waiting) > 1 else 'has'} waited {max(0.0, now - since):.1f} s "
                     f"in {describe_op(views[waiting[0]].collectives[target])}"
                     f"{_sites([views[r].collectives[target] for r in waiting])}")
    step = ""
    for r in absent:
        v = views[r]
        last = max(v.collectives) if v.collectives else 0
        was = "none"
        if last:
            rec = v.collectives[last]
            was = describe_op(rec) + _at(rec) + f", {rec['state']}"
            if rec["state"] == "done" and rec["t_done"]:
                was += f" {max(0.0, now - rec['t_done']):.1f} s ago"
        lines.append(f"rank {r} never entered collective #{target} (its last collective: {was}); now: {v.status()}")
        lines += [line[2:] for line in _stack_lines(directory, job, v, now)]
        if step:
            continue
        op = f"{called[0]['op']} #{target}{_sites(called)}" if called else f"collective #{target}"
        where = _innermost_user(directory, job, v)
        if where:
            step = (f"rank {r} never called {op}: when its stack was taken it was at {where}; make it reach that "
                    "call, or find what it waits for there")
        elif v.end == "live" and v.alive:
            step = (f"rank {r} is alive but never called {op} (no stack: its process did not answer "
                    f"{stacks.STACK_SIGNAL.name}); `py-spy dump --pid {v.pid}` shows where it is")
        elif v.killed:
            step = _killed_step(r, v)
        else:
            step = (f"rank {r} stopped calling collectives after #{last} ({v.status().replace('; ', ', ')}) while the "
                    f"others called {op}: make every rank issue the same collectives before it finalises or exits")
    return lines, step


def _killed_step(r: int, v: RankView) -> str:
    """What to do about a rank that was killed: find out by whom."""
    how = v.exit or "ended without an exit record"
    oom = "; SIGKILL is often the kernel's OOM killer (`dmesg | grep -i -e oom -e killed`)" \
        if "SIGKILL" in how or not v.exit else ""
    return f"find why rank {r} died: it {how}{oom}"


def _gone(r: int, v: RankView) -> str:
    cur = v.current()
    last = f"{describe_op(cur)}{_at(cur)}, {cur['state']}" if cur is not None else "none recorded"
    return f"rank {r} is gone (killed: no dump, its process ended without an exit record); its last operation: {last}"


def _findings(directory: str, job: str, size: int, views: Dict[int, RankView], now: float
              ) -> Tuple[List[str], str]:
    """The findings of one communicator and the next step they call for ('' when none)."""
    mismatch, step = _first_mismatch(views)
    stuck, stuck_step = _stuck(directory, job, views, now)
    findings = mismatch + stuck
    step = step or stuck_step
    for r in range(size):
        v = views.get(r)
        if v is None:
            findings.append(f"rank {r} left no flight record (it never created this communicator, or wrote "
                            "elsewhere)")
        elif v.killed and not v.dumped:
            findings.append(_gone(r, v))
            step = step or _killed_step(r, v)
    return findings, step


def analyse(comm: str, size: int, views: Dict[int, RankView], now: float, directory: str = "", job: str = ""
            ) -> Tuple[List[str], str]:
    """The report lines of one communicator (as of ``now``) and the next step they call for."""
    dumped = sorted(r for r, v in views.items() if v.dumped)
    lines = [f"communicator {comm!r} ({size} ranks): dumps from {_ranks(dumped) if dumped else 'no rank'}"
             + ("" if len(dumped) == len(views) else f", live records of {_ranks(sorted(views))}")]
    findings, step = _findings(directory, job, size, views, now)
    lines += [f"  {f}" for f in findings] or ["  no divergence found: every rank recorded the same collectives"]
    lines.append("  where each rank is:")
    for r, v in sorted(views.items()):
        cur = v.current()
        if cur is None:
            lines.append(f"    rank {r}: no operation recorded; {v.status()}")
            continue
        since = cur["t_running"] or cur["t_issued"]
        age = f" for {max(0.0, (cur['t_done'] or now) - since):.1f} s" if cur["state"] in _OPEN else ""
        lines.append(f"    rank {r}: {describe_op(cur)}{_at(cur)} {cur['state']}{age}; {v.status()}")
    return lines, step


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def report(directory: str, exits: Optional[Dict[int, str]] = None, now: Optional[float] = None,
           job: Optional[str] = None, command: str = "") -> str:
    """The desync report of job ``job`` (default: the newest) whose flight recorder files are in ``directory``.

    ``exits``: world rank -> how a launcher saw it end (default: what the last :func:`capture` kept).
    ``now``: the time the report is as of (default :func:`as_of`: the newest file, so a rerun prints the same).
    ``command``: the command that prints it again, said before the last line (the next step).
    """
    job, views, sizes = load(directory, exits, job)
    now = as_of(directory, job, views) if now is None else now
    lines = [f"flight recorder of job {job} ({directory}), as of {_when(now)}"]
    reasons = sorted({(r, v.reason) for vs in views.values() for r, v in vs.items() if v.dumped and v.reason})
    step = ""
    for comm in sorted(views, key=lambda c: (c != "world", c)):
        comm_lines, comm_step = analyse(comm, sizes[comm], views[comm], now, directory, job)
        lines += comm_lines
        step = step or comm_step
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
    if command:
        lines.append(f"reproduce this report with: {command}")
    lines.append("next step: " + (step or "no rank diverged in the records: if the job is slow rather than stuck, "
                                  "wait or raise HCOMM_STUCK_REPORT_S; else `kill -USR1` a rank for its dump"))
    return "\n".join(lines)


def summary(directory: str, job: str, exits: Optional[Dict[int, str]] = None) -> str:
    """One paragraph: the job's first finding and how each group of ranks ended (``hcomm run`` prints it first)."""
    try:
        job, views, sizes = load(directory, exits, job)
    except (ValueError, OSError):
        return ""
    now = as_of(directory, job, views)
    comm = min(views, key=lambda c: (c != "world", c)) if views else ""
    if not comm:
        return ""
    findings, _step = _findings(directory, job, sizes[comm], views[comm], now)
    ends: Dict[str, List[int]] = {}
    for r, v in sorted(views[comm].items()):
        ends.setdefault(re.sub(r" \(pid \d+\)", "", v.status()).replace("; ", ", "), []).append(r)
    # the finding that explains most: a mismatch, else a rank gone, else one that never arrived, else the first
    ranked = sorted(findings, key=lambda f: (" is in " not in f and "disagree" not in f, " is gone " not in f,
                                             " never entered " not in f))
    head = ranked[0] if ranked else "no rank diverged in the flight records"
    told = "; ".join(f"{_ranks(rs)}: {how}" for how, rs in ends.items())
    return f"on communicator {comm!r}: {head}. How the ranks ended: {told}"


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
