"""What a user sees when a job goes wrong: the four scenarios of examples/failures.py under hcomm run, torchrun and
plain env://, asserting on the report printed, its content and `hcomm doctor` on the directory it names."""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import Dict, List, Optional, Tuple

import pytest

from test_launch_helpers import start

pytestmark = pytest.mark.slow

EXAMPLE = ["-m", "hcomm_cffi.examples.failures"]
SITE = "hcomm_cffi/examples/failures.py"          # how a report names the example's lines (its call sites)
AT_3 = f" at {SITE}:46"                           # the three agreeing allreduces
AT_4 = f" at {SITE}:59"                           # the fourth allreduce of the ranks that behave
HAS_TORCH = importlib.util.find_spec("torch") is not None
STUCK_S = 2.0


def _sweep(shm: str) -> None:
    """What the next job does with the segments of ranks a launcher killed (torchrun's SIGTERM, kill -9)."""
    subprocess.run([sys.executable, "-c", "from hcomm_cffi.sim.shm import sweep_stale; sweep_stale()"],
                   env={**os.environ, "HCOMM_SIM_SHM_DIR": shm}, check=True, timeout=60)


def _env(shm: str, **extra: str) -> Dict[str, str]:
    return {"HCOMM_BACKEND": "sim", "HCOMM_SIM_SHM_DIR": shm, "OMP_NUM_THREADS": "1", **extra}


def _hcomm_run(n: int, mode: str, env: Dict[str, str]) -> Tuple[int, str, str]:
    proc = start([sys.executable, "-m", "hcomm_cffi", "run", "-n", str(n), "--", sys.executable, *EXAMPLE, mode], env)
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out, err


def _torchrun(n: int, mode: str, env: Dict[str, str]) -> Tuple[int, str, str]:
    proc = start([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(n),
                  *EXAMPLE, mode], env)
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out, err


