"""Another local user cannot block a file rendezvous by creating ``<tmp>/hcomm-<uid>`` first (issue 36.3).

srun without ``HCOMM_MASTER_ADDR`` and mpirun without mpi4py (or with ``HCOMM_RENDEZVOUS=file``) meet in
files keyed by the job id.  That directory used to sit under the fixed ``<tmp>/hcomm-<uid>``, which a
second user could create in a sticky ``/tmp`` as a directory, a 0777 directory, a symbolic link or a
file: every job then failed at init and the victim could not remove it.  Now the directory's name
carries an HMAC of the job id under this user's own key (file_store.rendezvous_dir), so nobody else can
name it in advance.  The squatter here is a real second uid (65534, by ``setuid`` in a forked child, as
tests/test_isolation_access.py does for ``hcomm run``), so this needs root.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from typing import Callable, Dict

import pytest

from multiproc import run_ranks

from test_isolation_access import NOBODY, _as_nobody, needs_root


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


@needs_root
@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
@pytest.mark.parametrize("how", ["dir", "dir-0777", "symlink", "file"])
def test_a_squatted_per_user_directory_does_not_block_the_file_rendezvous(launcher: str, how: str) -> None:
    tmp = tempfile.mkdtemp(prefix="hcomm-squat-rdzv-")
    os.chmod(tmp, 0o1777)                                  # a shared, sticky /tmp
    try:
        squatted = os.path.join(tmp, f"hcomm-{os.getuid()}")
        got = _as_nobody(_squat(squatted, how))
        assert got.startswith("ok"), got
        results = run_ranks(2, _job, LAUNCHERS[launcher], tmp, timeout=90)
        assert results == [3.0, 3.0]
        assert os.lstat(squatted).st_uid == NOBODY         # the squatter's entry is left alone
        left = [name for name in os.listdir(tmp) if name != os.path.basename(squatted)]
        assert left == [], left                            # the rendezvous directory was removed after use
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_the_rendezvous_directory_name_is_this_users_secret() -> None:
    """Same job id: the same directory for every rank of this user; its name is not derivable from the job id."""
    from hcomm_cffi.bootstrap.file_store import rendezvous_dir, user_key
    if user_key() is None:
        pytest.skip("no home directory of this user's own to keep the rendezvous key in")
    a, b = rendezvous_dir("job-7", "/somewhere"), rendezvous_dir("job-7", "/somewhere")
    assert a == b and os.path.dirname(a) == "/somewhere"
    name = os.path.basename(a)
    assert name.startswith(f"hcomm-{os.getuid()}-rdzv-job-7-") and len(name) > len(f"hcomm-{os.getuid()}-rdzv-job-7-") + 20
    assert rendezvous_dir("job-8", "/somewhere") != a
