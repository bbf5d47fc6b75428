"""`hcomm run` / `python -m hcomm_cffi.run` as a subprocess: allreduce jobs, failures, signals, output, no orphans."""
from __future__ import annotations

import os
import re
import shutil
import signal
import sys
import tempfile
import time

import pytest
from test_launch_helpers import (
    alive, launcher, pids, private_shm_dir, start, wait_files, wait_gone, write_worker,
)

EXAMPLE = [sys.executable, "-m", "hcomm_cffi.examples.allreduce"]


@pytest.fixture
def job(tmp_path):
    """A state dir for the worker (pid/ready files), the worker script, and a private segment dir checked at the end."""
    shm = private_shm_dir()
    state = tmp_path / "state"
    state.mkdir()
    ns = type("Job", (), {})()
    ns.state = str(state)
    ns.worker = write_worker(str(tmp_path))
    ns.env = {"HCOMM_SIM_SHM_DIR": shm, "HCOMM_BACKEND": "sim"}
    yield ns
    left = os.listdir(shm)
    shutil.rmtree(shm, ignore_errors=True)
    assert left == [], f"segments left behind: {left}"


def _finish(proc, within: float):
    try:
        out, err = proc.communicate(timeout=within)
    except Exception:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"launcher still running after {within} s\nstdout:\n{out}\nstderr:\n{err}")
    return proc.returncode, out, err


def _check_allreduce(out: str, n: int) -> None:
    expected = n * (n + 1) / 2
    for r in range(n):
        line = f"[{r}] rank {r}/{n}: allreduce(sum of rank+1) = {expected:.1f} on every element (expected {expected:.1f}) OK"
        assert line in out.splitlines(), out
    assert f"[0] allreduce: {n}/{n} ranks OK (PASS); backend sim, launcher hcomm-run" in out


@pytest.mark.parametrize("n, module", [(2, "hcomm_cffi.run"), (4, "hcomm_cffi"), (8, "hcomm_cffi.launch")])
def test_allreduce_example(job, n, module):
    rc, out, err = _finish(start(launcher(n, *EXAMPLE, module=module), job.env), 60)
    assert rc == 0, err
    _check_allreduce(out, n)


def test_tcp_store_under_hcomm_run(job):
    env = {**job.env, "HCOMM_RENDEZVOUS": "tcp"}  # rank 0 serves it on MASTER_ADDR:MASTER_PORT+1 set by the launcher
    rc, out, err = _finish(start(launcher(3, *EXAMPLE), env), 60)
    assert rc == 0, err
    _check_allreduce(out, 3)


def test_two_jobs_in_parallel(job):
    procs = [start(launcher(3, *EXAMPLE), job.env) for _ in range(2)]
    results = [_finish(p, 60) for p in procs]
    for rc, out, err in results:
        assert rc == 0, err
        _check_allreduce(out, 3)
    ids = [re.search(r"job (\S+),", out).group(1) for _, out, _ in results]
    assert ids[0] != ids[1]


def test_failing_rank_stops_the_job_with_its_exit_code(job):
    start_time = time.monotonic()
    rc, out, err = _finish(start(launcher(4, sys.executable, job.worker, "fail", job.state), job.env), 30)
    assert rc == 3, err
    assert time.monotonic() - start_time < 15  # the others sleep 60 s
    assert "hcomm run: rank 1 exited with code 3; stopping rank(s) 0, 2-3" in err
    assert wait_gone(pids(job.state)) == []
    # segments of the stopped ranks are swept: the fixture checks the private segment dir is empty


def test_rank_killed_by_signal_gives_128_plus_signal(job):
    rc, out, err = _finish(start(launcher(3, sys.executable, job.worker, "sigkill", job.state), job.env), 30)
    assert rc == 128 + signal.SIGKILL, err
    assert "rank 1 was killed by SIGKILL (exit code 137)" in err
    assert wait_gone(pids(job.state)) == []