def _env_ranks(n: int, mode: str, env: Dict[str, str], args: List[str] = ()) -> List[subprocess.Popen]:
    """Plain env://: n processes started by hand with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return [start([sys.executable, *EXAMPLE, mode, *args],
                  {**env, "RANK": str(r), "WORLD_SIZE": str(n), "LOCAL_RANK": str(r), "MASTER_ADDR": "127.0.0.1",
                   "MASTER_PORT": str(port)}) for r in range(n)]


def _env_run(n: int, mode: str, env: Dict[str, str]) -> Tuple[List[int], str, str]:
    procs = _env_ranks(n, mode, env)
    outs = [p.communicate(timeout=120) for p in procs]
    return [p.returncode for p in procs], "".join(o for o, _ in outs), "".join(e for _, e in outs)


def _doctor(directory: str) -> str:
    doc = subprocess.run([sys.executable, "-m", "hcomm_cffi", "doctor", directory], capture_output=True, text=True,
                         timeout=60)
    assert doc.returncode == 0, doc.stderr
    return doc.stdout


def _reported_dir(err: str) -> str:
    """The directory the report names in its reproduce line; it must exist after the job."""
    found = re.findall(r"hcomm doctor (\S+)", err)
    assert found, err
    path = found[-1].rstrip("`;")
    assert os.path.isdir(path), f"{path} named by the report is gone: {err}"
    return path


def _others(n: int) -> str:
    return ",".join(str(r) for r in range(n) if r != 1)


# ---------------------------------------------------------------------------------------------- hcomm run
def test_mismatch_under_hcomm_run_prints_the_report_and_doctor_reproduces_it(shm):
    rc, out, err = _hcomm_run(4, "mismatch", _env(shm))
    assert rc == 1, err
    path = _reported_dir(err)
    try:
        assert "job_dir" not in path and "/run-" not in path             # not inside the deleted job directory
        finding = (f"ranks 0,2,3 are in allreduce #4 (4 KiB fp32, op sum){AT_4}; rank 1 is in broadcast #4 "
                   f"(4 KiB fp32, root 0) at {SITE}:50")
        assert "hcomm run: desync report (hcomm doctor):" in err and finding in err, err
        for r in range(4):
            assert re.search(rf"rank {r}: \w+ #4 .* failed for [0-9.]+ s; raised CollectiveMismatchError; exited "
                             r"with code 1", err), err
        assert "CheckerWarning" not in err and "gone" not in err
        # one clean error per rank: the user's mistake at the user's line, no library code, Comm names only
        assert "507000" not in err and "ACL_ERROR" not in err and "The above exception" not in err, err
        assert not re.search(r"communicator [0-9a-f]{16,}", err), err
        assert len(re.findall(r"\] hcomm_cffi\.api\.consistency\.CollectiveMismatchError: rank \d of communicator "
                              rf"'world': collective mismatch at {SITE}:\d+: this rank is in ", err)) == 4, err
        # the summary first, then each rank's traceback whole (never interleaved), then the report
        lines = err.splitlines()
        first = next(i for i, line in enumerate(lines)
                     if line.startswith("hcomm run: job") and " failed: rank " in line)
        assert finding in lines[first], lines[first]
        tracebacks = [i for i, line in enumerate(lines) if line.endswith("Traceback (most recent call last):")]
        assert len(tracebacks) == 4 and first < tracebacks[0], err
        for start, end in zip(tracebacks, tracebacks[1:] + [lines.index("hcomm run: desync report (hcomm doctor):")]):
            tags = {line.split("]")[0] for line in lines[start:end]}
            assert len(tags) == 1, lines[start:end]         # one rank's block, whole
        assert lines[-1].startswith("hcomm run: next step: make rank 1 call allreduce as collective #4"), err
        doc = _doctor(path)
        assert finding in doc and "dumps from ranks 0,1,2,3" in doc, doc
        assert doc.count("raised CollectiveMismatchError; exited with code 1") == 4, doc   # the launcher's view, kept
        printed = [line[len("hcomm run: "):] for line in lines[lines.index("hcomm run: desync report (hcomm doctor):")
                                                               + 1:] if "reproduce this report with" not in line]
        assert doc.splitlines() == printed                                  # doctor reproduces the report
        time.sleep(1.1)
        assert _doctor(path) == doc                                         # the same report every time
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_straggler_that_exits_is_named_as_finalised_without_checker_noise(shm):
    rc, out, err = _hcomm_run(4, "straggler", _env(shm))
    assert rc == 1, err
    path = _reported_dir(err)
    try:
        assert re.search(r"rank 1 never entered collective #4 \(its last collective: allreduce #3 \(4 KiB fp32, op "
                         rf"sum\){AT_3}, done [0-9.]+ s ago\); now: finalised cleanly \(destroyed the communicator\); "
                         r"exited with code 0", err), err
        assert re.search(r"peer rank 1 of communicator 'world' (destroyed its communicator \(finalised\)|is gone)",
                         err), err
        assert "never created this communicator" not in err
        assert "CheckerWarning" not in err and "protocol 20033" not in err, err
        doc = _doctor(path)
        assert "rank 1 never entered collective #4" in doc and "finalised cleanly" in doc, doc
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_killed_rank_is_gone_and_the_others_were_stopped(shm):
    rc, out, err = _hcomm_run(4, "killed", _env(shm))
    assert rc == 128 + 9, err
    path = _reported_dir(err)
    try:
        assert ("rank 1 is gone (killed: no dump, its process ended without an exit record); its last operation: "
                f"allreduce #3 (4 KiB fp32, op sum){AT_3}, done") in err, err
        assert f"rank 1: allreduce #3 (4 KiB fp32, op sum){AT_3} done; gone: was killed by SIGKILL (exit code 137)" \
            in err
        assert "next step: find why rank 1 died: it was killed by SIGKILL (exit code 137); SIGKILL is often the " \
            "kernel's OOM killer" in err, err
        doc = _doctor(path)
        assert "rank 1 is gone (killed" in doc and "dumps from ranks 0,2,3" in doc, doc
    finally:
        shutil.rmtree(path, ignore_errors=True)


class _Lines:
    """Reads a process's stdout and stderr on threads, each line with the time it arrived."""

    def __init__(self, procs: List[subprocess.Popen]) -> None:
        self.lines: List[Tuple[float, str]] = []
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._read, args=(pipe,), daemon=True)
                        for p in procs for pipe in (p.stdout, p.stderr)]
        for t in self.threads:
            t.start()

    def _read(self, pipe) -> None:
        for line in iter(pipe.readline, ""):
            with self.lock:
                self.lines.append((time.monotonic(), line.rstrip("\n")))

    def first(self, pattern: str, within: float) -> Tuple[float, str]:
        end = time.monotonic() + within
        while time.monotonic() < end:
            with self.lock:
                for t, line in self.lines:
                    if re.search(pattern, line):
                        return t, line
            time.sleep(0.05)
        with self.lock:
            text = "\n".join(line for _, line in self.lines)
        raise AssertionError(f"no line matching {pattern!r} within {within} s:\n{text}")

    def text(self) -> str:
        with self.lock:
            return "\n".join(line for _, line in self.lines)


