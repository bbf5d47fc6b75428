"""Per-device and per-stream modes: the SoC name, the float overflow mode, the stream failure mode.

``aclrtGetSocName`` answers the SoC of the emulated platform (``HCOMM_SIM_PLATFORM``; sim/product.py names it),
so clients that branch on it (hccl_test's 910B overflow mode and Ascend950 options, ranktable versions, custom
operators) take the platform's branch.
"""
from __future__ import annotations

import functools
from typing import Any, Dict

from .._ffi import ffi

from ..errors import ACL_ERROR_API_NOT_SUPPORT
from . import product
from .errors import ACL_ERROR_RT_PARAM_INVALID, SimError, entry
from .acl import acl_stream, interned
from .part import Part
from .state import key_of

__all__ = ["DeviceModes", "OVERFLOW_MODE_INFNAN", "STOP_ON_FAILURE"]

OVERFLOW_MODE_SATURATION, OVERFLOW_MODE_INFNAN = 0, 1        # aclrtFloatOverflowMode (acl/acl_rt.h:280-284)
CONTINUE_ON_FAILURE, STOP_ON_FAILURE = 0, 1                  # aclrtSetStreamFailureMode's modes


class DeviceModes(Part):
    """aclrtGetSocName (acl/acl_base_rt.h), aclrtSetDeviceSatMode / aclrtGetDeviceSatMode, aclrtSetStreamFailureMode."""

    HEADERS = ("acl/acl_base_rt.h", "acl/acl_rt.h")
    _overflow_mode = OVERFLOW_MODE_INFNAN
    _failure_modes: Dict[int, int] = {}

    @functools.partial(entry, failure=ffi.NULL)
    def aclrtGetSocName(self) -> Any:
        return interned(product.soc_name())

    @entry
    def aclrtSetDeviceSatMode(self, mode: int) -> int:
        """runtime device.cpp:243-249 forwards to rtSetDeviceSatMode.  The emulator's kernels compute IEEE results
        (an fp16/bf16 overflow is inf, NumPy's arithmetic), which is INFNAN mode: saturation is refused."""
        if mode == OVERFLOW_MODE_INFNAN:
            DeviceModes._overflow_mode = mode
            return 0
        if mode == OVERFLOW_MODE_SATURATION:
            raise SimError(ACL_ERROR_API_NOT_SUPPORT, "mode=ACL_RT_OVERFLOW_MODE_SATURATION: the emulator's "
                                                           "kernels compute inf/nan on overflow (INFNAN mode) only")
        raise SimError(ACL_ERROR_RT_PARAM_INVALID, f"mode={mode}; expected ACL_RT_OVERFLOW_MODE_SATURATION (0) or "
                                                   "ACL_RT_OVERFLOW_MODE_INFNAN (1)")

    @entry
    def aclrtGetDeviceSatMode(self, mode: Any) -> int:
        mode[0] = DeviceModes._overflow_mode
        return 0

    @entry
    def aclrtSetStreamFailureMode(self, stream: Any, mode: int) -> int:
        """runtime stream.cpp:258-264 (rtStreamSetMode).  The emulator stops a stream at its first failed task
        and fails what waits on it (sim/runtime.py fail_queue), which is STOP_ON_FAILURE; both modes are recorded,
        continuing past a failed task is not emulated."""
        acl_stream(self.state, stream)                      # an unknown stream: ACL_ERROR_RT_INVALID_HANDLE
        if mode not in (CONTINUE_ON_FAILURE, STOP_ON_FAILURE):
            raise SimError(ACL_ERROR_RT_PARAM_INVALID, f"mode={mode}; expected 0 (continue on failure) or 1 (stop "
                                                       "on failure)")
        DeviceModes._failure_modes[key_of(stream)] = mode
        return 0
