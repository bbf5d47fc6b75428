"""Where the µs of one 8-byte native ``HcclAllReduce`` go on the emulator, layer by layer (issue 43's profile).

    HCOMM_SIM_CHECK=off HCOMM_CHECK_COLLECTIVES=0 hcomm run -n 2 -- python benchmarks/profile_native.py
    HCOMM_SIM_CHECK=off HCOMM_CHECK_COLLECTIVES=0 hcomm run -n 4 -- python benchmarks/profile_native.py --iters 2000
    hcomm run -n 2 -- python benchmarks/profile_native.py      # the checker at its default, as users run

Every rank runs the same loops (so peers are in step), rank 0 prints µs per call:

* ``bench loop``: what ``compare_allreduce.py`` times: ``iters`` calls launched back to back, one stream
  synchronisation at the end;
* ``blocking``: call + ``aclrtSynchronizeStream`` each time;
* the layers of the blocking call, each peeled off in turn: the binding's method, the library's entry
  (its divert: group, capture and the repeat lookup), the launch (``EXECUTOR.enter``, the replay ring's one C call,
  or ``EXECUTOR.launch``: the task list run as far as the notifies allow) and the synchronisation (``run_until``: the rest of the list, polling and sleeping);
* inside the executor: per task kind, how many of the call's tasks ran and the µs they took when they ran
  (a wait's time here is only its successful look; the time it spent blocked is in the synchronisation);
* how the synchronisation ended: at once, after runs of the replay ring in C with its waits, after waits in C on the
  ring's head, after polling (sched_yield rounds) or after futex sleeps.

It reaches into the emulator's internals on purpose (it profiles them).
"""
from __future__ import annotations

import argparse
import time
from collections import defaultdict
from types import SimpleNamespace
from typing import Any, Callable, Dict, List

import numpy as np

from hcomm_cffi import settings
from hcomm_cffi._ffi import ffi
from hcomm_cffi.binding import get_binding
from hcomm_cffi.bootstrap import discover
from hcomm_cffi.enums import DataType, MemcpyKind, ReduceOp
from hcomm_cffi.sim import compiled, runtime
from hcomm_cffi.sim.tasks import KIND_NAMES


