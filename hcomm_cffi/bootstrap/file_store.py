"""A key-value store of one file per key in a private directory (local jobs, or hosts sharing a file system).

The directory must be this user's alone: :func:`private_dir` creates it ``0700`` and refuses one that
is a symbolic link, owned by another user or open to group/others; a key file owned by another user is
refused too, so nobody else can plant a root info.

Where a file rendezvous without a launcher's directory lives (:func:`rendezvous_dir`): every rank must find
the same directory without talking to the others, and no other local user may create it first in a shared
sticky directory such as ``/tmp`` (the victim could not remove it) nor see its name and take it before a later
run.  So it is ``rdzv-<job id>`` inside this user's private directory :func:`private_parent`: made once by
``mkdtemp`` (a random name nobody can create first, ``0700``) and found again by owner, so nothing of it is
visible to other users and it needs no home directory.  A per-user parent ``<dir>/hcomm-<uid>``
(:func:`user_dir`) is used only when the ranks span hosts (a shared ``HCOMM_RENDEZVOUS_DIR``, which the
hosts must find by name).
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import tempfile
import threading
import time
from typing import Dict, Iterator, List, Optional, Sequence

from .. import files
from ..files import UnsafePath, checked_dir, create_file
from ..flocks import lock_held
from .errors import BootstrapError
from .kvstore import KeyValueStore

__all__ = ["FileStore", "private_dir", "user_dir", "rendezvous_dir", "private_parent", "JOB_LOCK_NAME",
           "held_by_launcher"]

CREATE_LOCK_S = 5.0      # most seconds a rank waits for its turn to make this user's private directory

JOB_LOCK_NAME = ".lock"   # in an hcomm run job directory: flock'ed by the launcher (and its watchdog) for life


def private_dir(path: str, what: str = "rendezvous directory (HCOMM_RENDEZVOUS_DIR)") -> str:
    """``path`` as a directory of this user only (created ``0700`` if missing); BootstrapError naming ``what``
    otherwise (the package's one directory check, :func:`hcomm_cffi.files.checked_dir`)."""
    try:
        return checked_dir(path, what, private=True)
    except UnsafePath as exc:
        raise BootstrapError(str(exc)) from None


def held_by_launcher(job_dir: str) -> bool:
    """True when ``job_dir`` is a live ``hcomm run`` job directory: its lock file is held by the launcher."""
    return lock_held(os.path.join(job_dir, JOB_LOCK_NAME)) is True


def user_dir(parent: Optional[str] = None) -> str:
    """This user's directory ``<parent or temp dir>/hcomm-<uid>`` (created and checked): the parent of file
    rendezvous directories on a shared ``HCOMM_RENDEZVOUS_DIR`` that several hosts must find by name."""
    return private_dir(os.path.join(parent or tempfile.gettempdir(), f"hcomm-{os.getuid()}"))


def _private_prefix() -> str:
    return f"hcomm-{os.getuid()}-private-"


def _own_private_dir(base: str) -> Optional[str]:
    """The first (by name) directory ``hcomm-<uid>-private-*`` in ``base`` that is this user's and ``0700``."""
    found = files.own_dirs(base, _private_prefix(), private=True)
    return found[0][1] if found else None


@contextlib.contextmanager
def _serialised(base: str, wait_s: float = CREATE_LOCK_S) -> Iterator[None]:
    """This user's ranks making the private directory take turns: an ``flock`` on ``base`` itself, which any user
    may take, so one held by someone else for longer than ``wait_s`` is passed over, never waited for."""
    try:
        fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        yield
        return
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN) or time.monotonic() > deadline:
                    break
                time.sleep(0.005)
        yield
    finally:
        os.close(fd)        # drops the lock


def private_parent(base: Optional[str] = None) -> str:
    """This user's private directory in ``base`` (default: the temp dir) that holds its file rendezvous directories.

    Made once by ``mkdtemp`` (a random name, created exclusively, ``0700``) and found again by every later rank and
    job of this user as the ``hcomm-<uid>-private-*`` directory it owns: no other user can create it first, list it
    or create anything in it.  It stays (empty) for the next job.
    """
    base = base or tempfile.gettempdir()
    found = _own_private_dir(base)
    if found is None:
        with _serialised(base):
            found = _own_private_dir(base)          # another rank made it while we waited
            if found is None:
                try:
                    found = tempfile.mkdtemp(prefix=_private_prefix(), dir=base)
                except OSError as exc:
                    raise BootstrapError(f"cannot create this user's private rendezvous directory in {base}: "
                                         f"{exc.strerror}; set HCOMM_RENDEZVOUS_DIR to a directory this user can "
                                         "write") from None
    return private_dir(found)


def rendezvous_dir(job_id: str, parent: Optional[str] = None, keyed: bool = True) -> str:
    """The file rendezvous directory of ``job_id`` (see the module docstring; not created here).

    ``keyed`` (every rank on this host): ``rdzv-<job id>`` in this user's :func:`private_parent` of ``parent``
    (default: the temp dir); False (ranks on several hosts sharing ``parent``): ``<parent>/hcomm-<uid>/rdzv-<job id>``.
    """
    if keyed:
        return os.path.join(private_parent(parent), f"rdzv-{job_id}")
    return os.path.join(user_dir(parent), f"rdzv-{job_id}")


