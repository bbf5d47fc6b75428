"""The emulator's named task types (sim/tasks.py): kind codes filled in, fields by name, bytes per task."""
from __future__ import annotations

import copy
import pickle
from typing import List, Tuple

import pytest

from hcomm_cffi._ffi import ffi
from hcomm_cffi.enums import DataType, ReduceOp
from hcomm_cffi.sim import runtime, tasks

# (constructor, arguments after the kind, the vendor's name of the kind)
CASES = [
    (tasks.LocalCopy, ("th", 1, 2, 16), "LocalCopy"),
    (tasks.LocalReduce, ("th", 1, 2, 4, DataType.FP32, ReduceOp.SUM), "LocalReduce"),
    (tasks.Reduce3, ("th", 1, 2, 3, 4, DataType.BFP16, ReduceOp.MAX), "Reduce3"),
    (tasks.UfuncReduce, ("th", max, "out", "a", "b"), "Reduce"),
    (tasks.Write, ("th", "ch", 1, 2, 16), "Write"),
    (tasks.Read, ("th", "ch", 1, 2, 16), "Read"),
    (tasks.WriteReduce, ("th", "ch", 1, 2, 4, DataType.INT16, ReduceOp.MIN), "WriteReduce"),
    (tasks.ReadReduce, ("th", "ch", 1, 2, 4, DataType.INT16, ReduceOp.MIN), "ReadReduce"),
    (tasks.ThreadRecord, ("th", "other", 3), "ThreadNotifyRecord"),
    (tasks.ThreadWait, ("th", 3, 0.0), "ThreadNotifyWait"),
    (tasks.ChannelRecord, ("th", "ch", 3, 0x8000_0001), "ChannelNotifyRecord"),
    (tasks.ChannelWait, ("th", "ch", 3, 2.5, 0x8000_0001), "ChannelNotifyWait"),
    (tasks.EventRecord, ("ev",), "EventRecord"),
    (tasks.EventWait, ("ev", 2), "StreamWaitEvent"),
    (tasks.HostCall, (print,), "HostTask"),
]


def test_every_kind_code_has_exactly_one_type() -> None:
    kinds = [cls(*args)[0] for cls, args, _ in CASES]
    assert sorted(kinds) == sorted(tasks.KIND_NAMES) == list(range(15))


@pytest.mark.parametrize("cls, args, name", CASES, ids=[c[0].__name__ for c in CASES])
def test_a_task_is_its_kind_then_its_arguments(cls: type, args: tuple, name: str) -> None:
    t = cls(*args)
    assert isinstance(t, tuple) and t[-len(args):] == args and len(t) == len(cls._fields)
    assert tasks.KIND_NAMES[t[0]] == t.name == name
    # stream tasks of the ACL layer carry no thread; every other kind is issued by one
    assert t.thread == (None if name in ("EventRecord", "StreamWaitEvent", "HostTask") else "th")
    assert copy.copy(t) == t and type(copy.deepcopy(t)) is cls
    assert pickle.loads(pickle.dumps(t)) == t
    assert t._replace(thread="other").thread == "other" and t._replace(thread="other")[0] == t[0]


def test_fields_are_named_where_the_executor_reads_them() -> None:
    wait = tasks.ChannelWait("th", "ch", 5, 1.5)
    assert (wait.thread, wait.channel, wait.index, wait.timeout) == ("th", "ch", 5, 1.5)
    rec = tasks.ThreadRecord("th", "main", 2)
    assert (rec.target, rec.index) == ("main", 2)
    assert tasks.EventWait("ev", 7).records == 7


def test_task_bytes_counts_elements_times_itemsize() -> None:
    assert tasks.task_bytes(tasks.LocalCopy(None, 1, 2, 40)) == 40
    assert tasks.task_bytes(tasks.Read("th", "ch", 1, 2, 24)) == 24
    assert tasks.task_bytes(tasks.LocalReduce("th", 1, 2, 10, DataType.FP16, ReduceOp.SUM)) == 20
    assert tasks.task_bytes(tasks.WriteReduce("th", "ch", 1, 2, 10, DataType.INT32, ReduceOp.SUM)) == 40
    assert tasks.task_bytes(tasks.ChannelRecord("th", "ch", 0)) == 0


def test_runtime_still_exports_the_kind_codes() -> None:
    assert (runtime.C_WAIT, runtime.UFUNC, runtime.KIND_NAMES) == (tasks.C_WAIT, tasks.UFUNC, tasks.KIND_NAMES)


