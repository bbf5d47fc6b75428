"""Streams: waiting for one (``sync_stream``), and where a communicator's collectives run: its own stream, or (stream-ordered) a caller's ACL stream.

Each stream gets its own :class:`ResourceCache` (threads bound to it, never freed before the communicator
is destroyed: at most ``HCOMM_MAX_STREAMS`` user streams).  All collectives of one communicator stay in one
total order: a stream that follows another waits for an event recorded on it, so two collectives never
share channel notifies or the HCCL buffer at the same time.
"""
from __future__ import annotations

from functools import partial

from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple

from .._ffi import ffi
from .. import settings
from ..binding import Binding
from ..errors import ACL_ERROR_RT_STREAM_SYNC_TIMEOUT, HcclError
from ..algorithms.replay import Schedule
from ..resources import ResourceCache, Resources
from .errors import CommError

__all__ = ["StreamTarget", "StreamTargets", "stream_handle", "stream_key", "sync_stream", "STREAM_SYNC_TIMEOUT"]

STREAM_SYNC_TIMEOUT = ACL_ERROR_RT_STREAM_SYNC_TIMEOUT   # our own wait expired, the stream is fine


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


@dataclass(eq=False)
class StreamTarget:
    """One stream collectives are issued on, with the resources bound to it."""

    stream: Any
    cache: ResourceCache
    own: bool
    res: Dict[Tuple[Any, ...], Resources] = field(default_factory=dict)  # (algorithm, call signature) -> resources
    #: (algorithm, call signature, in place) -> its schedule recorded on ``res`` (algorithms/replay.py) and whether
    #: the call starts with the signature handshake
    schedules: Dict[Tuple[Any, ...], Tuple[Schedule, bool]] = field(default_factory=dict)

    def forget_resources(self) -> None:
        """Drop the resource sets and the schedules recorded on them (the next call acquires and issues anew)."""
        self.cache.clear()
        self.res.clear()
        self.schedules.clear()


_STREAM_T = ffi.typeof("aclrtStream")


def stream_handle(stream: Any) -> Any:
    """An ``aclrtStream`` from ``stream=``: a cdata handle, an int address, or a torch_npu Stream (``npu_stream``).

    An :class:`~hcomm_cffi.api.stream.Stream` gives the handle object it owns, and an ``aclrtStream`` cdata is
    given back as is: the same object on every call, which the library's lookup of a stream recognises by identity.
    """
    own = getattr(stream, "handle", None) if hasattr(stream, "npu_stream") else None
    if isinstance(own, ffi.CData) and ffi.typeof(own) is _STREAM_T and own != ffi.NULL:
        return own
    raw = getattr(stream, "npu_stream", stream)  # torch_npu.npu.Stream exposes the aclrtStream address
    if isinstance(raw, ffi.CData):
        if raw == ffi.NULL:
            raise ValueError("stream is NULL; expected an aclrtStream handle")
        return raw if ffi.typeof(raw) is _STREAM_T else ffi.cast("aclrtStream", raw)
    if isinstance(raw, bool) or not isinstance(raw, int) or raw <= 0:
        raise TypeError(f"stream={stream!r}; expected an aclrtStream handle (cdata or address) or a torch_npu "
                        "Stream")
    return ffi.cast("aclrtStream", raw)


def stream_key(stream: Any) -> int:
    """The address of ``stream=`` (anything :func:`stream_handle` takes): what identifies a stream in a map."""
    return int(ffi.cast("uintptr_t", stream_handle(stream)))


class StreamTargets:
    """The communicator's own stream plus the user streams it has issued on (at most HCOMM_MAX_STREAMS)."""

    def __init__(self, binding: Binding, comm: Any, own_stream: Any, name: str) -> None:
        self.binding = binding
        self.comm = comm
        self.name = name
        self.own = StreamTarget(own_stream, ResourceCache(binding, comm, own_stream), True)
        self._targets: Dict[int, StreamTarget] = {stream_key(own_stream): self.own}
        self.last = self.own
        self._event: Any = None
        self.limit = int(settings.value("HCOMM_MAX_STREAMS"))

    def get(self, stream: Optional[Any]) -> StreamTarget:
        """The target for ``stream=`` (None: the communicator's own stream)."""
        if stream is None:
            return self.own
        key = stream_key(stream)
        target = self._targets.get(key)
        if target is None:
            handle = stream_handle(stream)
            users = len(self._targets) - 1
            if users >= self.limit:
                raise CommError(f"communicator {self.name!r} already ran collectives on {users} user streams "
                                f"(HCOMM_MAX_STREAMS={self.limit}); each stream holds its own threads until the "
                                "communicator is destroyed: reuse a stream, or raise HCOMM_MAX_STREAMS")
            target = StreamTarget(handle, ResourceCache(self.binding, self.comm, handle), False)
            self._targets[key] = target
            closing = getattr(stream, "on_close", None)     # a Stream of the package: told when it is destroyed
            if isinstance(closing, dict):
                closing[id(self)] = partial(self.forget, target)
        return target

    def forget(self, target: StreamTarget) -> None:
        """``target``'s stream was destroyed (``Stream.close`` waited for its work first): drop it, and order the
        next call after nothing of it (a new stream may even get its address)."""
        key = stream_key(target.stream)
        if self._targets.get(key) is target:
            del self._targets[key]
        if self.last is target:
            self.last = self.own

    def order(self, target: StreamTarget) -> None:
        """Make ``target``'s stream wait for the previous collective's stream (same stream: nothing to do)."""
        if target is self.last:
            return
        if self._event is None:
            self._event = self.binding.create_event()
        self.binding.record_event(self._event, self.last.stream)
        self.binding.stream_wait_event(target.stream, self._event)
        self.last = target

    def forget_resources(self) -> None:
        """Every target forgets its resources and schedules."""
        for t in self._targets.values():
            t.forget_resources()

    def clear(self) -> None:
        """Forget every handle (the communicator is destroyed; user streams stay the user's)."""
        if self._event is not None:
            self.binding.destroy_event(self._event)
            self._event = None
        self.forget_resources()
        self._targets = {stream_key(self.own.stream): self.own}
        self.last = self.own
