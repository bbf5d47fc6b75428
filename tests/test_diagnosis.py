"""Issue 35: the user's line on every flight record, a live rank's stack on request, one clean error per rank, a
doctor that reads only its own files and finds the newest directory, and op='avg' as the torch backend defines it."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from hcomm_cffi import callsite, flight, stacks
from hcomm_cffi.desync import capture


# ---------------------------------------------------------------------------------------------- call sites
def test_call_site_is_the_first_frame_outside_the_library():
    # code compiled as if it were a file of the package: its frames are the library's and are skipped
    lib_file = os.path.join(os.path.dirname(callsite.__file__), "api", "pretend.py")
    ns: dict = {"here": callsite.here}
    exec(compile("def issue():\n    return here()\ndef allreduce():\n    return issue()\n", lib_file, "exec"), ns)
    site = ns["allreduce"]().decode()                         # called from this test file: that line
    assert re.fullmatch(r"(tests/)?test_diagnosis\.py:\d+", site), site
    line = int(site.rsplit(":", 1)[1])
    with open(__file__, encoding="utf-8") as f:
        assert "ns[\"allreduce\"]()" in f.read().splitlines()[line - 1]
    assert callsite.is_library(lib_file) and not callsite.is_library(__file__)
    assert not callsite.is_library(os.path.join(os.path.dirname(callsite.__file__), "examples", "failures.py"))


def test_flight_record_keeps_the_site_in_its_file(tmp_path):
    fr = flight.FlightRecorder("w", 0, 2, 0, 4, str(tmp_path))
    try:
        fr.issue(1, "allreduce", "ring", 4, 16, 4, 0, -1, b"train.py:42")
        fr.issue(2, "allreduce", "ring", 4, 16, 4, 0, -1, b"x" * 200)         # longer than a record keeps
        records = flight.read_ring(fr.path)["records"]
        assert records[0]["site"] == "train.py:42" and len(records[1]["site"]) == callsite.SITE_BYTES
    finally:
        fr.close()


# ---------------------------------------------------------------------------------------------- stacks
_SLEEPER = textwrap.dedent('''
    import sys, time
    from hcomm_cffi import stacks
    stacks.install(sys.argv[1], "job", 7)
    print("ready", flush=True)
    def nap():
        time.sleep(60)
    nap()
''')
_SPINNER = textwrap.dedent('''
    import re, sys
    from hcomm_cffi import stacks
    stacks.install(sys.argv[1], "job", 7)
    print("ready", flush=True)
    re.match(r"(a+)+$", "a" * 40 + "b")       # minutes inside C (the regex engine), holding the GIL
''')


def _asked_until(tmp_path, source: str, name: str, line: int):
    """Start ``source`` as ``name``, ask it for its stacks until its main thread is in ``name:line`` (it prints
    'ready' just before getting there); returns (process, main thread's frames as (file, line, function))."""
    script = tmp_path / name
    script.write_text(source)
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    frames: list = []
    for _ in range(20):
        assert stacks.request(str(tmp_path), "job", 7, proc.pid) is not None and proc.poll() is None
        taken, threads = stacks.read(str(tmp_path), "job", 7)
        assert abs(taken - time.time()) < 30 and threads[0]["main"]
        frames = [(os.path.basename(f), n, func) for f, n, func in threads[0]["frames"]]
        if any((name, line) == f[:2] for f in frames):
            break
        time.sleep(0.2)
    return proc, frames


def test_a_sleeping_process_answers_with_every_threads_stack(tmp_path):
    proc, frames = _asked_until(tmp_path, _SLEEPER, "sleeper.py", 7)
    try:
        assert frames == [("sleeper.py", 8, "<module>"), ("sleeper.py", 7, "nap")], frames      # outermost first
        # a process that does not hold the log (a reused pid, another program) is never signalled
        assert stacks.request(str(tmp_path), "job", 8, proc.pid) is None
        assert stacks.request(str(tmp_path), "job", 7, os.getpid()) is None
    finally:
        proc.kill()
        proc.wait(timeout=30)


def test_a_process_inside_c_code_holding_the_gil_answers_too(tmp_path):
    """A Python signal handler would wait for the C call to return; faulthandler's dump runs in the C handler."""
    proc, frames = _asked_until(tmp_path, _SPINNER, "spinner.py", 6)
    try:
        assert frames[0] == ("spinner.py", 6, "<module>") and frames[-1][2] == "match" and proc.poll() is None, frames
    finally:
        proc.kill()
        proc.wait(timeout=30)


# ---------------------------------------------------------------------------------------------- doctor
def _doctor(*args: str, env=None):
    return subprocess.run([sys.executable, "-m", "hcomm_cffi", "doctor", *args], capture_output=True, text=True,
                          timeout=60, env={**os.environ, **(env or {})})


def _rings(where: str, job: str = "made") -> None:
    """Two ranks' rings by hand: rank 0 waits in allreduce #2 at train.py:9, rank 1 finished #1 only."""
    old = os.environ.get("HCOMM_JOB_ID")
    os.environ["HCOMM_JOB_ID"] = job
    try:
        rings = [flight.FlightRecorder("world", r, 2, r, 8, where) for r in range(2)]
        for r, ring in enumerate(rings):
            for seq in (1, 2) if r == 0 else (1,):
                slot = ring.issue(seq, "allreduce", "native", 4, 16, 4, 0, -1, f"train.py:{7 + seq}".encode())
                ring.running(slot)
                if seq == 1:
                    ring.done(slot)
        for ring in rings:
            ring.end(flight.EXITED, "signal SIGTERM")       # as a launcher's stop leaves them
            with flight._lock:                              # this process forgets them (as if it had died)
                flight._live.remove(ring)
            ring._mm.close()
    finally:
        if old is None:
            del os.environ["HCOMM_JOB_ID"]
        else:
            os.environ["HCOMM_JOB_ID"] = old


def test_doctor_reports_the_same_every_time_and_reads_only_its_own_files(tmp_path):
    where = str(tmp_path / "fr")
    _rings(where)
    capture(where, "made", {0: "stopped by hcomm run (SIGTERM)", 1: "stopped by hcomm run (SIGTERM)"})
    (tmp_path / "fr" / "bar07.json").write_text('{"not": "ours"}')       # a user's file beside them
    first = _doctor(where)
    assert first.returncode == 0, first.stderr
    time.sleep(1.1)
    assert _doctor(where).stdout == first.stdout                          # times as of the files, not now
    text = first.stdout
    assert "rank 0 has waited" in text and "in allreduce #2 (16 B fp32, op sum) at train.py:9" in text, text
    assert "rank 1 never entered collective #2 (its last collective: allreduce #1 (16 B fp32, op sum) at " \
           "train.py:8, done" in text, text
    assert "stopped by hcomm run (SIGTERM)" in text and "bar07" not in text, text
    assert text.rstrip().splitlines()[-1].startswith("next step: rank 1 "), text
    unrelated = tmp_path / "unrelated"
    unrelated.mkdir()
    (unrelated / "bar07.json").write_text("[1, 2]")
    doc = _doctor(str(unrelated))
    assert doc.returncode == 2 and "holds no flight recorder files" in doc.stderr, doc.stderr
    assert "remove" not in doc.stderr and "delete" not in doc.stderr


def test_doctor_without_a_directory_shows_the_newest_or_says_where_it_looked(tmp_path):
    base = tmp_path / "tmp"
    base.mkdir()
    env = {"TMPDIR": str(base), "HCOMM_FR_DIR": ""}
    doc = _doctor(env=env)
    assert doc.returncode == 2 and f"looked in HCOMM_FR_DIR (unset) and {base}/hcomm-{os.getuid()}-flight-*" \
        in doc.stderr, doc.stderr
    older, newer = (base / f"hcomm-{os.getuid()}-flight-{j}-x" for j in ("a", "b"))
    _rings(str(older), "a")
    _rings(str(newer), "b")
    os.utime(older, (time.time() - 60, time.time() - 60))
    doc = _doctor(env=env)
    assert doc.returncode == 0, doc.stderr
    assert f"the newest flight directory of this user: {newer} (1 older: {older})" in doc.stdout, doc.stdout
    assert "flight recorder of job b " in doc.stdout


# ---------------------------------------------------------------------------------------------- errors
_FAILING = textwrap.dedent('''
    import hcomm_cffi as hcomm
    import hcomm_cffi.api.comm as lib
    hcomm.init()
    # a function compiled as a file of the package: the error and its library cause are raised inside it
    exec(compile(
        "def run():\\n"
        "    try:\\n"
        "        raise AclRtInternalError(507000, 'aclrtSynchronizeStream', 'checker: collective mismatch: inner')\\n"
        "    except AclRtInternalError as exc:\\n"
        "        raise CommError('what the user did') from exc\\n", lib.__file__, "exec"),
        {**lib.__dict__, "AclRtInternalError": hcomm.errors.AclRtInternalError}, ns := {})
    ns["run"]()
''')


@pytest.mark.parametrize("debug", ["", "INFO"])
def test_an_uncaught_package_error_is_printed_at_the_users_line(tmp_path, debug):
    script = tmp_path / "user.py"
    script.write_text(_FAILING)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "HCOMM_BACKEND": "sim", "RANK": "0", "WORLD_SIZE": "1",
                               "HCOMM_DEBUG": debug})
    err = proc.stderr
    assert proc.returncode == 1 and "hcomm_cffi.api.errors.CommError: what the user did" in err, err
    if debug:                                   # everything, as Python prints it
        assert "AclRtInternalError" in err and "The above exception was the direct cause" in err, err
        return
    assert "The above exception" not in err and "507000" not in err, err
    assert err.splitlines()[-2] == "hcomm_cffi.api.errors.CommError: what the user did", err
    assert "user.py\", line 13, in <module>" in err and "comm.py" not in err, err
    assert "(hcomm: 1 frame inside hcomm_cffi and the library's error (AclRtInternalError, the exception's " \
           "__cause__) not shown; HCOMM_DEBUG=INFO prints them)" in err, err


