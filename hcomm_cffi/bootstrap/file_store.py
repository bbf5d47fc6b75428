"""A key-value store of one file per key in a private directory (local jobs, or hosts sharing a file system).

The directory must be this user's alone: :func:`private_dir` creates it ``0700`` and refuses one that
is a symbolic link, owned by another user or open to group/others; a key file owned by another user is
refused too, so nobody else can plant a root info.

Where a file rendezvous without a launcher's directory lives (:func:`rendezvous_dir`, issue 36.3): every
rank must find the same directory without talking to the others, so its name is derived from the job id
-- and, so that no other local user can create it first in a shared sticky directory such as ``/tmp``
(the victim could not remove it), from this user's own key as well: an HMAC of the job id under 32
random bytes kept in ``~/.hcomm/rendezvous-key`` (``0600``, made on first use).  The old per-user
parent ``<temp dir>/hcomm-<uid>`` (:func:`user_dir`) is used only when there is no usable home directory,
or when the ranks span hosts (a shared ``HCOMM_RENDEZVOUS_DIR``, whose hosts need not share a home).
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import hmac
import os
import shutil
import stat
import tempfile
import threading
import time
from typing import Dict, List, Optional, Sequence

from ..flocks import lock_held
from .errors import BootstrapError
from .kvstore import KeyValueStore

__all__ = ["FileStore", "private_dir", "user_dir", "rendezvous_dir", "user_key", "JOB_LOCK_NAME", "held_by_launcher"]

KEY_BYTES = 32
KEY_DIR, KEY_FILE = ".hcomm", "rendezvous-key"     # in the home directory

JOB_LOCK_NAME = ".lock"   # in an hcomm run job directory: flock'ed by the launcher (and its watchdog) for life


def private_dir(path: str) -> str:
    """``path`` as a directory of this user only (created ``0700`` if missing); BootstrapError otherwise."""
    path = os.path.abspath(path)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise BootstrapError(f"cannot create the private directory {path}: {exc.strerror}") from None
    st = os.lstat(path)
    me = os.getuid()
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise BootstrapError(f"{path} is not a directory (a symbolic link or a file): refusing it as a private "
                             "rendezvous directory; remove it")
    if st.st_uid != me:
        raise BootstrapError(f"{path} is owned by uid {st.st_uid}, not by this user (uid {me}): refusing a rendezvous "
                             "directory another user controls; remove it or choose another HCOMM_RENDEZVOUS_DIR")
    if st.st_mode & 0o077:
        raise BootstrapError(f"{path} has mode {stat.S_IMODE(st.st_mode):o}, open to other users: expected 700 "
                             f"(chmod 700 {path})")
    return path


def held_by_launcher(job_dir: str) -> bool:
    """True when ``job_dir`` is a live ``hcomm run`` job directory: its lock file is held by the launcher."""
    return lock_held(os.path.join(job_dir, JOB_LOCK_NAME)) is True


def user_dir(parent: Optional[str] = None) -> str:
    """This user's private directory ``<parent or temp dir>/hcomm-<uid>`` (created and checked)."""
    return private_dir(os.path.join(parent or tempfile.gettempdir(), f"hcomm-{os.getuid()}"))


def _read_key(path: str) -> Optional[bytes]:
    """The key at ``path`` if it is this user's regular file of the right size (never through a symlink)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        st = os.fstat(fd)
        data = os.pread(fd, KEY_BYTES + 1, 0)
    finally:
        os.close(fd)
    if st.st_uid != os.getuid() or not stat.S_ISREG(st.st_mode) or st.st_mode & 0o077 or len(data) != KEY_BYTES:
        raise BootstrapError(f"{path} is not this user's private {KEY_BYTES}-byte rendezvous key (owner uid "
                             f"{st.st_uid}, mode {stat.S_IMODE(st.st_mode):o}, {len(data)} bytes); remove it")
    return data


def user_key() -> Optional[bytes]:
    """This user's rendezvous key (``~/.hcomm/rendezvous-key``, made atomically on first use); None without a home.

    Several ranks may make it at once: each writes a complete candidate and links it into place, and
    every rank then reads whichever one won.
    """
    home = os.path.expanduser("~")
    try:
        if not os.path.isabs(home) or os.stat(home).st_uid != os.getuid():
            return None                      # no home of this user's own (HOME unset, or another user's)
        folder = private_dir(os.path.join(home, KEY_DIR))
    except (OSError, BootstrapError):
        return None
    path = os.path.join(folder, KEY_FILE)
    key = _read_key(path)
    if key is not None:
        return key
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, os.urandom(KEY_BYTES))
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass                                 # another rank was first: use its key
    finally:
        os.unlink(tmp)
    return _read_key(path)


def rendezvous_dir(job_id: str, parent: Optional[str] = None, keyed: bool = True) -> str:
    """The file rendezvous directory of ``job_id`` (see the module docstring; not created here).

    ``keyed``: name it with this user's key directly in ``parent`` (default: the temp dir), where no other
    user can predict the name; False (ranks on several hosts) or no key: ``<parent>/hcomm-<uid>/rdzv-<job id>``.
    """
    key = user_key() if keyed else None
    if key is None:
        return os.path.join(user_dir(parent), f"rdzv-{job_id}")
    tag = hmac.new(key, job_id.encode(), hashlib.sha256).hexdigest()[:24]
    return os.path.join(parent or tempfile.gettempdir(), f"hcomm-{os.getuid()}-rdzv-{job_id}-{tag}")


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
                with open(tmp, "wb") as fh:
                    fh.write(value)
                os.replace(tmp, path)
                return
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise BootstrapError(f"{self.description}: cannot write {path}: {exc.strerror}") from None
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
                fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
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