def test_rank_that_never_calls_init_is_named_on_every_rank(job):
    env = {**job.env, "HCCL_CONNECT_TIMEOUT": "2"}
    rc, out, err = _finish(start(launcher(4, sys.executable, job.worker, "missing", job.state), env), 30)
    assert rc == 9, err
    for r in range(3):
        lines = [line for line in out.splitlines() if line.startswith(f"[{r}] caught:")]
        assert lines, out
        assert "rank(s) 3 of 4 did not arrive within 2 s (HCCL_CONNECT_TIMEOUT=2)" in lines[0]
        assert "arrived: 0-2" in lines[0]
    assert wait_gone(pids(job.state)) == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_to_the_launcher_stops_everything(job, sig):
    env = {**job.env, "WITH_COMM": "1", "IGNORE_TERM": "1"}  # rank 1 ignores SIGTERM: needs the SIGKILL step
    proc = start(launcher(3, sys.executable, job.worker, "sleep", job.state, options=["--grace", "1"]), env)
    wait_files(job.state, "ready.", 3)
    t0 = time.monotonic()
    os.kill(proc.pid, sig)
    rc, out, err = _finish(proc, 15)
    assert rc == 128 + sig, err
    assert time.monotonic() - t0 < 6
    assert f"received {signal.Signals(sig).name}; stopping rank(s) 0-2" in err
    assert "rank(s) 1 still running 1 s after SIGTERM; sending SIGKILL" in err
    assert wait_gone(pids(job.state)) == []


def test_timeout_stops_the_job(job):
    t0 = time.monotonic()
    proc = start(launcher(2, sys.executable, job.worker, "sleep", job.state, options=["--timeout", "1.5"]), job.env)
    rc, out, err = _finish(proc, 20)
    assert rc == 124, err
    assert 1.5 <= time.monotonic() - t0 < 10
    assert "timeout: the job ran longer than --timeout 1.5 s; stopping rank(s) 0-1" in err
    assert wait_gone(pids(job.state)) == []


def test_the_watchdog_cleans_up_after_a_launcher_that_died(shm, tmp_path):
    """The watchdog as the launcher starts it (a script: no package imported at its start): when the launcher's pipe
    closes without "done", it sweeps this user's segments whose owner is gone and removes the job directory; with
    "done" it leaves everything as it is."""
    import subprocess

    from hcomm_cffi.launch import watchdog

    for said, cleaned in (("done\n", False), ("", True)):
        stale = os.path.join(shm, f"hcomm_u{os.getuid()}_stale_segment")   # named as this user's: no lock holder
        open(stale, "w").close()
        job_dir = tmp_path / f"job-{cleaned}"
        job_dir.mkdir()
        proc = subprocess.Popen(watchdog.command(str(job_dir)), stdin=subprocess.PIPE, text=True,
                                env={**os.environ, "HCOMM_SIM_SHM_DIR": shm})
        proc.communicate(said, timeout=60)
        assert proc.returncode == 0
        assert os.path.exists(stale) is not cleaned and job_dir.exists() is not cleaned, (said, os.listdir(shm))
        if not cleaned:
            os.unlink(stale)


def test_launcher_killed_takes_its_ranks_along(job):
    proc = start(launcher(2, sys.executable, job.worker, "sleep", job.state, options=["--job-id", "orphans"]),
                 job.env)
    wait_files(job.state, "ready.", 2)
    os.kill(proc.pid, signal.SIGKILL)  # no chance to clean up: PR_SET_PDEATHSIG must do it
    proc.communicate()
    assert wait_gone(pids(job.state)) == []
    flight = f"hcomm-{os.getuid()}-flight-orphans-"     # the launcher made it; no rank wrote to it

    def flight_left() -> list:
        return [n for n in os.listdir(tempfile.gettempdir()) if n.startswith(flight)]

    end = time.monotonic() + 15
    while flight_left() and time.monotonic() < end:
        time.sleep(0.05)
    assert flight_left() == [], "the watchdog removes the empty flight recorder directory of a killed launcher"
    for leftover in os.listdir(tempfile.gettempdir()):
        if leftover.startswith(f"hcomm-{os.getuid()}-run-orphans-"):
            shutil.rmtree(os.path.join(tempfile.gettempdir(), leftover), ignore_errors=True)


def test_grandchildren_do_not_outlive_the_job(job):
    rc, out, err = _finish(start(launcher(2, sys.executable, job.worker, "grandchild", job.state), job.env), 30)
    assert rc == 0, err
    with open(os.path.join(job.state, "grandchild")) as fh:
        assert wait_gone([int(fh.read())]) == []