def _per_call(fn: Callable[[], None], iters: int, barrier: Callable[[], None]) -> float:
    barrier()
    start = time.perf_counter_ns()
    for _ in range(iters):
        fn()
    return (time.perf_counter_ns() - start) / iters / 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=5000)
    args = ap.parse_args()
    b = get_binding()
    b.acl_init()
    spec = discover(b, select_device=lambda local: b.set_device(local % max(1, b.get_device_count())))
    comm = b.comm_init_root_info(spec.size, spec.root_info, spec.rank)
    stream = b.create_stream()
    lib = b.lib
    raw = getattr(lib, "raw", lib)
    send, recv = b.malloc(8), b.malloc(8)
    host = np.ones(2, np.float32)
    b.memcpy(send, 8, ffi.from_buffer(host), 8, MemcpyKind.HOST_TO_DEVICE)
    dt, op = int(DataType.FP32), int(ReduceOp.SUM)
    sync = b.synchronize_stream
    q = raw.state.stream(stream)

    def barrier() -> None:
        b.barrier(comm, stream)
        sync(stream)

    def binding_call() -> None:
        b.all_reduce(send, recv, 2, dt, op, comm, stream)

    def blocking() -> None:
        b.all_reduce(send, recv, 2, dt, op, comm, stream)
        sync(stream)

    for _ in range(500):
        blocking()
    n = args.iters
    rows: Dict[str, float] = {}
    barrier()
    start = time.perf_counter_ns()
    cpu = time.process_time_ns()
    for _ in range(n):
        binding_call()
    sync(stream)
    rows["bench loop (launch x iters, one sync)"] = (time.perf_counter_ns() - start) / n / 1e3
    rows["  its CPU time on this rank"] = (time.process_time_ns() - cpu) / n / 1e3
    rows["blocking: call + synchronize"] = _per_call(blocking, n, barrier)

    # the layers of the blocking call, timed inside one loop
    clock = time.perf_counter_ns
    spent = defaultdict(int)
    executor = runtime.EXECUTOR
    real_launch, real_enter = executor.launch, executor.enter
    inner: Dict[str, int] = {"launch": 0}

    def timed_launch(queue: Any, tasks: Any, run: bool = True, program: Any = None) -> None:
        t0 = clock()
        real_launch(queue, tasks, run, program)
        inner["launch"] += clock() - t0

    def timed_enter(*args: Any) -> bool:
        t0 = clock()
        took = real_enter(*args)
        inner["launch"] += clock() - t0
        return took

    ends: Dict[str, int] = defaultdict(int)
    real_poll, real_sleep = executor._poll_heads, executor._sleep

    def counted_poll(deadline: Any = None) -> bool:
        ends["polls"] += 1
        return real_poll(deadline)

    def counted_sleep(*a: Any) -> None:
        ends["futex sleeps"] += 1
        real_sleep(*a)

    real_wait, real_sync = compiled.wait, compiled.Ring.sync

    def counted_wait(*a: Any) -> bool:
        ends["waits in C (sched_yield looks, then one doorbell sleep)"] += 1
        return real_wait(*a)

    def counted_sync(*a: Any) -> Any:
        ends["runs of the ring in C with its waits (hce_sync)"] += 1
        return real_sync(*a)

    executor.launch = timed_launch            # type: ignore[method-assign]
    executor.enter = timed_enter              # type: ignore[method-assign]
    compiled.wait = counted_wait              # type: ignore[assignment]
    compiled.Ring.sync = counted_sync         # type: ignore[method-assign]
    executor._poll_heads = counted_poll        # type: ignore[method-assign]
    executor._sleep = counted_sleep            # type: ignore[method-assign,assignment]
    barrier()
    ends.clear()
    for _ in range(n):
        t0 = clock()
        rc = lib.HcclAllReduce(send, recv, 2, dt, op, comm, stream)
        t1 = clock()
        sync(stream)
        t2 = clock()
        spent["library entry to launch"] += t1 - t0
        spent["synchronize (rest of the list, waits)"] += t2 - t1
        assert rc == 0
    spent["  of which EXECUTOR.enter/launch"] = inner["launch"]
    executor.launch, executor.enter = real_launch, real_enter     # type: ignore[method-assign]
    executor._poll_heads, executor._sleep = real_poll, real_sleep   # type: ignore[method-assign]
    compiled.wait = real_wait                 # type: ignore[assignment]
    compiled.Ring.sync = real_sync            # type: ignore[method-assign]
    binding_only = _per_call(blocking, n, barrier)

    # per task kind inside the executor: through its tracing hook (the time from a task's start to its end; a
    # wait's only from its last, successful look); traced queues run on the Python engine
    kinds: Dict[int, List[int]] = defaultdict(lambda: [0, 0])
    real_trace, real_traced = runtime._trace, runtime._traced

    def timed_task(queue: Any, t: Any, t0: int, t1: int) -> None:
        k = kinds[t[0]]
        k[0] += 1
        k[1] += t1 - t0

    runtime._trace = SimpleNamespace(ACTIVE=True, now=clock)     # type: ignore[assignment]
    runtime._traced = timed_task                                  # type: ignore[assignment]
    barrier()
    kinds.clear()
    for _ in range(n):
        blocking()
    runtime._trace, runtime._traced = real_trace, real_traced

    if spec.rank == 0:
        print(f"# 8-byte native HcclAllReduce, {spec.size} ranks, µs per call on rank 0, {n} calls "
              f"(queue executed {q.executed} tasks); data plane engine: {compiled.engine_status()}; checker "
              f"HCOMM_SIM_CHECK={settings.value('HCOMM_SIM_CHECK')}")
        for name, us in rows.items():
            print(f"{name:>44s} {us:8.2f}")
        print(f"{'blocking, binding method + sync':>44s} {binding_only:8.2f}")
        for name, ns in spent.items():
            print(f"{name:>44s} {ns / n / 1e3:8.2f}")
        print("# the synchronisations: " + (", ".join(f"{k} {v / n:.2f} per call" for k, v in ends.items())
                                              or "each ended at once (the peers' records had come)"))
        print("# tasks per call by kind: count, µs per call when they ran")
        for kind, (count, ns) in sorted(kinds.items()):
            print(f"{KIND_NAMES.get(kind, kind):>44s} {count / n:5.1f} {ns / n / 1e3:8.2f}")
    barrier()
    b.free(send)
    b.free(recv)
    b.destroy_stream(stream)
    b.comm_destroy(comm)


if __name__ == "__main__":
    main()