def _check_stuck_report(text: str, n: int) -> None:
    waiting = _others(n)
    assert re.search(rf"ranks {waiting} have waited [0-9.]+ s in allreduce #4 \(4 KiB fp32, op sum\){AT_4}", text), text
    assert re.search(rf"rank 1 never entered collective #4 \(its last collective: allreduce #3 \(4 KiB fp32, op sum\)"
                     rf"{AT_3}, done [0-9.]+ s ago\); now: (alive \(pid \d+\)|stopped by SIGTERM)", text), text
    # where it is: its Python stack, taken when the report was written (it sleeps in failures.py, line 55)
    assert re.search(r"rank 1's Python stack, taken [0-9.]+ s before this report \(\d threads?, most recent call "
                     r"last\):", text), text
    assert re.search(rf"thread 0x[0-9a-f]+ \(the main thread\):\n(.*\n)*?.*      {SITE}:55 in main",
                     text), text
    assert f"next step: rank 1 never called allreduce #4{AT_4}: when its stack was taken it was at {SITE}:55 in " \
           "main" in text, text


def test_absent_rank_stuck_report_within_the_limit_while_the_job_waits_and_on_sigusr1(shm):
    proc = start([sys.executable, "-m", "hcomm_cffi", "run", "-n", "4", "--", sys.executable, *EXAMPLE, "absent"],
                 _env(shm, HCOMM_STUCK_REPORT_S=str(STUCK_S)))
    lines = _Lines([proc])
    path = None
    try:
        t_done, _ = lines.first(r"rank 1: 3 allreduces done", 60)
        t_report, _ = lines.first(r"reproduce this report with: hcomm doctor", STUCK_S + 30)
        assert t_report - t_done <= STUCK_S + 5, (t_report - t_done, lines.text())
        assert proc.poll() is None                                      # the job keeps waiting
        text = lines.text()
        assert re.search(r"stuck: no rank of communicator 'world' made progress for \d+ s "
                         r"\(HCOMM_STUCK_REPORT_S=2\); the job keeps waiting", text), text
        _check_stuck_report(text, 4)
        path = _reported_dir(text)
        _check_stuck_report(_doctor(path), 4)                           # the same, read again by hcomm doctor
        os.kill(proc.pid, signal.SIGUSR1)                               # on demand
        lines.first(r"report on SIGUSR1 \(the job keeps running\)", 10)
        assert proc.poll() is None
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
        if path:
            shutil.rmtree(path, ignore_errors=True)


