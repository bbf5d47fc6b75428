"""HCCL zero copy and symmetric windows over the emulator's virtual memory (sim/vmm.py).

Zero copy (hicann/hcomm@8958adbf src/legacy/ascend910/framework/op_base/src/op_base.cc:5527-5620): the memory
range is the communicator's (SetMemoryRange / UnsetMemoryRange); inside it, mapped ranges are activated for
collectives (ActivateCommMemory / DeactivateCommMemory).  Only Atlas A3 supports it: an A2 communicator answers
HCCL_E_NOT_SUPPORT (framework/communicator/impl/hccl_communicator_host.cc:8921-8926, deviceType_ !=
DEV_TYPE_910_93), which is what the emulator answers unless HCOMM_SIM_PLATFORM=a3.  Activate/Deactivate/Unset
without a range set is HCCL_E_PARA (same file :8934-8960); an activation overlapping an active one, or a
deactivation of an address that is not an activation's start, is HCCL_E_PARA
(framework/communicator/impl/zero_copy/zero_copy_address_mgr.cc:190-240); a NULL argument is HCCL_E_PTR (CHK_PTR_NULL).
On the emulator a collective reads and writes the user's buffers in place whatever is activated: the calls
check and record, which is the contract a program sees.

Symmetric windows (op_base.cc:5839-5900; A3 only, hccl_communicator_host.cc:9842-9850; mapped physical memory within
the per-rank stride hcclSymWinMaxMemSizePerRank GiB, symmetric_memory/symmetric_memory.cc:646-676): flag 1 (HCCL_COMM_SYM_WINDOW_FLAG_COLL_SYMMETRIC) registers
[addr, addr+size) with the communicator and returns a handle, flag 0 is "not supported yet" (HCCL_E_PARA), size 0
is HCCL_E_PARA; deregistering a handle that is not registered is HCCL_E_PARA.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple

from .. import settings
from ..constants import HCCL_DEFAULT_SYMMETRIC_MEMORY_STRIDE
from .._ffi import ffi
from .errors import HcclResult, SimError, entry
from .part import Part
from .state import SimState, key_of
from .vmm import VirtualMemory

__all__ = ["ZeroCopyCalls", "SYM_WINDOW_FLAG_COLL_SYMMETRIC", "CommConfigFields", "remember_config"]

SYM_WINDOW_FLAG_COLL_SYMMETRIC = 1
_A3_ONLY = ("a3",)
_GIB = 1 << 30


@dataclass(frozen=True)
class CommConfigFields:
    """The HcclCommConfig fields CANN keeps for these calls and for reporting (comm_config.cc:185-198 of
    src/legacy/ascend910/framework/communicator): the expansion mode, the world rank and job ids (NSLB-DP
    telemetry; the emulator has one execution path, so none of the three changes what it does) and the symmetric
    window stride in GiB (hcclSymWinMaxMemSizePerRank; hccl_communicator_host.cc:9816-9830 sizes the windows'
    address space with it)."""

    op_expansion_mode: int = 0
    world_rank_id: int = 0
    job_id: int = 0
    sym_win_stride_gib: int = HCCL_DEFAULT_SYMMETRIC_MEMORY_STRIDE


_CONFIGS: Dict[int, CommConfigFields] = {}


def remember_config(handle: int, config: Any) -> None:
    """Keep communicator ``handle``'s config fields (its HcclCommConfig, or None/NULL for the defaults)."""
    if config is None or config == ffi.NULL:
        _CONFIGS[handle] = CommConfigFields()
        return
    c = ffi.cast("HcclCommConfig *", config)
    size = int(ffi.cast("uint64_t *", config)[0])       # the config's own size: older versions are shorter
    stride = HCCL_DEFAULT_SYMMETRIC_MEMORY_STRIDE
    if size >= ffi.offsetof("HcclCommConfig", "hcclSymWinMaxMemSizePerRank") + 8 and c.hcclSymWinMaxMemSizePerRank:
        stride = int(c.hcclSymWinMaxMemSizePerRank)
    _CONFIGS[handle] = CommConfigFields(int(c.hcclOpExpansionMode), int(c.hcclWorldRankID), int(c.hcclJobID), stride)


