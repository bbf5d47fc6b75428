"""Flight recorder, desync report (hcomm doctor, hcomm run) and HCOMM_DEBUG logging, on real 4-rank jobs."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from hcomm_cffi import flight, settings
from hcomm_cffi.desync import report
from test_launch_helpers import launcher, private_shm_dir, run_job

WORKER = r'''
import os, signal, sys
import numpy as np
import hcomm_cffi as hcomm

mode = sys.argv[1]
world = hcomm.init()
rank = world.rank
x = np.ones(1024, np.float32)
for _ in range(3):
    world.allreduce(x)                                  # collectives #1..#3 agree
if mode == "op":                                        # #4: rank 2 calls broadcast, the others allreduce
    if rank == 2:
        world.broadcast(x, root=0)
    else:
        world.allreduce(x)
elif mode == "count":                                   # #4: rank 2 reduces 2048 elements, the others 1024
    y = np.ones(2048 if rank == 2 else 1024, np.float32)
    world.allreduce(y)
    world.dump_flight_recorder()
elif mode == "kill":                                    # rank 2 dies with #4 in flight
    if rank == 2:
        req = world.allreduce(x, async_op=True)
        os.kill(os.getpid(), signal.SIGKILL)
    for _ in range(3):
        world.allreduce(x)
print("rank", rank, "done", flush=True)
hcomm.finalize()
'''


@pytest.fixture
def job(tmp_path):
    """A worker script, a flight-recorder directory and a private segment directory (checked empty at the end)."""
    shm = private_shm_dir()
    ns = type("Job", (), {})()
    ns.worker = str(tmp_path / "worker.py")
    with open(ns.worker, "w") as fh:
        fh.write(WORKER)
    ns.fr = str(tmp_path / "fr")
    ns.env = {"HCOMM_SIM_SHM_DIR": shm, "HCOMM_FR_DIR": ns.fr, "HCOMM_CHECK_COLLECTIVES": "0",
              "HCCL_EXEC_TIMEOUT": "3"}
    yield ns
    left = os.listdir(shm)
    shutil.rmtree(shm, ignore_errors=True)
    assert left == [], f"segments left behind: {left}"


def _run(job, mode: str, extra=None):
    return run_job(launcher(4, sys.executable, job.worker, mode, module="hcomm_cffi"), {**job.env, **(extra or {})})


def _doctor(directory: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hcomm_cffi", "doctor", directory], capture_output=True, text=True,
                          timeout=60)


def test_op_mismatch_is_named_by_the_launcher_and_by_doctor(job):
    rc, out, err = _run(job, "op")
    assert rc != 0, out
    # each side named with the user's line of its call (the flight record's call site)
    expected = ("ranks 0,1,3 are in allreduce #4 (4 KiB fp32, op sum) at worker.py:16; rank 2 is in broadcast #4 "
                "(4 KiB fp32, root 0) at worker.py:14")
    assert "hcomm run: desync report (hcomm doctor):" in err, err
    assert expected in err, err
    doc = _doctor(job.fr)
    assert doc.returncode == 0, doc.stderr
    assert expected in doc.stdout
    assert "dumps from ranks 0,1,2,3" in doc.stdout
    # why the ranks dumped: the emulator's checker saw the signatures differ at the first handshake
    # (before it, the mismatched calls' handshakes paired up and mixed their data); the headline is the user's
    # mistake at the user's line, without the library's code
    assert "rank 2: broadcast #4 (4 KiB fp32, root 0) at worker.py:14 failed" in doc.stdout, doc.stdout
    assert "CollectiveMismatchError: rank 2 of communicator 'world': collective mismatch at worker.py:14: this rank " \
        "is in broadcast" in doc.stdout, doc.stdout
    assert "is in allreduce of 1024 x fp32, op sum but rank 2 is in broadcast of 1024 x fp32, root 0" in err, err
    assert "507000" not in doc.stdout and "ACL_ERROR" not in doc.stdout, doc.stdout
    assert doc.stdout.rstrip().splitlines()[-1].startswith("next step: make rank 2 call allreduce as collective #4")



def test_count_mismatch_is_named_with_both_counts(job):
    rc, out, err = _run(job, "count")
    doc = _doctor(job.fr)
    assert doc.returncode == 0, (doc.stderr, out, err)
    assert "ranks disagree on the count of allreduce #4: 1024 on 0,1,3 at worker.py:19 vs 2048 on 2 at worker.py:19" \
        in doc.stdout, doc.stdout
    assert "next step: make every rank pass the same count to allreduce #4: rank 2 passes 2048" in doc.stdout


def test_killed_rank_is_named_as_gone_with_its_last_operation(job):
    rc, out, err = _run(job, "kill")
    assert rc == 128 + 9, err
    for text in (err, _doctor(job.fr).stdout):
        assert ("rank 2 is gone (killed: no dump, its process ended without an exit record); its last operation: "
                "allreduce #4 (4 KiB fp32, op sum) at worker.py:23, running") in text, text
        assert "rank 2 never entered collective #5" in text
        assert "dumps from ranks 0,1,3" in text


def test_logs_at_info_name_backend_communicator_and_algorithm(job, tmp_path):
    log = str(tmp_path / "hcomm.%r.log")
    rc, out, err = run_job(launcher(2, sys.executable, "-m", "hcomm_cffi.examples.allreduce", module="hcomm_cffi"),
                           {**job.env, "HCOMM_DEBUG": "INFO", "HCOMM_DEBUG_FILE": log})
    assert rc == 0, err
    assert "hcomm[rank" not in err                          # the log went to the files, not stderr
    for rank in (0, 1):
        with open(log.replace("%r", str(rank))) as fh:
            text = fh.read()
        assert f"hcomm[rank {rank}] INFO hcomm_cffi.comm: backend sim (HCOMM_BACKEND=sim)" in text, text
        assert f"communicator 'world' created: rank {rank} of 2" in text
        assert "allreduce of" in text and "algorithm native (auto: " in text
        assert "DEBUG" not in text


def test_quiet_by_default_and_debug_logs_every_call(job):
    code = ("import numpy as np, hcomm_cffi as h; from hcomm_cffi.binding import get_binding; b = get_binding(); "
            "b.set_device(0); w = h.init(rank=0, world_size=1, root_info=b.get_root_info()); "
            "x = np.ones(4, np.float32); w.allreduce(x); w.broadcast(x); h.finalize()")
    env = {**os.environ, **job.env, "HCOMM_BACKEND": "sim"}
    env.pop("HCOMM_DEBUG", None)
    quiet = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
    loud = subprocess.run([sys.executable, "-c", code], env={**env, "HCOMM_DEBUG": "debug"}, capture_output=True,
                          text=True, timeout=60)
    assert loud.returncode == 0, loud.stderr
    assert "DEBUG hcomm_cffi.calls: allreduce #1 on 'world': 4 x fp32 = 16 bytes, op sum, algorithm ring" in loud.stderr
    assert "broadcast #2 on 'world': 4 x fp32 = 16 bytes, root 0, algorithm ring" in loud.stderr
    bad = subprocess.run([sys.executable, "-c", code], env={**env, "HCOMM_DEBUG": "loud"}, capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode != 0 and "HCOMM_DEBUG='loud' is not a log level; expected one of WARN, INFO, DEBUG" \
        in bad.stderr


# ---------------------------------------------------------------------------------------------- the ring itself
def test_ring_keeps_the_last_n_with_states_and_survives_in_its_file(tmp_path):
    fr = flight.FlightRecorder("pp", 1, 2, 3, 4, str(tmp_path))
    try:
        for seq in range(1, 7):
            slot = fr.issue(seq, "allreduce", "ring", seq * 10, seq * 40, 4, 0, -1)
            if seq < 6:
                fr.running(slot)
            if seq < 5:
                fr.done(slot)
        snap = flight.read_ring(fr.path)                    # what a killed rank leaves on disk
        assert [r["seq"] for r in snap["records"]] == [3, 4, 5, 6]
        assert [r["state"] for r in snap["records"]] == ["done", "done", "running", "issued"]
        assert fr.fail_open() == 2                          # the communicator failed: #5 and #6 with it
        snap = flight.read_ring(fr.path)
        assert [r["state"] for r in snap["records"]] == ["done", "done", "failed", "failed"]
        assert snap["records"][0]["count"] == 30 and snap["comm"] == "pp" and snap["world_rank"] == 3
        assert snap["recorded"] == 6
    finally:
        fr.close()
    assert flight.read_ring(fr.path)["end"] == "finalised"      # says so while its peer has not finalised
    peer = flight.FlightRecorder("pp", 0, 2, 2, 4, str(tmp_path))
    assert flight.read_ring(peer.path)["end"] == "live"
    peer.close()                                                # the last rank to finalise removes every ring
    assert not os.path.exists(fr.path) and not os.path.exists(peer.path)


def test_bad_inputs_are_named(tmp_path):
    with pytest.raises(settings.SettingsError, match=r"HCOMM_FR_SIZE='lots' is not an integer"):
        settings.value("HCOMM_FR_SIZE", {"HCOMM_FR_SIZE": "lots"})
    with pytest.raises(ValueError, match="capacity=0"):
        flight.FlightRecorder("w", 0, 1, 0, 0)
    with pytest.raises(ValueError, match="holds no flight recorder files"):
        report(str(tmp_path))
    doc = _doctor(str(tmp_path / "missing"))
    assert doc.returncode == 2 and "is not a directory" in doc.stderr
