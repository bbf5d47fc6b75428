"""The key-value interface the root-info protocol needs; every store implements it."""
from __future__ import annotations

from typing import List, Optional, Sequence

__all__ = ["KeyValueStore"]


class KeyValueStore:
    """The few operations the protocol needs.  Keys are ``/``-separated ASCII paths."""

    description = "key-value store"
    persistent = False   # keys outlive the processes (files): the last one out removes them

    def set(self, key: str, value: bytes) -> None:
        raise NotImplementedError

    def get(self, key: str) -> Optional[bytes]:
        """The value, or None when the key is not set (never blocks)."""
        raise NotImplementedError

    def missing(self, keys: Sequence[str]) -> List[str]:
        """The keys of ``keys`` that are not set."""
        return [k for k in keys if self.get(k) is None]

    def claim(self, key: str, value: bytes) -> Optional[bytes]:
        """Set ``key`` only if it is not set: None when this call set it, else the value already there.

        Stores shared by several processes make this atomic (a file created exclusively, one server
        lock, torch's compare_set); this default is not, and serves single-process stores only.
        """
        current = self.get(key)
        if current is None:
            self.set(key, value)
        return current

    def alive(self, key: str) -> Optional[bool]:
        """Whether the process that claimed ``key`` still lives: True, False, or None when unknown."""
        return None

    def release(self, key: str) -> None:
        """Give up a claim this process holds (its value stays, as a finished rank's)."""

    def namespaces(self) -> Optional[List[str]]:
        """The top-level key prefixes in use (a file store's directories), or None when the store cannot list them."""
        return None

    def delete_prefix(self, prefix: str) -> None:
        """Forget every key under ``prefix/`` (best effort)."""

    def close(self) -> None:
        """Release connections (the data stays)."""
