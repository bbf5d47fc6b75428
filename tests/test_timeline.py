"""HCOMM_TRACE timelines: a real 3-rank ring allreduce traced task by task, hcomm trace, and hcomm plan --timeline."""
from __future__ import annotations

import collections
import glob
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from hcomm_cffi import timeline
from hcomm_cffi.algorithms import registry
from hcomm_cffi.algorithms.dryrun import dry_run
from hcomm_cffi.algorithms.interface import CollectiveCall
from hcomm_cffi.algorithms.plan_timeline import plan_events
from hcomm_cffi.enums import DataType, ReduceOp
from hcomm_cffi.plan import Topology
from test_launch_helpers import launcher, private_shm_dir, run_job

COUNT = 3 * 1024
WORKER = f'''
import numpy as np, hcomm_cffi as hcomm
w = hcomm.init()
x = np.ones({COUNT}, np.float32)
y = np.zeros_like(x)
w.allreduce(x, out=y, algorithm="ring")
assert (y == w.size).all()
hcomm.finalize()
'''
TASKS = ("copy", "reduce", "write", "read", "record", "wait", "trecord", "twait")


def _planned(n: int):
    call = CollectiveCall("allreduce", 0, 0, COUNT, DataType.FP32, ReduceOp.SUM, 0, None)
    return dry_run(registry.resolve("ring"), Topology.single_server(n), call, 400 << 20)


def _check_flows(events) -> int:
    """Every wait's flow has a record with the same id that started before the wait ended; returns the waits."""
    records = {e["args"]["flow_out"]: e for e in events if e["ph"] == "X" and "flow_out" in e.get("args", {})}
    waits = [e for e in events if e["ph"] == "X" and e["name"] in ("wait", "twait")]
    for w in waits:
        fid = w["args"].get("flow_in")
        assert fid is not None, w
        r = records.get(fid)
        assert r is not None, f"no record releases {w}"
        assert r["ts"] <= w["ts"] + w["dur"], (r, w)
        assert (r["pid"] != w["pid"]) == (w["name"] == "wait")    # channel notifies cross ranks, thread ones do not
    return len(waits)


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    """The trace directory of one 3-rank ring allreduce under hcomm run."""
    base = tmp_path_factory.mktemp("trace")
    shm = private_shm_dir()
    worker = base / "worker.py"
    worker.write_text(WORKER)
    tdir = str(base / "tr")
    rc, out, err = run_job(launcher(3, sys.executable, str(worker), module="hcomm_cffi"),
                           {"HCOMM_SIM_SHM_DIR": shm, "HCOMM_TRACE": tdir, "HCOMM_CHECK_COLLECTIVES": "0"})
    left = os.listdir(shm)
    shutil.rmtree(shm, ignore_errors=True)
    assert rc == 0, err
    assert left == []
    return tdir


def test_ring_allreduce_trace_matches_the_schedule(traced):
    planned = _planned(3)
    files = sorted(glob.glob(os.path.join(traced, "*.rank*.trace.json")))
    assert len(files) == 3
    all_events = []
    for rank, path in enumerate(files):
        with open(path) as fh:
            events = json.load(fh)["traceEvents"]
        all_events += events
        tasks = [e for e in events if e["ph"] == "X" and e["cat"] == "task" and e["args"].get("op") == "allreduce #1"]
        assert {e["pid"] for e in events} == {rank}                        # one process per rank
        tracks = {e["tid"] for e in tasks}
        assert len(tracks) == planned.ranks[rank].threads                 # one track per thread it used
        got = collections.Counter(e["name"] for e in tasks if e["name"] in TASKS)
        want = collections.Counter(t.kind for t in planned.tasks[rank])
        # ahead of the schedule, the signature handshake: one write, record and wait per peer (api/signatures.py);
        # an algorithm's first call also agrees before its channels are set up, before the operation is recorded
        # (its tasks are in the trace, outside the operation: counted with every wait below)
        want.update({"write": 2, "record": 2, "wait": 2})
        assert got == want, (rank, got, want)
        ops = [e for e in events if e["ph"] == "X" and e["cat"] == "op"]
        assert [e["name"] for e in ops] == ["allreduce #1"]
        assert ops[0]["args"]["bytes"] == COUNT * 4
        assert all(e["args"]["bytes"] > 0 for e in tasks if e["name"] in ("write", "copy", "reduce"))
    waits = _check_flows(all_events)
    assert waits == sum(1 for ts in planned.tasks for t in ts if t.kind in ("wait", "twait")) + 3 * 2 * 2
    assert sum(1 for e in all_events if e["ph"] == "s") == sum(1 for e in all_events if e["ph"] == "f")


def test_hcomm_trace_merges_and_draws(traced, tmp_path):
    png = tmp_path / "t.png"
    proc = subprocess.run([sys.executable, "-m", "hcomm_cffi", "trace", traced, "-o", str(png)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    with open(os.path.join(traced, timeline.MERGED_NAME)) as fh:
        merged = json.load(fh)["traceEvents"]
    assert {e["pid"] for e in merged} == {0, 1, 2}
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_plan_timeline_draws_the_dry_run(tmp_path):
    events = plan_events(_planned(4))
    planned = _planned(4)
    for rank in range(4):
        got = collections.Counter(e["name"] for e in events if e["ph"] == "X" and e["pid"] == rank)
        assert got == collections.Counter(t.kind for t in planned.tasks[rank])
    _check_flows(events)
    png = tmp_path / "plan.png"
    proc = subprocess.run([sys.executable, "-m", "hcomm_cffi", "plan", "--algo", "ring", "--ranks", "4", "--size",
                           "12K", "--timeline", str(png)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_clear_errors(tmp_path, monkeypatch):
    proc = subprocess.run([sys.executable, "-m", "hcomm_cffi", "trace", str(tmp_path)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2 and "holds no trace files" in proc.stderr
    monkeypatch.setitem(sys.modules, "matplotlib", None)             # as if it were not installed
    with pytest.raises(RuntimeError, match="pip install matplotlib"):
        timeline.render(plan_events(_planned(2)), str(tmp_path / "x.png"))


def test_lanes_are_named_by_role(traced):
    with open(sorted(glob.glob(os.path.join(traced, "*.rank*.trace.json")))[0]) as fh:
        events = json.load(fh)["traceEvents"]
    names = [e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"]
    assert any(re.fullmatch(r"ring thread 1 \(thread 0x[0-9a-f]+\)", n) for n in names), names
    assert any(n.endswith(": main threads, library collectives, signature check") for n in names), names
    assert "ops world" in names, names


def test_hcomm_trace_without_matplotlib_writes_the_json_and_exits_0(traced, tmp_path):
    # a sitecustomize that hides matplotlib, as on an install without the [plot] extra
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text("import sys\nsys.modules['matplotlib'] = None\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hide), os.environ.get("PYTHONPATH", "")])}
    out_json = tmp_path / "m.json"
    proc = subprocess.run([sys.executable, "-m", "hcomm_cffi", "trace", traced, "--json", str(out_json)],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "no PNG drawn: it needs matplotlib (pip install 'hcomm_cffi[plot]')" in proc.stdout, proc.stdout
    assert json.loads(out_json.read_text())["traceEvents"]
    asked = subprocess.run([sys.executable, "-m", "hcomm_cffi", "trace", traced, "--json", str(out_json), "-o",
                            str(tmp_path / "x.png")], capture_output=True, text=True, timeout=120, env=env)
    assert asked.returncode == 2 and "the merged trace was written" in asked.stderr
