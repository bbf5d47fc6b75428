"""Jobs and users kept apart (issue 12 items 1, 2, 4, 5): per-user segments, job secrets, private rendezvous
directories, and a killed launcher that leaves nothing behind."""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import sys
import tempfile
import time

import pytest

from hcomm_cffi.bootstrap import BootstrapError, FileStore, private_dir, user_dir
from hcomm_cffi.sim import shm
from hcomm_cffi.sim.errors import SimError
from test_launch_helpers import alive, launcher, start, wait_files, wait_gone

NOBODY = 65534
needs_root = pytest.mark.skipif(os.getuid() != 0, reason="creating another user's files needs root (os.setuid)")


def as_other_user(action) -> int:
    """Fork a child that becomes uid/gid NOBODY and runs ``action(pipe_w)``; returns its pid (still running)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        try:
            os.close(r)
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            action(w)
        finally:
            os._exit(0)
    os.close(w)
    assert os.read(r, 2) == b"ok", "the child as another user did not get ready"
    os.close(r)
    return pid


def _stop(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)


# ---------------------------------------------------------------------------------------------- item 1
@needs_root
def test_other_users_segments_are_ignored_and_never_mapped():
    live = os.path.join(shm.SHM_DIR, f"hcomm_u{NOBODY}_live_r0_ctl")
    planted = os.path.join(shm.SHM_DIR, f"{shm.user_prefix()}planted_r0_ctl")

    def make(w: int) -> None:
        fd = os.open(live, os.O_RDWR | os.O_CREAT, 0o600)   # another user's job, alive (holds its lock)
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 4096)
        os.close(os.open(planted, os.O_RDWR | os.O_CREAT, 0o644))  # planted under one of our names, no owner
        os.write(w, b"ok")
        time.sleep(60)

    child = as_other_user(make)
    try:
        removed = shm.sweep_stale()                            # neither is ours to remove
        assert os.path.basename(live) not in removed and os.path.basename(planted) not in removed
        assert os.path.exists(live) and os.path.exists(planted)
        assert planted.rsplit("/", 1)[1] in shm.list_segments()
        with pytest.raises(SimError, match=f"owned by uid {NOBODY}, not by this user"):
            shm.Segment(os.path.basename(planted))
        from hcomm_cffi.binding import Binding
        from hcomm_cffi.lib import load

        b = Binding(load("sim"))                               # init (which sweeps first) still works
        b.set_device(0)                                        # CANN needs a device before any communicator
        comms = b.comm_init_all([0, 1])
        for c in comms:
            b.comm_destroy(c)
        assert os.path.exists(live) and os.path.exists(planted)   # still there: never ours to remove
    finally:
        _stop(child)
        for path in (live, planted):
            if os.path.exists(path):  # (an older package version elsewhere may sweep them by name)
                os.unlink(path)


def test_segment_names_carry_the_uid():
    from hcomm_cffi.sim.comm import segment_names

    assert all(n.startswith(f"hcomm_u{os.getuid()}_") for n in segment_names("abc", 3))


# ---------------------------------------------------------------------------------------------- item 2
def test_a_peer_of_another_job_is_refused_at_attach():
    from hcomm_cffi.sim.comm import SimComm
    from hcomm_cffi.sim.config import read_config

    cfg = read_config()
    mine = SimComm(1, "samecommid000000000a", "c", 0, 2, cfg, b"secret of job A")
    other = SimComm(2, "samecommid000000000a", "c", 1, 2, cfg, b"secret of job B")
    try:
        with pytest.raises(SimError, match="segment of rank 1 belongs to another job"):
            mine.map_peers(time.monotonic() + 5)
    finally:
        mine.destroy()
        other.destroy()


RANKTABLE_WORKER = r'''
import os, sys
import numpy as np
from hcomm_cffi._ffi import ffi
from hcomm_cffi.binding import get_binding
from hcomm_cffi.bootstrap import discover
from hcomm_cffi.enums import DataType, ReduceOp
scale = float(sys.argv[1])
b = get_binding()
b.acl_init()
b.set_device(int(os.environ.get("RANK_ID") or os.environ.get("RANK") or 0))  # before any root info, as on CANN
spec = discover(b)
if spec.ranktable is not None:
    comm = b.comm_init_cluster_info(spec.ranktable, spec.rank)
else:
    comm = b.comm_init_root_info(spec.size, spec.root_info, spec.rank)
stream = b.create_stream()
for i in range(30):
    x = np.full(256, scale * (spec.rank + 1), np.float32)
    y = np.zeros_like(x)
    b.all_reduce(ffi.cast("char *", ffi.from_buffer(x)), ffi.cast("char *", ffi.from_buffer(y)), x.size,
                 DataType.FP32, ReduceOp.SUM, comm, stream)
    b.synchronize_stream(stream)
    assert np.all(y == 3 * scale), (i, y[:4])
print(f"rank {spec.rank} sum {float(y[0])}", flush=True)
b.destroy_stream(stream)
b.comm_destroy(comm)
'''


def _ranktable(path: str) -> None:
    devices = [{"device_id": str(r), "device_ip": f"192.168.1.{r}", "rank_id": str(r)} for r in range(2)]
    with open(path, "w") as fh:
        json.dump({"version": "1.0", "server_count": "1", "status": "completed",
                   "server_list": [{"server_id": "10.0.0.1", "device": devices}]}, fh)


def test_two_jobs_with_the_same_ranktable_and_job_id_keep_their_own_data(tmp_path, shm):
    table, worker = str(tmp_path / "rt.json"), str(tmp_path / "worker.py")
    _ranktable(table)
    with open(worker, "w") as fh:
        fh.write(RANKTABLE_WORKER)
    env = {"HCOMM_SIM_SHM_DIR": shm, "HCOMM_BACKEND": "sim", "RANK_TABLE_FILE": table}
    jobs = [start(launcher(2, sys.executable, worker, scale, options=["--job-id", "same"]), env)
            for scale in ("1", "100")]
    outs = [p.communicate(timeout=120) for p in jobs]
    for proc, (out, err), total in zip(jobs, outs, (3.0, 300.0)):
        assert proc.returncode == 0, err
        assert f"[0] rank 0 sum {total}" in out and f"[1] rank 1 sum {total}" in out


# ---------------------------------------------------------------------------------------------- item 4
def test_private_dir_refuses_open_modes_and_symlinks(tmp_path):
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    os.chmod(loose, 0o755)
    with pytest.raises(BootstrapError, match="mode 755, open to other users: expected 700"):
        private_dir(str(loose))
    link = tmp_path / "link"
    os.symlink(loose, link)
    with pytest.raises(BootstrapError, match="not a directory"):
        private_dir(str(link))
    made = private_dir(str(tmp_path / "new"))
    assert os.stat(made).st_mode & 0o777 == 0o700


@needs_root
def test_rendezvous_directory_or_file_of_another_user_is_refused():
    parent = tempfile.mkdtemp(prefix="hcomm-rdzv-test-")
    os.chmod(parent, 0o1777)                       # a shared /tmp-like parent
    try:
        ours = os.path.join(parent, f"hcomm-{os.getuid()}")

        def plant(w: int) -> None:
            os.mkdir(ours, 0o700)                  # squats our per-user directory name
            os.write(w, b"ok")

        os.waitpid(as_other_user(plant), 0)
        with pytest.raises(BootstrapError, match=f"owned by uid {NOBODY}, not by this user.*HCOMM_RENDEZVOUS_DIR"):
            user_dir(parent)
        store = FileStore(os.path.join(parent, "mine"))    # our own private dir, a key file of another user
        store.set("job/root_info", b"x" * 8)
        os.chown(os.path.join(store.root, "job", "root_info"), NOBODY, NOBODY)
        with pytest.raises(BootstrapError, match=f"owned by uid {NOBODY}.*planted by another user"):
            store.get("job/root_info")
    finally:
        shutil.rmtree(parent)


# ---------------------------------------------------------------------------------------------- item 5
KILL_WORKER = r'''
import os, subprocess, sys, time
from hcomm_cffi.binding import get_binding
from hcomm_cffi.bootstrap import discover
state, rank = sys.argv[1], os.environ["RANK"]
b = get_binding()
b.acl_init()
b.set_device(0)                                # CANN: a device before the root info
spec = discover(b)
comm = b.comm_init_root_info(spec.size, spec.root_info, spec.rank)
child = subprocess.Popen(["sleep", "60"])      # a descendant in the rank's process group
for name, value in (("pid", os.getpid()), ("child", child.pid), ("jobdir", os.environ["HCOMM_RUN_JOB_DIR"])):
    with open(os.path.join(state, f"{name}.{rank}"), "w") as fh:
        fh.write(str(value))
open(os.path.join(state, f"ready.{rank}"), "w").close()
time.sleep(60)
'''


def test_kill_9_of_the_launcher_leaves_no_process_segment_or_job_dir(tmp_path, shm):
    state, worker = tmp_path / "state", tmp_path / "worker.py"
    state.mkdir()
    worker.write_text(KILL_WORKER)
    proc = start(launcher(2, sys.executable, str(worker), str(state)), {"HCOMM_SIM_SHM_DIR": shm,
                                                                        "HCOMM_BACKEND": "sim"})
    try:
        wait_files(str(state), "ready.", 2)
        # once connected, the segments have no names (nobody outside the job can attach): ctl, buf, nat and
        # chk (the race checker's log, unless it is off) live on only in the ranks' mappings
        assert os.listdir(shm) == []
        read = {name: (state / name).read_text() for name in os.listdir(state)}
        procs = [int(v) for k, v in read.items() if k.startswith(("pid.", "child."))]
        for rank_pid in (int(v) for k, v in read.items() if k.startswith("pid.")):
            with open(f"/proc/{rank_pid}/maps") as fh:
                mapped = {line.split()[-2].rsplit("/", 1)[1] for line in fh
                          if f"{shm}/" in line and line.rstrip().endswith("(deleted)")}
            assert len(mapped) == (6 if os.environ.get("HCOMM_SIM_CHECK") == "off" else 8), mapped
        job_dirs = {v for k, v in read.items() if k.startswith("jobdir.")}
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate()
        assert wait_gone(procs, within=5.0) == [], "ranks or their children survived the launcher"
        end = time.monotonic() + 5.0
        while time.monotonic() < end and (os.listdir(shm) or any(os.path.exists(d) for d in job_dirs)):
            time.sleep(0.05)
        assert os.listdir(shm) == [] and not any(os.path.exists(d) for d in job_dirs)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()


def test_next_launch_sweeps_a_dead_jobs_directory():
    from hcomm_cffi.launch.jobdir import LOCK_NAME, sweep_dead_job_dirs

    dead = tempfile.mkdtemp(prefix=f"hcomm-{os.getuid()}-run-deadjob-")
    open(os.path.join(dead, LOCK_NAME), "w").close()      # nobody holds its lock
    live = tempfile.mkdtemp(prefix=f"hcomm-{os.getuid()}-run-livejob-")
    fd = os.open(os.path.join(live, LOCK_NAME), os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        removed = sweep_dead_job_dirs()
        assert dead in removed and live not in removed and os.path.isdir(live)
    finally:
        os.close(fd)
        shutil.rmtree(live)
    assert alive(os.getpid())