def _issued_kinds(rank: int, n: int, root: bytes) -> List[Tuple[str, str, bool]]:
    """Every data-plane call prepared into one batch: (type name, kind name, rebuilt by its type == itself)."""
    from hcomm_cffi.enums import Engine
    from simhelp import open_rank

    env = open_rank(rank, n, root)
    try:
        b, raw = env.b, getattr(env.lib, "raw", env.lib)
        ch = env.channels([1 - rank])[1 - rank]
        th = b.thread_acquire_with_stream(env.comm, Engine.CPU_TS, env.stream, 2)
        peer_buf, _ = b.channel_get_hccl_buffer(env.comm, ch)
        mine = ffi.cast("char *", env.buf)
        f32, add = int(DataType.FP32), int(ReduceOp.SUM)
        calls = [(b.local_copy, (th, mine, mine + 64, 16)),
                 (b.local_reduce, (th, mine, mine + 64, 4, f32, add)),
                 (b.thread_notify_record, (th, th, 1)),
                 (b.thread_notify_wait, (th, 1, 5)),
                 (raw.HcommThreadNotifyWaitOnThreadWithDefaultTimeout, (th, 1)),
                 (b.channel_notify_record, (th, ch, 0)),
                 (b.channel_notify_wait, (th, ch, 0, 5)),
                 (b.write, (th, ch, peer_buf, mine, 16)),
                 (b.read, (th, ch, mine, peer_buf, 16)),
                 (b.write_reduce, (th, ch, peer_buf, mine, 4, f32, add)),
                 (b.read_reduce, (th, ch, mine, peer_buf, 4, f32, add))]
        prepared = raw.sim_prepare_batch(calls)      # built as issued, never launched
        (issued,) = prepared.tasks.values()
        return [(type(t).__name__, t.name, copy.copy(t) == t) for t in issued]
    finally:
        env.close()


def test_the_data_plane_builds_each_call_as_its_own_kind() -> None:
    # the issue path builds tasks with tuple.__new__(Type, (KIND, ...)): the type and the kind code must agree
    from multiproc import run_ranks

    want = [("LocalCopy", "LocalCopy"), ("LocalReduce", "LocalReduce"), ("ThreadRecord", "ThreadNotifyRecord"),
            ("ThreadWait", "ThreadNotifyWait"), ("ThreadWait", "ThreadNotifyWait"),
            ("ChannelRecord", "ChannelNotifyRecord"), ("ChannelWait", "ChannelNotifyWait"), ("Write", "Write"),
            ("Read", "Read"), ("WriteReduce", "WriteReduce"), ("ReadReduce", "ReadReduce")]
    for issued in run_ranks(2, _issued_kinds, timeout=60):
        assert [(cls, name) for cls, name, _ in issued] == want
        assert all(same for _, _, same in issued)


def test_a_queue_runs_all_its_tasks_in_one_executor_frame() -> None:
    """``Executor._run_queue`` dispatches every kind in line: however many tasks a queue holds, launching it passes
    two frames of sim/runtime.py (``launch``, ``_run_queue``), not one more per task (issue 42's frame count)."""
    import sys
    from collections import Counter

    import numpy as np

    from hcomm_cffi.sim.queues import Queue, SimEvent

    src, dst = np.arange(4, dtype=np.float32), np.zeros(4, np.float32)
    a, b, out = np.ones(4, np.float32), np.full(4, 2.0, np.float32), np.zeros(4, np.float32)
    ran: List[int] = []
    ev = SimEvent(1)
    q = Queue("test stream")
    work = [tasks.LocalCopy(None, ffi.from_buffer(dst), ffi.from_buffer(src), dst.nbytes),
            tasks.HostCall(lambda: ran.append(1)), tasks.EventRecord(ev), tasks.EventWait(ev, 1),
            tasks.UfuncReduce(None, np.add, out, a, b), tasks.HostCall(lambda: ran.append(2))]
    frames: Counter = Counter()

    def count(frame: object, event: str, arg: object) -> None:
        code = frame.f_code          # type: ignore[attr-defined]
        if event == "call" and code.co_filename == runtime.__file__:
            frames[code.co_name] += 1

    sys.setprofile(count)
    try:
        runtime.EXECUTOR.launch(q, work)
    finally:
        sys.setprofile(None)
    assert not q.tasks and q.error is None and q.executed == len(work)
    assert dst.tolist() == src.tolist() and out.tolist() == [3.0] * 4 and ran == [1, 2] and ev.completed == 1
    assert frames == {"launch": 1, "_run_queue": 1}, frames
