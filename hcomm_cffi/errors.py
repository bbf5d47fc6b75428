"""Typed exceptions for HcclResult / aclError return codes, each with a one-line message and a hint.

The binding turns every nonzero C return value into one of these through :func:`error_for`; the
loader raises :class:`LibraryNotFoundError` when the CANN shared libraries cannot be found.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple, Type

from . import acl_codes

__all__ = [
    "HcclError", "AclError", "LibraryNotFoundError", "MissingSymbolError", "error_for",
    "HCCL_ERROR_CLASSES", "ACL_ERROR_CLASSES", "ACL_ERROR_NAMES", "ACL_CODES", "hint_for",
    "HcclParaError", "HcclPtrError", "HcclMemoryError", "HcclInternalError", "HcclNotSupportError",
    "HcclNotFoundError", "HcclUnavailError", "HcclSyscallError", "HcclTimeoutError",
    "HcclOpenFileError", "HcclTcpConnectError", "HcclRoceConnectError", "HcclTcpTransferError",
    "HcclRoceTransferError", "HcclRuntimeError", "HcclDrvError", "HcclProfilingError",
    "HcclCceError", "HcclNetworkError", "HcclAgainError", "HcclRemoteError",
    "HcclSuspendingError", "HcclOpRetryFailError", "HcclOomError", "HcclInStatusError",
    "HcclReservedError", "HcclCompatStubError",
    "AclInvalidParamError", "AclUninitializedError", "AclRepeatInitializeError",
    "AclBadAllocError", "AclInternalFailureError", "AclRtParamInvalidError",
    "AclRtInvalidDeviceError", "AclRtContextNullError", "AclRtInvalidHandleError", "AclRtWaitTimeoutError",
    "AclRtTaskTimeoutError", "AclRtFeatureNotSupportError", "AclRtMemoryAllocationError",
    "AclRtNoDeviceError", "AclRtDeviceOomError", "AclRtInternalError",
    "AclRtStreamSyncTimeoutError", "AclRtEventSyncTimeoutError", "AclRtFftsPlusTimeoutError",
    "AclRtLinkError", "AclRtSuspectRemoteError", "AclRtCommOpRetryFailError",
    # and every C name of the ACL table (ACL_SUCCESS, ACL_ERROR_INVALID_PARAM, ...), appended below
]


# ---------------------------------------------------------------------------------------------
# hints (shared by HCCL and ACL codes with the same cause)

_HINT_TIMEOUT = (
    "a peer did not arrive in time: check that every rank is alive and issued the same sequence "
    "of operations; raise HCCL_EXEC_TIMEOUT (notify/execution waits, default 1836 s) or "
    "HCCL_CONNECT_TIMEOUT (link setup, default 120 s) if the peers are just slow"
)
_HINT_UNAVAIL = (
    "resource quota exhausted: a communicator has at most 200 threads and 65536 thread notifies; "
    "acquire threads/channels once per communicator and cache the handles instead of acquiring "
    "them per operation"
)
_HINT_MEMORY = (
    "device memory exhausted: lower HCCL_BUFFSIZE (MiB per buffer half, default 200) or the "
    "communicator's hcclBufferSize config field, or free device memory first"
)
_HINT_PARA = (
    "an argument was rejected: check the argument named in the message (rank, count, data type, "
    "reduce op, notify index, engine) against what the function accepts"
)
_HINT_PTR = "a NULL pointer or handle was passed: check that buffers and handles are allocated and not yet freed"
_HINT_NOT_SUPPORT = (
    "this engine/protocol/product combination is not supported (e.g. WriteWithNotify or "
    "non-read/write batch entries on A2/A3, ReadReduce over RoCE, AIV/CCU engine for "
    "HcclThreadAcquire); pick another engine or protocol"
)
_HINT_OPEN_FILE = "check that the ranktable path (or kernel file) exists and is readable by this process"
_HINT_TCP_CONNECT = (
    "root or peer unreachable: check HCCL_IF_IP / HCCL_SOCKET_IFNAME, firewalls, and that the root "
    "port (HCCL_IF_BASE_PORT, default 60000) is not used by another process"
)
_HINT_REMOTE = "a peer failed or exited: read the other ranks' errors first, this rank only saw the consequence"
_HINT_RUNTIME = (
    "an ACL runtime call failed: call aclrtSetDevice with a valid device id on this thread before "
    "creating communicators or streams"
)
_HINT_AGAIN = "the communicator is busy (e.g. destroyed from another thread); retry after outstanding work completes"
_HINT_NOT_FOUND = (
    "resource not found: expected on the first HcclEngineCtxGet for a tag; otherwise check that "
    "the ranks are linked by the requested protocol"
)
_HINT_SUSPENDING = "the communicator is suspended (HcclCommSuspend / fault recovery); resume it before issuing work"
_HINT_NETWORK = "a socket or verbs call failed: check for port conflicts (HCCL_HOST_SOCKET_PORT_RANGE) and NIC state"
_HINT_COMPAT_STUB = (
    "-1 is what the libhccl_compat.so fallback stubs return: the installed libhcomm.so probably "
    "does not implement this function (CANN too old)"
)

# code -> (C name, class name, hint)
_HCCL_CODES: Dict[int, Tuple[str, str, Optional[str]]] = {
    1: ("HCCL_E_PARA", "HcclParaError", _HINT_PARA),
    2: ("HCCL_E_PTR", "HcclPtrError", _HINT_PTR),
    3: ("HCCL_E_MEMORY", "HcclMemoryError", _HINT_MEMORY),
    4: ("HCCL_E_INTERNAL", "HcclInternalError",
        "internal or state error; on A2/A3 also a channel notify index out of range"),
    5: ("HCCL_E_NOT_SUPPORT", "HcclNotSupportError", _HINT_NOT_SUPPORT),
    6: ("HCCL_E_NOT_FOUND", "HcclNotFoundError", _HINT_NOT_FOUND),
    7: ("HCCL_E_UNAVAIL", "HcclUnavailError", _HINT_UNAVAIL),
    8: ("HCCL_E_SYSCALL", "HcclSyscallError", "a system call failed: check ulimits, file descriptors and /dev/shm space"),
    9: ("HCCL_E_TIMEOUT", "HcclTimeoutError", _HINT_TIMEOUT),
    10: ("HCCL_E_OPEN_FILE_FAILURE", "HcclOpenFileError", _HINT_OPEN_FILE),
    11: ("HCCL_E_TCP_CONNECT", "HcclTcpConnectError", _HINT_TCP_CONNECT),
    12: ("HCCL_E_ROCE_CONNECT", "HcclRoceConnectError",
         "RoCE link setup failed: check NIC link state and IPs (hccn_tool -link -g / -ip -g)"),
    13: ("HCCL_E_TCP_TRANSFER", "HcclTcpTransferError", _HINT_REMOTE),
    14: ("HCCL_E_ROCE_TRANSFER", "HcclRoceTransferError", _HINT_REMOTE),
    15: ("HCCL_E_RUNTIME", "HcclRuntimeError", _HINT_RUNTIME),
    16: ("HCCL_E_DRV", "HcclDrvError", "a driver call failed: check driver/firmware versions and device health (npu-smi info)"),
    17: ("HCCL_E_PROFILING", "HcclProfilingError", "a profiling call failed: check the profiling configuration"),
    18: ("HCCL_E_CCE", "HcclCceError", None),
    19: ("HCCL_E_NETWORK", "HcclNetworkError", _HINT_NETWORK),
    20: ("HCCL_E_AGAIN", "HcclAgainError", _HINT_AGAIN),
    21: ("HCCL_E_REMOTE", "HcclRemoteError", _HINT_REMOTE),
    22: ("HCCL_E_SUSPENDING", "HcclSuspendingError", _HINT_SUSPENDING),
    23: ("HCCL_E_OPRETRY_FAIL", "HcclOpRetryFailError",
         "operator retry (HCCL_OP_RETRY_ENABLE) could not recover from a link fault"),
    24: ("HCCL_E_OOM", "HcclOomError", _HINT_MEMORY),
    1041: ("HCCL_E_IN_STATUS", "HcclInStatusError", "the detailed status is in the function's status output"),
    1042: ("HCCL_E_RESERVED", "HcclReservedError", None),
}

# The aclError codes the package raises or returns: C name, exception class name (None: no class), hint.
# Their values are the headers' (acl_codes.py); the emulator (sim/errors.py) and the binding take their
# constants from here.
_ACL_TABLE: Tuple[Tuple[str, Optional[str], Optional[str]], ...] = (
    ("ACL_SUCCESS", None, None),
    ("ACL_ERROR_INVALID_PARAM", "AclInvalidParamError", _HINT_PARA),
    ("ACL_ERROR_UNINITIALIZE", "AclUninitializedError", "call aclInit (Binding.acl_init) before any other ACL call"),
    ("ACL_ERROR_REPEAT_INITIALIZE", "AclRepeatInitializeError",
     "aclInit was already called in this process (e.g. by torch_npu); it is safe to continue"),
    ("ACL_ERROR_BAD_ALLOC", "AclBadAllocError", _HINT_MEMORY),
    ("ACL_ERROR_INTERNAL_ERROR", "AclInternalFailureError", None),
    ("ACL_ERROR_RT_PARAM_INVALID", "AclRtParamInvalidError", _HINT_PARA),
    ("ACL_ERROR_RT_INVALID_DEVICEID", "AclRtInvalidDeviceError",
     "the device id does not exist: check ASCEND_RT_VISIBLE_DEVICES and the number of visible devices"),
    ("ACL_ERROR_RT_CONTEXT_NULL", "AclRtContextNullError", _HINT_RUNTIME),
    ("ACL_ERROR_RT_INVALID_HANDLE", "AclRtInvalidHandleError",
     "a stream/event handle that this process did not create, or one already destroyed, was passed"),
    ("ACL_ERROR_RT_WAIT_TIMEOUT", "AclRtWaitTimeoutError", _HINT_TIMEOUT),
    ("ACL_ERROR_RT_TASK_TIMEOUT", "AclRtTaskTimeoutError", _HINT_TIMEOUT),
    ("ACL_ERROR_RT_FEATURE_NOT_SUPPORT", "AclRtFeatureNotSupportError", _HINT_NOT_SUPPORT),
    ("ACL_ERROR_RT_MEMORY_ALLOCATION", "AclRtMemoryAllocationError", _HINT_MEMORY),
    ("ACL_ERROR_RT_NO_DEVICE", "AclRtNoDeviceError",
     "no NPU is visible to this process: check the driver and ASCEND_RT_VISIBLE_DEVICES, or use HCOMM_BACKEND=sim"),
    ("ACL_ERROR_RT_DEVICE_OOM", "AclRtDeviceOomError", _HINT_MEMORY),
    ("ACL_ERROR_RT_INTERNAL_ERROR", "AclRtInternalError", None),
    ("ACL_ERROR_RT_STREAM_SYNC_TIMEOUT", "AclRtStreamSyncTimeoutError", _HINT_TIMEOUT),
    ("ACL_ERROR_RT_EVENT_SYNC_TIMEOUT", "AclRtEventSyncTimeoutError", _HINT_TIMEOUT),
    ("ACL_ERROR_RT_FFTS_PLUS_TIMEOUT", "AclRtFftsPlusTimeoutError",
     "a notify wait on the stream timed out: " + _HINT_TIMEOUT),
    ("ACL_ERROR_RT_LINK_ERROR", "AclRtLinkError", _HINT_REMOTE),
    ("ACL_ERROR_RT_SUSPECT_REMOTE_ERROR", "AclRtSuspectRemoteError", _HINT_REMOTE),
    ("ACL_ERROR_RT_COMM_OP_RETRY_FAIL", "AclRtCommOpRetryFailError",
     "operator retry (HCCL_OP_RETRY_ENABLE) could not recover from a link fault"),
    # ---- ACL graphs (rt_error_codes.h:48-59, 154): the capture rules of aclmdlRICaptureBegin..End
    ("ACL_ERROR_RT_STREAM_CAPTURED", "AclRtStreamCapturedError",
     "the stream is capturing an ACL graph: it cannot be synchronised or destroyed until aclmdlRICaptureEnd"),
    ("ACL_ERROR_RT_EVENT_CAPTURED", "AclRtEventCapturedError",
     "the event was recorded inside an ACL graph capture: it cannot be synchronised until the capture ends"),
    ("ACL_ERROR_RT_STREAM_NOT_CAPTURED", "AclRtStreamNotCapturedError",
     "the stream is not capturing: call aclmdlRICaptureBegin first"),
    ("ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT", "AclRtCaptureModeNotSupportError",
     "a synchronous operation during a GLOBAL/THREAD_LOCAL capture: do it before the capture, or switch this "
     "thread to RELAXED with aclmdlRICaptureThreadExchangeMode"),
    ("ACL_ERROR_RT_STREAM_CAPTURE_IMPLICIT", "AclRtStreamCaptureImplicitError",
     "the default stream cannot take part in an ACL graph: use a stream made by aclrtCreateStream"),
    ("ACL_ERROR_STREAM_TASK_GROUP_STATUS", "AclStreamTaskGroupStatusError",
     "task groups: aclmdlRICaptureTaskGrpBegin/End and TaskUpdateBegin/End must pair up on one stream"),
    ("ACL_ERROR_RT_STREAM_CAPTURE_UNMATCHED", "AclRtStreamCaptureUnmatchedError",
     "end the capture on the stream that began it"),
    ("ACL_ERROR_RT_STREAM_CAPTURE_WRONG_THREAD", "AclRtStreamCaptureWrongThreadError",
     "end the capture on the OS thread that began it (or capture in RELAXED mode)"),
    ("ACL_ERROR_RT_MODEL_UPDATE_FAILED", "AclRtModelUpdateFailedError",
     "a task update must launch the same operations as the task group, with new arguments"),
    ("ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED", "AclRtStreamCaptureInvalidatedError",
     "an operation refused during the capture invalidated it: fix that operation and capture again"),
    # the profiler, events with timing and unsupported APIs (hccl_test; acl_base_rt.h:64 on, rt_error_codes.h:21 on)
    ("ACL_ERROR_INVALID_PROFILING_CONFIG", "AclInvalidProfilingConfigError",
     "pass the aclprofConfig that aclprofCreateConfig returned (and that aclprofStart started)"),
    ("ACL_ERROR_PROF_ALREADY_RUN", "AclProfAlreadyRunError", "profiling is running: aclprofStop it first"),
    ("ACL_ERROR_PROF_NOT_RUN", "AclProfNotRunError", "start profiling (aclprofStart) before stopping it"),
    ("ACL_ERROR_API_NOT_SUPPORT", "AclApiNotSupportError", _HINT_NOT_SUPPORT),
    ("ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID", "AclRtEventTimestampInvalidError",
     "both events need an executed record: record them and synchronize their streams first"),
)

# code -> (C name, class name, hint), like _HCCL_CODES
_ACL_CODES: Dict[int, Tuple[str, str, Optional[str]]] = {
    acl_codes.VALUES[c_name]: (c_name, cls_name, hint) for c_name, cls_name, hint in _ACL_TABLE if cls_name is not None
}

ACL_ERROR_NAMES: Dict[int, str] = {code: entry[0] for code, entry in _ACL_CODES.items()}

# the C names as module constants (plain ints), spelled out so type checkers and readers see them;
# tests/test_acl_codes.py checks that every row of the table has its constant
ACL_CODES: Dict[str, int] = {c_name: acl_codes.VALUES[c_name] for c_name, _cls, _hint in _ACL_TABLE}
ACL_SUCCESS: int = ACL_CODES["ACL_SUCCESS"]
ACL_ERROR_INVALID_PARAM: int = ACL_CODES["ACL_ERROR_INVALID_PARAM"]
ACL_ERROR_UNINITIALIZE: int = ACL_CODES["ACL_ERROR_UNINITIALIZE"]
ACL_ERROR_REPEAT_INITIALIZE: int = ACL_CODES["ACL_ERROR_REPEAT_INITIALIZE"]
ACL_ERROR_BAD_ALLOC: int = ACL_CODES["ACL_ERROR_BAD_ALLOC"]
ACL_ERROR_INTERNAL_ERROR: int = ACL_CODES["ACL_ERROR_INTERNAL_ERROR"]
ACL_ERROR_RT_PARAM_INVALID: int = ACL_CODES["ACL_ERROR_RT_PARAM_INVALID"]
ACL_ERROR_RT_INVALID_DEVICEID: int = ACL_CODES["ACL_ERROR_RT_INVALID_DEVICEID"]
ACL_ERROR_RT_CONTEXT_NULL: int = ACL_CODES["ACL_ERROR_RT_CONTEXT_NULL"]
ACL_ERROR_RT_INVALID_HANDLE: int = ACL_CODES["ACL_ERROR_RT_INVALID_HANDLE"]
ACL_ERROR_RT_WAIT_TIMEOUT: int = ACL_CODES["ACL_ERROR_RT_WAIT_TIMEOUT"]
ACL_ERROR_RT_TASK_TIMEOUT: int = ACL_CODES["ACL_ERROR_RT_TASK_TIMEOUT"]
ACL_ERROR_RT_FEATURE_NOT_SUPPORT: int = ACL_CODES["ACL_ERROR_RT_FEATURE_NOT_SUPPORT"]
ACL_ERROR_RT_MEMORY_ALLOCATION: int = ACL_CODES["ACL_ERROR_RT_MEMORY_ALLOCATION"]
ACL_ERROR_RT_NO_DEVICE: int = ACL_CODES["ACL_ERROR_RT_NO_DEVICE"]
ACL_ERROR_RT_DEVICE_OOM: int = ACL_CODES["ACL_ERROR_RT_DEVICE_OOM"]
ACL_ERROR_RT_INTERNAL_ERROR: int = ACL_CODES["ACL_ERROR_RT_INTERNAL_ERROR"]
ACL_ERROR_RT_STREAM_SYNC_TIMEOUT: int = ACL_CODES["ACL_ERROR_RT_STREAM_SYNC_TIMEOUT"]
ACL_ERROR_RT_EVENT_SYNC_TIMEOUT: int = ACL_CODES["ACL_ERROR_RT_EVENT_SYNC_TIMEOUT"]
ACL_ERROR_RT_FFTS_PLUS_TIMEOUT: int = ACL_CODES["ACL_ERROR_RT_FFTS_PLUS_TIMEOUT"]
ACL_ERROR_RT_LINK_ERROR: int = ACL_CODES["ACL_ERROR_RT_LINK_ERROR"]
ACL_ERROR_RT_SUSPECT_REMOTE_ERROR: int = ACL_CODES["ACL_ERROR_RT_SUSPECT_REMOTE_ERROR"]
ACL_ERROR_RT_COMM_OP_RETRY_FAIL: int = ACL_CODES["ACL_ERROR_RT_COMM_OP_RETRY_FAIL"]
ACL_ERROR_RT_STREAM_CAPTURED: int = ACL_CODES["ACL_ERROR_RT_STREAM_CAPTURED"]
ACL_ERROR_RT_EVENT_CAPTURED: int = ACL_CODES["ACL_ERROR_RT_EVENT_CAPTURED"]
ACL_ERROR_RT_STREAM_NOT_CAPTURED: int = ACL_CODES["ACL_ERROR_RT_STREAM_NOT_CAPTURED"]
ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT: int = ACL_CODES["ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT"]
ACL_ERROR_RT_STREAM_CAPTURE_IMPLICIT: int = ACL_CODES["ACL_ERROR_RT_STREAM_CAPTURE_IMPLICIT"]
ACL_ERROR_STREAM_TASK_GROUP_STATUS: int = ACL_CODES["ACL_ERROR_STREAM_TASK_GROUP_STATUS"]
ACL_ERROR_RT_STREAM_CAPTURE_UNMATCHED: int = ACL_CODES["ACL_ERROR_RT_STREAM_CAPTURE_UNMATCHED"]
ACL_ERROR_RT_STREAM_CAPTURE_WRONG_THREAD: int = ACL_CODES["ACL_ERROR_RT_STREAM_CAPTURE_WRONG_THREAD"]
ACL_ERROR_RT_MODEL_UPDATE_FAILED: int = ACL_CODES["ACL_ERROR_RT_MODEL_UPDATE_FAILED"]
ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED: int = ACL_CODES["ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED"]
ACL_ERROR_INVALID_PROFILING_CONFIG: int = ACL_CODES["ACL_ERROR_INVALID_PROFILING_CONFIG"]
ACL_ERROR_PROF_ALREADY_RUN: int = ACL_CODES["ACL_ERROR_PROF_ALREADY_RUN"]
ACL_ERROR_PROF_NOT_RUN: int = ACL_CODES["ACL_ERROR_PROF_NOT_RUN"]
ACL_ERROR_API_NOT_SUPPORT: int = ACL_CODES["ACL_ERROR_API_NOT_SUPPORT"]
ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID: int = ACL_CODES["ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID"]
__all__ += list(ACL_CODES)

_TIMEOUT_CODES = frozenset({9, 107019, 107020, 507046, 507047, 507048})

#: the phrase the emulator's checker puts in a failure when ranks ran different collectives (the
#: Comm layer then dumps the flight recorders, as for a timeout: it is a desync)
COLLECTIVE_MISMATCH = "collective mismatch"
__all__ += ["COLLECTIVE_MISMATCH"]


# ---------------------------------------------------------------------------------------------
# exception classes

class HcclError(Exception):
    """A C call returned a nonzero HcclResult/aclError: names the function, the code and its name, the library's message and a hint."""

    default_code: Optional[int] = None
    #: raised for a library's return code (False: the Comm API's own errors, api/errors.py, carry a code too)
    from_library = True

    def __init__(
        self,
        code: int,
        function: str,
        library_message: Optional[str] = None,
        hint: Optional[str] = None,
        code_name: Optional[str] = None,
        detail: Optional[str] = None,
    ) -> None:
        self.code = int(code)
        self.function = function
        self.library_message = _one_line(library_message)
        self.hint = hint
        self.code_name = code_name if code_name is not None else _code_name(self.code, function)
        self.detail = _one_line(detail)
        super().__init__(self.code, function, self.library_message, hint, self.code_name, self.detail)

    def __str__(self) -> str:
        text = f"{self.function} failed: {self.code_name} ({self.code})"
        if self.library_message:
            text += f": {self.library_message.rstrip('. ')}"
        if self.detail:
            text += f" [{self.detail.rstrip('. ')}]"
        if self.hint:
            text += f". Hint: {self.hint}"
        return text

    def __reduce__(self) -> Tuple[Any, ...]:
        return (
            _rebuild,
            (type(self), self.code, self.function, self.library_message, self.hint,
             self.code_name, self.detail),
        )


