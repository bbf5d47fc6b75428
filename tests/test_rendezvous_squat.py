"""Another local user cannot block a file rendezvous (issue 36.3, issue 46 items 6 and 12).

srun without ``HCOMM_MASTER_ADDR`` and mpirun without mpi4py (or with ``HCOMM_RENDEZVOUS=file``) meet in
files keyed by the job id.  That directory used to sit under the fixed ``<tmp>/hcomm-<uid>``, which a
second user could create in a sticky ``/tmp`` as a directory, a 0777 directory, a symbolic link or a
file: every job then failed at init and the victim could not remove it.  Then its name carried an HMAC
under a key in the home directory: without a usable home (item 6) the fixed directory came back, and the
name, the same on every run of a job id and visible in the temp dir, could be taken after one run to block
the next (item 12).  Now it lives in this user's private directory (file_store.private_parent: made by
``mkdtemp``, found again by owner), which nobody else can create first, list or enter.  The squatter here is
a real second uid (65534, by ``setuid`` in a forked child, as tests/test_isolation_access.py does for
``hcomm run``), so this needs root.
"""
from __future__ import annotations

import os
import select
import shutil
import tempfile
from typing import Callable, Dict, List

import pytest

from multiproc import run_ranks

from test_isolation_access import NOBODY, _as_nobody, needs_root

pytestmark = pytest.mark.slow


def _squat(path: str, how: str) -> Callable[[], None]:
    def act() -> None:
        if how == "dir":
            os.mkdir(path, 0o755)
        elif how == "dir-0777":
            os.mkdir(path)
            os.chmod(path, 0o777)
        elif how == "symlink":
            os.symlink("/", path)
        else:
            with open(path, "w") as fh:
                fh.write("squatted")
    return act


