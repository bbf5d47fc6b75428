"""User buffers -> (pointer, bytes, dtype): NumPy arrays, torch tensors, DLPack and buffer-protocol objects.

Validation happens here, before any library call: supported dtype, C-contiguous, writable when
the call writes into it -- by :func:`as_buffer`, and for a repeated blocking call by :func:`key_of`, which
reads a buffer in a way that makes the same checks (side by side below).  On the emulator host memory *is* device memory.  On Ascend, NPU tensors
(torch_npu) are used in place after the caller's current NPU stream is synchronised; host
buffers are staged through device memory (aclrtMalloc + aclrtMemcpy) by :class:`Staging`.
"""
from __future__ import annotations

import sys
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple, cast

import numpy as np

from .._ffi import ffi
from ..enums import ELEMENT_SIZE, DataType, MemcpyKind, dtype_from_numpy, dtype_from_torch, numpy_dtype, torch_dtype_names
from ..types import BufferLike, CData, SupportsDLPack

__all__ = ["Buffer", "as_buffer", "new_like", "is_torch", "Staging", "overlaps", "DeviceMemory", "DeviceBlock", "key_of",
           "buffer_view", "unowned", "Key", "X_AT", "OUT_AT", "own_bytes", "NO_STAGING"]


class Buffer:
    """A validated user buffer: ``ptr`` (``char *``), element ``count``, ``dtype``, ``shape``, device kind, ``nbytes``."""

    __slots__ = ("obj", "ptr", "count", "dtype", "shape", "device", "keep", "nbytes")

    def __init__(self, obj: BufferLike, ptr: CData, count: int, dtype: DataType, shape: Tuple[int, ...],
                 device: str = "host", keep: Optional[List[Any]] = None) -> None:
        self.obj = obj
        self.ptr = ptr
        self.count = count
        self.dtype = dtype
        self.shape = shape
        self.device = device                 # "host" or "npu"
        self.keep = keep if keep is not None else []   # what keeps the memory alive
        self.nbytes = count * ELEMENT_SIZE[dtype]       # size in bytes (read on every path: computed once)

    @property
    def addr(self) -> int:
        """Start address as an int."""
        return int(ffi.cast("uintptr_t", self.ptr))


# ------------------------------------------------------------------ the fast key, beside the checks it mirrors
# A repeated blocking call is looked up by its key: the collective, its *validated* op, algorithm and root,
# and each buffer's address, size and dtype, read in a way that makes the checks as_buffer makes of a buffer
# of that kind (a NumPy array through ``ffi.from_buffer``: C-contiguous, and writable when the call writes
# it; a CPU torch tensor through ``is_contiguous``).  An entry is stored only after the full path accepted a
# call of the same key, so a hit is a call the full path accepts; whatever the key cannot describe gets no
# key and takes the full path, which validates it and raises what it raises.
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


def is_torch(x: Any) -> bool:
    """True for a torch.Tensor (checked without importing torch)."""
    return type(x).__module__.startswith("torch") and hasattr(x, "data_ptr") and hasattr(x, "is_contiguous")


def _from_numpy(arr: np.ndarray, obj: Any, name: str, writable: bool) -> Buffer:
    dt = dtype_from_numpy(arr.dtype)
    if dt is None and arr.dtype.name == "bfloat16":  # ml_dtypes / jax style bf16
        dt = DataType.BFP16
    if dt is None:
        raise TypeError(f"{name} has dtype {arr.dtype}, which HCCL cannot carry; expected one of int8, int16, "
                        "int32, int64, uint8, uint16, uint32, uint64, float16, float32, float64 or bfloat16")
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


def own_bytes(arr: np.ndarray) -> Buffer:
    """A :class:`Buffer` of a C-contiguous, writable uint8 array this package made (a message header): nothing
    to validate."""
    return Buffer(arr, ffi.cast("char *", _from_buffer(arr)), arr.size, DataType.UINT8, arr.shape, "host", [arr])


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



#: host ranges a communicator keeps declared device memory; more start over (many short-lived arrays)
DEVICE_RANGES_MAX = 4096


class DeviceMemory:
    """The host buffers one communicator declared device memory, where the backend takes host memory so.

    The emulator rejects host memory as a local copy/reduce operand (sim/devmem.py); the Comm API hands
    NumPy buffers to it directly instead of copying them into aclrtMalloc memory, so it says so here, once
    per address range (a range already declared costs one dict lookup).  ``on_withdraw``: called before
    ranges are withdrawn (bound calls were validated on them).
    """

    __slots__ = ("lib", "needed", "ranges", "on_withdraw")

    def __init__(self, lib: Any, needed: bool, on_withdraw: Callable[[], None]) -> None:
        self.lib = lib
        self.needed = needed                              # False where the backend stages host buffers
        self.ranges: Dict[Tuple[Any, int], int] = {}      # (char *, bytes) -> address, declared
        self.on_withdraw = on_withdraw

    def declare(self, buf: Optional[Buffer]) -> None:
        """Declare ``buf`` device memory (nothing for None, an NPU tensor, an empty buffer or a staging backend)."""
        if buf is None or not self.needed or buf.device == "npu" or not buf.nbytes:
            return
        key = (buf.ptr, buf.nbytes)         # cffi pointers hash and compare by address
        if key in self.ranges:
            return
        if len(self.ranges) >= DEVICE_RANGES_MAX:
            self.withdraw()
        addr = int(ffi.cast("uintptr_t", buf.ptr))
        self.lib.declare_device_memory(addr, buf.nbytes)
        self.ranges[key] = addr

    def withdraw(self) -> None:
        """Withdraw every range declared."""
        if self.ranges:
            self.on_withdraw()
            for addr in self.ranges.values():
                self.lib.withdraw_device_memory(addr)
            self.ranges.clear()


class DeviceBlock:
    """One device allocation of a communicator that is replaced when it no longer fits (the engine's scratch, the
    handshake's signature table), and the replaced ones, kept while a started operation may still read them."""

    __slots__ = ("binding", "ptr", "size", "inflight", "replaced")

    def __init__(self, binding: Any, inflight: Set[Any]) -> None:
        self.binding = binding
        self.ptr: Any = None                 # the live allocation (None: none yet)
        self.size = 0
        self.inflight = inflight             # the communicator's started operations not yet seen complete
        self.replaced: List[Any] = []        # replaced allocations not yet freed

    def replace(self, size: int) -> Any:
        """A new allocation of ``size`` bytes in place of the live one (kept until :meth:`free_old` may free it)."""
        if self.ptr is not None:
            self.replaced.append(self.ptr)
            self.ptr = None
        self.ptr, self.size = self.binding.malloc(size), size
        return self.ptr

    def free_old(self) -> None:
        """Free the replaced allocations once no started operation can still read them."""
        if self.replaced and not self.inflight:
            for ptr in self.replaced:
                self.binding.free(ptr)
            self.replaced.clear()

    def release(self) -> None:
        """Free everything (the communicator is destroyed)."""
        for ptr in self.replaced + ([self.ptr] if self.ptr is not None else []):
            self.binding.free(ptr)
        self.replaced.clear()
        self.ptr, self.size = None, 0
