"""The ACL virtual-memory API over the emulator's device memory: reserved ranges, physical handles, mappings.

A reservation is an inaccessible anonymous mapping (``PROT_NONE``) of the process; a physical handle is
a memfd of its size; ``aclrtMapMem`` maps the memfd into the reservation (``MAP_FIXED | MAP_SHARED``),
``aclrtUnmapMem`` puts the inaccessible mapping back.  So a mapped range is ordinary memory of the rank's
process (device memory here, ``sim/devmem.py``), two mappings of one handle see the same bytes, and an
access to an unmapped part of a reservation faults as on the device.

Checks, as hicann/runtime@681ef7610df1 makes them: src/acl/aclrt_impl/memory.cpp:1044-1058 (reserve: virPtr
not NULL, size > 0, flags 0 or 1 -> ACL_ERROR_INVALID_PARAM), :1073-1145 (malloc physical: handle and prop
not NULL, size > 0, flags 0, handleType NONE, allocationType PINNED, a device location with a DDR attribute,
unregistered/managed locations -> ACL_ERROR_INVALID_PARAM), :1148-1185 (free/map/unmap: pointers and handle not
NULL, size > 0, flags 0), :1299 on (granularity: prop and out not NULL).  What the driver refuses below them
(an unknown handle, a size or offset not a multiple of the granularity, a range outside the reservation or
already mapped, releasing a reservation that is still mapped) is RT_ERROR_INVALID_VALUE there
(src/runtime/api/impl/api_error.cc:6326-6372), ACL_ERROR_RT_PARAM_INVALID to the caller.
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple

import cffi

from .._ffi import ffi
from .errors import ACL_ERROR_INVALID_PARAM, ACL_ERROR_RT_MEMORY_ALLOCATION, ACL_ERROR_RT_PARAM_INVALID, SimError, entry
from .part import Part
from .state import key_of

__all__ = ["VirtualMemory", "GRANULARITY", "HUGE1G_GRANULARITY", "HOST_MEMORY_BYTES"]

_libc_ffi = cffi.FFI()
_libc_ffi.cdef("void *mmap(void *addr, size_t length, int prot, int flags, int fd, long offset);"
               "int munmap(void *addr, size_t length);")
_libc = _libc_ffi.dlopen(None)
_PROT_NONE, _PROT_RW = 0, 3
_MAP_SHARED, _MAP_PRIVATE, _MAP_FIXED, _MAP_ANONYMOUS, _MAP_NORESERVE = 0x01, 0x02, 0x10, 0x20, 0x4000
_MAP_FAILED = 2**64 - 1

#: the physical granularity: 2 MiB huge pages (hccl_test's default physicalGranularity, "zero_copy默认对齐2M",
#: hicann/oam-tools src/hccl_test/common/src/hccl_test_common.h), 1 GiB for the HUGE1G attributes
GRANULARITY = 2 << 20
HUGE1G_GRANULARITY = 1 << 30
_HUGE1G = (10, 11, 14, 17)          # ACL_HBM_MEM_HUGE1G, ACL_HBM_MEM_P2P_HUGE1G, ACL_MEM_HUGE1G, ACL_MEM_P2P_HUGE1G
_DDR = (2, 3, 6, 7)                 # ACL_DDR_MEM_HUGE, _NORMAL, _P2P_HUGE, _P2P_NORMAL
_LOCATION_DEVICE, _LOCATION_UNREGISTERED, _LOCATION_MANAGED = 1, 2, 3
#: what aclrtGetMemInfo reports as a device's total memory: an A2 card's 64 GiB of HBM
HOST_MEMORY_BYTES = 64 << 30


@dataclass
class _Physical:
    fd: int
    size: int
    granularity: int
    mapped: Dict[int, int] = field(default_factory=dict)    # virtual start -> size


@dataclass
class _Reservation:
    start: int
    size: int
    mapped: Dict[int, Tuple[int, int]] = field(default_factory=dict)   # start -> (size, handle)


def _mmap(addr: int, size: int, prot: int, flags: int, fd: int = -1, offset: int = 0) -> int:
    got = _libc.mmap(_libc_ffi.cast("void *", addr), size, prot, flags, fd, offset)
    value = int(_libc_ffi.cast("uintptr_t", got))
    if value == _MAP_FAILED:
        raise SimError(ACL_ERROR_RT_MEMORY_ALLOCATION, f"mmap of {size} bytes failed: {os.strerror(_libc_ffi.errno)}")
    return value


class VirtualMemory(Part):
    """aclrtReserveMemAddress ... aclrtMemGetAllocationGranularity and aclrtGetMemInfo (acl/acl_rt.h)."""

    HEADERS = ("acl/acl_rt.h",)
    _vmm_lock = threading.Lock()
    _reservations: Dict[int, _Reservation] = {}     # process-wide, as the device's address space is
    _physical: Dict[int, _Physical] = {}

    # ------------------------------------------------------------------ granularity and memory info
    @staticmethod
    def _granularity_of(prop: Any, function: str) -> int:
        if prop == ffi.NULL:
            raise SimError(ACL_ERROR_INVALID_PARAM, "prop is NULL; expected an aclrtPhysicalMemProp")
        if prop.location.type == _LOCATION_DEVICE and prop.memAttr in _DDR:
            raise SimError(ACL_ERROR_INVALID_PARAM, f"prop->memAttr={prop.memAttr} (a DDR attribute) with a device "
                                                    "location; DDR memory is allocated on the host (location 0 or 4)")
        return HUGE1G_GRANULARITY if prop.memAttr in _HUGE1G else GRANULARITY

    @entry
    def aclrtMemGetAllocationGranularity(self, prop: Any, option: int, granularity: Any) -> int:
        if granularity == ffi.NULL:
            raise SimError(ACL_ERROR_INVALID_PARAM, "granularity is NULL")
        if option not in (0, 1):
            raise SimError(ACL_ERROR_INVALID_PARAM, f"option={option}; expected ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM "
                                                    "(0) or ACL_RT_MEM_ALLOC_GRANULARITY_RECOMMENDED (1)")
        granularity[0] = self._granularity_of(prop, "aclrtMemGetAllocationGranularity")
        return 0

    @entry
    def aclrtGetMemInfo(self, attr: int, free: Any, total: Any) -> int:
        """memory.cpp:963-976: free and total not NULL; the emulator's device is the process's memory."""
        if free == ffi.NULL or total == ffi.NULL:
            raise SimError(ACL_ERROR_INVALID_PARAM, "free or total is NULL")
        if not 0 <= attr <= 17:
            raise SimError(ACL_ERROR_INVALID_PARAM, f"attr={attr} is not an aclrtMemAttr (0..17)")
        available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        total[0] = HOST_MEMORY_BYTES
        free[0] = min(available, HOST_MEMORY_BYTES)
        return 0

    # ------------------------------------------------------------------ reservations
    @entry
    def aclrtReserveMemAddress(self, virPtr: Any, size: int, alignment: int, expectPtr: Any, flags: int) -> int:
        if virPtr == ffi.NULL:
            raise SimError(ACL_ERROR_INVALID_PARAM, "virPtr is NULL")
        if size <= 0:
            raise SimError(ACL_ERROR_INVALID_PARAM, f"size={size}; expected > 0")
        if flags not in (0, 1):
            raise SimError(ACL_ERROR_INVALID_PARAM, f"flags={flags}; expected 0 (1 is kept for compatibility)")
        if expectPtr != ffi.NULL:
            raise SimError(ACL_ERROR_RT_PARAM_INVALID, "expectPtr must be NULL (acl_rt.h: a fixed address is "
                                                       "not supported)")
        if alignment and alignment & (alignment - 1):
            raise SimError(ACL_ERROR_RT_PARAM_INVALID, f"alignment={alignment}; expected 0 or a power of two")
        if size % GRANULARITY:
            raise SimError(ACL_ERROR_RT_PARAM_INVALID, f"size={size} is not a multiple of the granularity "
                                                       f"{GRANULARITY} (aclrtMemGetAllocationGranularity)")
        align = max(alignment, GRANULARITY)
        base = _mmap(0, size + align, _PROT_NONE, _MAP_PRIVATE | _MAP_ANONYMOUS | _MAP_NORESERVE)
        start = (base + align - 1) // align * align
        if start > base:
            _libc.munmap(_libc_ffi.cast("void *", base), start - base)
        tail = base + size + align - (start + size)
        if tail:
            _libc.munmap(_libc_ffi.cast("void *", start + size), tail)
        with self._vmm_lock:
            self._reservations[start] = _Reservation(start, size)
        virPtr[0] = ffi.cast("void *", start)
        return 0

    @entry
    def aclrtReleaseMemAddress(self, virPtr: Any) -> int:
        if virPtr == ffi.NULL:
            raise SimError(ACL_ERROR_INVALID_PARAM, "virPtr is NULL")
        start = key_of(virPtr)
        with self._vmm_lock:
            r = self._reservations.get(start)
            if r is None:
                raise SimError(ACL_ERROR_RT_PARAM_INVALID, f"virPtr=0x{start:x} is not the start of a range "
                                                           "reserved by aclrtReserveMemAddress")
            if r.mapped:
                ranges = ", ".join(f"0x{s:x}+{n}" for s, (n, _h) in sorted(r.mapped.items()))
                raise SimError(ACL_ERROR_RT_PARAM_INVALID, f"the range at 0x{start:x} still has mappings ({ranges}); "
                                                           "aclrtUnmapMem them first")
            del self._reservations[start]
        _libc.munmap(_libc_ffi.cast("void *", start), r.size)
        return 0

    # ------------------------------------------------------------------ physical memory
    @entry
    def aclrtMallocPhysical(self, handle: Any, size: int, prop: Any, flags: int) -> int:
        if handle == ffi.NULL:
            raise SimError(ACL_ERROR_INVALID_PARAM, "handle is NULL")
        if size <= 0:
            raise SimError(ACL_ERROR_INVALID_PARAM, f"size={size}; expected > 0")
        if flags != 0:
            raise SimError(ACL_ERROR_INVALID_PARAM, f"flags={flags}; expected 0 (reserved)")
        granularity = self._granularity_of(prop, "aclrtMallocPhysical")
        if prop.handleType != 0:
            raise SimError(ACL_ERROR_INVALID_PARAM, f"prop->handleType={prop.handleType}; expected "
                                                    "ACL_MEM_HANDLE_TYPE_NONE (0)")
        if prop.allocationType != 0:
            raise SimError(ACL_ERROR_INVALID_PARAM, f"prop->allocationType={prop.allocationType}; expected "
                                                    "ACL_MEM_ALLOCATION_TYPE_PINNED (0)")
        if prop.location.type in (_LOCATION_UNREGISTERED, _LOCATION_MANAGED):
            raise SimError(ACL_ERROR_INVALID_PARAM, f"prop->location.type={prop.location.type}; unregistered and "
                                                    "managed locations are not supported")
        if size % granularity:
            raise SimError(ACL_ERROR_RT_PARAM_INVALID, f"size={size} is not a multiple of the granularity "
                                                       f"{granularity} (aclrtMemGetAllocationGranularity)")
        fd = os.memfd_create("hcomm-sim-physical", os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, size)
        except OSError as exc:
            os.close(fd)
            raise SimError(ACL_ERROR_RT_MEMORY_ALLOCATION, f"cannot allocate {size} bytes: {exc}") from None
        key = self.state.new_ptr_key()
        with self._vmm_lock:
            self._physical[key] = _Physical(fd, size, granularity)
        handle[0] = ffi.cast("aclrtDrvMemHandle", key)
        return 0

    def _handle(self, handle: Any) -> Tuple[int, _Physical]:
        key = key_of(handle)
        phys = self._physical.get(key)
        if phys is None:
            raise SimError(ACL_ERROR_RT_PARAM_INVALID, f"handle 0x{key:x} is not a physical allocation of this "
                                                       "process (aclrtMallocPhysical), or was freed")
        return key, phys

    @entry
    def aclrtFreePhysical(self, handle: Any) -> int:
        if handle == ffi.NULL:
            raise SimError(ACL_ERROR_INVALID_PARAM, "handle is NULL")
        with self._vmm_lock:
            key, phys = self._handle(handle)
            if phys.mapped:
                ranges = ", ".join(f"0x{s:x}" for s in sorted(phys.mapped))
                raise SimError(ACL_ERROR_RT_PARAM_INVALID, f"handle 0x{key:x} is still mapped at {ranges}; "
                                                           "aclrtUnmapMem first")
            del self._physical[key]
        os.close(phys.fd)
        return 0

    # ------------------------------------------------------------------ mappings
    def _reservation_of(self, start: int, size: int) -> _Reservation:
        for r in self._reservations.values():
            if r.start <= start < r.start + r.size:
                if start + size > r.start + r.size:
                    raise SimError(ACL_ERROR_RT_PARAM_INVALID, f"[0x{start:x}, +{size}) runs past the end of its "
                                                               f"reservation [0x{r.start:x}, +{r.size})")
                return r
        raise SimError(ACL_ERROR_RT_PARAM_INVALID, f"virPtr=0x{start:x} is not inside a range reserved by "
                                                   "aclrtReserveMemAddress")

    @entry
    def aclrtMapMem(self, virPtr: Any, size: int, offset: int, handle: Any, flags: int) -> int:
        if virPtr == ffi.NULL or handle == ffi.NULL:
            raise SimError(ACL_ERROR_INVALID_PARAM, "virPtr or handle is NULL")
        if size <= 0:
            raise SimError(ACL_ERROR_INVALID_PARAM, f"size={size}; expected > 0")
        if flags != 0:
            raise SimError(ACL_ERROR_INVALID_PARAM, f"flags={flags}; expected 0")
        start = key_of(virPtr)
        with self._vmm_lock:
            key, phys = self._handle(handle)
            g = phys.granularity
            if size % g or offset % g or start % g:
                raise SimError(ACL_ERROR_RT_PARAM_INVALID, f"virPtr=0x{start:x}, size={size}, offset={offset}: each "
                                                           f"must be a multiple of the granularity {g}")
            if offset + size > phys.size:
                raise SimError(ACL_ERROR_RT_PARAM_INVALID, f"offset={offset} + size={size} exceeds the {phys.size} "
                                                           f"bytes of handle 0x{key:x}")
            r = self._reservation_of(start, size)
            for s, (n, _h) in r.mapped.items():
                if s < start + size and start < s + n:
                    raise SimError(ACL_ERROR_RT_PARAM_INVALID, f"[0x{start:x}, +{size}) overlaps the mapping "
                                                               f"[0x{s:x}, +{n}) already there; aclrtUnmapMem it first")
            _mmap(start, size, _PROT_RW, _MAP_SHARED | _MAP_FIXED, phys.fd, offset)
            r.mapped[start] = (size, key)
            phys.mapped[start] = size
        self.state.device.add(start, size, "its aclrtMapMem mapping")
        return 0

    @entry
    def aclrtUnmapMem(self, virPtr: Any) -> int:
        if virPtr == ffi.NULL:
            raise SimError(ACL_ERROR_INVALID_PARAM, "virPtr is NULL")
        start = key_of(virPtr)
        with self._vmm_lock:
            owner: Optional[_Reservation] = next((r for r in self._reservations.values() if start in r.mapped), None)
            if owner is None:
                raise SimError(ACL_ERROR_RT_PARAM_INVALID, f"virPtr=0x{start:x} is not the start of a mapping made "
                                                           "by aclrtMapMem")
            size, key = owner.mapped.pop(start)
            self._physical[key].mapped.pop(start, None)
            _mmap(start, size, _PROT_NONE, _MAP_PRIVATE | _MAP_ANONYMOUS | _MAP_NORESERVE | _MAP_FIXED)
        self.state.device.remove(start)
        return 0

    def vmm_mapping(self, addr: int) -> Optional[Tuple[int, int, int]]:
        """(start, size, handle) of the aclrtMapMem mapping holding ``addr``, or None (the zero-copy checks use it)."""
        with self._vmm_lock:
            for r in self._reservations.values():
                for s, (n, h) in r.mapped.items():
                    if s <= addr < s + n:
                        return s, n, h
        return None
