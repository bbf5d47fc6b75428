"""User buffers -> (pointer, bytes, dtype): NumPy arrays, torch tensors, DLPack and buffer-protocol objects.

Validation happens here, before any library call: supported dtype, C-contiguous, writable when
the call writes into it.  On the emulator host memory *is* device memory.  On Ascend, NPU tensors
(torch_npu) are used in place after the caller's current NPU stream is synchronised; host
buffers are staged through device memory (aclrtMalloc + aclrtMemcpy) by :class:`Staging`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List, Sequence, Tuple, cast

import numpy as np

from .._ffi import ffi
from ..enums import DataType, MemcpyKind, dtype_from_numpy, dtype_from_torch, numpy_dtype, torch_dtype_names
from ..types import BufferLike, CData, SupportsDLPack

__all__ = ["Buffer", "as_buffer", "new_like", "is_torch", "Staging", "overlaps"]


@dataclass
class Buffer:
    """A validated user buffer: ``ptr`` (``char *``), element ``count``, ``dtype``, ``shape``, device kind."""

    obj: BufferLike
    ptr: CData
    count: int
    dtype: DataType
    shape: Tuple[int, ...]
    device: str = "host"            # "host" or "npu"
    keep: List[Any] = field(default_factory=list)

    @property
    def nbytes(self) -> int:
        """Size in bytes."""
        return self.count * self.dtype.itemsize

    @property
    def addr(self) -> int:
        """Start address as an int."""
        return int(ffi.cast("uintptr_t", self.ptr))


def is_torch(x: Any) -> bool:
    """True for a torch.Tensor (checked without importing torch)."""
    return type(x).__module__.startswith("torch") and hasattr(x, "data_ptr") and hasattr(x, "is_contiguous")


def _np_dtype(arr: np.ndarray, name: str) -> DataType:
    dt = dtype_from_numpy(arr.dtype)
    if dt is None and arr.dtype.name == "bfloat16":  # ml_dtypes / jax style bf16
        return DataType.BFP16
    if dt is None:
        raise TypeError(f"{name} has dtype {arr.dtype}, which HCCL cannot carry; expected one of int8, int16, "
                        "int32, int64, uint8, uint16, uint32, uint64, float16, float32, float64 or bfloat16")
    return dt


def _from_numpy(arr: np.ndarray, obj: Any, name: str, writable: bool) -> Buffer:
    dt = _np_dtype(arr, name)
    if not arr.flags.c_contiguous:
        raise ValueError(f"{name} is not C-contiguous (strides {arr.strides} for shape {arr.shape}); "
                         "pass np.ascontiguousarray(x) or a contiguous view")
    if writable and not arr.flags.writeable:
        raise ValueError(f"{name} is read-only but this call writes its result into it; pass a writable "
                         "array (or out=...)")
    ptr = ffi.cast("char *", ffi.from_buffer(arr)) if arr.size else ffi.NULL  # 4x cheaper than arr.ctypes
    return Buffer(obj, ptr, int(arr.size), dt, tuple(arr.shape), "host", [arr])


def _from_torch(t: Any, name: str, writable: bool) -> Buffer:
    dt = dtype_from_torch(t.dtype)
    if dt is None:
        raise TypeError(f"{name} has dtype {t.dtype}, which HCCL cannot carry; expected one of {torch_dtype_names()}")
    if not t.is_contiguous():
        raise ValueError(f"{name} is not contiguous (stride {tuple(t.stride())} for shape {tuple(t.shape)}); "
                         "pass x.contiguous()")
    kind = t.device.type
    if kind not in ("cpu", "npu"):
        raise ValueError(f"{name} lives on device {t.device}; expected a CPU tensor (emulator) or an NPU tensor")
    if kind == "npu":  # pragma: no cover - needs Ascend hardware
        import torch
        import torch_npu  # noqa: F401  (registers torch.npu)
        # the user's queued kernels finish before our stream reads
        torch.npu.current_stream().synchronize()  # type: ignore[attr-defined]
    ptr = ffi.cast("char *", t.data_ptr()) if t.numel() else ffi.NULL
    return Buffer(t, ptr, int(t.numel()), dt, tuple(t.shape), "npu" if kind == "npu" else "host", [t])


def as_buffer(x: BufferLike, name: str, writable: bool = False) -> Buffer:
    """Validate ``x`` and view it as a :class:`Buffer` (raises TypeError/ValueError naming ``name``)."""
    if isinstance(x, np.ndarray):
        return _from_numpy(x, x, name, writable)
    if is_torch(x):
        return _from_torch(x, name, writable)
    if hasattr(x, "__dlpack__"):
        try:
            arr = np.from_dlpack(cast(SupportsDLPack, x))   # hasattr does not narrow the union
        except Exception as exc:
            raise TypeError(f"{name}: DLPack export failed ({exc}); pass a NumPy array or a torch tensor") from None
        return _from_numpy(arr, x, name, writable)
    try:
        view = memoryview(x)
    except TypeError:
        raise TypeError(f"{name} is a {type(x).__name__}; expected a NumPy array, a torch tensor, or an object "
                        "with DLPack or the buffer protocol") from None
    arr = np.asarray(view)
    if not view.readonly and not arr.flags.writeable:
        arr.flags.writeable = True
    return _from_numpy(arr, x, name, writable)


def new_like(x: Any, shape: Sequence[int], dtype: DataType) -> Any:
    """A new uninitialised buffer of ``shape`` of the same library (NumPy or torch) as ``x`` (else NumPy)."""
    if is_torch(x):
        import torch
        return torch.empty(tuple(shape), dtype=x.dtype, device=x.device)
    if isinstance(x, np.ndarray):
        return np.empty(tuple(shape), dtype=x.dtype)
    return np.empty(tuple(shape), dtype=numpy_dtype(dtype))


def overlaps(a: Buffer, b: Buffer) -> bool:
    """True when the two buffers share bytes."""
    if a.count == 0 or b.count == 0:
        return False
    return a.addr < b.addr + b.nbytes and b.addr < a.addr + a.nbytes


class Staging:
    """Host <-> device staging for the CANN backend (host buffers are not reachable by the engines).

    ``device_ptr(buf, copy_in)`` returns a pointer the engines can use; ``finish()`` copies the
    written buffers back and frees the device memory.  On the emulator (or for NPU tensors) the
    user's pointer is returned unchanged.
    """

    def __init__(self, binding: Any, needed: bool) -> None:
        self.b = binding
        self.needed = needed
        self._back: List[Tuple[CData, CData, int]] = []
        self._free: List[CData] = []

    def device_ptr(self, buf: Buffer, copy_in: bool = True, copy_out: bool = False) -> CData:
        """Pointer to use in tasks for ``buf``."""
        if not self.needed or buf.device == "npu" or buf.nbytes == 0:
            return buf.ptr
        dev = self.b.malloc(buf.nbytes)  # pragma: no cover - CANN backend only
        self._free.append(dev)
        if copy_in:
            self.b.memcpy(dev, buf.nbytes, buf.ptr, buf.nbytes, MemcpyKind.HOST_TO_DEVICE)
        if copy_out:
            self._back.append((buf.ptr, dev, buf.nbytes))
        return dev

    def in_place(self, buf: Buffer, dev: CData) -> CData:
        """``dev`` (the staged copy of the send buffer) is also the result: copy it back into ``buf`` at finish()."""
        if self.needed and buf.device != "npu" and buf.nbytes:
            self._back.append((buf.ptr, dev, buf.nbytes))    # pragma: no cover - CANN backend only
        return dev

    def finish(self) -> None:
        """Copy results back to host buffers and free the staging memory; cut short, a second call finishes it
        (a copy may run twice, nothing is freed twice)."""
        while self._back:  # pragma: no cover - CANN backend only
            host, dev, n = self._back[0]
            self.b.memcpy(host, n, dev, n, MemcpyKind.DEVICE_TO_HOST)
            del self._back[0]
        while self._free:  # pragma: no cover - CANN backend only
            self.b.free(self._free.pop())


class _NoStaging(Staging):
    """The emulator (and NPU tensors) need no staging: pointers pass through, nothing to finish."""

    def __init__(self) -> None:
        super().__init__(None, False)

    def device_ptr(self, buf: Buffer, copy_in: bool = True, copy_out: bool = False) -> CData:
        return buf.ptr

    def finish(self) -> None:
        return None


NO_STAGING = _NoStaging()