def test_the_package_lists_no_helper_names():
    import hcomm_cffi
    names = dir(hcomm_cffi)
    assert not {"Any", "Dict", "List", "TYPE_CHECKING", "importlib", "ModuleType", "annotations"} & set(names)
    assert {"init", "Comm", "CommError", "errors", "__version__"} <= set(names)


# ---------------------------------------------------------------------------------------------- avg
def _avg_body(rank: int, n: int, root_info: bytes) -> list:
    import torch

    import hcomm_cffi as hcomm
    w = hcomm.init(rank=rank, world_size=n, root_info=root_info)
    try:
        got = []
        x = np.full(5, rank + 1.0, np.float32)
        got.append(w.allreduce(x, "avg").tolist())                          # (1 + 2) / 2
        y = np.full(3, 2.0 * (rank + 1), np.float64)
        got.append(w.iallreduce(y, "AVG").wait(30).tolist())
        z = np.full(4, rank + 1.0, np.float16)
        got.append(None if (r := w.reduce(z, 1, "avg")) is None else r.tolist())
        blocks = np.arange(4, dtype=np.float32) + rank
        got.append(w.reduce_scatter(blocks, "avg").tolist())
        t = torch.full((2,), float(rank + 3))
        got.append(w.allreduce(t, "avg").tolist())
        ints = np.full(2, rank, np.int32)
        try:
            w.allreduce(ints, "avg")
            got.append("accepted")
        except ValueError as exc:
            got.append(str(exc))
        got.append(ints.tolist())                                            # refused: nothing moved
        got.append(w.allreduce(np.ones(2, np.float32), "sum").tolist())     # and the communicator still works
        return got
    finally:
        hcomm.finalize()


