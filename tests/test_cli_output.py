"""What the CLI prints for a person: plan's legend and titles, info's search list once, quiet exits into `head`."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

HCOMM = [sys.executable, "-m", "hcomm_cffi"]


def _run(*args: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([*HCOMM, *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


def test_plan_compare_has_a_title_and_a_legend():
    out = _run("plan", "--servers", "2", "--devices", "8", "--op", "allreduce", "--size", "64M", "--compare").stdout
    lines = out.splitlines()
    assert lines[0] == ("allreduce of 64 MiB FP32 on 16 ranks (2 server(s)): the package's algorithms as they run "
                        "here, beside the vendor's executors on Atlas A2 (910B), AI CPU expansion"), out
    assert lines[2].split()[:2] == ["package", "(as"] and lines[3].split()[:4] == ["algorithm", "threads", "ch", "ntf"]
    assert lines[-1].startswith("columns: threads, ch ntf (channel notifies), chans (channels)"), out
    assert sum("the package's quickest" in line for line in lines) == 1, out


def test_plan_explains_its_columns_and_how_the_two_buffer_figures_differ():
    out = _run("plan", "--algo", "ring", "--ranks", "4", "--size", "64M").stdout
    assert "columns: ranks = ranks in the role, then per rank: threads = HCOMM threads acquired" in out, out
    assert "HCCL buffer (formula): one piece needs 64 MiB in each of its two halves, configured" in out, out
    assert ("into the HCCL buffer (the highest offset in both halves together, on the busiest rank: what the "
            "schedule touches, not what one piece needs)") in out, out


def test_info_prints_the_library_search_list_once():
    env = {k: "" for k in ("HCOMM_CANN_LIB_DIR", "HCCL_SO_PATH", "ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME",
                           "ASCEND_OPP_PATH", "HCOMM_BACKEND")}
    out = _run("info", env=env).stdout
    if "not found; searched:" not in out:
        pytest.skip("CANN (or an emulated install) is found here: nothing is searched for in vain")
    assert out.count("$HCOMM_CANN_LIB_DIR") == 1, out
    assert "libhccl.so: not found in the same places" in out, out


@pytest.mark.parametrize("args", [["info"], ["plan", "--servers", "2", "--devices", "8", "--compare"],
                                  ["plan", "--algo", "ring", "--ranks", "8"], ["--help"]])
def test_a_cli_piped_into_head_exits_quietly(args):
    # `hcomm ... | head -1`: the reader closes the pipe after one line
    proc = subprocess.Popen([*HCOMM, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.wait(timeout=60)
    assert first, err
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    assert proc.returncode in (0, 141), (proc.returncode, err)


@pytest.mark.slow
def test_bench_header_says_which_checks_are_off_and_what_the_time_includes(shm):
    env = {"HCOMM_SIM_SHM_DIR": shm, "HCOMM_BACKEND": "sim", "HCOMM_SIM_CHECK": "", "HCOMM_CHECK_COLLECTIVES": ""}
    out = _run("bench", "-b", "8", "-e", "8", "-N", "2", "--algo", "native,ring", "-n", "5", "-w", "1", env=env)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "# signature check (Comm API paths; --algo native calls the library directly): HCOMM_CHECK_COLLECTIVES=0 " \
           "(set by hcomm bench" in text, text
    assert "# emulator schedule checker: HCOMM_SIM_CHECK=off (set by hcomm bench" in text, text
    assert "# time: iters back-to-back library calls on one stream, then one stream synchronisation" in text, text
    assert "# time: iters back-to-back blocking Comm API calls" in text, text
    kept = _run("bench", "-b", "8", "-e", "8", "-N", "2", "--algo", "ring", "-n", "5", "-w", "1",
                env={**env, "HCOMM_CHECK_COLLECTIVES": "1"})
    assert "HCOMM_CHECK_COLLECTIVES=1" in kept.stdout and "set by hcomm bench: it is" not in kept.stdout, kept.stdout
    # the manual's benchmarks page says the same
    page = open(os.path.join(os.path.dirname(__file__), "..", "docs", "guide", "benchmarks.md"), encoding="utf-8").read()
    assert "`HCOMM_SIM_CHECK=off` and the signature check `HCOMM_CHECK_COLLECTIVES=0`" in page
