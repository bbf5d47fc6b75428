"""The emulator's named task types (sim/tasks.py): kind codes filled in, fields by name, bytes per task."""
from __future__ import annotations

import copy
import pickle

import pytest

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
    (tasks.ChannelRecord, ("th", "ch", 3), "ChannelNotifyRecord"),
    (tasks.ChannelWait, ("th", "ch", 3, 2.5), "ChannelNotifyWait"),
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
