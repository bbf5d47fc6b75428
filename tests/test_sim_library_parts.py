"""How the emulated library is composed: one part per vendor header, one error-to-code path, explicit group deferral."""
from __future__ import annotations

import re
from typing import Dict

from hcomm_cffi._cdef import CDEF, DECLARATION, FUNCTIONS_MARKER
from hcomm_cffi._ffi import ffi
from hcomm_cffi.enums import HcclResult
from hcomm_cffi.lib.contract import Backend
from hcomm_cffi.sim import SimLibrary
from hcomm_cffi.sim.abi_check import function_types
from hcomm_cffi.sim.group import GROUPED_FUNCTIONS
from hcomm_cffi.sim.native import NativeCollectives
from hcomm_cffi.sim.part import Part, c_functions


def _headers() -> Dict[str, str]:
    """Function name -> the header comment of _cdef.py it is declared under."""
    out, header = {}, ""
    for line in CDEF[CDEF.find(FUNCTIONS_MARKER):].splitlines():
        m = re.match(r"^/\* ((?:hccl|hcomm|acl)/\w+\.h) \*/$", line)
        if m:
            header = m.group(1)
        for _, name, _ in DECLARATION.findall(line):
            out[name] = header
    return out


def test_the_library_holds_its_parts_instead_of_inheriting_them() -> None:
    assert SimLibrary.__bases__ == (Backend,)
    lib = SimLibrary()
    assert len(lib.parts) >= 10
    assert sum(len(c_functions(part)) for part in lib.parts) == len(lib.functions)   # no name in two parts
    for part in lib.parts:
        # a part is a Part and nothing else: no part reaches another through base-class order
        assert type(part).__bases__ == (Part,), type(part)
        assert part.state is lib.state


def test_each_part_implements_functions_of_its_own_headers() -> None:
    headers = _headers()
    lib = SimLibrary()
    for part in lib.parts:
        for name, fn in lib.functions.items():
            if fn.__self__ is part and name in headers:
                assert headers[name] in type(part).HEADERS, (name, headers[name], type(part).__name__)


def test_every_c_function_is_one_entry_wrapper_deep() -> None:
    lib = SimLibrary()
    assert len(lib.functions) > 150
    for name, fn in lib.functions.items():
        assert getattr(lib, name) is fn, name                      # the attribute is the part's bound method
        assert getattr(fn.__func__, "c_function", None) == name, name
        assert not hasattr(fn.__func__.__wrapped__, "c_function"), name    # no wrapper behind the entry
    stub = lib.HcclCommSuspend                                     # declared, not emulated: through entry too
    assert stub.c_function == "HcclCommSuspend"
    assert stub(ffi.NULL) == int(HcclResult.E_NOT_SUPPORT)
    assert ffi.string(lib.aclGetRecentErrMsg()).decode().startswith("HcclCommSuspend is not implemented")


def test_a_pointer_function_fails_with_null_and_its_message() -> None:
    lib = SimLibrary()
    assert lib.aclprofCreateConfig(ffi.NULL, 0, 0, ffi.NULL, 0) == ffi.NULL
    assert ffi.string(lib.aclGetRecentErrMsg()).decode().startswith("aclprofCreateConfig: deviceIdList is NULL")


def test_group_deferral_is_the_collectives_own_entry() -> None:
    lib = SimLibrary()
    for name in GROUPED_FUNCTIONS:
        fn = lib.functions[name]
        assert type(fn.__self__) is NativeCollectives, name
        assert fn.__func__ is getattr(NativeCollectives, name)
        assert fn.__func__.diverted, name                          # group.collective: deferred inside a group


def _call_everything_with_zeros(rank: int, n: int, root: bytes) -> Dict[str, str]:
    """Every emulated C function called with 0 for each argument: what escaped it (nothing may)."""
    import faulthandler
    faulthandler.dump_traceback_later(50)              # a call that blocks names itself
    lib = SimLibrary()
    escaped: Dict[str, str] = {}
    for name, fn in sorted(lib.functions.items()):
        if name in ("HcclGroupStart", "aclrtResetDevice"):
            continue            # would leave the collectives after it deferred / the thread without a device
        declared = function_types().get(name)                 # cdef parameters, else the Python ones
        nargs = (len(declared.split("(*)(", 1)[1][:-1].split(",")) if declared and not declared.endswith("(void)")
                 else 0 if declared else fn.__func__.__wrapped__.__code__.co_argcount - 1)
        try:
            result = fn(*([0] * nargs))
        except BaseException as exc:       # a C function never raises: entry turns everything into its result
            escaped[name] = repr(exc)
            continue
        if not isinstance(result, (int, ffi.CData)):
            escaped[name] = f"returned {result!r}"
    return escaped


def test_no_c_function_raises_whatever_its_arguments() -> None:
    from multiproc import run_ranks
    assert run_ranks(1, _call_everything_with_zeros, timeout=120)[0] == {}