# ---------------------------------------------------------------------------------------------- torchrun
@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed (pip install -e .[test])")
@pytest.mark.parametrize("mode", ["mismatch", "killed"])
def test_torchrun_failures_are_explained_by_doctor_on_the_printed_path(shm, tmp_path, mode):
    fr = str(tmp_path / "fr")
    rc, out, err = _torchrun(3, mode, _env(shm, HCOMM_FR_DIR=fr))
    _sweep(shm)                                 # torchrun's SIGTERM stopped ranks before they cleaned up
    assert rc != 0, err
    assert f"`hcomm doctor {fr}` explains" in err, err
    doc = _doctor(fr)
    if mode == "mismatch":
        assert (f"ranks 0,2 are in allreduce #4 (4 KiB fp32, op sum){AT_4}; rank 1 is in broadcast #4 (4 KiB fp32, "
                f"root 0) at {SITE}:50") in doc, doc
        # torchrun stops the others once one exits: each raised the error first, or was stopped by SIGTERM
        assert doc.count("raised CollectiveMismatchError and exited") + doc.count("stopped by SIGTERM") == 3, doc
        # the emulator's native collectives find the mismatch in-band: each rank says what it and its peer are in,
        # naming the communicator as the Comm does (never the library's id)
        assert re.search(rf"CollectiveMismatchError: rank [02] of communicator 'world': collective mismatch{AT_4}: "
                         r"this rank is in allreduce of 1024 x fp32, op sum but rank 1 is in broadcast of 1024 x fp32, "
                         r"root 0", doc) \
            or re.search(rf"CollectiveMismatchError: rank 1 of communicator 'world': collective mismatch at {SITE}:50: "
                         r"this rank is in broadcast of 1024 x fp32, root 0 but rank [02] is in allreduce of 1024 x "
                         r"fp32, op sum", doc), doc
        assert not re.search(r"communicator [0-9a-f]{16,}", doc), doc
    else:
        # torchrun's agent stops ranks 0 and 2 with SIGTERM at once: they dump their flight recorders then
        assert "rank 1 is gone (killed: no dump" in doc and "dumps from ranks 0,2" in doc, doc
        # launched and waiting in-band when the SIGTERM came, or failed first on the peer's death
        assert re.search(rf"rank 0: allreduce #4 \(4 KiB fp32, op sum\){AT_4} (running|failed)", doc), doc


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed (pip install -e .[test])")
def test_torchrun_absent_rank_is_reported_by_the_ranks_while_they_wait(shm, tmp_path):
    fr = str(tmp_path / "fr")
    proc = start([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "3", *EXAMPLE,
                  "absent", "--sleep", "30"], _env(shm, HCOMM_FR_DIR=fr, HCOMM_STUCK_REPORT_S=str(STUCK_S)))
    lines = _Lines([proc])
    try:
        t_done, _ = lines.first(r"rank 1: 3 allreduces done", 60)
        t_report, _ = lines.first(r"hcomm: reproduce this report with: hcomm doctor", STUCK_S + 30)
        assert t_report - t_done <= STUCK_S + 5, (t_report - t_done, lines.text())
        assert proc.poll() is None
        for r in (0, 2):        # each waiting rank says so itself (within a poll of the others)
            t_line, _ = lines.first(rf"hcomm: rank {r}: no progress on communicator 'world' for 2 s "
                                    rf"\(HCOMM_STUCK_REPORT_S\): in allreduce #4 \(4 KiB fp32, op sum\){AT_4} running "
                                    r"for [0-9.]+ s; still waiting", 10)
            assert t_line - t_done <= STUCK_S + 5, lines.text()
        text = lines.text()
        _check_stuck_report(text, 3)
        assert text.count("hcomm: reproduce this report") == 1, text     # the lowest waiting rank writes it, once
    finally:
        proc.send_signal(signal.SIGTERM)        # torchrun passes it on: its ranks die without cleaning up
        proc.wait(timeout=60)
        _sweep(shm)