class AclError(HcclError):
    """An ACL runtime call (aclInit, aclrt*) returned a nonzero aclError."""


class HcclCompatStubError(HcclError):
    """A call returned -1, the value of libhccl_compat.so's fallback stubs (function missing from libhcomm.so)."""


def _rebuild(cls: Type[HcclError], code: int, function: str, message: Optional[str],
             hint: Optional[str], code_name: str, detail: Optional[str]) -> HcclError:
    return cls(code, function, message, hint, code_name, detail)


def _one_line(text: Optional[str]) -> Optional[str]:
    if text is None:
        return None
    text = " ".join(str(text).split())
    return text or None


def _code_name(code: int, function: str) -> str:
    entry = _HCCL_CODES.get(code) or _ACL_CODES.get(code)
    if entry is not None:
        return entry[0]
    if code == 0:
        return "HCCL_SUCCESS"
    if _is_acl(code, function):
        return "unknown aclError"
    return "unknown HcclResult"


def _is_acl(code: int, function: str) -> bool:
    return code in _ACL_CODES or code >= 100000 or function.startswith("acl")


def classes_source() -> str:
    """The source of one class per code of ``_HCCL_CODES`` and ``_ACL_TABLE``: the generated block below.

    Written out (``scripts/generate_typed.py``) rather than built with ``type()`` so type checkers
    and readers see real classes; tests/test_typed_generated.py fails when the block is stale.
    """
    rows = [(code, c_name, cls_name, "HcclError") for code, (c_name, cls_name, _) in _HCCL_CODES.items()]
    rows += [(code, c_name, cls_name, "AclError") for code, (c_name, cls_name, _) in _ACL_CODES.items()]
    out = []
    for code, c_name, cls_name, base in rows:
        bases = f"{base}, TimeoutError" if code in _TIMEOUT_CODES else base
        out += [f"class {cls_name}({bases}):", f'    """{c_name} ({code})."""', "", f"    default_code = {code}",
                "", ""]
    return "\n".join(out) + "\n"