@pytest.mark.slow
def test_avg_is_the_sum_divided_by_the_ranks_and_refused_for_integers():
    from multiproc import run_ranks
    out = run_ranks(2, _avg_body, timeout=90)
    for rank, got in enumerate(out):
        assert got[0] == [1.5] * 5 and got[1] == [3.0] * 3
        assert got[2] == ([1.5] * 4 if rank == 1 else None)
        assert got[3] == [[0.5, 1.5], [2.5, 3.5]][rank]
        assert got[4] == [3.5, 3.5]
        assert "op='avg' on int32 data: the average of int32 values is not a int32" in got[5], got[5]
        assert got[6] == [rank, rank] and got[7] == [2.0, 2.0]


def test_bench_takes_avg_and_refuses_it_where_it_cannot_be(tmp_path):
    from hcomm_cffi.cli import CliError
    from hcomm_cffi.cli.bench import add_parser, parse_config
    import argparse
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    cfg, extras = parse_config(parser.parse_args(["bench", "-o", "avg", "-b", "8", "-e", "8"]), 2)
    assert cfg.average and cfg.redop_name == "avg" and extras["algorithms"] == ["auto"]   # the Comm API's op
    with pytest.raises(CliError, match=r"-o avg -d int32: the average of int32 values is not one"):
        parse_config(parser.parse_args(["bench", "-o", "avg", "-d", "int32", "-b", "8", "-e", "8"]), 2)
    with pytest.raises(CliError, match=r"-o avg with --algo native: HCCL's reduce ops are sum, prod, max and min"):
        parse_config(parser.parse_args(["bench", "-o", "avg", "--algo", "native", "-b", "8", "-e", "8"]), 2)


