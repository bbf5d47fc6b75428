"""Waiting for a stream, with or without a timeout (record-then-launch is the algorithms layer's TaskBatch)."""
from __future__ import annotations

from typing import Any, Optional

from ..binding import Binding
from ..errors import HcclError

__all__ = ["sync_stream", "STREAM_SYNC_TIMEOUT"]

STREAM_SYNC_TIMEOUT = 507046  # ACL_ERROR_RT_STREAM_SYNC_TIMEOUT: our own wait expired, the stream is fine


def sync_stream(binding: Binding, stream: Any, timeout: Optional[float]) -> bool:
    """Wait for ``stream``: True when drained, False when ``timeout`` (s) expired first; raises HcclError."""
    if timeout is None:
        binding.synchronize_stream(stream)
        return True
    try:
        binding.synchronize_stream_with_timeout(stream, max(1, int(timeout * 1000)))
    except HcclError as exc:
        if exc.code == STREAM_SYNC_TIMEOUT:
            return False
        raise
    return True