_GENERATED_BEGIN = "# ---- generated by scripts/generate_typed.py from errors.classes_source(): do not edit ----\n"
_GENERATED_END = "# ---- end of the generated classes ----\n"


# ---- generated by scripts/generate_typed.py from errors.classes_source(): do not edit ----
class HcclParaError(HcclError):
    """HCCL_E_PARA (1)."""

    default_code = 1


class HcclPtrError(HcclError):
    """HCCL_E_PTR (2)."""

    default_code = 2


class HcclMemoryError(HcclError):
    """HCCL_E_MEMORY (3)."""

    default_code = 3


class HcclInternalError(HcclError):
    """HCCL_E_INTERNAL (4)."""

    default_code = 4


class HcclNotSupportError(HcclError):
    """HCCL_E_NOT_SUPPORT (5)."""

    default_code = 5


class HcclNotFoundError(HcclError):
    """HCCL_E_NOT_FOUND (6)."""

    default_code = 6


class HcclUnavailError(HcclError):
    """HCCL_E_UNAVAIL (7)."""

    default_code = 7


class HcclSyscallError(HcclError):
    """HCCL_E_SYSCALL (8)."""

    default_code = 8


class HcclTimeoutError(HcclError, TimeoutError):
    """HCCL_E_TIMEOUT (9)."""

    default_code = 9


