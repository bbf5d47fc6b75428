"""Return codes map to the right exception classes, fields, one-line messages and hints."""
from __future__ import annotations

import pickle

import pytest

from hcomm_cffi import errors
from hcomm_cffi.enums import HcclResult
from hcomm_cffi.errors import AclError, HcclError, error_for

EXPECTED_CLASSES = {
    1: "HcclParaError", 2: "HcclPtrError", 3: "HcclMemoryError", 4: "HcclInternalError",
    5: "HcclNotSupportError", 6: "HcclNotFoundError", 7: "HcclUnavailError", 8: "HcclSyscallError",
    9: "HcclTimeoutError", 10: "HcclOpenFileError", 11: "HcclTcpConnectError",
    12: "HcclRoceConnectError", 13: "HcclTcpTransferError", 14: "HcclRoceTransferError",
    15: "HcclRuntimeError", 16: "HcclDrvError", 17: "HcclProfilingError", 18: "HcclCceError",
    19: "HcclNetworkError", 20: "HcclAgainError", 21: "HcclRemoteError", 22: "HcclSuspendingError",
    23: "HcclOpRetryFailError", 24: "HcclOomError", 1041: "HcclInStatusError", 1042: "HcclReservedError",
}

ACL_EXPECTED = {
    100000: ("ACL_ERROR_INVALID_PARAM", "AclInvalidParamError"),
    100001: ("ACL_ERROR_UNINITIALIZE", "AclUninitializedError"),
    100002: ("ACL_ERROR_REPEAT_INITIALIZE", "AclRepeatInitializeError"),
    107000: ("ACL_ERROR_RT_PARAM_INVALID", "AclRtParamInvalidError"),
    107001: ("ACL_ERROR_RT_INVALID_DEVICEID", "AclRtInvalidDeviceError"),
    207001: ("ACL_ERROR_RT_MEMORY_ALLOCATION", "AclRtMemoryAllocationError"),
    507000: ("ACL_ERROR_RT_INTERNAL_ERROR", "AclRtInternalError"),
    507046: ("ACL_ERROR_RT_STREAM_SYNC_TIMEOUT", "AclRtStreamSyncTimeoutError"),
    507047: ("ACL_ERROR_RT_EVENT_SYNC_TIMEOUT", "AclRtEventSyncTimeoutError"),
    507048: ("ACL_ERROR_RT_FFTS_PLUS_TIMEOUT", "AclRtFftsPlusTimeoutError"),
    507057: ("ACL_ERROR_RT_SUSPECT_REMOTE_ERROR", "AclRtSuspectRemoteError"),
}


@pytest.mark.parametrize("code", [c for c in HcclResult if c != HcclResult.SUCCESS])
def test_every_hccl_result_has_its_class(code: HcclResult) -> None:
    err = error_for(int(code), "HcclFoo", "library says no")
    cls = getattr(errors, EXPECTED_CLASSES[int(code)])
    assert type(err) is cls and issubclass(cls, HcclError) and not isinstance(err, AclError)
    assert err.code == int(code) and cls.default_code == int(code)
    assert err.code_name == code.c_name
    assert err.function == "HcclFoo" and err.library_message == "library says no"
    assert str(err).startswith(f"HcclFoo failed: {code.c_name} ({int(code)}): library says no")
    assert "\n" not in str(err)


def test_message_format_example() -> None:
    err = error_for(9, "HcommChannelNotifyWaitOnThread", "notify 2 of channel 0x10 was not recorded\nwithin 5 s.")
    text = str(err)
    assert text.startswith(
        "HcommChannelNotifyWaitOnThread failed: HCCL_E_TIMEOUT (9): notify 2 of channel 0x10 was "
        "not recorded within 5 s. Hint: "
    )
    assert "\n" not in text and "HCCL_EXEC_TIMEOUT" in text and "HCCL_CONNECT_TIMEOUT" in text


def test_message_without_library_text_and_with_detail() -> None:
    err = error_for(1, "HcclThreadAcquire", None, detail="engine=5 thread_num=2")
    assert str(err).startswith("HcclThreadAcquire failed: HCCL_E_PARA (1) [engine=5 thread_num=2]. Hint: ")
    assert err.library_message is None and err.detail == "engine=5 thread_num=2"


