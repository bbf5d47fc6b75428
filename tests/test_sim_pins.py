"""A communicator's memory stays mapped while another host thread reads it, and only then (sim/runtime.py pins).

An exception raised by a signal handler between a pin and its release (Ctrl-C, an alarm) used to leave the
communicator pinned by a reader that was gone: destroying it then waited the full 30 s retire timeout.  Pins
are counted per host thread now: the destroying thread's own leftover pin is dropped, another thread's pin is
still waited for.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Dict

import numpy as np

from multiproc import run_ranks


def body(rank: int, n: int, root_info: bytes) -> Dict[str, Any]:
    import hcomm_cffi as hcomm
    from hcomm_cffi.sim.library import _STATE
    from hcomm_cffi.sim.runtime import EXECUTOR

    hcomm.init(rank=rank, world_size=n, root_info=root_info)
    try:
        own, other = hcomm.Comm("own-pin"), hcomm.Comm("other-thread-pin")
        for c in (own, other):
            c.allreduce(np.ones(4, np.float32))
        with EXECUTOR.lock:          # what an exception between a pin and its release leaves in this thread
            EXECUTOR._pin({_STATE.comm(own.handle)})
        t0 = time.monotonic()
        own.destroy()
        own_s = time.monotonic() - t0

        reader = _STATE.comm(other.handle)
        pinned = threading.Event()

        def read_a_while() -> None:   # another host thread reading the memory outside the lock
            with EXECUTOR.lock:
                held = EXECUTOR._pin({reader})
            pinned.set()
            time.sleep(0.5)
            EXECUTOR._unpin(held)
        t = threading.Thread(target=read_a_while)
        t.start()
        pinned.wait(5)
        t0 = time.monotonic()
        other.destroy()
        other_s = time.monotonic() - t0
        t.join(5)
        return {"own": own_s, "other": other_s}
    finally:
        hcomm.finalize()


def test_a_pin_left_by_this_thread_does_not_delay_destroy_and_another_threads_is_waited_for() -> None:
    for r in run_ranks(2, body, timeout=60):
        assert r["own"] < 5.0, f"destroy waited {r['own']:.1f} s for a pin this thread left behind"
        assert r["other"] >= 0.4, f"destroy did not wait for another thread's read ({r['other']:.2f} s)"