class HcclOpenFileError(HcclError):
    """HCCL_E_OPEN_FILE_FAILURE (10)."""

    default_code = 10


class HcclTcpConnectError(HcclError):
    """HCCL_E_TCP_CONNECT (11)."""

    default_code = 11


class HcclRoceConnectError(HcclError):
    """HCCL_E_ROCE_CONNECT (12)."""

    default_code = 12


class HcclTcpTransferError(HcclError):
    """HCCL_E_TCP_TRANSFER (13)."""

    default_code = 13


class HcclRoceTransferError(HcclError):
    """HCCL_E_ROCE_TRANSFER (14)."""

    default_code = 14


class HcclRuntimeError(HcclError):
    """HCCL_E_RUNTIME (15)."""

    default_code = 15


class HcclDrvError(HcclError):
    """HCCL_E_DRV (16)."""

    default_code = 16


class HcclProfilingError(HcclError):
    """HCCL_E_PROFILING (17)."""

    default_code = 17


class HcclCceError(HcclError):
    """HCCL_E_CCE (18)."""

    default_code = 18


class HcclNetworkError(HcclError):
    """HCCL_E_NETWORK (19)."""

    default_code = 19


class HcclAgainError(HcclError):
    """HCCL_E_AGAIN (20)."""

    default_code = 20


