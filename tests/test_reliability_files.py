"""Files, directories and full file systems (issue 46 items 3, 4, 5 and 13).

* Another user's directory or a link they planted never makes a job write through it: the flight recorder's
  directory, its ring, HCOMM_TRACE and HCOMM_DEBUG_FILE are refused, naming the variable (a real second uid,
  65534, by ``setuid`` in a forked child as the other isolation tests do; needs root).
* A shared-memory directory too small for the communicator fails its init with the bytes needed and free and the
  settings that change them; one filled by anyone after init cannot kill a rank; a full flight directory leaves the
  recorder in memory, said once (a small tmpfs mounted by the test; skipped where mounting is not permitted).
* Unusable HCOMM_FR_DIR / HCOMM_TRACE / HCOMM_SIM_LEDGER values are clear errors naming the variable, not raw
  OSErrors; ``hcomm run`` refuses a deeply nested ranktable without a traceback.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from typing import Dict, Iterator

import pytest

from test_isolation_access import NOBODY, _as_nobody, needs_root
from test_launch_helpers import launcher, start

pytestmark = pytest.mark.slow

ONE_RANK = "import hcomm_cffi as h, numpy as np; w = h.init(); x = np.ones(4, np.float32); w.allreduce(x); h.finalize()"


def _one_rank(env: Dict[str, str], script: str = ONE_RANK) -> subprocess.CompletedProcess:
    """A one-rank job in a fresh interpreter (hcomm.init() with no launcher) with ``env`` added."""
    proc = start([sys.executable, "-c", script], {"HCOMM_BACKEND": "sim", **env})
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@contextlib.contextmanager
def _shared_dir() -> Iterator[str]:
    """A directory like /tmp: this user's, world-writable and sticky."""
    where = tempfile.mkdtemp(prefix="hcomm-shared-")
    os.chmod(where, 0o1777)
    try:
        yield where
    finally:
        shutil.rmtree(where, ignore_errors=True)


@contextlib.contextmanager
def _victim() -> Iterator[str]:
    """A file of this user's that a planted link points at; it must come out unchanged."""
    fd, path = tempfile.mkstemp(prefix="hcomm-victim-")
    os.write(fd, b"precious\n")
    os.close(fd)
    try:
        yield path
    finally:
        os.unlink(path)


def _plant(link: str, target: str) -> None:
    got = _as_nobody(lambda: os.symlink(target, link))
    assert got.startswith("ok"), got


# ---------------------------------------------------------------------------------------------- the one check
def test_checked_dir_refuses_links_files_and_directories_others_can_write(tmp_path) -> None:
    from hcomm_cffi import files
    (tmp_path / "file").write_text("x")
    with pytest.raises(files.UnsafePath, match=r"HCOMM_TRACE='.*file' is not a directory"):
        files.checked_dir(str(tmp_path / "file"), "HCOMM_TRACE")
    os.symlink(tmp_path, tmp_path / "link")
    with pytest.raises(files.UnsafePath, match=r"HCOMM_TRACE='.*link' is not a directory \(a symbolic link"):
        files.checked_dir(str(tmp_path / "link"), "HCOMM_TRACE")
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    os.chmod(open_dir, 0o777)
    with pytest.raises(files.UnsafePath, match="has mode 777: other users can write it .*no sticky bit"):
        files.checked_dir(str(open_dir), "HCOMM_FR_DIR")
    os.chmod(open_dir, 0o1777)                                   # sticky, as /tmp: accepted
    assert files.checked_dir(str(open_dir), "HCOMM_FR_DIR") == str(open_dir)
    with pytest.raises(files.UnsafePath, match="open to other users: expected 700"):
        files.checked_dir(str(open_dir), "rendezvous directory", private=True)
    made = files.checked_dir(str(tmp_path / "a" / "b"), "HCOMM_FR_DIR")
    assert stat.S_IMODE(os.stat(made).st_mode) == 0o700


@needs_root
def test_checked_dir_refuses_a_directory_whose_parent_another_user_owns(tmp_path) -> None:
    from hcomm_cffi import files
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, NOBODY, NOBODY)
    with pytest.raises(files.UnsafePath, match=f"its parent directory {theirs} is owned by uid {NOBODY}"):
        files.checked_dir(str(theirs / "flight"), "HCOMM_FR_DIR")


@needs_root
def test_files_are_never_created_or_appended_through_a_planted_link() -> None:
    from hcomm_cffi import files
    with _shared_dir() as shared, _victim() as victim:
        ring, log, out = (os.path.join(shared, n) for n in ("x.ring", "x.log", "x.json"))
        for link in (ring, log, out):
            _plant(link, victim)
        with pytest.raises(files.UnsafePath, match="exists and is a symbolic link"):
            files.create_file(ring, replace=True)
        with pytest.raises(files.UnsafePath, match="HCOMM_DEBUG_FILE=.*symbolic link"):
            files.open_own(log, "HCOMM_DEBUG_FILE")
        files.write_atomically(out, "{}")                        # replaces the link itself
        assert not os.path.islink(out) and open(out).read() == "{}"
        assert open(victim, "rb").read() == b"precious\n"


