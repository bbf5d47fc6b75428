"""The machinery under Comm: record an algorithm's tasks, launch them in one batch, synchronise, wrap errors.

Tasks are first recorded into a :class:`Recorder` and only replayed between HcommBatchModeStart/End
once the algorithm issued all of them without error, so a validation error raised half-way never
launches half an operation (which would hang the peers).
"""
from __future__ import annotations

from typing import Any, Callable, List, Optional, Tuple

from ..binding import Binding
from ..errors import HcclError
from .errors import CommError, CommTimeoutError

__all__ = ["Recorder", "launch", "sync_stream", "wrap_failure", "STREAM_SYNC_TIMEOUT"]

STREAM_SYNC_TIMEOUT = 507046  # ACL_ERROR_RT_STREAM_SYNC_TIMEOUT: our own wait expired, the stream is fine


class Recorder:
    """Collects data-plane calls (same names as :class:`Binding`) for a later atomic launch."""

    def __init__(self, binding: Binding) -> None:
        self._b = binding
        self.calls: List[Tuple[Callable[..., None], tuple]] = []

    def local_copy(self, *a: Any) -> None:
        self.calls.append((self._b.local_copy, a))

    def local_reduce(self, *a: Any) -> None:
        self.calls.append((self._b.local_reduce, a))

    def write(self, *a: Any) -> None:
        self.calls.append((self._b.write, a))

    def channel_notify_record(self, *a: Any) -> None:
        self.calls.append((self._b.channel_notify_record, a))

    def channel_notify_wait(self, *a: Any) -> None:
        self.calls.append((self._b.channel_notify_wait, a))

    def thread_notify_record(self, *a: Any) -> None:
        self.calls.append((self._b.thread_notify_record, a))

    def thread_notify_wait(self, *a: Any) -> None:
        self.calls.append((self._b.thread_notify_wait, a))


def launch(binding: Binding, rec: Recorder) -> None:
    """Replay the recorded calls inside one batch (nothing to do for an empty recording)."""
    if not rec.calls:
        return
    binding.batch_mode_start(b"")
    try:
        for fn, args in rec.calls:
            fn(*args)
    finally:
        binding.batch_mode_end(b"")


def wrap_failure(exc: HcclError, where: str) -> CommError:
    """A CommError (CommTimeoutError for timeouts) saying where, keeping the library's text."""
    cls = CommTimeoutError if isinstance(exc, TimeoutError) else CommError
    return cls(f"{where} failed: {exc}")


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
