"""Repeated blocking calls: the key of a call's buffers (the communicator's cache maps keys to bound calls).

Every public collective of :class:`~hcomm_cffi.api.comm.Comm` validates its scalar arguments (op,
root, algorithm) with the same functions on every call, cached or not; the key is the collective,
those *validated* values, and each buffer's address, size and dtype, read in a way that makes the
checks :func:`~hcomm_cffi.api.buffers.as_buffer` makes of a buffer of that kind: a NumPy array
through ``ffi.from_buffer`` (C-contiguous, and writable when the call writes it), a CPU torch tensor
through ``is_contiguous``.  An entry is stored only after the full path accepted a call of the same
key, so a hit is a call the full path accepts; whatever the key cannot describe (another buffer
type, a non-contiguous or read-only array, a device tensor) gets no key and takes the full path,
which validates it and raises what it raises.  The communicator's cache (api/call.py) drops the
entries with its bound batches whenever they could go stale.
"""
from __future__ import annotations

import sys
from typing import Any, Dict, Optional, Tuple

import numpy as np

from .._ffi import ffi

__all__ = ["key_of", "buffer_view", "unowned", "Key", "X_AT", "OUT_AT"]

Key = Tuple[Any, ...]
_from_buffer = ffi.from_buffer
_ndarray = np.ndarray
_NOT_A_BUFFER = (ValueError, TypeError, BufferError)
#: positions of the two buffer addresses in a key (see key_of), and the key's tail without ``out``
X_AT, OUT_AT = 2, 5
_NO_OUT = (None, 0, None)


_tensors: Tuple[type, ...] = ()     # torch.Tensor and nn.Parameter, once torch is imported


def _tensor_types() -> Tuple[type, ...]:
    """torch.Tensor and nn.Parameter when torch is imported (never imports it: a user of tensors did)."""
    global _tensors
    if not _tensors:
        torch = sys.modules.get("torch")
        nn = getattr(torch, "nn", None)
        if torch is not None and nn is not None and hasattr(nn, "Parameter"):   # fully imported
            _tensors = (torch.Tensor, nn.Parameter)
    return _tensors


def buffer_view(buf: Any, written: bool) -> Optional[Tuple[Any, int, Any]]:
    """(address, bytes, dtype) of a NumPy array or a CPU torch tensor that as_buffer would accept, else None."""
    kind = type(buf)
    if kind is _ndarray:
        try:
            view = _from_buffer("char[]", buf, written)   # refuses non-C-contiguous and (written) read-only arrays
        except _NOT_A_BUFFER:
            return None
        return view, len(view), buf.dtype
    if kind in _tensor_types():
        try:
            if not buf.is_cpu or not buf.is_contiguous():   # NPU tensors: the full path synchronises their stream
                return None
            return buf.data_ptr(), buf.nbytes, buf.dtype
        except RuntimeError:        # sparse and other layouts without strides: the full path says what is wrong
            return None
    return None


def key_of(coll: str, x: Any, x_written: bool, out: Any, scalars: Tuple[Any, ...]) -> Optional[Key]:
    """The cache key of a call on ``x`` (and ``out``), or None when the full path must serve it.

    ``scalars``: the call's validated op, algorithm and root.  The key holds ``from_buffer`` views
    (they keep the arrays alive only as long as the key lives); :meth:`~hcomm_cffi.api.call.CommCache.keep_fast` keeps
    plain pointers instead, which hash and compare equal to them.
    """
    if type(x) is _ndarray:          # the common case inline (what buffer_view does for an ndarray)
        try:
            v = _from_buffer("char[]", x, x_written)
        except _NOT_A_BUFFER:
            return None
        xv: Tuple[Any, int, Any] = (v, len(v), x.dtype)
    else:
        view = buffer_view(x, x_written)
        if view is None:
            return None
        xv = view
    if out is None:
        return (coll, scalars) + xv + _NO_OUT
    if type(out) is _ndarray:
        try:
            v = _from_buffer("char[]", out, True)
        except _NOT_A_BUFFER:
            return None
        return (coll, scalars) + xv + (v, len(v), out.dtype)
    ov = buffer_view(out, True)
    if ov is None:
        return None
    return (coll, scalars) + xv + ov


def unowned(address: Any) -> Any:
    """A plain pointer (or int address) equal to ``address`` as a key, keeping no array alive."""
    return ffi.cast("char *", address) if isinstance(address, ffi.CData) else address