# ---------------------------------------------------------------------------------------------- item 3
def _their_dir(parent: str, name: str) -> str:
    """A directory another user made first (world-writable, as the reproducer's), returned by path."""
    theirs = os.path.join(parent, name)

    def make() -> None:
        os.mkdir(theirs)
        os.chmod(theirs, 0o777)
    got = _as_nobody(make)
    assert got.startswith("ok"), got
    return theirs


@needs_root
def test_a_flight_directory_another_user_made_first_is_refused() -> None:
    """The reproducer: another user makes HCOMM_FR_DIR first and links the predictable ring name to a file of ours."""
    with _shared_dir() as shared, _victim() as victim:
        theirs = _their_dir(shared, "flight")
        _plant(os.path.join(theirs, "fr-link.rank0.world.0.ring"), victim)
        run = _one_rank({"HCOMM_FR_DIR": theirs, "HCOMM_JOB_ID": "fr-link"})
        assert open(victim, "rb").read() == b"precious\n"
        assert run.returncode != 0
        assert (f"HCOMM_FR_DIR='{theirs}' is owned by uid {NOBODY}, not by this user (uid {os.getuid()}): refusing a "
                "directory another user controls; remove it or choose another HCOMM_FR_DIR") in run.stderr, run.stderr
        launched = start(launcher(1, sys.executable, "-c", ONE_RANK), {"HCOMM_BACKEND": "sim", "HCOMM_FR_DIR": theirs})
        out, err = launched.communicate(timeout=120)
        assert launched.returncode != 0 and f"HCOMM_FR_DIR='{theirs}' is owned by uid {NOBODY}" in err, err
        assert "Traceback" not in err                       # hcomm run refuses it before starting any rank
        assert open(victim, "rb").read() == b"precious\n"


@needs_root
def test_trace_and_debug_file_refuse_another_users_directory_and_links() -> None:
    with _shared_dir() as shared, _victim() as victim:
        theirs = _their_dir(shared, "trace")
        run = _one_rank({"HCOMM_TRACE": theirs})
        assert run.returncode != 0 and f"HCOMM_TRACE='{theirs}' is owned by uid {NOBODY}" in run.stderr, run.stderr
        assert os.listdir(theirs) == []
        _plant(os.path.join(theirs, "debug-0.log"), victim)
        log = os.path.join(theirs, "debug-0.log")
        run = _one_rank({"HCOMM_DEBUG": "INFO", "HCOMM_DEBUG_FILE": os.path.join(theirs, "debug-%r.log")})
        assert open(victim, "rb").read() == b"precious\n"
        assert run.returncode != 0 and f"HCOMM_DEBUG_FILE='{log}': cannot open it to append: a symbolic link" in \
            run.stderr, run.stderr


# ---------------------------------------------------------------------------------------------- item 13: bad paths
def test_unusable_output_directories_are_named_not_raw_os_errors(tmp_path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    for name in ("HCOMM_FR_DIR", "HCOMM_TRACE", "HCOMM_SIM_LEDGER"):
        run = _one_rank({name: str(a_file)})
        assert run.returncode != 0, (name, run.stderr)
        assert f"{name}='{a_file}' is not a directory" in run.stderr, (name, run.stderr)
        for raw in ("FileExistsError", "NotADirectoryError", "[Errno"):
            assert raw not in run.stderr, (name, run.stderr)


def test_hcomm_run_refuses_a_deeply_nested_ranktable_without_a_traceback(tmp_path) -> None:
    table = tmp_path / "deep.json"
    table.write_text("[" * 100000 + "]" * 100000)
    proc = start(launcher(2, sys.executable, "-c", "pass", module="hcomm_cffi"),
                 {"HCOMM_BACKEND": "sim", "RANK_TABLE_FILE": str(table)})
    out, err = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert f"RANK_TABLE_FILE: ranktable '{table}': JSON nested too deeply" in err, err
    assert "Traceback" not in err and "RecursionError" not in err


# ---------------------------------------------------------------------------------------------- items 4 and 5
@contextlib.contextmanager
def _tmpfs(size_mib: int) -> Iterator[str]:
    """A tmpfs of ``size_mib`` MiB (sticky, world-writable as /dev/shm), unmounted afterwards."""
    where = tempfile.mkdtemp(prefix="hcomm-tmpfs-")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mib}m,mode=1777", "tmpfs", where],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        os.rmdir(where)
        pytest.skip(f"cannot mount a {size_mib} MiB tmpfs here ({mounted.stderr.strip() or 'mount failed'}): the "
                    "full-file-system cases need one (root with CAP_SYS_ADMIN)")
    try:
        yield where
    finally:
        subprocess.run(["umount", where], check=True)
        os.rmdir(where)


