"""Memory of the Comm API: a validated user buffer (:class:`Buffer`, made by ``op.as_buffer``), host <-> device
staging (:class:`Staging`, CANN), host ranges declared device memory (:class:`DeviceMemory`, the emulator) and
replaceable device allocations (:class:`DeviceBlock`).

On the emulator host memory *is* device memory.  On Ascend, NPU tensors (torch_npu) are used in place;
host buffers are staged through device memory (aclrtMalloc + aclrtMemcpy).
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Set, Tuple

import numpy as np

from .._ffi import ffi
from ..enums import ELEMENT_SIZE, DataType, MemcpyKind
from ..types import BufferLike, CData

__all__ = ["Buffer", "Staging", "DeviceMemory", "DeviceBlock", "own_bytes", "NO_STAGING"]


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


def own_bytes(arr: np.ndarray) -> Buffer:
    """A :class:`Buffer` of a C-contiguous, writable uint8 array this package made (a message header): nothing
    to validate."""
    return Buffer(arr, ffi.cast("char *", ffi.from_buffer(arr)), arr.size, DataType.UINT8, arr.shape, "host", [arr])


class Staging:
    """Host <-> device staging for the CANN backend: ``device_ptr`` gives a pointer the engines can use (the user's own
    for NPU tensors), ``finish()`` copies the written buffers back and frees the device memory."""

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


#: the emulator's (and NPU tensors'): pointers pass through, nothing is ever copied or freed
NO_STAGING = Staging(None, False)


#: host ranges a communicator keeps declared device memory; more start over (many short-lived arrays)
DEVICE_RANGES_MAX = 4096


class DeviceMemory:
    """The host buffers one communicator declared device memory, once per address range: the emulator rejects host
    memory as a local copy/reduce operand (sim/devmem.py) and the Comm API hands it NumPy buffers directly.
    ``on_withdraw``: called before ranges are withdrawn (bound calls were validated on them)."""

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