@pytest.mark.parametrize("code, words", [
    (9, ["HCCL_EXEC_TIMEOUT", "HCCL_CONNECT_TIMEOUT"]),
    (7, ["200 threads", "65536", "cache"]),
    (3, ["HCCL_BUFFSIZE", "hcclBufferSize"]),
    (24, ["HCCL_BUFFSIZE"]),
    (1, ["argument named in the message"]),
    (5, ["engine", "protocol"]),
    (10, ["ranktable"]),
    (507048, ["HCCL_EXEC_TIMEOUT"]),
    (507046, ["HCCL_EXEC_TIMEOUT"]),
    (207001, ["HCCL_BUFFSIZE"]),
    (100001, ["aclInit"]),
])
def test_hints(code: int, words: list) -> None:
    hint = error_for(code, "x").hint
    assert hint is not None
    for word in words:
        assert word in hint


@pytest.mark.parametrize("code", [25, 1000, 1043, 99999])
def test_unknown_hccl_code(code: int) -> None:
    err = error_for(code, "HcclGetRankId")
    assert type(err) is HcclError
    assert f"({code})" in str(err) and "unknown HcclResult" in str(err)
    assert err.hint is None


def test_unknown_acl_code_and_acl_function() -> None:
    err = error_for(123456, "aclrtMalloc")
    assert type(err) is AclError and "(123456)" in str(err)
    err = error_for(7, "aclrtFoo")
    assert isinstance(err, HcclError)    # a known HcclResult number keeps its HCCL class


@pytest.mark.parametrize("code", sorted(ACL_EXPECTED))
def test_acl_codes(code: int) -> None:
    name, cls_name = ACL_EXPECTED[code]
    err = error_for(code, "aclrtSynchronizeStream", "stream failed")
    assert type(err) is getattr(errors, cls_name)
    assert isinstance(err, AclError) and isinstance(err, HcclError)
    assert err.code_name == name == errors.ACL_ERROR_NAMES[code]
    assert str(err).startswith(f"aclrtSynchronizeStream failed: {name} ({code}): stream failed")


@pytest.mark.parametrize("code", [9, 507046, 507047, 507048])
def test_timeouts_are_timeout_errors(code: int) -> None:
    assert isinstance(error_for(code, "f"), TimeoutError)


def test_non_timeouts_are_not_timeout_errors() -> None:
    assert not isinstance(error_for(21, "f"), TimeoutError)


def test_compat_stub_code() -> None:
    err = error_for(-1, "HcommFenceOnThread")
    assert type(err) is errors.HcclCompatStubError and "libhccl_compat.so" in (err.hint or "")
    assert "(-1)" in str(err)


@pytest.mark.parametrize("code", [9, 507057, 4242, -1])
def test_pickle_round_trip(code: int) -> None:
    err = error_for(code, "HcclAllReduce", "msg", detail="d")
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is type(err) and str(back) == str(err)
    assert (back.code, back.function, back.library_message, back.hint, back.detail) == \
        (err.code, err.function, err.library_message, err.hint, err.detail)


def test_can_be_raised_and_caught_by_base() -> None:
    with pytest.raises(HcclError) as info:
        raise error_for(20, "HcclCommDestroy")
    assert isinstance(info.value, errors.HcclAgainError)


def test_library_errors() -> None:
    assert issubclass(errors.LibraryNotFoundError, ImportError)
    err = errors.MissingSymbolError("HcclChannelDestroy", "/opt/lib64/libhcomm.so", "undefined\nsymbol")
    assert isinstance(err, AttributeError)
    assert "HcclChannelDestroy" in str(err) and "/opt/lib64/libhcomm.so" in str(err) and "\n" not in str(err)


def test_the_acl_headers_never_give_one_name_two_values() -> None:
    # acl_base_rt.h's static consts and rt_error_codes.h's defines overlap (ACL_ERROR_RT_* in both); the table
    # of values the errors take their codes from must agree with both groups
    from hcomm_cffi import acl_codes
    for name, value in acl_codes.STATIC_CONST + acl_codes.DEFINES:
        assert acl_codes.VALUES[name] == value, name
    assert errors.ACL_CODES["ACL_ERROR_RT_STREAM_SYNC_TIMEOUT"] == 507046
    assert errors.ACL_CODES["ACL_ERROR_API_NOT_SUPPORT"] == 200001