class HcclRemoteError(HcclError):
    """HCCL_E_REMOTE (21)."""

    default_code = 21


class HcclSuspendingError(HcclError):
    """HCCL_E_SUSPENDING (22)."""

    default_code = 22


class HcclOpRetryFailError(HcclError):
    """HCCL_E_OPRETRY_FAIL (23)."""

    default_code = 23


class HcclOomError(HcclError):
    """HCCL_E_OOM (24)."""

    default_code = 24


class HcclInStatusError(HcclError):
    """HCCL_E_IN_STATUS (1041)."""

    default_code = 1041


class HcclReservedError(HcclError):
    """HCCL_E_RESERVED (1042)."""

    default_code = 1042


class AclInvalidParamError(AclError):
    """ACL_ERROR_INVALID_PARAM (100000)."""

    default_code = 100000


class AclUninitializedError(AclError):
    """ACL_ERROR_UNINITIALIZE (100001)."""

    default_code = 100001


class AclRepeatInitializeError(AclError):
    """ACL_ERROR_REPEAT_INITIALIZE (100002)."""

    default_code = 100002


class AclBadAllocError(AclError):
    """ACL_ERROR_BAD_ALLOC (200000)."""

    default_code = 200000


class AclInternalFailureError(AclError):
    """ACL_ERROR_INTERNAL_ERROR (500000)."""

    default_code = 500000


