"""A ``torch.distributed.Store`` seen through the key-value interface (torch is never imported here)."""
from __future__ import annotations

from typing import Any, List, Optional, Sequence

from .kvstore import KeyValueStore

__all__ = ["TorchStore"]


class TorchStore(KeyValueStore):
    """A ``torch.distributed.Store`` (e.g. the default group's) seen through the protocol's interface."""

    def __init__(self, store: Any, description: str = "torch.distributed store") -> None:
        self.store = store
        self.description = description

    def set(self, key: str, value: bytes) -> None:
        self.store.set(key, value)

    def get(self, key: str) -> Optional[bytes]:
        if not self.store.check([key]):
            return None
        return bytes(self.store.get(key))

    def claim(self, key: str, value: bytes) -> Optional[bytes]:
        held = bytes(self.store.compare_set(key, b"", value))   # torch sets it only when the key is absent
        return None if held == value else held

    def missing(self, keys: Sequence[str]) -> List[str]:
        if self.store.check(list(keys)):
            return []
        return [k for k in keys if not self.store.check([k])]
