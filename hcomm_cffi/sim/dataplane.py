"""Data plane of the emulator: the Hcomm* primitives and batch mode.

Each call validates its arguments the way the A2 host build does (codes per the vendor source:
NULL pointers -> HCCL_E_PTR, thread-notify index out of range -> HCCL_E_PTR, channel-notify index
out of range -> HCCL_E_INTERNAL, unsupported reduce type/op -> HCCL_E_PARA, features of other
products -> HCCL_E_NOT_SUPPORT), then records one task.  Inside HcommBatchModeStart/End tasks are
collected and launched at End.  Outside batch mode the vendor's A2 host build accepts the call and
submits it at once (it returns 0; the documentation says batch mode is required): the emulator does
the same and its checker reports it (HCOMM_SIM_CHECK=strict rejects it with HCCL_E_NOT_SUPPORT).
"""
from __future__ import annotations

import math
import threading
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .._ffi import ffi
from ..enums import HOST_REDUCE_DTYPES, HOST_REDUCE_OPS, DataType, Engine, Protocol, ReduceOp
from .errors import ACL_ERROR_RT_INTERNAL_ERROR, HcclResult, SimError, warn_caller
from .acl_graphs import join_batch
from .config import CheckerWarning
from .queues import SimThread
from .runtime import EXECUTOR, TaskFailure
from .tasks import (
    C_RECORD, C_WAIT, COPY, READ, READ_REDUCE, REDUCE, T_RECORD, T_WAIT, WRITE, WRITE_REDUCE, ChannelRecord,
    ChannelWait, HostCall, LocalCopy, LocalReduce, Read, ReadReduce, Task, ThreadRecord, ThreadWait, Write,
    WriteReduce,
)
from .part import Part
from .state import SimState, c_string

_NULL = ffi.NULL
# tasks are built as tuple.__new__(Type, (KIND, ...)): the object Type(...) makes, without a Python-level
# constructor call on the per-call issue path (tests/test_sim_tasks.py checks every type against its kind)
_new = tuple.__new__
_cast = ffi.cast

__all__ = ["DataPlane", "PreparedBatch"]


class _Batch(threading.local):
    tasks: Optional[Dict[SimThread, List[Task]]] = None


class PreparedBatch:
    """The emulator tasks of a batch of data-plane calls, validated once and issued again and again.

    Made by :meth:`DataPlane.sim_prepare_batch` from a replayed schedule (algorithms/replay.py): the same calls
    with the same addresses pass the same checks, so issuing it only hands the tasks to the open batch.
    """

    __slots__ = ("tasks",)

    def __init__(self, tasks: Dict[SimThread, Tuple[Task, ...]]) -> None:
        self.tasks = tasks

    def __len__(self) -> int:
        return sum(len(lst) for lst in self.tasks.values())


def _reduce_args(count: int, dtype: int, op: int) -> "tuple[DataType, ReduceOp]":
    try:
        dt = DataType(dtype)
        rop = ReduceOp(op)
    except ValueError:
        raise SimError(HcclResult.E_PARA, f"dataType={dtype}, reduceOp={op}: not valid enum values") from None
    if dt not in HOST_REDUCE_DTYPES or rop not in HOST_REDUCE_OPS:
        raise SimError(HcclResult.E_PARA,
                       f"reduce of {dt.name} with {rop.name} is not supported by the A2/A3 data plane "
                       "(types int8/int16/int32/fp16/fp32/bf16, ops sum/max/min)")
    return dt, rop


def _not_on_a2(what: str) -> Callable[..., int]:
    """An Hcomm* function of other products: HCCL_E_NOT_SUPPORT naming ``what`` (the function, then where it exists)."""
    def not_supported(self: DataPlane, *args: Any) -> int:
        raise SimError(HcclResult.E_NOT_SUPPORT, f"{what} is not supported on the emulated A2 product")
    not_supported.__name__ = not_supported.__qualname__ = what.split(" ", 1)[0]
    return not_supported


