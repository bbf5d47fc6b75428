"""HcclGroupStart / HcclGroupEnd / HcclGroupStatusGet: operations issued inside a group run at its end.

Follows hicann/hcomm@c048f8bf1a42:src/framework/group/hccl_group.cc: the group depth is per host
thread (line 19); inside a group every HcclSend/HcclRecv of a communicator is collected into one
batch and every collective is queued (taskAppend, line 42: the first send/recv stream carries the
batch); the outermost HcclGroupEnd (line 282) launches, per communicator in first-use order, the
batch (as HcclBatchSendRecv) and then the collectives in issue order, and synchronises the
collectives' streams (groupLaunch, line 251); HcclGroupEnd without HcclGroupStart is
HCCL_E_NOT_SUPPORT (line 284).  The emulator also returns the first failure of the launch.
A library collective is declared with :func:`collective`, whose entry defers it inside a group.
"""
from __future__ import annotations

import functools
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

from .._ffi import ffi
from .errors import HcclResult, SimError, entry, failed
from .acl_graphs import captured
from .part import Part, check_out
from .state import SimState

__all__ = ["GroupCalls", "GROUPED_FUNCTIONS", "collective", "group_depth"]

_COLLECTIVES = ("HcclAllReduce", "HcclBroadcast", "HcclReduceScatter", "HcclReduceScatterV", "HcclScatter",
                "HcclAllGather", "HcclAllGatherV", "HcclAlltoAllVC", "HcclAlltoAllV", "HcclAlltoAll", "HcclReduce")
_P2P = {"HcclSend": 0, "HcclRecv": 1}          # HcclSendRecvType

#: every function a group defers; each takes its comm and stream as its last two arguments
GROUPED_FUNCTIONS = frozenset((*_COLLECTIVES, *_P2P))


class _Plan:
    """What one communicator was given inside the group (hcclKernelPlanner)."""

    def __init__(self) -> None:
        self.p2p: List[Tuple[int, Any, int, int, int]] = []     # (type, buf, count, dataType, peer)
        self.p2p_stream: Any = None
        self.collectives: List[Tuple[str, Tuple[Any, ...]]] = []


class _Group(threading.local):
    depth = 0

    def __init__(self) -> None:
        self.plans: Dict[int, Tuple[Any, _Plan]] = {}           # comm handle -> (comm argument, plan), in first use


_GROUP = _Group()


def group_depth() -> int:
    """How deep the calling OS thread is inside HcclGroupStart/End (0: not in a group)."""
    return _GROUP.depth


def collective(func: Callable[..., int], repeats: bool = False, count_at: Optional[int] = None) -> Callable[..., int]:
    """Declare a library collective of sim/native.py (its comm and stream arguments last): its entry.

    Inside a group (GROUPED_FUNCTIONS) it is deferred to the group's end; ``repeats``: a repeat of a small call
    is launched from the task list its first call kept (``part.repeat``, which leaves a capturing stream's call
    alone; ``count_at``: where the element count is among the arguments); on a capturing stream it is recorded
    (acl_graphs.captured, replayed through ``run``); else ``func`` runs.  Its exceptions become its return code
    (errors.failed), in this one frame.
    """
    name = func.__name__
    grouped = name in GROUPED_FUNCTIONS

    def repeat(part: Any, *args: Any) -> Optional[int]:
        return part.repeat(name, args, count_at)

    run = entry(func, divert=repeat if repeats else None)     # what a captured call replays

    @functools.wraps(func)
    def collective_entry(part: Any, *args: Any) -> int:
        try:
            if grouped and _GROUP.depth > 0:
                return _defer(part.state, name, args)
            if repeats:
                rc = part.repeat(name, args, count_at)
                if rc is not None:
                    return rc
            rc = captured(part, run, args)
            return func(part, *args) if rc is None else rc
        except Exception as exc:
            return failed(exc, name)

    # the marks errors.entry sets (sim/part.py finds the C functions by them)
    collective_entry.c_function = name  # type: ignore[attr-defined]
    collective_entry.diverted = True  # type: ignore[attr-defined]
    return collective_entry


def _defer(state: SimState, name: str, args: Tuple[Any, ...]) -> int:
    """Record ``name(*args)`` for the group's end (the communicator must be a live one now)."""
    comm, stream = args[-2:]
    c = state.comm(comm)
    held = _GROUP.plans.get(c.handle)
    if held is None:
        held = _GROUP.plans[c.handle] = (comm, _Plan())
    plan = held[1]
    if name in _P2P:
        buf, count, data_type, peer = args[0], args[1], args[2], args[3]
        plan.p2p.append((_P2P[name], buf, int(count), int(data_type), int(peer)))
        if plan.p2p_stream is None:
            plan.p2p_stream = stream
    else:
        plan.collectives.append((name, tuple(args)))
    return 0


class GroupCalls(Part):
    """HcclGroupStart/End/StatusGet (hccl/hccl_comm.h); the group's end runs what :func:`collective` deferred."""

    HEADERS = ("hccl/hccl_comm.h",)

    def __init__(self, state: SimState, collectives: Any, sync_stream: Callable[[Any], int]) -> None:
        super().__init__(state)
        self.collectives = collectives      # the part with the library collectives (sim/native.py)
        self.sync_stream = sync_stream      # aclrtSynchronizeStream

    def HcclGroupStart(self) -> int:
        _GROUP.depth += 1
        return 0

    def HcclGroupStatusGet(self, isGroupEnabled: Any) -> int:
        check_out(isGroupEnabled, "isGroupEnabled")
        isGroupEnabled[0] = _GROUP.depth > 0
        return 0

    def HcclGroupEnd(self) -> int:
        if _GROUP.depth == 0:
            raise SimError(HcclResult.E_NOT_SUPPORT, "not in a group: HcclGroupStart was not called first")
        _GROUP.depth -= 1
        if _GROUP.depth > 0:
            return 0
        plans = list(_GROUP.plans.values())
        _GROUP.plans.clear()
        streams: List[Any] = []
        codes = [rc for comm, plan in plans for rc in self._run_group(comm, plan, streams)]
        # then the collectives' streams are synchronised: a failure there is the group's internal error
        codes += [int(HcclResult.E_INTERNAL) for stream in streams if int(self.sync_stream(stream)) != 0]
        first_failure = next((rc for rc in codes if rc != 0), 0)
        if first_failure:
            raise SimError(first_failure, "an operation issued inside the group failed when the group ran "
                                          "(aclGetRecentErrMsg named it before this call)")
        return 0

    def _run_group(self, comm: Any, plan: _Plan, streams: List[Any]) -> List[int]:
        """Launch one communicator's share of the group (depth 0 now: the collectives run, not defer)."""
        codes: List[int] = []
        if plan.p2p:       # its tuples are in HcclSendRecvItem's field order
            items = ffi.new("HcclSendRecvItem[]", plan.p2p)
            codes.append(int(self.collectives.HcclBatchSendRecv(items, len(plan.p2p), comm, plan.p2p_stream)))
        for name, args in plan.collectives:
            codes.append(int(getattr(self.collectives, name)(*args)))
            stream = args[-1]
            if all(stream != known for known in streams):
                streams.append(stream)
        return codes