def _fill(path: str) -> int:
    """Write ``path`` until its file system is full; returns the bytes written."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    written = 0
    try:
        for chunk in (1 << 20, 1 << 16, 4096):
            block = b"x" * chunk
            while True:
                try:
                    written += os.write(fd, block)
                except OSError:
                    break
    finally:
        os.close(fd)
    return written


def _job(n: int, script: str, env: Dict[str, str]) -> subprocess.CompletedProcess:
    proc = start(launcher(n, sys.executable, "-c", script), {"HCOMM_BACKEND": "sim", "HCCL_BUFFSIZE": "8", **env})
    out, err = proc.communicate(timeout=180)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


ALLREDUCE = """
import os, numpy as np, hcomm_cffi as h
w = h.init()
fill = os.environ.get("FILL_AFTER_INIT")
if fill and w.rank == 0:
    fd = os.open(fill, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    for chunk in (1 << 20, 1 << 16, 4096):
        while True:
            try:
                os.write(fd, b"x" * chunk)
            except OSError:
                break
    os.close(fd)
w.barrier()
x = np.full(4 << 20, w.rank + 1.0, np.float32)      # 16 MiB: every page of the 2 x 8 MiB HCCL buffer is used
w.allreduce(x)
ok = bool((x == 3.0).all())
w.barrier()
if fill and w.rank == 0:
    os.unlink(fill)
h.finalize()
print("RESULT", w.rank, ok)
"""


def test_a_shared_memory_directory_too_small_fails_init_naming_what_is_needed() -> None:
    """Docker's 64 MiB /dev/shm, in small: 2 ranks need 2 x (2 x 16 MiB) and a little; 40 MiB cannot hold them."""
    with _tmpfs(40) as shm_dir:
        run = _job(2, ALLREDUCE, {"HCOMM_SIM_SHM_DIR": shm_dir})
        text = run.stdout + run.stderr
        assert run.returncode != 0, text
        assert "SIGBUS" not in text and "RESULT" not in text, text
        assert f"in {shm_dir}: No space left on device" in text and "MiB) free" in text, text
        assert "cannot reserve 16777216 bytes (16.0 MiB) for the shared-memory segment" in text, text
        assert "HCCL_BUFFSIZE" in text and "HCOMM_SIM_SHM_DIR" in text, text
        assert os.listdir(shm_dir) == []


def test_a_shared_memory_directory_filled_after_init_does_not_kill_the_job() -> None:
    with _tmpfs(80) as shm_dir:
        run = _job(2, ALLREDUCE, {"HCOMM_SIM_SHM_DIR": shm_dir, "FILL_AFTER_INIT": os.path.join(shm_dir, "fill")})
        text = run.stdout + run.stderr
        assert run.returncode == 0, text
        assert "RESULT 0 True" in run.stdout and "RESULT 1 True" in run.stdout, text
        assert os.listdir(shm_dir) == []


def test_a_full_flight_directory_leaves_the_recorder_in_memory_said_once() -> None:
    with _tmpfs(1) as fs:
        flight = os.path.join(fs, "flight")
        os.mkdir(flight, 0o700)
        _fill(os.path.join(fs, "fill"))
        run = _job(2, ALLREDUCE, {"HCOMM_FR_DIR": flight})
        text = run.stdout + run.stderr
        assert run.returncode == 0, text
        assert "RESULT 0 True" in run.stdout and "RESULT 1 True" in run.stdout, text
        notes = [line for line in run.stderr.splitlines() if "keeps its ring in memory only" in line]
        assert len(notes) == 2, text                              # once per rank
        assert f"for the flight recorder's ring in {flight}: No space left on device" in notes[0], notes
        assert [n for n in os.listdir(flight) if n.endswith(".ring")] == []


@needs_root
def test_build_outputs_refuse_another_users_directory() -> None:
    """`hcomm sim build-libs --out DIR`: libraries that programs later load never go where another user can write."""
    from hcomm_cffi.cannlib.build import BuildError, build_libs
    with _shared_dir() as shared:
        theirs = _their_dir(shared, "cann")
        with pytest.raises(BuildError, match=f"--out='{theirs}' is owned by uid {NOBODY}, not by this user"):
            build_libs(theirs)
        assert os.listdir(theirs) == []


@needs_root
def test_nothing_is_created_inside_another_users_directory() -> None:
    """A cache or output directory under another user's (a service account's HOME it cannot write; root could):
    refused naming that directory, and nothing made in it -- the compiled engine's cache under ~/.cache is one."""
    from hcomm_cffi.files import UnsafePath, checked_dir
    with _shared_dir() as shared:
        theirs = _their_dir(shared, "home")
        wanted = os.path.join(theirs, ".cache", "hcomm_cffi", "engine")
        with pytest.raises(UnsafePath, match=f"its parent directory {theirs} is owned by uid {NOBODY}"):
            checked_dir(wanted, "the compiled engine's cache", private=True)
        assert os.listdir(theirs) == []