class FileStore(KeyValueStore):
    """Keys are files under ``root``; a value is published by an atomic rename, a claim by an exclusive link."""

    persistent = True

    def __init__(self, root: str, remove_root: bool = False) -> None:
        self.root = private_dir(root)
        self.remove_root = remove_root  # delete_prefix also removes ``root`` once it is empty
        self.description = f"file rendezvous in {self.root}"
        self._held: Dict[str, int] = {}   # claims of this store object: key -> fd holding the claim's flock

    def _path(self, key: str) -> str:
        if key.startswith("/") or ".." in key.split("/"):
            raise ValueError(f"key={key!r}; expected a relative path without '..'")
        return os.path.join(self.root, *key.split("/"))

    def set(self, key: str, value: bytes) -> None:
        path = self._path(key)
        for _ in range(20):  # a concurrent delete_prefix may remove the directory under us: retry
            try:
                os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
                tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
                with os.fdopen(create_file(tmp, replace=True, read=False), "wb") as fh:
                    fh.write(value)
                os.replace(tmp, path)
                return
            except FileNotFoundError:
                continue
            except (OSError, UnsafePath) as exc:
                raise BootstrapError(f"{self.description}: cannot write {path}: {exc}") from None
        raise BootstrapError(f"{self.description}: cannot write {path}: its directory keeps disappearing")

    def get(self, key: str) -> Optional[bytes]:
        path = self._path(key)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise BootstrapError(f"{self.description}: cannot read {path}: {exc.strerror}") from None
        with os.fdopen(fd, "rb") as fh:
            owner = os.fstat(fh.fileno()).st_uid
            if owner != os.getuid():
                raise BootstrapError(f"{self.description}: {path} is owned by uid {owner}, not by this user "
                                     f"(uid {os.getuid()}): refusing a file planted by another user")
            return fh.read()

    def missing(self, keys: Sequence[str]) -> List[str]:
        return [k for k in keys if not os.path.exists(self._path(k))]

    def claim(self, key: str, value: bytes) -> Optional[bytes]:
        """Create ``key`` exclusively, locked (``flock``) for as long as this process holds the claim.

        A claim file whose lock nobody holds is a dead (or finished) process's: it is removed while we hold
        its lock, so two processes never both remove a live one, and the claim is retried.
        """
        path = self._path(key)
        for _ in range(50):
            tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.claim"
            try:
                os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
                fd = create_file(tmp)
            except FileNotFoundError:
                continue            # a concurrent delete_prefix removed the directory: again
            except OSError as exc:
                raise BootstrapError(f"{self.description}: cannot claim {path}: {exc.strerror}") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                os.write(fd, value)
                os.link(tmp, path)          # appears complete and locked, or not at all (like O_EXCL)
            except (FileExistsError, FileNotFoundError) as exc:
                os.close(fd)
                if isinstance(exc, FileNotFoundError):
                    continue
            except BaseException:
                os.close(fd)
                raise
            else:
                self._held[key] = fd
                return None
            finally:
                try:
                    os.unlink(tmp)
                except FileNotFoundError:
                    pass
            held = self._stale_or_value(path)
            if held is not None:
                return held
        raise BootstrapError(f"{self.description}: cannot claim {path}: it keeps changing hands")

    def _stale_or_value(self, path: str) -> Optional[bytes]:
        """The value of a live claim at ``path``; None after removing a dead one (or if it vanished)."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        try:
            owner = os.fstat(fd).st_uid
            if owner != os.getuid():
                raise BootstrapError(f"{self.description}: {path} is owned by uid {owner}, not by this user "
                                     f"(uid {os.getuid()}): refusing a claim planted by another user")
            for attempt in range(4):    # a brief probe by alive() holds the lock too: only a lasting lock is a holder
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as exc:
                    if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                        raise
                    if attempt == 3:
                        return os.pread(fd, 1 << 16, 0) or b"{}"   # alive: its holder wrote it before linking
                    time.sleep(0.005)
            try:                                            # dead, and we hold its lock: remove that very file
                if os.stat(path).st_ino == os.fstat(fd).st_ino:
                    os.unlink(path)
            except FileNotFoundError:
                pass
            return None
        finally:
            os.close(fd)

    def alive(self, key: str) -> Optional[bool]:
        return lock_held(self._path(key))

    def release(self, key: str) -> None:
        """Drop the claim's lock; the file stays (slower ranks still count it) until the epoch is deleted."""
        fd = self._held.pop(key, None)
        if fd is not None:
            os.close(fd)

    def close(self) -> None:
        """Drop the locks of the claims this object holds (their files stay, as a finished rank's)."""
        for fd in self._held.values():
            os.close(fd)
        self._held.clear()

    def namespaces(self) -> Optional[List[str]]:
        try:
            return sorted(e.name for e in os.scandir(self.root) if e.is_dir(follow_symlinks=False))
        except OSError:
            return None

    def delete_prefix(self, prefix: str) -> None:
        path = self._path(prefix)
        shutil.rmtree(path, ignore_errors=True)
        parent = os.path.dirname(path)
        while parent != self.root and parent.startswith(self.root + os.sep):   # parents left empty go too
            try:
                os.rmdir(parent)
            except OSError:
                return  # not empty: another epoch or generation is in use
            parent = os.path.dirname(parent)
        if self.remove_root:
            try:
                os.rmdir(self.root)
            except OSError:
                pass  # not empty: another generation is in use
