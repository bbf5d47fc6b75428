"""``hcomm_cffi.Stream``: an ACL stream the package owns, accepted wherever ``stream=`` is.

Like ``torch.npu.Stream``: it exposes its ``aclrtStream`` address as ``npu_stream`` (what
:func:`~hcomm_cffi.api.streams.stream_handle` reads), so collectives, :func:`hcomm_cffi.graph` and
torch_npu-style code take it as they take a torch_npu stream.

What communicators queue on it (a graph's replays, collectives and sends/receives issued with
``stream=``) is told how each :meth:`Stream.synchronize` ended.  An exception that leaves the wait
(Ctrl-C, an alarm handler) leaves that work queued, and a retry after rewriting the inputs would let it
run on the new contents: those communicators break instead (api/engine.py), their queued work is
discarded, their peers fail naming this rank, and the exception goes on.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional

from .._ffi import ffi
from ..binding import Binding, get_binding
from ..errors import (
    ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT, ACL_ERROR_RT_EVENT_CAPTURED, ACL_ERROR_RT_STREAM_CAPTURED, HcclError,
)
from .streams import sync_stream

__all__ = ["Stream", "CAPTURE_REFUSALS"]

#: the codes of a call refused because an ACL graph captures (the queued work is not at fault)
CAPTURE_REFUSALS = frozenset({ACL_ERROR_RT_STREAM_CAPTURED, ACL_ERROR_RT_EVENT_CAPTURED,
                              ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT})


class Stream:
    """An ``aclrtStream`` created on the current device; ``close()`` (or the ``with`` block's end) destroys it."""

    def __init__(self, binding: Optional[Binding] = None) -> None:
        self.binding = binding if binding is not None else get_binding()
        self.handle: Any = self.binding.create_stream()
        #: told how the next synchronize() ended, once, by key (one per registrant): None (everything queued
        #: completed), the HcclError, or the exception that interrupted the wait; what was queued on the stream
        #: and waits for it (a replayed graph's flight records, a communicator's started calls).  It may raise a
        #: better error (not for an interrupt: the interrupt goes on)
        self.on_synchronized: Dict[Any, Callable[[Optional[BaseException]], None]] = {}
        #: called once the stream is destroyed, by key (one per registrant): the communicators it served forget it
        self.on_close: Dict[Any, Callable[[], None]] = {}

    @property
    def npu_stream(self) -> int:
        """The ``aclrtStream`` address (torch_npu's attribute name)."""
        if self.handle is None:
            raise ValueError("the stream was closed")
        return int(ffi.cast("uintptr_t", self.handle))

    def synchronize(self, timeout: Optional[float] = None) -> bool:
        """Wait for everything queued on the stream: True, or False if ``timeout`` s passed first.

        Refused with ``AclRtStreamCapturedError`` while an ACL graph captures the stream (as on CANN).
        """
        if self.handle is None:
            raise ValueError("the stream was closed")
        try:
            done = sync_stream(self.binding, self.handle, timeout)
        except HcclError as exc:
            if exc.code not in CAPTURE_REFUSALS:       # a refused wait says nothing about the queued work
                self._settle(exc)
            raise
        except BaseException as exc:    # Ctrl-C, an alarm...: the queued work must never run later (module docstring)
            self._settle(exc)
            raise
        if done:
            self._settle(None)
        return done

    def _settle(self, error: Optional[BaseException]) -> None:
        callbacks, self.on_synchronized = self.on_synchronized, {}
        first: Optional[BaseException] = None
        for fn in callbacks.values():
            try:
                fn(error)
            except BaseException as exc:        # every callback hears it; the first error is raised
                first = first or exc
        if first is not None and (error is None or isinstance(error, HcclError)):
            raise first

    def close(self) -> None:
        """Wait for the stream's queued work, then destroy it; later uses raise.

        Destroying a stream drops what it has not run (the runtime asks for a synchronisation first), which
        would leave a peer waiting for this rank's part of a collective; a failure of the queued work is
        raised once the stream is gone.  Refused, the stream kept, while an ACL graph captures it.
        """
        if self.handle is None:
            return
        capturing = False
        try:
            self.synchronize()
        except HcclError as exc:
            capturing = exc.code in CAPTURE_REFUSALS
            raise
        finally:
            if not capturing:
                handle, self.handle = self.handle, None
                self.binding.destroy_stream(handle)
                callbacks, self.on_close = self.on_close, {}
                for forget in callbacks.values():
                    forget()

    def __enter__(self) -> "Stream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Stream(0x{self.npu_stream:x})" if self.handle is not None else "Stream(closed)"