class AclRtParamInvalidError(AclError):
    """ACL_ERROR_RT_PARAM_INVALID (107000)."""

    default_code = 107000


class AclRtInvalidDeviceError(AclError):
    """ACL_ERROR_RT_INVALID_DEVICEID (107001)."""

    default_code = 107001


class AclRtContextNullError(AclError):
    """ACL_ERROR_RT_CONTEXT_NULL (107002)."""

    default_code = 107002


class AclRtInvalidHandleError(AclError):
    """ACL_ERROR_RT_INVALID_HANDLE (107017)."""

    default_code = 107017


class AclRtWaitTimeoutError(AclError, TimeoutError):
    """ACL_ERROR_RT_WAIT_TIMEOUT (107019)."""

    default_code = 107019


class AclRtTaskTimeoutError(AclError, TimeoutError):
    """ACL_ERROR_RT_TASK_TIMEOUT (107020)."""

    default_code = 107020


class AclRtFeatureNotSupportError(AclError):
    """ACL_ERROR_RT_FEATURE_NOT_SUPPORT (207000)."""

    default_code = 207000


class AclRtMemoryAllocationError(AclError):
    """ACL_ERROR_RT_MEMORY_ALLOCATION (207001)."""

    default_code = 207001


class AclRtNoDeviceError(AclError):
    """ACL_ERROR_RT_NO_DEVICE (207004)."""

    default_code = 207004


