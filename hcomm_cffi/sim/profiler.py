"""The ACL profiler (acl/acl_prof.h, CANN's libmsprofiler.so) over the emulator's task trace.

``aclprofInit(path)`` names the result directory, ``aclprofCreateConfig`` what to profile (devices, data
types), ``aclprofStart`` starts recording and ``aclprofStop`` writes what the profiled devices executed in
between: every task the emulator's executor ran (copies, reductions, notify records and waits, event
records, host calls), one lane per stream or thread, as a Chrome trace (hcomm_cffi.trace, the format of
``HCOMM_TRACE``) named ``<job>.rank<device>.trace.json`` in the result directory, so ``hcomm trace DIR`` draws
the timeline.  It is not msprof's own output format (msprof's parsers are not part of CANN's open source).

Argument checks follow the header's contract (hicann/runtime@681ef7610df1:include/external/acl/acl_prof.h:
162-230): start/stop/finalize need a prior init (ACL_ERROR_UNINITIALIZE), init twice is
ACL_ERROR_REPEAT_INITIALIZE, a config that is not the running one is ACL_ERROR_INVALID_PROFILING_CONFIG,
starting twice ACL_ERROR_PROF_ALREADY_RUN and stopping what is not running ACL_ERROR_PROF_NOT_RUN.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

from .. import files, trace
from .._ffi import ffi
from ..errors import ACL_ERROR_INVALID_PROFILING_CONFIG, ACL_ERROR_PROF_ALREADY_RUN, ACL_ERROR_PROF_NOT_RUN
from .part import Part, check_out
from .errors import ACL_ERROR_INVALID_PARAM, ACL_ERROR_REPEAT_INITIALIZE, ACL_ERROR_UNINITIALIZE, SimError

__all__ = ["Profiler"]

_MAX_PATH = 4096
_AICORE_METRICS = frozenset(range(9)) | {0xFF}


class _Session:
    path: Optional[str] = None
    configs: Dict[int, Tuple[Any, Tuple[int, ...]]] = {}    # address of the opaque object -> (its cdata, devices)
    running: Optional[int] = None
    owns_trace = False           # False: HCOMM_TRACE was tracing already; its file gets the interval


def _end_trace() -> None:
    """Write the profiled interval: the profiler's own trace is written and turned off, HCOMM_TRACE's is flushed."""
    if _Session.owns_trace:
        trace.stop()
    else:
        trace.flush()


def _require_init() -> str:
    """The result directory of aclprofInit; ACL_ERROR_UNINITIALIZE before it."""
    if _Session.path is None:
        raise SimError(ACL_ERROR_UNINITIALIZE, "aclprofInit was not called")
    return _Session.path


class Profiler(Part):
    """aclprofInit, aclprofCreateConfig, aclprofStart, aclprofStop, aclprofDestroyConfig, aclprofFinalize."""

    HEADERS = ("acl/acl_prof.h",)

    def aclprofInit(self, profilerResultPath: Any, length: int) -> int:
        check_out(profilerResultPath, "profilerResultPath", ACL_ERROR_INVALID_PARAM)
        if not 0 < length <= _MAX_PATH:
            raise SimError(ACL_ERROR_INVALID_PARAM, f"length={length}; expected the path's length, 1..{_MAX_PATH}")
        if _Session.path is not None:
            raise SimError(ACL_ERROR_REPEAT_INITIALIZE, f"aclprofInit was already called (result path "
                                                        f"{_Session.path}); call aclprofFinalize first")
        path = ffi.string(ffi.cast("char *", profilerResultPath), length).decode("utf-8", "replace")
        try:
            files.checked_dir(path, "profilerResultPath")
        except files.UnsafePath as exc:
            raise SimError(ACL_ERROR_INVALID_PARAM, f"{exc} (the result directory)") from None
        _Session.path = path
        return 0

    def aclprofCreateConfig(self, deviceIdList: Any, deviceNums: int, aicoreMetrics: int, aicoreEvents: Any,
                            dataTypeConfig: int) -> Any:
        """The opaque config, or NULL (the header's failure value) when an argument is unusable (named in
        aclGetRecentErrMsg)."""
        if deviceIdList == ffi.NULL or deviceNums == 0:
            raise SimError(ACL_ERROR_INVALID_PARAM, "deviceIdList is NULL or deviceNums is 0; expected the devices "
                                                    "to profile")
        if aicoreMetrics not in _AICORE_METRICS:
            raise SimError(ACL_ERROR_INVALID_PARAM, f"aicoreMetrics={aicoreMetrics} is not an aclprofAicoreMetrics")
        devices = tuple(int(deviceIdList[i]) for i in range(deviceNums))
        handle = ffi.new("char[]", 8)                          # the opaque object: its address is the handle
        _Session.configs[int(ffi.cast("uintptr_t", handle))] = (handle, devices)
        return ffi.cast("aclprofConfig *", handle)

    @staticmethod
    def _prof_config(profilerConfig: Any) -> Tuple[int, Tuple[int, ...]]:
        key = int(ffi.cast("uintptr_t", profilerConfig))
        got = _Session.configs.get(key)
        if got is None:
            raise SimError(ACL_ERROR_INVALID_PROFILING_CONFIG, f"profilerConfig 0x{key:x} was not made by "
                                                               "aclprofCreateConfig (or was destroyed)")
        return key, got[1]

    def aclprofStart(self, profilerConfig: Any) -> int:
        path = _require_init()
        key, devices = self._prof_config(profilerConfig)
        if _Session.running is not None:
            raise SimError(ACL_ERROR_PROF_ALREADY_RUN, "profiling is already running; aclprofStop it first")
        _Session.running = key
        _Session.owns_trace = trace.start_in(path, devices[0])
        return 0

    def aclprofStop(self, profilerConfig: Any) -> int:
        _require_init()
        key, _ = self._prof_config(profilerConfig)
        if _Session.running is None:
            raise SimError(ACL_ERROR_PROF_NOT_RUN, "profiling is not running (aclprofStart)")
        if _Session.running != key:
            raise SimError(ACL_ERROR_INVALID_PROFILING_CONFIG, "profilerConfig is not the config profiling was "
                                                               "started with")
        _Session.running = None
        _end_trace()
        return 0

    def aclprofDestroyConfig(self, profilerConfig: Any) -> int:
        key, _ = self._prof_config(profilerConfig)
        if _Session.running == key:
            raise SimError(ACL_ERROR_INVALID_PROFILING_CONFIG, "profilerConfig is running; aclprofStop it first")
        del _Session.configs[key]
        return 0

    def aclprofFinalize(self) -> int:
        _require_init()
        if _Session.running is not None:
            _end_trace()                        # finalize ends a running session, writing what it recorded
            _Session.running = None
        _Session.path = None
        return 0