# ---------------------------------------------------------------------------------------------- plain env://
def test_env_straggler_and_absent_rank(shm, tmp_path):
    fr = str(tmp_path / "fr")
    codes, out, err = _env_run(3, "straggler", _env(shm, HCOMM_FR_DIR=fr))
    assert codes[1] == 0 and codes[0] != 0 and codes[2] != 0, (codes, err)
    assert "CheckerWarning" not in err and f"`hcomm doctor {fr}`" in err, err
    doc = _doctor(fr)
    assert "rank 1 never entered collective #4" in doc and "now: finalised cleanly" in doc, doc
    assert doc.count("raised CommError and exited") == 2, doc
    fr2 = str(tmp_path / "fr2")
    procs = _env_ranks(3, "absent", _env(shm, HCOMM_FR_DIR=fr2, HCOMM_STUCK_REPORT_S=str(STUCK_S)), ["--sleep", "30"])
    lines = _Lines(procs)
    try:
        t_done, _ = lines.first(r"rank 1: 3 allreduces done", 60)
        t_report, _ = lines.first(r"hcomm: reproduce this report with: hcomm doctor", STUCK_S + 30)
        assert t_report - t_done <= STUCK_S + 5 and all(p.poll() is None for p in procs), lines.text()
        _check_stuck_report(lines.text(), 3)
        _check_stuck_report(_doctor(fr2), 3)
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait(timeout=60)
        _sweep(shm)


def test_env_sigterm_dumps_every_rank_and_leaves_no_segment(shm, tmp_path):
    """SIGTERM (what torchrun sends the survivors) runs every hook of the package: the flight recorder's dump and
    the emulator's unlinking (each once kept the other's handler out), then the rank still dies of SIGTERM."""
    fr = str(tmp_path / "fr")
    procs = _env_ranks(3, "absent", _env(shm, HCOMM_FR_DIR=fr), ["--sleep", "30"])
    lines = _Lines(procs)
    try:
        for r in range(3):
            lines.first(rf"rank {r}: 3 allreduces done", 60)
        time.sleep(0.5)                         # ranks 0 and 2 wait in allreduce #4, rank 1 sleeps
        for p in procs:
            p.send_signal(signal.SIGTERM)
        codes = [p.wait(timeout=30) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=30)
    assert codes == [-signal.SIGTERM] * 3, (codes, lines.text())
    for t in lines.threads:
        t.join(timeout=10)
    assert lines.text().count(f"stopped by SIGTERM; `hcomm doctor {fr}` explains") == 3, lines.text()
    doc = _doctor(fr)
    assert "dumps from ranks 0,1,2" in doc and "ranks 0,1,2: SIGTERM" in doc, doc
    assert all(f"rank {r}: allreduce #{4 if r != 1 else 3} (4 KiB fp32, op sum){AT_4 if r != 1 else AT_3} " in doc
               for r in range(3)), doc
    assert os.listdir(shm) == [], os.listdir(shm)


def test_env_mismatch_and_killed(shm, tmp_path):
    for mode in ("mismatch", "killed"):
        fr = str(tmp_path / mode)
        codes, out, err = _env_run(3, mode, _env(shm, HCOMM_FR_DIR=fr))
        assert codes[0] != 0 and codes[2] != 0, (codes, err)
        doc = _doctor(fr)
        if mode == "mismatch":
            assert f"ranks 0,2 are in allreduce #4 (4 KiB fp32, op sum){AT_4}; rank 1 is in broadcast #4" in doc, doc
        else:
            assert codes[1] == -9 and "rank 1 is gone (killed: no dump" in doc, doc