LAUNCHERS: Dict[str, Dict[str, str]] = {
    "srun": {"SLURM_PROCID": "{rank}", "SLURM_NTASKS": "2", "SLURM_LOCALID": "{rank}", "SLURM_JOB_ID": "4242",
             "SLURM_STEP_ID": "0"},
    "mpirun": {"OMPI_COMM_WORLD_RANK": "{rank}", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "{rank}",
               "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "PMIX_NAMESPACE": "squat-ns", "HCOMM_RENDEZVOUS": "file"},
}


def _job(rank: int, n: int, _root: bytes, env: Dict[str, str], tmp: str) -> float:
    """One rank of a launcher's job: hcomm.init() through the file rendezvous in ``tmp``, then an allreduce."""
    import numpy as np
    os.environ.update({k: v.format(rank=rank) for k, v in env.items()})
    os.environ["TMPDIR"] = tmp
    for name in ("HCOMM_MASTER_ADDR", "HCOMM_RENDEZVOUS_DIR", "HCOMM_RUN_JOB_DIR", "HCOMM_JOB_ID"):
        os.environ.pop(name, None)
    tempfile.tempdir = None                    # the forked parent's cached temp dir: read TMPDIR again
    import hcomm_cffi as hcomm
    w = hcomm.init()
    try:
        x = np.full(4, rank + 1.0, np.float32)
        w.allreduce(x)
        return float(x[0])
    finally:
        hcomm.finalize()
        from hcomm_cffi.bootstrap import release_claims
        release_claims()                       # what exit does (forked ranks skip atexit)


def _left_behind(tmp: str, squatted: List[str]) -> List[str]:
    """What the jobs left in ``tmp`` besides the squatter's entries and this user's (empty) private directory."""
    left = []
    for name in os.listdir(tmp):
        if name in squatted:
            continue
        path = os.path.join(tmp, name)
        if name.startswith(f"hcomm-{os.getuid()}-private-") and os.lstat(path).st_uid == os.getuid():
            assert os.listdir(path) == [], os.listdir(path)      # every rendezvous directory was removed after use
            assert os.lstat(path).st_mode & 0o777 == 0o700
            continue
        left.append(name)
    return left


def _shared_tmp() -> str:
    tmp = tempfile.mkdtemp(prefix="hcomm-squat-rdzv-")
    os.chmod(tmp, 0o1777)                                  # a shared, sticky /tmp
    return tmp


@needs_root
@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
@pytest.mark.parametrize("how", ["dir", "dir-0777", "symlink", "file"])
def test_a_squatted_per_user_directory_does_not_block_the_file_rendezvous(launcher: str, how: str) -> None:
    tmp = _shared_tmp()
    try:
        squatted = os.path.join(tmp, f"hcomm-{os.getuid()}")
        got = _as_nobody(_squat(squatted, how))
        assert got.startswith("ok"), got
        results = run_ranks(2, _job, LAUNCHERS[launcher], tmp, timeout=90)
        assert results == [3.0, 3.0]
        assert os.lstat(squatted).st_uid == NOBODY         # the squatter's entry is left alone
        assert _left_behind(tmp, [os.path.basename(squatted)]) == []
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@needs_root
@pytest.mark.parametrize("how", ["dir", "symlink"])
def test_without_a_usable_home_a_squatted_per_user_directory_does_not_block(how: str) -> None:
    """Item 6: HOME is a directory this user cannot write (a service account): the job still runs."""
    tmp = _shared_tmp()
    home = tempfile.mkdtemp(prefix="hcomm-squat-home-")
    os.chown(home, NOBODY, NOBODY)                         # another user's home: nothing of ours can go there
    try:
        squatted = os.path.join(tmp, f"hcomm-{os.getuid()}")
        got = _as_nobody(_squat(squatted, how))
        assert got.startswith("ok"), got
        results = run_ranks(2, _job, dict(LAUNCHERS["srun"], HOME=home), tmp, timeout=90)
        assert results == [3.0, 3.0]
        assert os.listdir(home) == []
        assert _left_behind(tmp, [os.path.basename(squatted)]) == []
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(home, ignore_errors=True)


def _watch_then_squat(tmp: str):
    """Fork a child as uid NOBODY that lists ``tmp`` every millisecond until told to stop, then creates every name
    it saw (that is gone); returns (pid, stop, report) pipes' ends: write to ``stop``, read the names from ``report``."""
    stop_r, stop_w = os.pipe()
    rep_r, rep_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(stop_w)
            os.close(rep_r)
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            seen = set()
            os.write(rep_w, b"R")
            while not select.select([stop_r], [], [], 0.001)[0]:
                try:
                    seen.update(os.listdir(tmp))
                except OSError:
                    pass
            taken = []
            for name in sorted(seen):
                try:
                    os.mkdir(os.path.join(tmp, name), 0o755)
                    taken.append(name)
                except OSError:
                    pass
            os.write(rep_w, "\n".join(taken).encode())
        finally:
            os._exit(0)
    os.close(stop_r)
    os.close(rep_w)
    assert os.read(rep_r, 1) == b"R"
    return pid, stop_w, rep_r


@needs_root
def test_a_name_seen_during_one_run_cannot_block_the_next_run_of_the_job_id() -> None:
    """Item 12: another user who watches the temp dir during a run and takes every name it saw there does not block
    the next run of the same job id (the rendezvous directory's name is never visible to them)."""
    tmp = _shared_tmp()
    pid, stop, report = _watch_then_squat(tmp)
    try:
        assert run_ranks(2, _job, LAUNCHERS["srun"], tmp, timeout=90) == [3.0, 3.0]
        os.write(stop, b"x")
        taken = [n for n in os.read(report, 1 << 16).decode().split("\n") if n]
        os.waitpid(pid, 0)
        pid = 0
        assert all(os.lstat(os.path.join(tmp, n)).st_uid == NOBODY for n in taken)
        assert run_ranks(2, _job, LAUNCHERS["srun"], tmp, timeout=90) == [3.0, 3.0]    # the same job id again
        assert _left_behind(tmp, taken) == []
    finally:
        if pid:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        os.close(stop)
        os.close(report)
        shutil.rmtree(tmp, ignore_errors=True)


def _private_parent_of(base: str) -> str:
    from hcomm_cffi.bootstrap.file_store import private_parent
    return private_parent(base)


def test_every_rank_finds_the_same_private_directory(tmp_path) -> None:
    """Ranks making this user's private directory at once all agree on one (and it is this user's, 0700)."""
    import multiprocessing

    base = str(tmp_path)
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        found = pool.map(_private_parent_of, [base] * 4)
    assert len(set(found)) == 1, found
    assert os.listdir(base) == [os.path.basename(found[0])]
    st = os.lstat(found[0])
    assert st.st_uid == os.getuid() and st.st_mode & 0o777 == 0o700


@needs_root
def test_the_private_directory_is_closed_to_other_users() -> None:
    """Nobody else can list the private directory or create anything in it."""
    from hcomm_cffi.bootstrap.file_store import rendezvous_dir
    tmp = _shared_tmp()
    try:
        a = rendezvous_dir("job-7", tmp)
        assert a == rendezvous_dir("job-7", tmp) != rendezvous_dir("job-8", tmp)
        parent = os.path.dirname(a)
        assert os.path.dirname(parent) == tmp and os.path.basename(a) == "rdzv-job-7"
        got = _as_nobody(lambda: os.listdir(parent))
        assert got.startswith("PermissionError"), got
        got = _as_nobody(lambda: os.mkdir(a))
        assert got.startswith("PermissionError"), got
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
