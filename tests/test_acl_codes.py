"""One table of aclError codes: the C names as constants, their classes and hints, used by the emulator too."""
from __future__ import annotations

import pytest

from hcomm_cffi import errors
from hcomm_cffi.sim import errors as sim_errors

# values copied from the runtime's include/external/acl/error_codes/rt_error_codes.h and acl_base.h
VENDOR = {
    "ACL_SUCCESS": 0, "ACL_ERROR_INVALID_PARAM": 100000, "ACL_ERROR_UNINITIALIZE": 100001,
    "ACL_ERROR_REPEAT_INITIALIZE": 100002, "ACL_ERROR_BAD_ALLOC": 200000, "ACL_ERROR_INTERNAL_ERROR": 500000,
    "ACL_ERROR_RT_PARAM_INVALID": 107000, "ACL_ERROR_RT_INVALID_DEVICEID": 107001,
    "ACL_ERROR_RT_CONTEXT_NULL": 107002, "ACL_ERROR_RT_INVALID_HANDLE": 107017,
    "ACL_ERROR_RT_WAIT_TIMEOUT": 107019, "ACL_ERROR_RT_TASK_TIMEOUT": 107020,
    "ACL_ERROR_RT_FEATURE_NOT_SUPPORT": 207000, "ACL_ERROR_RT_MEMORY_ALLOCATION": 207001,
    "ACL_ERROR_RT_NO_DEVICE": 207004, "ACL_ERROR_RT_DEVICE_OOM": 207018, "ACL_ERROR_RT_INTERNAL_ERROR": 507000,
    "ACL_ERROR_RT_STREAM_SYNC_TIMEOUT": 507046, "ACL_ERROR_RT_EVENT_SYNC_TIMEOUT": 507047,
    "ACL_ERROR_RT_FFTS_PLUS_TIMEOUT": 507048, "ACL_ERROR_RT_LINK_ERROR": 507056,
    "ACL_ERROR_RT_SUSPECT_REMOTE_ERROR": 507057, "ACL_ERROR_RT_COMM_OP_RETRY_FAIL": 507904,
    # ACL graphs
    "ACL_ERROR_RT_STREAM_CAPTURED": 107027, "ACL_ERROR_RT_EVENT_CAPTURED": 107028,
    "ACL_ERROR_RT_STREAM_NOT_CAPTURED": 107029, "ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT": 107030,
    "ACL_ERROR_RT_STREAM_CAPTURE_IMPLICIT": 107031, "ACL_ERROR_STREAM_TASK_GROUP_STATUS": 107033, "ACL_ERROR_RT_STREAM_CAPTURE_UNMATCHED": 107036,
    "ACL_ERROR_RT_STREAM_CAPTURE_WRONG_THREAD": 107038, "ACL_ERROR_RT_MODEL_UPDATE_FAILED": 107040,
    "ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED": 507903,
    "ACL_ERROR_INVALID_PROFILING_CONFIG": 100010, "ACL_ERROR_PROF_ALREADY_RUN": 100042,
    "ACL_ERROR_PROF_NOT_RUN": 100043, "ACL_ERROR_API_NOT_SUPPORT": 200001,
    "ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID": 107006,
}


def test_constants_are_the_vendor_values() -> None:
    assert errors.ACL_CODES == VENDOR
    for name, code in VENDOR.items():
        assert getattr(errors, name) == code and type(getattr(errors, name)) is int, name
        assert name in errors.__all__


@pytest.mark.parametrize("name", sorted(set(VENDOR) - {"ACL_SUCCESS"}))
def test_every_error_code_has_its_class_name_and_hint_path(name: str) -> None:
    code = VENDOR[name]
    err = errors.error_for(code, "aclrtFoo")
    assert isinstance(err, errors.AclError) and type(err) is errors.ACL_ERROR_CLASSES[code]
    assert err.code_name == name == errors.ACL_ERROR_NAMES[code]
    assert str(err).startswith(f"aclrtFoo failed: {name} ({code})")


def test_invalid_handle_has_a_class_and_a_hint() -> None:
    err = errors.error_for(107017, "aclrtDestroyStream")
    assert type(err) is errors.AclRtInvalidHandleError and "Hint:" in str(err)


def test_success_has_no_exception_class() -> None:
    assert 0 not in errors.ACL_ERROR_CLASSES and 0 not in errors.ACL_ERROR_NAMES


def test_the_emulator_uses_the_same_constants() -> None:
    for name in sim_errors.__all__:
        if name.startswith("ACL_"):
            assert getattr(sim_errors, name) is getattr(errors, name), name
