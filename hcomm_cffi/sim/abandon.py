"""Abandoning a rank's communicator: its queued tasks are discarded and its header says FAILED.

The emulator's executor runs inside library calls, so an exception that leaves a stream
synchronisation early (Ctrl-C, an alarm handler, pytest-timeout's signal) leaves the rest of the
operation queued, and the next library call of the process would run it against buffers the caller
has since reused -- a peer would then receive the new contents as the old call's data.  The Comm API
abandons the communicator instead (``Backend.abandon_communicator``); peers blocked on it see its
header (``runtime.Executor._check_peers``).
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from .errors import ACL_ERROR_RT_INTERNAL_ERROR, HcclResult, SimError
from .runtime import EXECUTOR
from .state import SimState

__all__ = ["abandon"]


def abandon(state: SimState, open_batch: Optional[Dict[Any, List[Any]]], handle: Any, why: str,
            interrupted: bool = False) -> bool:
    """Fail every queue of communicator ``handle`` with ``why`` (its tasks dropped, event waiters released) and mark
    it FAILED; False when it is not live.

    ``open_batch``: the tasks of a batch this host thread has open (HcommBatchModeStart without End), or None.
    ``interrupted``: an exception left the caller's wait: the header says ABANDONED, so peers fail at once
    (after a failure they wait ``PEER_LEFT_GRACE_S`` for their own, more precise error, e.g. a mismatch).
    Idempotent: a queue already failed keeps its first error.
    """
    try:
        comm = state.comm(handle)
    except SimError:
        return False           # destroyed or unknown: nothing of it can run any more
    message = f"rank {comm.rank} of communicator {comm.name} was abandoned: {why}"
    if interrupted:      # the exception left the executor: nothing of this thread still reads shared memory
        EXECUTOR.drop_pins_of_this_thread()
    with EXECUTOR.lock:
        if open_batch:
            for th in [th for th in open_batch if th.comm is comm]:
                del open_batch[th]
        for th in comm.all_threads():
            q = th.queue
            if q.tasks:
                EXECUTOR.fail_queue(q, HcclResult.E_INTERNAL, ACL_ERROR_RT_INTERNAL_ERROR, message)
        comm.record_failure(int(HcclResult.E_INTERNAL), message)   # the header says FAILED: peers stop waiting
        if interrupted:
            comm.abandoned()
    return True
