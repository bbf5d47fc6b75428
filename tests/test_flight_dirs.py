"""Where ``hcomm run`` keeps the ranks' flight recorders (launch/flightwatch.py): a new private directory per
job directly in the temp dir, never under a fixed name another user could create first; old ones swept."""
from __future__ import annotations

import os
import stat
import tempfile
import time
from pathlib import Path

import pytest

from hcomm_cffi.launch import flightwatch


@pytest.fixture
def temp_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))     # what TMPDIR selects
    return tmp_path


def test_each_job_gets_a_new_private_directory_beside_a_squatted_user_dir(temp_dir: Path) -> None:
    (temp_dir / f"hcomm-{os.getuid()}").write_text("not a directory")   # what a squatter's name would block
    first = flightwatch.flight_dir({}, "0123456789ab")
    second = flightwatch.flight_dir({}, "0123456789ab")
    assert first != second and os.path.dirname(first) == str(temp_dir)
    assert os.path.basename(first).startswith(f"hcomm-{os.getuid()}-flight-0123456789ab-")
    st = os.lstat(first)
    assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.getuid()


def test_hcomm_fr_dir_is_used_as_given_and_not_created(temp_dir: Path) -> None:
    chosen = str(temp_dir / "mine")
    assert flightwatch.flight_dir({"HCOMM_FR_DIR": chosen}, "0123456789ab") == chosen
    assert not os.path.exists(chosen)


def test_sweep_removes_only_this_users_old_flight_directories(temp_dir: Path) -> None:
    old = flightwatch.flight_dir({}, "aaaaaaaaaaaa")
    young = flightwatch.flight_dir({}, "bbbbbbbbbbbb")
    other = temp_dir / "unrelated"
    other.mkdir()
    link = temp_dir / f"hcomm-{os.getuid()}-flight-cccccccccccc-link"
    link.symlink_to(other)
    stale = time.time() - (flightwatch.KEEP_DAYS + 1) * 86400
    for path in (old, str(other)):
        os.utime(path, (stale, stale))
    os.utime(link, (stale, stale), follow_symlinks=False)
    assert flightwatch.sweep_old() == [old]
    assert os.path.isdir(young) and other.is_dir() and link.is_symlink()