class AclRtDeviceOomError(AclError):
    """ACL_ERROR_RT_DEVICE_OOM (207018)."""

    default_code = 207018


class AclRtInternalError(AclError):
    """ACL_ERROR_RT_INTERNAL_ERROR (507000)."""

    default_code = 507000


class AclRtStreamSyncTimeoutError(AclError, TimeoutError):
    """ACL_ERROR_RT_STREAM_SYNC_TIMEOUT (507046)."""

    default_code = 507046


class AclRtEventSyncTimeoutError(AclError, TimeoutError):
    """ACL_ERROR_RT_EVENT_SYNC_TIMEOUT (507047)."""

    default_code = 507047


class AclRtFftsPlusTimeoutError(AclError, TimeoutError):
    """ACL_ERROR_RT_FFTS_PLUS_TIMEOUT (507048)."""

    default_code = 507048


class AclRtLinkError(AclError):
    """ACL_ERROR_RT_LINK_ERROR (507056)."""

    default_code = 507056


class AclRtSuspectRemoteError(AclError):
    """ACL_ERROR_RT_SUSPECT_REMOTE_ERROR (507057)."""

    default_code = 507057


class AclRtCommOpRetryFailError(AclError):
    """ACL_ERROR_RT_COMM_OP_RETRY_FAIL (507904)."""

    default_code = 507904


class AclRtStreamCapturedError(AclError):
    """ACL_ERROR_RT_STREAM_CAPTURED (107027)."""

    default_code = 107027


class AclRtEventCapturedError(AclError):
    """ACL_ERROR_RT_EVENT_CAPTURED (107028)."""

    default_code = 107028


