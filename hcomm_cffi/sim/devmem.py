"""Which address ranges of this process stand for device memory (the operands a device task may touch).

On A2 a host-path local copy/reduce becomes an SDMA task on the thread's NPU stream with both
addresses taken as device memory (hcomm @ 8958adb src/base_comm/primitives/api_c_adpt/
cpu_primitives_c_adpt.cc:58-85 -> src/legacy/ascend910/platform/comm_primitive/hccl_primitive_local.cc:32-47
-> src/legacy/ascend910/platform/task/dispatcher.cc:451-465, kind DEVICE_TO_DEVICE); nothing there
looks the addresses up.  The runtime classifies each address as device, pinned host (aclrtMallocHost)
or "unregistered" pageable memory (runtime @ 681ef76 src/runtime/api/impl/api_error.cc:2805-2850,
table at 2694-2736); the SDMA engine cannot reach pageable memory, so such a task faults on the
hardware (SDMA error).  HcclCommMemReg gives no such reach: it only records the range for the
communicator ("仅域内管理，无进程级注册", comm_mem_manager.cc:39).  So device-visible here means:
aclrtMalloc and aclrtMallocHost blocks, the HCCL buffers, and what the emulator's own callers
declare as standing in for device memory (the Comm API's staged NumPy buffers, see
``SimLibrary.sim_register_device_memory``).
"""
from __future__ import annotations

import bisect
import threading
from typing import Dict, List, Optional, Tuple

__all__ = ["DeviceMemory"]

_LOOKBACK = 32


class DeviceMemory:
    """[start, end) ranges with a name each, counted per start; ``find`` is one bisect plus a short look back."""

    def __init__(self) -> None:
        self._starts: List[int] = []
        self._ranges: Dict[int, Tuple[int, str, int]] = {}     # start -> (end, name, registrations)
        self._lock = threading.Lock()

    def add(self, start: int, size: int, name: str) -> None:
        """Record [start, start+size) as device memory; again at the same start: counted, the longer end kept."""
        if size <= 0:
            raise ValueError(f"size={size} for {name} at 0x{start:x}; expected > 0")
        with self._lock:
            known = self._ranges.get(start)
            if known is None:
                bisect.insort(self._starts, start)
                self._ranges[start] = (start + size, name, 1)
            else:
                self._ranges[start] = (max(known[0], start + size), known[1], known[2] + 1)

    def remove(self, start: int) -> bool:
        """Withdraw one registration of the range at ``start`` (forgotten with the last); False when there was none."""
        with self._lock:
            known = self._ranges.get(start)
            if known is None:
                return False
            if known[2] > 1:
                self._ranges[start] = (known[0], known[1], known[2] - 1)
                return True
            del self._ranges[start]
            del self._starts[bisect.bisect_left(self._starts, start)]
            return True

    def find(self, addr: int, nbytes: int = 1) -> Optional[Tuple[int, int, str]]:
        """(start, end, name) of a recorded range holding [addr, addr+nbytes), else one holding ``addr``, else None.

        Looks at the nearest starts at or below ``addr`` (up to _LOOKBACK of them): ranges may overlap
        (a view beside its base array, or a range declared for an array since freed), and the one that
        holds the whole operand wins over one that holds only its first byte.
        """
        starts = self._starts
        i = bisect.bisect_right(starts, addr)
        partial: Optional[Tuple[int, int, str]] = None
        for j in range(i - 1, max(i - _LOOKBACK, 0) - 1, -1):
            start = starts[j]
            end, name, _count = self._ranges[start]
            if addr + nbytes <= end:
                return start, end, name
            if addr < end and partial is None:
                partial = (start, end, name)
        return partial
