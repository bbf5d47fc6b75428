"""The key-value interface the root-info protocol needs; every store implements it."""
from __future__ import annotations

from typing import List, Optional, Sequence

__all__ = ["KeyValueStore"]


class KeyValueStore:
    """The few operations the protocol needs.  Keys are ``/``-separated ASCII paths."""

    description = "key-value store"

    def set(self, key: str, value: bytes) -> None:
        raise NotImplementedError

    def get(self, key: str) -> Optional[bytes]:
        """The value, or None when the key is not set (never blocks)."""
        raise NotImplementedError

    def missing(self, keys: Sequence[str]) -> List[str]:
        """The keys of ``keys`` that are not set."""
        return [k for k in keys if self.get(k) is None]

    def delete_prefix(self, prefix: str) -> None:
        """Forget every key under ``prefix/`` (best effort)."""

    def close(self) -> None:
        """Release connections (the data stays)."""
