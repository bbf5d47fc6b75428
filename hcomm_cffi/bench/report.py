"""Results as people and programs read them: the nccl-tests-like table, JSON and CSV files.

Table columns: size (B), count (elements), type, redop, root, time (µs, the slowest rank), algbw and
busbw (GB/s, GB = 10^9), #wrong (the worst rank's count; ``N/A`` when not checked).

JSON (``--json FILE``)::

    {"format": "hcomm-bench/1", "config": {...}, "environment": {...}, "results": [{...}, ...]}

CSV (``--csv FILE``): one row per size (and algorithm); every row repeats the configuration and the main
environment facts (so the file is one flat table), then the per-size numbers.  :func:`read_json` and
:func:`read_csv` load both back (``read_csv`` returns typed values).
"""
from __future__ import annotations

import csv
import datetime
import json
import os
import platform
import socket
from typing import IO, Any, Dict, List, Optional, Sequence

from ..files import write_atomically
from .runner import BenchConfig, SizeResult

__all__ = ["JSON_FORMAT", "CSV_COLUMNS", "TIMING", "header_lines", "format_row", "footer_lines", "environment",
           "write_json", "read_json", "write_csv", "read_csv", "document", "print_table", "algorithms_of"]

JSON_FORMAT = "hcomm-bench/1"
_CONFIG_COLUMNS = ("op", "nranks", "dtype", "redop", "root", "algorithm", "iters", "warmup", "check", "backend",
                   "path", "hcomm_cffi", "sim_check")
_RESULT_COLUMNS = ("size", "count", "time_us", "algbw", "busbw", "wrong", "check_status", "check_reason",
                   "model_us", "model_algorithm", "time_us_ranks", "wrong_ranks")
CSV_COLUMNS = _CONFIG_COLUMNS + _RESULT_COLUMNS
_INT_COLUMNS = {"nranks", "root", "iters", "warmup", "size", "count", "wrong"}
_FLOAT_COLUMNS = {"time_us", "algbw", "busbw", "model_us"}

_ROW = "{:>12}  {:>12}  {:>8}  {:>6}  {:>5}  {:>10}  {:>8}  {:>8}  {:>7}"
_TYPE_NAMES = {"fp32": "float", "fp16": "half", "bfp16": "bfloat16", "fp64": "double"}