class DataPlane(Part):
    """Hcomm* data-plane calls (hcomm/hcomm_primitives.h)."""

    HEADERS = ("hcomm/hcomm_primitives.h",)

    def __init__(self, state: SimState) -> None:
        super().__init__(state)
        self._batch = _Batch()

    def open_batch(self) -> Optional[Dict[Any, List[Task]]]:
        """The tasks of the batch this OS thread has open (HcommBatchModeStart without End), by thread; None."""
        return self._batch.tasks

    def sim_discard_batch(self) -> None:
        """Emulator only: drop this OS thread's open batch (a kernel that stopped before HcommBatchModeEnd)."""
        self._batch.tasks = None

    # ------------------------------------------------------------------ issuing
    def _issue(self, th: SimThread, task: Task) -> None:
        tasks = self._batch.tasks
        if tasks is not None:
            lst = tasks.get(th)
            if lst is None:
                tasks[th] = lst = []
            lst.append(task)
            return
        comm = th.comm
        mode = comm.config.check
        if mode != "off":
            message = (f"checker: rank {comm.rank}, {th.label}: data-plane call outside "
                       "HcommBatchModeStart/End; the A2/A3 documentation requires batch mode (the A2 host "
                       "build submits it immediately, or silently defers it after an earlier batch)")
            comm.finding(message, HcclResult.E_NOT_SUPPORT)
        _host_issues([th])
        EXECUTOR.launch(th.queue, [task])

    def _thread_channel(self, thread: int, channel: int, *operands: Any) -> "tuple[SimThread, Any]":
        """The thread and channel of a call, checked to be usable together; any of ``operands`` (the call's dst
        and src) NULL is HCCL_E_PTR."""
        state = self.state
        th = state.threads.get(thread)
        ch = state.channels.get(channel)
        if th is None or ch is None or th.comm.destroyed or ch.comm.destroyed:
            th, ch = state.thread(thread), state.channel(channel)   # raises the error naming the bad handle
        if ch.comm is not th.comm:
            raise SimError(HcclResult.E_PARA, f"thread 0x{thread:x} and channel 0x{channel:x} belong to "
                                              "different communicators")
        if ch.engine == Engine.AIV:
            # hcomm @ 8958adb coll_communicator_mgr/api_c_adpt/coll_comm_res_c_adpt.cc:748
            # ConvertAivChannelHandlesToDevicePtrs: an AIV channel handle is a device address for AIV kernels
            raise SimError(HcclResult.E_PARA, f"channel 0x{channel:x} is an AIV channel: its handle is for AIV "
                                              "kernels on the device, not for the host data-plane calls")
        if _NULL in operands:
            raise SimError(HcclResult.E_PTR, "dst or src is NULL")
        return th, ch

    @staticmethod
    def _in_peer_buffer(ch: Any, ptr: Any, nbytes: int, what: str) -> None:
        lo = int(_cast("uintptr_t", ptr))
        if lo < ch.buf_lo or lo + nbytes > ch.buf_hi:
            raise SimError(HcclResult.E_PARA,
                           f"{what} range [0x{lo:x}, +{nbytes}) is outside rank {ch.peer}'s HCCL buffer "
                           f"(0x{ch.buf_lo:x}, {ch.buf_hi - ch.buf_lo} bytes) as seen through this channel")

    # ------------------------------------------------------------------ local
    def _local_operands(self, th: SimThread, dst: Any, src: Any, nbytes: int) -> None:
        """Overlap, device visibility and bounds of a local copy/reduce, checked at the call (HCCL_E_PARA).

        The vendor's host path checks none of them (hcomm @ 8958adb src/legacy/ascend910/platform/
        comm_primitive/hccl_primitive_local.cc:32 HcclLocalCopy hands the addresses to an SDMA
        device-to-device copy; the hardware then faults the task or silently corrupts): rejecting them
        at the call is the emulator's choice, so a copy past the HCCL buffer is an error naming it
        instead of a SIGSEGV.  Overlap within one task: an error, as HCCL's single-task check.  Memory that
        is not device memory (devmem.py: pageable host memory the SDMA engine cannot reach) is an error in
        strict mode and a checker warning in warn mode.
        """
        d, s = int(_cast("uintptr_t", dst)), int(_cast("uintptr_t", src))
        if d < s + nbytes and s < d + nbytes:
            raise SimError(HcclResult.E_PARA, f"dst [0x{d:x}, +{nbytes}) and src [0x{s:x}, +{nbytes}) overlap; "
                                              "a local copy/reduce needs disjoint operands")
        for what, lo in (("dst", d), ("src", s)):
            region = self._owner_region(th, lo, nbytes)
            if region is None:
                self._not_device_memory(th, what, lo, nbytes)
            elif lo + nbytes > region[1]:
                name, start, end = region[2], region[0], region[1]
                raise SimError(HcclResult.E_PARA,
                               f"{what} [0x{lo:x}, +{nbytes}) runs {lo + nbytes - end} bytes past the end of {name} "
                               f"(0x{start:x}, {end - start} bytes)")

    def _not_device_memory(self, th: SimThread, what: str, addr: int, nbytes: int) -> None:
        """A local copy/reduce operand outside every device-visible range: E_PARA (strict) or a checker warning."""
        comm = th.comm
        if comm.config.check == "off":
            return
        message = (f"checker: rank {comm.rank}, {th.label}: {what} 0x{addr:x} (+{nbytes} bytes) is not device "
                   "memory: on A2 a local copy/reduce is an SDMA task that cannot reach pageable host memory. "
                   "Use the HCCL buffer, aclrtMalloc or aclrtMallocHost memory (copy host data in with "
                   "aclrtMemcpy first)")
        comm.finding(message)

    def _owner_region(self, th: SimThread, addr: int, nbytes: int) -> "Optional[tuple[int, int, str]]":
        """(start, end, name) of the device-visible memory holding ``addr``: an HCCL buffer, else a devmem.py range."""
        comm = th.comm
        base = comm.buf.addr
        if base <= addr < base + comm.buffer_bytes:
            return base, base + comm.buffer_bytes, f"rank {comm.rank}'s HCCL buffer"
        found = self.state.device.find(addr, nbytes)
        if found is not None:
            return found
        for other in self.state.comms.values():     # another communicator's buffer of this process
            base = other.buf.addr
            if not other.destroyed and base <= addr < base + other.buffer_bytes:
                return base, base + other.buffer_bytes, f"rank {other.rank}'s HCCL buffer of {other.name}"
        return None

    def HcommLocalCopyOnThread(self, thread: int, dst: Any, src: Any, len: int) -> int:
        th = self.state.thread(thread)
        if dst == _NULL or src == _NULL:
            raise SimError(HcclResult.E_PTR, "dst or src is NULL")
        if len:
            self._local_operands(th, dst, src, len)
            self._issue(th, _new(LocalCopy, (COPY, th, dst, src, len)))
        return 0

    def HcommLocalReduceOnThread(self, thread: int, dst: Any, src: Any, count: int, dataType: int,
                                 reduceOp: int) -> int:
        th = self.state.thread(thread)
        if dst == _NULL or src == _NULL:
            raise SimError(HcclResult.E_PTR, "dst or src is NULL")
        dt, op = _reduce_args(count, dataType, reduceOp)
        if count:
            self._local_operands(th, dst, src, count * dt.itemsize)
            self._issue(th, _new(LocalReduce, (REDUCE, th, dst, src, count, dt, op)))
        return 0

    # ------------------------------------------------------------------ notifies
    def HcommThreadNotifyRecordOnThread(self, thread: int, dstThread: int, dstNotifyIdx: int) -> int:
        th = self.state.thread(thread)
        dst = self.state.thread(dstThread)
        if dst.comm is not th.comm:
            raise SimError(HcclResult.E_PARA, "thread and dstThread belong to different communicators")
        if dstNotifyIdx >= len(dst.notifies):
            raise SimError(HcclResult.E_PTR, f"dstNotifyIdx={dstNotifyIdx} is out of range: {dst.label} has "
                                             f"{len(dst.notifies)} notifies")
        self._issue(th, _new(ThreadRecord, (T_RECORD, th, dst, dstNotifyIdx)))
        return 0

    def HcommThreadNotifyWaitOnThread(self, thread: int, notifyIdx: int, timeOut: int) -> int:
        return self._thread_wait(thread, notifyIdx, float(timeOut))

    def HcommThreadNotifyWaitOnThreadWithDefaultTimeout(self, thread: int, notifyIdx: int) -> int:
        return self._thread_wait(thread, notifyIdx, self.state.default_wait_s)

    def _thread_wait(self, thread: int, notifyIdx: int, timeout: float) -> int:
        th = self.state.thread(thread)
        if notifyIdx >= len(th.notifies):
            raise SimError(HcclResult.E_PTR, f"notifyIdx={notifyIdx} is out of range: {th.label} has "
                                             f"{len(th.notifies)} notifies")
        self._issue(th, _new(ThreadWait, (T_WAIT, th, notifyIdx, timeout)))
        return 0

    def HcommSetNotifyWaitTimeOut(self, timeOut: float) -> int:
        # hcomm @ 8958adb base_comm/primitives/api_c_adpt/cpu_primitives_c_adpt.cc:41: NaN, negative or above
        # UINT32_MAX is HCCL_E_PARA; anything else is truncated to whole seconds (1.5 -> 1) and accepted.
        if math.isnan(timeOut) or timeOut < 0 or timeOut > 0xFFFFFFFF:
            raise SimError(HcclResult.E_PARA, f"timeOut={timeOut}; expected seconds in [0, {0xFFFFFFFF}]")
        self.state.default_wait_s = float(int(timeOut)) or 86400.0   # process-wide, like g_threadLaunchCtx
        return 0

    def HcommChannelNotifyRecordOnThread(self, thread: int, channel: int, remoteNotifyIdx: int) -> int:
        th, ch = self._thread_channel(thread, channel)
        if remoteNotifyIdx >= ch.notify_num:
            raise SimError(HcclResult.E_INTERNAL, f"remoteNotifyIdx={remoteNotifyIdx} is out of range: the channel "
                                                  f"to rank {ch.peer} has {ch.notify_num} notifies")
        self._issue(th, _new(ChannelRecord, (C_RECORD, th, ch, remoteNotifyIdx, 1)))
        return 0

    def HcommChannelNotifyWaitOnThread(self, thread: int, channel: int, localNotifyIdx: int, timeOut: int) -> int:
        th, ch = self._thread_channel(thread, channel)
        if localNotifyIdx >= ch.notify_num:
            raise SimError(HcclResult.E_INTERNAL, f"localNotifyIdx={localNotifyIdx} is out of range: the channel "
                                                  f"to rank {ch.peer} has {ch.notify_num} notifies")
        self._issue(th, _new(ChannelWait, (C_WAIT, th, ch, localNotifyIdx, float(timeOut), 0)))
        return 0

    # ------------------------------------------------------------------ remote
    def HcommWriteOnThread(self, thread: int, channel: int, dst: Any, src: Any, len: int) -> int:
        th, ch = self._thread_channel(thread, channel, dst, src)
        if len:
            self._in_peer_buffer(ch, dst, len, "dst")
            self._issue(th, _new(Write, (WRITE, th, ch, dst, src, len)))
        return 0

    def HcommReadOnThread(self, thread: int, channel: int, dst: Any, src: Any, len: int) -> int:
        th, ch = self._thread_channel(thread, channel, dst, src)
        if len:
            self._in_peer_buffer(ch, src, len, "src")
            self._issue(th, _new(Read, (READ, th, ch, dst, src, len)))
        return 0

    def HcommWriteReduceOnThread(self, thread: int, channel: int, dst: Any, src: Any, count: int, dataType: int,
                                 reduceOp: int) -> int:
        th, ch = self._thread_channel(thread, channel, dst, src)
        dt, op = _reduce_args(count, dataType, reduceOp)
        if count:
            self._in_peer_buffer(ch, dst, count * dt.itemsize, "dst")
            self._issue(th, _new(WriteReduce, (WRITE_REDUCE, th, ch, dst, src, count, dt, op)))
        return 0

    def HcommReadReduceOnThread(self, thread: int, channel: int, dst: Any, src: Any, count: int, dataType: int,
                                reduceOp: int) -> int:
        th, ch = self._thread_channel(thread, channel, dst, src)
        if ch.protocol == Protocol.ROCE:
            raise SimError(HcclResult.E_NOT_SUPPORT, "ReadReduce is not supported over RoCE on A2/A3")
        dt, op = _reduce_args(count, dataType, reduceOp)
        if count:
            self._in_peer_buffer(ch, src, count * dt.itemsize, "src")
            self._issue(th, _new(ReadReduce, (READ_REDUCE, th, ch, dst, src, count, dt, op)))
        return 0

    # ------------------------------------------------------------------ host tasks (Backend.host_task)
    def sim_host_task(self, thread: int, fn: Callable[[], None]) -> None:
        """Emulator only: run ``fn`` on ``thread``'s queue in order; an exception fails the queue with its text."""
        def run() -> None:
            try:
                fn()
            except TaskFailure:
                raise
            except Exception as exc:
                raise TaskFailure(HcclResult.E_INTERNAL, ACL_ERROR_RT_INTERNAL_ERROR, str(exc)) from None
        self._issue(self.state.thread(thread), HostCall(run))

    # ------------------------------------------------------------------ prepared batches (schedule replay)
    def sim_prepare_batch(self, calls: Sequence[Tuple[Callable[..., None], Tuple[Any, ...]]]) -> PreparedBatch:
        """Emulator only: run ``calls`` (callables issuing data-plane calls, arguments) into a batch that is kept:
        validated as when issued (an error raises, nothing is launched), the tasks HcommBatchModeEnd would submit."""
        batch = self._batch
        if batch.tasks is not None:
            raise RuntimeError("sim_prepare_batch inside HcommBatchModeStart/End; expected outside batch mode")
        batch.tasks = {}
        try:
            for fn, args in calls:
                fn(*args)
            tasks = batch.tasks
        finally:
            batch.tasks = None
        return PreparedBatch({th: tuple(lst) for th, lst in tasks.items()})

    def sim_issue_prepared(self, prepared: PreparedBatch) -> None:
        """Emulator only: add a prepared batch's tasks to the open batch (between HcommBatchModeStart and End)."""
        tasks = self._batch.tasks
        if tasks is None:
            raise RuntimeError("sim_issue_prepared outside HcommBatchModeStart/End; expected inside batch mode")
        for th, lst in prepared.tasks.items():
            tasks.setdefault(th, []).extend(lst)

    # ------------------------------------------------------------------ batch mode
    def HcommBatchModeStart(self, batchTag: Any) -> int:
        # the tag names the batch for the vendor's profiling; nothing here reads it
        if self._batch.tasks is None:
            self._batch.tasks = {}
        return 0

    def HcommBatchModeEnd(self, batchTag: Any) -> int:
        tasks = self._batch.tasks
        if tasks is None:
            return 0  # the vendor's End without Start launches nothing and succeeds
        self._batch.tasks = None
        if not tasks:
            return 0
        if len(tasks) > 1:
            self._check_fork_join(tasks)
        threads = list(tasks)
        join_batch(threads)                         # threads launched with a capturing stream join its capture
        _host_issues(threads)
        if len(threads) == 1:                         # one thread: submitted and run under one lock
            for th, lst in tasks.items():
                EXECUTOR.launch(th.queue, lst)
            return 0
        for th, lst in tasks.items():
            EXECUTOR.submit(th.queue, lst)
        EXECUTOR.settle()
        return 0

    def _check_fork_join(self, tasks: Dict[SimThread, List[Task]]) -> None:
        """Checker: secondary threads start by waiting on the main thread and end by signalling it."""
        threads = list(tasks)
        comm = threads[0].comm
        if comm.config.check == "off":
            return
        # the main thread is the stream-bound one, else the one acquired first (handles grow with every
        # acquisition); the order in which threads got their tasks carries no meaning
        main = min(threads, key=lambda th: (not th.main, th.handle))
        problems = []
        for th in threads:
            if th is main:
                continue
            lst = tasks[th]
            if lst[0][0] != T_WAIT:
                problems.append(f"{th.label} does not begin by waiting on a thread notify from the main thread "
                                f"({main.label}); its first task is {lst[0].name}")
            last = lst[-1]
            if last[0] != T_RECORD or last.target is not main:
                problems.append(f"{th.label} does not end by recording a notify of the main thread ({main.label}); "
                                f"its last task (step {len(lst) - 1}) is {last.name}")
        messages = [f"checker: rank {comm.rank}, batch: {text}" for text in problems]
        comm.reports.extend(messages)
        if messages and comm.config.check == "strict":
            raise SimError(HcclResult.E_INTERNAL, "; ".join(messages))
        for message in messages:
            warn_caller(message, CheckerWarning)

    # ------------------------------------------------------------------ not on A2
    HcommWriteWithNotifyOnThread = _not_on_a2("HcommWriteWithNotifyOnThread (Ascend 950 only)")
    HcommWriteReduceWithNotifyOnThread = _not_on_a2("HcommWriteReduceWithNotifyOnThread (Ascend 950 only)")
    HcommFenceOnThread = _not_on_a2("HcommFenceOnThread (950 host CPU engine only)")
    HcommChannelFenceOnThread = _not_on_a2("HcommChannelFenceOnThread (950 only)")
    HcommChannelFence = _not_on_a2("HcommChannelFence (950 host CPU engine only)")
    HcommChannelNotifyWaitOnThreadWithDefaultTimeout = _not_on_a2(
        "HcommChannelNotifyWaitOnThreadWithDefaultTimeout on ordinary channels")
    HcommBatchTransferOnThread = _not_on_a2("HcommBatchTransferOnThread (NIC-plugin RoCE channels only)")
    HcommChannelDrainOnThread = _not_on_a2("HcommChannelDrainOnThread (AICPU RoCE only)")

    def HcommAcquireComm(self, commId: Any) -> int:
        """Bind the named communicator's dispatcher; 0, or HCCL_E_PTR for a NULL or unknown name.

        hcomm @ 8958adb base_comm/primitives/api_c_adpt/cpu_primitives_c_adpt.cc:763 (the host build).
        """
        if commId is None or commId == _NULL:
            raise SimError(HcclResult.E_PTR, "commId is NULL")
        name = c_string(commId).decode("utf-8", "replace")
        if not any(c.name == name and not c.destroyed for c in self.state.comms.values()):
            raise SimError(HcclResult.E_PTR, f"commId={name!r} names no communicator of this process")
        return 0

    def HcommReleaseComm(self, commId: Any) -> int:
        """Nothing to release on the host: 0 (HCCL_E_PTR for NULL), cpu_primitives_c_adpt.cc:773."""
        if commId is None or commId == _NULL:
            raise SimError(HcclResult.E_PTR, "commId is NULL")
        return 0


def _host_issues(threads: List[SimThread]) -> None:
    """Race checker: tasks issued now come after everything the host saw complete (its stream syncs)."""
    for th in threads:
        if th.comm.race is not None:
            with EXECUTOR.lock:
                for th in threads:
                    if th.comm.race is not None:
                        th.comm.race.host_issues(th)
            return
