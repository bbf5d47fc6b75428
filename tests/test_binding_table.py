"""The binding's C-function table: entries match the cdef, the API is unchanged, the hot paths cost nothing extra."""
from __future__ import annotations

import inspect
import json
import re
import traceback
from pathlib import Path
from typing import Any, Dict

import pytest

from hcomm_cffi import calltable, errors
from hcomm_cffi._ffi import ffi
from hcomm_cffi.binding import C_FUNCTIONS, Binding
from hcomm_cffi.calltable import CFunction, Out, OutArray, c_pointer_type, install, source_of
from hcomm_cffi.sim.abi_check import function_types

BEFORE: Dict[str, Any] = json.loads((Path(__file__).parent / "data" / "binding_api_before_table.json").read_text())
CDEF = (Path(__file__).resolve().parents[1] / "hcomm_cffi" / "_cdef.py").read_text()
HOT = ("local_copy", "local_reduce", "write", "channel_notify_record", "channel_notify_wait",
       "thread_notify_record", "thread_notify_wait", "batch_mode_start", "batch_mode_end", "synchronize_stream")


def _normalise(text: str) -> str:
    return re.sub(r"\s*([*,()])\s*", r"\1", " ".join(text.split()))


@pytest.mark.parametrize("entry", C_FUNCTIONS, ids=[e.method for e in C_FUNCTIONS])
def test_entry_is_the_cdef_declaration(entry: CFunction) -> None:
    declared = function_types()
    assert entry.c_name in declared, f"{entry.c_name} is not declared in hcomm_cffi/_cdef.py"
    assert ffi.typeof(c_pointer_type(entry.prototype)) is ffi.typeof(declared[entry.c_name])
    assert _normalise(entry.prototype) + ";" in _normalise(CDEF)


def test_every_c_function_appears_once() -> None:
    names = [e.c_name for e in C_FUNCTIONS]
    assert len(names) == len(set(names))
    # the two message getters are called by the error path itself, not through the table
    assert set(BEFORE["c_functions"]) - set(names) == set()


@pytest.mark.parametrize("method", sorted(BEFORE["methods"]))
def test_every_method_of_the_hand_written_binding_keeps_its_signature(method: str) -> None:
    assert str(inspect.signature(getattr(Binding, method))) == BEFORE["methods"][method]


#: methods added to the table since the snapshot, on purpose (one set per topic)
ADDED_ACL_GRAPHS = {"capture_begin", "capture_get_info", "capture_end", "capture_thread_exchange_mode",
                    "graph_execute_async", "graph_execute", "graph_destroy", "capture_task_group_begin",
                    "capture_task_group_end", "capture_task_update_begin", "capture_task_update_end"}


def test_no_public_method_was_added_by_accident() -> None:
    public = {n for n in dir(Binding) if not n.startswith("_")}
    assert public - set(BEFORE["methods"]) == {"lib"} | ADDED_ACL_GRAPHS


def _reference(self: Any, thread: Any, dst: Any, src: Any, nbytes: Any) -> None:
    """The hand-written method the binding had before its table."""
    rc = self._lib.HcommLocalCopyOnThread(thread, dst, src, nbytes)
    if rc:
        raise self._error(rc, "HcommLocalCopyOnThread")


def test_hot_methods_are_one_call_and_one_check() -> None:
    ref = _reference.__code__
    assert Binding.local_copy.__code__.co_code == ref.co_code
    assert Binding.local_copy.__code__.co_names == ref.co_names
    for name in HOT:
        code = getattr(Binding, name).__code__
        # self._lib.<C function>(args) and self._error: nothing else is looked up per call ...
        assert set(code.co_names) <= {"_lib", "_error", "_tag"}.union(e.c_name for e in C_FUNCTIONS), name
        # ... and no out-parameter, check or helper call runs before the C call
        assert "ffi" not in code.co_names and "_out0" not in code.co_varnames, name


def test_generated_source_is_readable_and_shows_in_tracebacks() -> None:
    text = source_of(Binding, "thread_acquire")
    assert "# C: HcclResult HcclThreadAcquire(" in text
    assert "_uint('thread_num', thread_num)" in text and "ffi.new('ThreadHandle[]', thread_num)" in text

    class Failing:
        def HcommWriteOnThread(self, *args: Any) -> int:
            return 4

    with pytest.raises(errors.HcclInternalError) as info:
        Binding(Failing()).write(1, 2, ffi.NULL, ffi.NULL, 8)
    shown = "".join(traceback.format_exception(info.value))
    assert "raise self._error(rc, 'HcommWriteOnThread')" in shown
    with pytest.raises(KeyError, match="comm_init_root_info was not generated"):
        source_of(Binding, "comm_init_root_info")


def test_out_parameters_are_declared_and_returned() -> None:
    class Lib:
        def HcclGetHcclBuffer(self, comm: Any, buf: Any, size: Any) -> int:
            buf[0], size[0] = ffi.cast("void *", 0x1000), 77
            return 0

        def HcclThreadAcquire(self, comm: Any, engine: int, n: int, notifies: int, threads: Any) -> int:
            for i in range(n):
                threads[i] = 10 + i
            return 0

    b = Binding(Lib())
    ptr, size = b.get_hccl_buffer(None)
    assert ffi.typeof(ptr) is ffi.typeof("char *") and int(ffi.cast("uintptr_t", ptr)) == 0x1000 and size == 77
    assert b.thread_acquire(None, 1, 3, 2) == [10, 11, 12]


def test_install_rejects_an_entry_whose_arguments_do_not_match_its_prototype() -> None:
    class Target:
        pass

    bad = CFunction("fence", "int32_t HcommFenceOnThread(ThreadHandle thread)", "thread: int, extra: int")
    with pytest.raises(ValueError, match="'fence': 2 C arguments for HcommFenceOnThread, whose prototype declares 1"):
        install(Target, [bad], {"__name__": "t"})
    out_too_many = CFunction("get_device", "aclError aclrtGetDevice(int32_t* deviceId)",
                             args=(Out("int32_t *"), OutArray("int32_t", "1")))
    with pytest.raises(ValueError, match="2 C arguments for aclrtGetDevice"):
        install(Target, [out_too_many], {"__name__": "t"})


def test_install_rejects_duplicates_and_hand_written_clashes() -> None:
    class Target:
        def fence(self) -> None:
            """Written by hand."""

    entry = CFunction("fence", "int32_t HcommFenceOnThread(ThreadHandle thread)", "thread: int")
    with pytest.raises(ValueError, match=r"\['fence'\] are also written by hand in Target"):
        install(Target, [entry], {"__name__": "t"})
    with pytest.raises(ValueError, match=r"methods \['fence'\] more than once"):
        install(type("Other", (), {}), [entry, entry], {"__name__": "t"})


def test_c_pointer_type_rejects_what_is_not_a_declaration() -> None:
    assert calltable.c_pointer_type("aclError aclFinalize(void);") == "aclError(*)(void)"
    assert calltable.c_pointer_type("const char* aclrtGetSocName(void)") == "const char*(*)(void)"
    with pytest.raises(ValueError, match="is not a C declaration"):
        calltable.c_pointer_type("int f(int")