# ---------------------------------------------------------------------------------------------- hcomm run's output
_RAISES = textwrap.dedent('''
    import os, sys, time, traceback
    rank = int(os.environ["RANK"])
    try:
        raise KeyError("logged and survived")
    except KeyError:
        traceback.print_exc()                 # a traceback the rank goes on after
    print(f"after the logged traceback {rank}", file=sys.stderr, flush=True)
    open(f"{sys.argv[2]}/printed{rank}", "w").close()
    if sys.argv[1] == "fail" and rank == 0:
        for _ in range(300):                  # rank 1 has printed its lines: then fail
            if os.path.exists(f"{sys.argv[2]}/printed1"):
                break
            time.sleep(0.1)
        raise ValueError("the user's own mistake")
    time.sleep(30 if sys.argv[1] == "fail" else 0)
''')


def _launch(tmp_path, mode: str):
    script = tmp_path / "ranks.py"
    script.write_text(_RAISES)
    return subprocess.run([sys.executable, "-m", "hcomm_cffi", "run", "-n", "2", "--grace", "1", "--",
                           sys.executable, str(script), mode, str(tmp_path)], capture_output=True, text=True,
                          timeout=120)


def test_hcomm_run_prints_the_summary_then_each_ranks_errors_whole(tmp_path):
    proc = _launch(tmp_path, "fail")
    lines = proc.stderr.splitlines()
    assert proc.returncode == 1, proc.stderr
    summary = next(i for i, line in enumerate(lines) if line.startswith("hcomm run: job "))
    assert re.match(r"hcomm run: job \w+ failed: rank 0 exited with code 1 first; rank\(s\) 1 stopped by hcomm run "
                    r"\(SIGTERM\)\. Below: the error output of ranks? [0-9, -]+, each rank's whole\.",
                    lines[summary]), proc.stderr
    after = lines[summary + 1:]
    zero = [line for line in after if line.startswith("[0] ")]
    assert after[:len(zero)] == zero, proc.stderr              # rank 0's held output in one piece, right after
    assert zero[-1] == "[0] ValueError: the user's own mistake" and "[0] after the logged traceback 0" in zero
    assert "[1] after the logged traceback 1" in lines       # nothing lost


def test_a_traceback_a_rank_goes_on_after_is_written_when_the_job_succeeds(tmp_path):
    proc = _launch(tmp_path, "ok")
    assert proc.returncode == 0, proc.stderr
    for r in (0, 1):
        mine = [line for line in proc.stderr.splitlines() if line.startswith(f"[{r}] ")]
        assert mine[0] == f"[{r}] Traceback (most recent call last):" and mine[-1] == \
            f"[{r}] after the logged traceback {r}", proc.stderr
    assert "failed" not in proc.stderr


def test_call_site_stays_right_when_code_objects_come_and_go(tmp_path: Path) -> None:
    """The site caches are keyed by code identity: a freed function's id reused by a new one must not inherit
    its answer (every round makes a fresh library function and a fresh user function, then drops both)."""
    lib_file = os.path.join(os.path.dirname(callsite.__file__), "site_probe.py")
    for i in range(300):
        ns: dict = {"here": callsite.here}
        exec(compile("def lib():\n    return here(2)\n", lib_file, "exec"), ns)
        exec(compile(f"def user_{i}():\n    return lib()\n", str(tmp_path / f"user_{i}.py"), "exec"), ns)
        site = ns[f"user_{i}"]()
        assert site.endswith(f"user_{i}.py:2".encode()), (i, site)
        del ns