# ---------------------------------------------------------------------------------------------- one name each
def _names_body(rank: int, n: int, root_info: bytes) -> List[str]:
    import numpy as np

    import hcomm_cffi as hcomm
    w = hcomm.init(rank=rank, world_size=n, root_info=root_info)
    try:
        pair = hcomm.Comm("pp", ranks=[0])
        shown = [repr(pair)]
        if rank == 1:
            return shown + [""]
        x = np.ones(4, np.float32)
        try:                                 # rank 1 finalises instead: the library's error names the communicator
            w.allreduce(x)
        except hcomm.CommError as exc:
            return shown + [str(exc)]
        return shown + ["no error"]
    finally:
        hcomm.finalize()


def test_one_name_per_communicator_and_a_null_comm_says_it_is_null(tmp_path):
    from multiproc import run_ranks
    lib_ids = re.compile(r"communicator [0-9a-f]{16,}")
    ok, null = run_ranks(2, _names_body, timeout=60)
    assert null[0] == "<Comm 'pp' null: this rank is not in ranks [0]>", null
    assert "peer rank 1 of communicator 'world' destroyed its communicator (finalised)" in ok[1], ok
    assert not lib_ids.search(ok[1]), ok[1]                 # the library's id never beside the Comm's name
    assert ok[0] == "<Comm 'pp' rank 0/1 live>", ok


def test_example_names_the_backend_as_hcomm_info_does(shm):
    proc = start([sys.executable, "-m", "hcomm_cffi", "run", "-n", "2", "--", sys.executable, "-m",
                  "hcomm_cffi.examples.allreduce"], {**_env(shm), "HCOMM_BACKEND": ""})
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "backend sim," in out and "SimLibrary" not in out, out


def test_doctor_tells_each_end_apart_from_the_rings_alone(tmp_path):
    """Rings written by hand (no launcher): finalised cleanly, finalised after a failure, exited after an error,
    killed, alive and never created are each said so."""
    import os as _os

    from hcomm_cffi import flight
    from hcomm_cffi.desync import report
    where = str(tmp_path)
    _os.environ["HCOMM_JOB_ID"], old = "handmade", _os.environ.get("HCOMM_JOB_ID")
    try:
        rings = [flight.FlightRecorder("world", r, 6, r, 8, where) for r in range(5)]
        for r, ring in enumerate(rings):
            for seq in (1, 2) if r else (1,):
                slot = ring.issue(seq, "allreduce", "native", 1024, 4096, 4, 0, -1)
                ring.running(slot)
                if seq == 1:
                    ring.done(slot)
        rings[2].fail_open()
        # rank 0 finalised after #1; rank 2 failed and finalised; rank 3 raised and exited; rank 4 was killed
        rings[0].close()
        rings[2].close()
        rings[3].end(flight.EXITED, "CollectiveMismatchError: rank 3 of communicator 'world': ...")
        with open(rings[4].path, "r+b") as f:        # a killed rank: its pid is gone
            f.seek(flight.HEADER.size - 128 - 4)
            f.write((2 ** 31 - 2).to_bytes(4, "little"))
        text = report(where)
        for ring in (rings[1], rings[3], rings[4]):
            ring.close()
    finally:
        if old is None:
            del _os.environ["HCOMM_JOB_ID"]
        else:
            _os.environ["HCOMM_JOB_ID"] = old
    assert "rank 0: allreduce #1 (4 KiB fp32, op sum) done; finalised cleanly (destroyed the communicator)" in text
    assert re.search(r"rank 1: allreduce #2 \(4 KiB fp32, op sum\) running for [0-9.]+ s; alive \(pid \d+\)", text)
    assert "rank 2: allreduce #2 (4 KiB fp32, op sum) failed" in text and "finalised after its failure" in text
    assert "rank 3: allreduce #2 (4 KiB fp32, op sum) running" in text and "raised CollectiveMismatchError and " \
        "exited" in text, text
    assert "rank 4 is gone (killed: no dump, its process ended without an exit record)" in text, text
    assert "rank 5 left no flight record (it never created this communicator" in text, text
    assert "rank 0 never entered collective #2 (its last collective: allreduce #1" in text, text
