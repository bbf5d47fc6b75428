"""``SimLibrary``: the emulator seen as one C library: one part per vendor header, every HCCL/HCOMM/ACL function name."""
from __future__ import annotations

import atexit
import os
from typing import Any, Callable, Dict, List, Sequence

from ..lib.contract import Backend, DataPlaneCall, Capabilities
from .abandon import abandon
from .announce import API
from .abi_check import function_types
from .acl import AclRuntime
from .aicpu import AicpuCalls
from .dataplane import DataPlane
from ..errors import ACL_ERROR_API_NOT_SUPPORT
from .errors import HcclResult, SimError, entry
from .acl_graphs import GraphCalls
from .group import GroupCalls
from .hccl_comm import HcclCommCalls
from .hccl_rank_graph import HcclRankGraphCalls
from .hccl_res import HcclChannelCalls, HcclResCalls
from .native import NativeCollectives
from .part import c_functions
from .profiler import Profiler
from .vmm import VirtualMemory
from .zero_copy import ZeroCopyCalls
from .runtime import CORES, EXECUTOR
from .state import SimState

__all__ = ["SimLibrary", "shutdown"]

_STATE = SimState()

# Declared in the headers but compiled only into the device library (libccl_kernel.so), so host code
# gets a missing symbol: hcomm @ 8958adb defines HcclSymWinGetPeerPointer only in
# src/legacy/ascend910/framework/device/framework/aicpu_symmetric_memory.cc:34.
DEVICE_ONLY_FUNCTIONS = {
    "HcclSymWinGetPeerPointer": "defined only in the device library libccl_kernel.so (AICPU kernels)",
}


def shutdown() -> None:
    """Release every communicator of this process (its segments leave /dev/shm); runs at exit."""
    for comm in list(_STATE.comms.values()):
        try:
            comm.destroy()
        except Exception:
            pass
    _STATE.comms.clear()


atexit.register(shutdown)


def _after_fork_in_child() -> None:
    """A forked child starts with no library objects: its exit's shutdown() destroys only what it created."""
    _STATE.own_registries()
    EXECUTOR.forget_inherited()


os.register_at_fork(after_in_child=_after_fork_in_child)


#: The emulator's answers to the backend contract (lib/contract.py).  Its step: what the Comm API's
#: algorithms stage per step and peer unless HCOMM_STEP_BYTES says otherwise: a step this size is still in
#: the CPU's cache when the peer process reads it (64 MiB ring allreduce, 2 ranks: 21-26 ms in whole-chunk
#: steps, 14-16 ms in 512 KiB-1 MiB steps, as fast as the native one-shot).  Its library collectives
#: compare every rank's call at their first handshake (sim/native.py), whatever HCOMM_SIM_CHECK says.
SIM_CAPABILITIES = Capabilities(emulator=True, host_memory_as_device=True, step_bytes=1 << 20,
                                checks_signatures_in_band=True, host_tasks=True, prepares_batches=True,
                                host_cores=CORES)