def environment(ops_info: Dict[str, Any], nranks: int, versions: Dict[str, Any],
                hccl_env: Dict[str, str], backend: str) -> Dict[str, Any]:
    """The environment section: backend, path, versions, HCCL_*/HCOMM_* variables, host."""
    return {
        "backend": backend, **ops_info, "nranks": nranks, "versions": versions, "variables": hccl_env,
        "host": socket.gethostname(), "platform": platform.platform(), "cpus": os.cpu_count(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


#: what the time column includes, per execution path (printed in the header)
TIMING = {
    "binding/native": ("iters back-to-back library calls on one stream, then one stream synchronisation, divided by "
                       "iters; the slowest rank (as nccl-tests; each call includes its Python binding)"),
    "comm-api": ("iters back-to-back blocking Comm API calls (each waits for its own completion: the stream "
                 "synchronisation and the flight record are in every call), divided by iters; the slowest rank"),
}


def header_lines(cfg: BenchConfig, nranks: int, env: Dict[str, Any], notes: Sequence[str] = ()) -> List[str]:
    """The comment block and column titles printed before the first row."""
    lines = [
        f"# hcomm bench: {cfg.op} on {nranks} rank(s), algorithm {cfg.algorithm}, backend {env.get('backend')} "
        f"({env.get('path')})",
        f"#   dtype {cfg.dtype.name.lower()}  redop {cfg.redop_name}  root {cfg.root_shown}  iters {cfg.iters}  "
        f"warmup {cfg.warmup}  check {int(cfg.check)}",
    ]
    lines += [f"# {note}" for note in notes]
    lines.append(f"# time: {TIMING.get(str(env.get('path')), TIMING['comm-api'])}")
    lines += ["#", "#" + _ROW.format("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong")[1:],
              "#" + _ROW.format("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "")[1:]]
    return lines


def format_row(cfg: BenchConfig, res: SizeResult) -> str:
    """One table row."""
    dtype = cfg.dtype.name.lower()
    bus = "N/A" if res.busbw is None else f"{res.busbw:.3f}"
    alg = "N/A" if cfg.op == "barrier" else f"{res.algbw:.3f}"
    wrong = "N/A" if res.wrong is None else str(res.wrong)
    return _ROW.format(res.size, res.count, _TYPE_NAMES.get(dtype, dtype), cfg.redop_name, cfg.root_shown,
                       f"{res.time_us:.2f}", alg, bus, wrong)


def footer_lines(results: Sequence[SizeResult]) -> List[str]:
    """Average busbw and the wrong-element verdict."""
    bus = [r.busbw for r in results if r.busbw is not None]
    bad = [r for r in results if r.wrong]
    lines = []
    if bus:
        lines.append(f"# Avg bus bandwidth    : {sum(bus) / len(bus):.3f} GB/s")
    checked = [r for r in results if r.wrong is not None]
    if not checked:
        lines.append("# Wrong elements       : not checked")
    else:
        total = sum(r.wrong or 0 for r in checked)
        verdict = "OK" if not bad else f"FAILED in {len(bad)} of {len(checked)} checked size(s)"
        lines.append(f"# Wrong elements       : {total} ({verdict})")
    return lines


def print_table(cfg: BenchConfig, results: Sequence[SizeResult], nranks: int, env: Dict[str, Any],
                out: IO[str]) -> None:
    """Header, rows and footer in one go (for results read back from a file)."""
    for line in header_lines(cfg, nranks, env):
        print(line, file=out)
    for res in results:
        print(format_row(cfg, res), file=out)
    for line in footer_lines(results):
        print(line, file=out)


def algorithms_of(cfg: BenchConfig, results: Sequence[SizeResult]) -> List[str]:
    """The algorithms of ``results`` in order of appearance (``cfg.algorithm`` when none is recorded)."""
    return list(dict.fromkeys(r.algorithm or cfg.algorithm for r in results)) or [cfg.algorithm]


def document(cfg: BenchConfig, nranks: int, env: Dict[str, Any], results: Sequence[SizeResult]) -> Dict[str, Any]:
    """The JSON document; ``config.algorithms`` lists every ``--algo`` run, each result row names its own."""
    config = {**cfg.to_dict(), "nranks": nranks, "algorithms": algorithms_of(cfg, results)}
    return {"format": JSON_FORMAT, "config": config, "environment": env, "results": [r.to_dict() for r in results]}


def write_json(path: str, cfg: BenchConfig, nranks: int, env: Dict[str, Any], results: Sequence[SizeResult]) -> None:
    """Write the JSON document to ``path``."""
    write_atomically(path, json.dumps(document(cfg, nranks, env, results), indent=2) + "\n")


def read_json(path: str) -> Dict[str, Any]:
    """Load a document written by :func:`write_json` (ValueError if it is not one)."""
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    if not isinstance(doc, dict) or doc.get("format") != JSON_FORMAT:
        raise ValueError(f"{path}: not an hcomm bench JSON file (expected format {JSON_FORMAT!r})")
    return doc


def _csv_rows(cfg: BenchConfig, nranks: int, env: Dict[str, Any], results: Sequence[SizeResult]) -> List[Dict[str, Any]]:
    c = cfg.to_dict()
    base = {"op": c["op"], "nranks": nranks, "dtype": c["dtype"], "redop": c["redop"], "root": c["root"],
            "iters": c["iters"], "warmup": c["warmup"], "check": int(cfg.check),
            "backend": env.get("backend"), "path": env.get("path"),
            "hcomm_cffi": (env.get("versions") or {}).get("hcomm_cffi"),
            "sim_check": (env.get("variables") or {}).get("HCOMM_SIM_CHECK", "")}
    rows = []
    for r in results:
        rows.append({**base, "algorithm": r.algorithm or c["algorithm"], "size": r.size, "count": r.count,
                     "time_us": repr(r.time_us), "algbw": repr(r.algbw),
                     "busbw": "" if r.busbw is None else repr(r.busbw), "wrong": "" if r.wrong is None else r.wrong,
                     "check_status": r.check, "check_reason": r.check_reason or "",
                     "model_us": "" if r.model_us is None else repr(r.model_us),
                     "model_algorithm": r.model_algorithm or "",
                     "time_us_ranks": " ".join(repr(t) for t in r.time_us_ranks),
                     "wrong_ranks": " ".join(str(w) for w in r.wrong_ranks)})
    return rows


def write_csv(path: str, cfg: BenchConfig, nranks: int, env: Dict[str, Any], results: Sequence[SizeResult]) -> None:
    """Write one CSV row per size (columns :data:`CSV_COLUMNS`)."""
    import io

    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(CSV_COLUMNS), lineterminator="\n")
    writer.writeheader()
    writer.writerows(_csv_rows(cfg, nranks, env, results))
    write_atomically(path, buf.getvalue())


def _typed(column: str, value: str) -> Any:
    if value == "":
        return None
    if column in _INT_COLUMNS:
        return int(value)
    if column in _FLOAT_COLUMNS:
        return float(value)
    if column == "time_us_ranks":
        return [float(v) for v in value.split()]
    if column == "wrong_ranks":
        return [int(v) for v in value.split()]
    if column == "check":
        return bool(int(value))
    return value


def read_csv(path: str) -> List[Dict[str, Any]]:
    """Rows of a file written by :func:`write_csv`, with numbers as int/float and lists as lists."""
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        if tuple(reader.fieldnames or ()) != CSV_COLUMNS:
            raise ValueError(f"{path}: not an hcomm bench CSV file (unexpected columns {reader.fieldnames})")
        return [{k: _typed(k, v) for k, v in row.items()} for row in reader]


def optional_float(value: Optional[float]) -> str:
    """``1.5 -> '1.500'``, None -> ``'-'`` (for tables)."""
    return "-" if value is None else f"{value:.3f}"