def test_output_prefix_environment_and_cleanup(job):
    proc = start(launcher(3, sys.executable, job.worker, "output", job.state, options=["--job-id", "pfx-1"]),
                 job.env)
    rc, out, err = _finish(proc, 30)
    assert rc == 0, err
    lines = out.splitlines()
    for r in range(3):
        assert (f"[{r}] env RANK={r} WORLD_SIZE=3 LOCAL_RANK={r} LOCAL_WORLD_SIZE=3 HCOMM_RUN_ID=pfx-1 "
                f"HCOMM_JOB_ID=pfx-1 HCOMM_BACKEND=sim JOB_DIR_EXISTS=True") in lines
        body = str(r) * 997
        mine = [line for line in lines if line.startswith(f"[{r}] line ")]
        # 300 long lines per rank, written concurrently by 3 ranks: each arrives whole, in order
        assert mine == [f"[{r}] line {i} {body}" for i in range(300)]
        assert f"[{r}] no newline at the end" in lines
        assert [line for line in err.splitlines() if line.startswith(f"[{r}] ")] == \
            [f"[{r}] err {i} of rank {r}" for i in range(0, 300, 50)]
        with open(os.path.join(job.state, f"jobdir.{r}")) as fh:
            assert not os.path.exists(fh.read())  # the rendezvous dir is removed at the end
    assert all(re.match(r"\[\d\] ", line) for line in lines)


def test_no_prefix(job):
    proc = start(launcher(2, sys.executable, job.worker, "output", job.state, options=["--no-prefix"]), job.env)
    rc, out, err = _finish(proc, 30)
    assert rc == 0, err
    lines = out.splitlines()
    assert len(lines) == 2 * 302
    assert sum(line.startswith("line 299 ") for line in lines) == 2
    assert not any(line.startswith("[") for line in lines)


def test_script_path_runs_with_this_interpreter(job):
    rc, out, err = _finish(start(launcher(2, job.worker, "grandchild", job.state), job.env), 30)
    assert rc == 0, err


@pytest.mark.parametrize("args, message", [
    (["-n", "0", "--", "true"], "expected a number of ranks >= 1"),
    (["-n", "two", "--", "true"], "'two' is not an integer"),
    (["-n", "2"], "no command given"),
    (["-n", "2", "--job-id", "a b", "--", "true"], "--job-id='a b'; expected 1-64 characters"),
    (["-n", "2", "--timeout", "-1", "--", "true"], "expected a number of seconds > 0"),
])
def test_bad_arguments(args, message):
    for cmd in ([sys.executable, "-m", "hcomm_cffi.run", *args], [sys.executable, "-m", "hcomm_cffi", "run", *args]):
        proc = start(cmd)
        rc, out, err = _finish(proc, 30)
        assert rc == 2 and message in err, (cmd, err)


def test_command_not_found(job):
    rc, out, err = _finish(start(launcher(2, "no-such-command-hcomm"), job.env), 30)
    assert rc == 127
    assert "cannot start rank 0: 'no-such-command-hcomm'" in err


def test_no_process_left_after_success(job):
    rc, out, err = _finish(start(launcher(2, sys.executable, job.worker, "grandchild", job.state), job.env), 30)
    assert rc == 0
    assert [p for p in pids(job.state) if alive(p)] == []



def test_one_intra_op_thread_per_rank_unless_set(job, monkeypatch):
    """As torchrun (torch/distributed/run.py:872): OMP_NUM_THREADS=1 for every rank when unset and N > 1."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    show = [sys.executable, "-c", "import os; print('OMP', os.environ.get('OMP_NUM_THREADS'))"]
    for n, given, expected in ((2, None, "1"), (2, "3", "3"), (1, None, "None")):
        env = {**job.env, **({"OMP_NUM_THREADS": given} if given is not None else {})}
        rc, out, err = _finish(start(launcher(n, *show), env), 30)
        assert rc == 0, err
        assert sorted(out.splitlines()) == [f"[{r}] OMP {expected}" for r in range(n)], (n, given, out)