class SimLibrary(Backend):
    """Drop-in for the dlopen'ed CANN libraries: same function names, cdata arguments, return codes.

    Its parts (sim/part.py) share the one state of the process, as all handles into one real library would; each
    C function is an attribute bound to its part's method.  ``traces_c_program``: a C program runs on it.
    """

    backend_name = "sim"
    capabilities = SIM_CAPABILITIES

    def __init__(self, traces_c_program: bool = False) -> None:
        state = self.state = _STATE
        if traces_c_program:
            EXECUTOR.foreign_threads = True
        acl = AclRuntime(state)
        self.primitives = DataPlane(state)
        vmm = VirtualMemory(state)
        res = HcclResCalls(state)
        collectives = NativeCollectives(state)
        self.parts = (HcclCommCalls(state, traces_c_program), res, HcclChannelCalls(state), HcclRankGraphCalls(state),
                      GroupCalls(state, collectives, acl.aclrtSynchronizeStream), ZeroCopyCalls(state, vmm),
                      collectives, self.primitives, AicpuCalls(state, acl, res, self.primitives), acl,
                      GraphCalls(state), vmm, Profiler(state))
        self.functions: Dict[str, Callable[..., Any]] = {}
        for part in self.parts:
            self.functions.update(c_functions(part))
        self.__dict__.update(self.functions)
        #: bumped by every aclrtSetDevice / aclrtResetDevice (sim/acl.py)
        self.device_changes = acl.device_changes
        # the data plane's prepared batches under their emulator names (tests call them)
        self.sim_prepare_batch = self.primitives.sim_prepare_batch
        self.sim_issue_prepared = self.primitives.sim_issue_prepared

    # the backend contract (lib/contract.py)
    def declare_device_memory(self, addr: int, size: int) -> None:
        """[addr, addr+size) stands for device memory: a host array the Comm API hands to the data plane, where on
        CANN it would stage it in aclrtMalloc memory."""
        self.state.device.add(int(addr), int(size), "memory registered with sim_register_device_memory")

    def withdraw_device_memory(self, addr: int) -> bool:
        """Forget a range :meth:`declare_device_memory` declared at ``addr``; False when there was none."""
        return self.state.device.remove(int(addr))

    sim_register_device_memory = declare_device_memory          # the emulator's own names (tests)
    sim_unregister_device_memory = withdraw_device_memory

    def prepare_batch(self, calls: Sequence[DataPlaneCall]) -> Any:
        """A prepared task list of ``calls`` (sim_prepare_batch)."""
        return self.primitives.sim_prepare_batch(calls)

    def issue_prepared(self, prepared: Any) -> None:
        """Add a prepared task list to the open batch (sim_issue_prepared)."""
        self.primitives.sim_issue_prepared(prepared)

    def host_task(self, thread: int, fn: Callable[[], None]) -> DataPlaneCall:
        """The call that queues ``fn`` on ``thread`` (sim_host_task)."""
        return (self.primitives.sim_host_task, (thread, fn))

    def collective_announcer(self, comm: Any) -> Callable[[int, int, str], None]:
        """The function that publishes the Comm API's collective ``seq`` of ``comm`` in this rank's announcements
        (sim/announce.py), with the communicator looked up once."""
        sim = self.state.comm(comm)
        table = sim.announced

        def announce(seq: int, value: int, text: str) -> None:
            if sim.destroyed:                   # as every call naming a destroyed communicator (sim/state.py)
                raise SimError(HcclResult.E_PARA, f"communicator {sim.name} was destroyed")
            table.announce(API, seq, value, text)
        return announce

    def announce_wait(self, comm: Any, kind: int, number: int, peer: int, text: str) -> None:
        """Publish what this rank's host waits in on communicator ``comm`` (sim/announce.py)."""
        self.state.comm(comm).announced.wait(kind, number, peer, text)

    def abandon_communicator(self, comm: Any, why: str, interrupted: bool = False) -> bool:
        """Drop communicator ``comm``'s queued tasks and mark it FAILED (ABANDONED) for its peers (sim/abandon.py)."""
        return abandon(self.state, self.primitives.open_batch(), comm, why, interrupted)

    def checker_reports(self) -> List[str]:
        """Every checker finding of this process so far, oldest first."""
        return [report for comm in self.state.comms.values() for report in comm.reports]

    def __getattr__(self, name: str) -> Any:
        """A declared host function the emulator does not implement answers HCCL_E_NOT_SUPPORT; any other name (a
        typo, a DEVICE_ONLY_FUNCTIONS one) is a MissingSymbolError, as on the cann backend."""
        if name.startswith("_"):
            raise AttributeError(name)
        if name in DEVICE_ONLY_FUNCTIONS or name not in function_types():
            from ..errors import MissingSymbolError
            from ..lib.cann import library_for

            reason = DEVICE_ONLY_FUNCTIONS.get(name, "not a function of the CANN host libraries")
            raise MissingSymbolError(name, f"lib{library_for(name)}.so (emulated, HCOMM_BACKEND=sim)", reason)

        # an ACL function answers ACL's "API not supported" (cannlib/acl_rt_exports.py), an HCCL one HCCL's
        code = ACL_ERROR_API_NOT_SUPPORT if name.startswith("acl") else int(HcclResult.E_NOT_SUPPORT)
        why = f"{name} is not implemented by the hcomm_cffi emulator (HCOMM_BACKEND=sim)"

        def not_implemented(*args: Any) -> int:
            raise SimError(code, why, named=True)
        not_implemented.__name__ = name
        return entry(not_implemented)
