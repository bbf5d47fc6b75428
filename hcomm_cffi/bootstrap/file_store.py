"""A key-value store of one file per key in a private directory (local jobs, or hosts sharing a file system).

The directory must be this user's alone: :func:`private_dir` creates it ``0700`` and refuses one that
is a symbolic link, owned by another user or open to group/others; a key file owned by another user is
refused too, so nobody else can plant a root info.  The per-user parent of rendezvous and job directories
is :func:`user_dir` (``<temp dir>/hcomm-<uid>``).
"""
from __future__ import annotations

import os
import shutil
import stat
import tempfile
import threading
from typing import List, Optional, Sequence

from .errors import BootstrapError
from .kvstore import KeyValueStore

__all__ = ["FileStore", "private_dir", "user_dir"]


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


def user_dir(parent: Optional[str] = None) -> str:
    """This user's private directory ``<parent or temp dir>/hcomm-<uid>`` (created and checked)."""
    return private_dir(os.path.join(parent or tempfile.gettempdir(), f"hcomm-{os.getuid()}"))


class FileStore(KeyValueStore):
    """Keys are files under ``root``; a value is published by an atomic rename."""

    def __init__(self, root: str, remove_root: bool = False) -> None:
        self.root = private_dir(root)
        self.remove_root = remove_root  # delete_prefix also removes ``root`` once it is empty
        self.description = f"file rendezvous in {self.root}"

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

    def delete_prefix(self, prefix: str) -> None:
        shutil.rmtree(self._path(prefix), ignore_errors=True)
        if self.remove_root:
            try:
                os.rmdir(self.root)
            except OSError:
                pass  # not empty: another generation is in use
