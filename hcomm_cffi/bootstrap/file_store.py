"""A key-value store of one file per key in a directory (local jobs, or hosts sharing a file system)."""
from __future__ import annotations

import os
import shutil
import threading
from typing import List, Optional, Sequence

from .errors import BootstrapError
from .kvstore import KeyValueStore

__all__ = ["FileStore"]


class FileStore(KeyValueStore):
    """Keys are files under ``root``; a value is published by an atomic rename."""

    def __init__(self, root: str, remove_root: bool = False) -> None:
        self.root = os.path.abspath(root)
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
        try:
            with open(self._path(key), "rb") as fh:
                return fh.read()
        except FileNotFoundError:
            return None

    def missing(self, keys: Sequence[str]) -> List[str]:
        return [k for k in keys if not os.path.exists(self._path(k))]

    def delete_prefix(self, prefix: str) -> None:
        shutil.rmtree(self._path(prefix), ignore_errors=True)
        if self.remove_root:
            try:
                os.rmdir(self.root)
            except OSError:
                pass  # not empty: another generation is in use
