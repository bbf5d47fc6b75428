"""Environment settings the emulator honours, read when a communicator is created (as HCCL does)."""
from __future__ import annotations

import os
from dataclasses import dataclass

from ..enums import DEFAULT_CONNECT_TIMEOUT_S, DEFAULT_EXEC_TIMEOUT_S, HCCL_COMM_DEFAULT_BUFFSIZE_MB
from .errors import HcclResult, SimError

CHECK_MODES = ("off", "warn", "strict")

__all__ = ["SimConfig", "read_config", "CHECK_MODES"]


@dataclass(frozen=True)
class SimConfig:
    """Settings of one communicator: buffer half size, timeouts, checker mode."""

    buffsize_mb: int
    exec_timeout_s: float
    connect_timeout_s: float
    check: str


def _number(name: str, default: float, minimum: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SimError(HcclResult.E_PARA, f"environment variable {name}={raw!r} is not a number") from None
    if value < minimum:
        raise SimError(HcclResult.E_PARA, f"environment variable {name}={raw!r} is below its minimum {minimum:g}")
    return value


def read_config() -> SimConfig:
    """Current settings from HCCL_BUFFSIZE, HCCL_EXEC_TIMEOUT, HCCL_CONNECT_TIMEOUT, HCOMM_SIM_CHECK.

    HCCL_EXEC_TIMEOUT=0 means "never" on the A2 host path; the emulator caps it at one day so that
    no wait is unbounded.  HCCL_CONNECT_TIMEOUT below 120 s is accepted (the real range starts at
    120) so tests can exercise rendezvous failures quickly.
    """
    buffsize = int(_number("HCCL_BUFFSIZE", HCCL_COMM_DEFAULT_BUFFSIZE_MB, 1))
    exec_timeout = _number("HCCL_EXEC_TIMEOUT", DEFAULT_EXEC_TIMEOUT_S, 0) or 86400.0
    connect = _number("HCCL_CONNECT_TIMEOUT", DEFAULT_CONNECT_TIMEOUT_S, 0.1)
    check = os.environ.get("HCOMM_SIM_CHECK", "warn").strip().lower() or "warn"
    if check not in CHECK_MODES:
        raise SimError(HcclResult.E_PARA, f"HCOMM_SIM_CHECK={check!r}; expected one of {CHECK_MODES}")
    return SimConfig(buffsize, exec_timeout, connect, check)