class AclRtStreamNotCapturedError(AclError):
    """ACL_ERROR_RT_STREAM_NOT_CAPTURED (107029)."""

    default_code = 107029


class AclRtCaptureModeNotSupportError(AclError):
    """ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT (107030)."""

    default_code = 107030


class AclRtStreamCaptureImplicitError(AclError):
    """ACL_ERROR_RT_STREAM_CAPTURE_IMPLICIT (107031)."""

    default_code = 107031


class AclStreamTaskGroupStatusError(AclError):
    """ACL_ERROR_STREAM_TASK_GROUP_STATUS (107033)."""

    default_code = 107033


class AclRtStreamCaptureUnmatchedError(AclError):
    """ACL_ERROR_RT_STREAM_CAPTURE_UNMATCHED (107036)."""

    default_code = 107036


class AclRtStreamCaptureWrongThreadError(AclError):
    """ACL_ERROR_RT_STREAM_CAPTURE_WRONG_THREAD (107038)."""

    default_code = 107038


class AclRtModelUpdateFailedError(AclError):
    """ACL_ERROR_RT_MODEL_UPDATE_FAILED (107040)."""

    default_code = 107040


class AclRtStreamCaptureInvalidatedError(AclError):
    """ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED (507903)."""

    default_code = 507903


class AclInvalidProfilingConfigError(AclError):
    """ACL_ERROR_INVALID_PROFILING_CONFIG (100010)."""

    default_code = 100010


class AclProfAlreadyRunError(AclError):
    """ACL_ERROR_PROF_ALREADY_RUN (100042)."""

    default_code = 100042


class AclProfNotRunError(AclError):
    """ACL_ERROR_PROF_NOT_RUN (100043)."""

    default_code = 100043


class AclApiNotSupportError(AclError):
    """ACL_ERROR_API_NOT_SUPPORT (200001)."""

    default_code = 200001


class AclRtEventTimestampInvalidError(AclError):
    """ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID (107006)."""

    default_code = 107006


# ---- end of the generated classes ----


def _classes(codes: Dict[int, Tuple[str, str, Optional[str]]]) -> Dict[int, Type[HcclError]]:
    """code -> the class a table names (each defined above, ``default_code`` equal to its code)."""
    found: Dict[int, Any] = {code: globals().get(cls_name) for code, (_, cls_name, _) in codes.items()}
    stale = sorted(name for code, (_, name, _) in codes.items() if getattr(found[code], "default_code", None) != code)
    if stale:   # the generated block and the tables disagree
        raise ImportError(f"hcomm_cffi.errors: classes {stale} are missing or do not match the code tables; "
                          "run python scripts/generate_typed.py")
    return found


HCCL_ERROR_CLASSES: Dict[int, Type[HcclError]] = _classes(_HCCL_CODES)
ACL_ERROR_CLASSES: Dict[int, Type[HcclError]] = _classes(_ACL_CODES)


def hint_for(code: int, function: str = "") -> Optional[str]:
    """The advice attached to ``code`` (None when there is nothing useful to say)."""
    entry = _HCCL_CODES.get(code) or _ACL_CODES.get(code)
    if entry is not None:
        return entry[2]
    if code == -1:
        return _HINT_COMPAT_STUB
    return None


def error_for(
    code: int,
    function: str,
    library_message: Optional[str] = None,
    detail: Optional[str] = None,
) -> HcclError:
    """The exception for a nonzero ``code`` returned by C function ``function`` (not raised, returned).

    HcclResult codes give an ``Hccl*Error``, aclError codes (>= 100000, or any code from an
    ``acl*`` function) an ``AclError`` subclass; unknown codes still give an HcclError/AclError
    whose message contains the number.
    """
    code = int(code)
    cls = HCCL_ERROR_CLASSES.get(code) or ACL_ERROR_CLASSES.get(code)
    if cls is None:
        if code == -1:
            cls = HcclCompatStubError
        elif _is_acl(code, function):
            cls = AclError
        else:
            cls = HcclError
    return cls(code, function, library_message, hint_for(code, function), None, detail)


class LibraryNotFoundError(ImportError):
    """The CANN shared libraries (libhcomm.so, libhccl.so, libacl_rt.so) were not found; the message lists every place searched."""


class MissingSymbolError(AttributeError):
    """A C function is not exported by the shared library it should come from (e.g. an older CANN)."""

    def __init__(self, symbol: str, library: str, reason: str = "") -> None:
        self.symbol = symbol
        self.library = library
        text = f"C function {symbol} is not available in {library}"
        if reason:
            text += f" ({_one_line(reason)})"
        text += "; this CANN version may be too old for it"
        super().__init__(text)
