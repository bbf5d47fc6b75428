"""An untagged batch passes NULL as the tag: to the vendor an empty string is a tag (it turns on its task cache)."""
from __future__ import annotations

from typing import Any, List

from hcomm_cffi._ffi import ffi
from hcomm_cffi.binding import Binding


class _Lib:
    """Records the tag argument of HcommBatchModeStart/End."""

    def __init__(self) -> None:
        self.tags: List[Any] = []

    def HcommBatchModeStart(self, tag: Any) -> int:
        self.tags.append(tag)
        return 0

    HcommBatchModeEnd = HcommBatchModeStart


def test_untagged_batch_is_null_and_a_tag_is_passed_through() -> None:
    lib = _Lib()
    b = Binding(lib)  # type: ignore[arg-type]
    b.batch_mode_start()
    b.batch_mode_end()
    b.batch_mode_start("allreduce-cache")
    assert lib.tags[0] == ffi.NULL and lib.tags[1] == ffi.NULL
    assert lib.tags[2] == b"allreduce-cache"