def comm_config(handle: int) -> CommConfigFields:
    """The fields :func:`remember_config` kept for ``handle`` (defaults for a communicator made otherwise)."""
    return _CONFIGS.get(handle) or CommConfigFields()


def _require_a3(what: str) -> None:
    platform = str(settings.value("HCOMM_SIM_PLATFORM"))
    if platform not in _A3_ONLY:
        raise SimError(HcclResult.E_NOT_SUPPORT, f"{what} needs an Atlas A3 device; the emulated platform is "
                                                 f"{platform} (HCOMM_SIM_PLATFORM=a3 emulates A3)")


@dataclass
class _CommMemory:
    ranges: Dict[int, int] = field(default_factory=dict)             # base -> size (SetMemoryRange)
    active: Dict[int, Tuple[int, int]] = field(default_factory=dict)  # start -> (size, physical handle)


@dataclass(frozen=True)
class _Window:
    comm: int
    addr: int
    size: int


def _ptr(value: Any, name: str) -> int:
    if value == ffi.NULL or value is None:
        raise SimError(HcclResult.E_PTR, f"{name} is NULL")
    return key_of(value)


class ZeroCopyCalls(Part):
    """HcclCommSetMemoryRange ... HcclCommDeactivateCommMemory, HcclCommSymWinRegister/Deregister/Get (hccl/hccl_comm.h)."""

    HEADERS = ("hccl/hccl_comm.h",)

    def __init__(self, state: SimState, vmm: VirtualMemory) -> None:
        super().__init__(state)
        self.vmm = vmm                      # the ACL part that maps physical memory (aclrtMapMem)
    _zc_lock = threading.Lock()
    _comm_memory: Dict[int, _CommMemory] = {}
    _windows: Dict[int, _Window] = {}

    def _zero_copy(self, comm: Any) -> Tuple[int, _CommMemory]:
        key = _ptr(comm, "comm")
        self.state.comm(comm)                        # an unknown or destroyed communicator: its error
        return key, self._comm_memory.setdefault(key, _CommMemory())

    @entry
    def HcclCommSetMemoryRange(self, comm: Any, baseVirPtr: Any, size: int, alignment: int, flags: int) -> int:
        key, mem = self._zero_copy(comm)
        base = _ptr(baseVirPtr, "baseVirPtr")
        _require_a3("zero copy")
        if size == 0:
            raise SimError(HcclResult.E_PARA, "size=0; expected the length of the reserved range")
        with self._zc_lock:
            for b, n in mem.ranges.items():
                if b < base + size and base < b + n:
                    raise SimError(HcclResult.E_PARA, f"[0x{base:x}, +{size}) overlaps the range [0x{b:x}, +{n}) "
                                                      "already set on this communicator")
            mem.ranges[base] = size
        return 0

    @entry
    def HcclCommUnsetMemoryRange(self, comm: Any, baseVirPtr: Any) -> int:
        key, mem = self._zero_copy(comm)
        base = _ptr(baseVirPtr, "baseVirPtr")
        with self._zc_lock:
            if base not in mem.ranges:
                raise SimError(HcclResult.E_PARA, f"baseVirPtr=0x{base:x} is not a range set by HcclCommSetMemoryRange")
            size = mem.ranges[base]
            inside = [s for s in mem.active if base <= s < base + size]
            if inside:
                raise SimError(HcclResult.E_PARA, f"the range at 0x{base:x} still has activated memory at "
                                                  f"{', '.join(hex(s) for s in sorted(inside))}; "
                                                  "HcclCommDeactivateCommMemory it first")
            del mem.ranges[base]
        return 0

    @entry
    def HcclCommActivateCommMemory(self, comm: Any, virPtr: Any, size: int, offset: int, handle: Any,
                                   flags: int) -> int:
        key, mem = self._zero_copy(comm)
        start = _ptr(virPtr, "virPtr")
        phys = _ptr(handle, "handle")
        if size == 0:
            raise SimError(HcclResult.E_PARA, "size=0")
        with self._zc_lock:
            if not mem.ranges:
                raise SimError(HcclResult.E_PARA, "HcclCommSetMemoryRange was not called on this communicator")
            if not any(b <= start and start + size <= b + n for b, n in mem.ranges.items()):
                raise SimError(HcclResult.E_PARA, f"[0x{start:x}, +{size}) is not inside a range set by "
                                                  "HcclCommSetMemoryRange")
            mapping = self.vmm.vmm_mapping(start)
            if mapping is None or mapping[2] != phys or start + size > mapping[0] + mapping[1]:
                raise SimError(HcclResult.E_PARA, f"[0x{start:x}, +{size}) is not mapped to handle 0x{phys:x} "
                                                  "(aclrtMapMem it first)")
            for s, (n, _h) in mem.active.items():
                if s < start + size and start < s + n:
                    raise SimError(HcclResult.E_PARA, f"[0x{start:x}, +{size}) overlaps the activated memory "
                                                      f"[0x{s:x}, +{n})")
            mem.active[start] = (size, phys)
        return 0

    @entry
    def HcclCommDeactivateCommMemory(self, comm: Any, virPtr: Any) -> int:
        key, mem = self._zero_copy(comm)
        start = _ptr(virPtr, "virPtr")
        with self._zc_lock:
            if not mem.ranges:
                raise SimError(HcclResult.E_PARA, "HcclCommSetMemoryRange was not called on this communicator")
            if mem.active.pop(start, None) is None:
                raise SimError(HcclResult.E_PARA, f"virPtr=0x{start:x} is not the start of memory activated by "
                                                  "HcclCommActivateCommMemory")
        return 0

    # ------------------------------------------------------------------ symmetric windows
    @entry
    def HcclCommSymWinRegister(self, comm: Any, addr: Any, size: int, winHandle: Any, flag: int) -> int:
        key = _ptr(comm, "comm")
        self.state.comm(comm)
        start = _ptr(addr, "addr")
        _ptr(winHandle, "winHandle")
        if size == 0:
            raise SimError(HcclResult.E_PARA, "size=0; expected the window's length")
        if flag != SYM_WINDOW_FLAG_COLL_SYMMETRIC:
            raise SimError(HcclResult.E_PARA, f"flag={flag}; only HCCL_COMM_SYM_WINDOW_FLAG_COLL_SYMMETRIC (1) is "
                                              "supported")
        _require_a3("symmetric memory")
        if self.vmm.vmm_mapping(start) is None:
            raise SimError(HcclResult.E_PARA, f"addr=0x{start:x} is not memory mapped by aclrtMapMem (a window "
                                              "is made of physical allocations)")
        stride = comm_config(key).sym_win_stride_gib * _GIB
        with self._zc_lock:
            used = sum(w.size for w in self._windows.values() if w.comm == key)
            if used + size > stride:
                raise SimError(HcclResult.E_MEMORY, f"windows of {used} + {size} bytes exceed the "
                                                    f"{stride >> 30} GiB per rank of hcclSymWinMaxMemSizePerRank")
            handle = self.state.new_ptr_key()
            self._windows[handle] = _Window(key, start, int(size))
        winHandle[0] = ffi.cast("HcclCommSymWindow", handle)
        return 0

    @entry
    def HcclCommSymWinDeregister(self, winHandle: Any) -> int:
        handle = _ptr(winHandle, "winHandle")
        with self._zc_lock:
            if self._windows.pop(handle, None) is None:
                raise SimError(HcclResult.E_PARA, f"window handle 0x{handle:x} is not registered")
        return 0

    @entry
    def HcclCommSymWinGet(self, comm: Any, ptr: Any, size: int, winHandle: Any, offset: Any) -> int:
        key = _ptr(comm, "comm")
        start = _ptr(ptr, "ptr")
        _ptr(winHandle, "winHandle")
        _ptr(offset, "offset")
        with self._zc_lock:
            found: Optional[Tuple[int, _Window]] = next(
                ((h, w) for h, w in self._windows.items()
                 if w.comm == key and w.addr <= start and start + size <= w.addr + w.size), None)
        if found is None:
            raise SimError(HcclResult.E_PARA, f"[0x{start:x}, +{size}) is in no window registered on this communicator")
        winHandle[0] = ffi.cast("HcclCommSymWindow", found[0])
        offset[0] = start - found[1].addr
        return 0
