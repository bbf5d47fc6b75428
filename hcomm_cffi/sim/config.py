"""Environment settings the emulator honours, read when a communicator is created (as HCCL does)."""
from __future__ import annotations

from dataclasses import dataclass

from .. import settings
from .errors import HcclResult, SimError

CHECK_MODES = settings.CHECK_MODES

__all__ = ["SimConfig", "read_config", "CHECK_MODES", "CheckerWarning"]


class CheckerWarning(UserWarning):
    """A schedule problem found by the emulator's checker (HCOMM_SIM_CHECK=warn)."""


@dataclass(frozen=True)
class SimConfig:
    """Settings of one communicator: buffer half size, timeouts, checker mode."""

    buffsize_mb: int
    exec_timeout_s: float
    connect_timeout_s: float
    check: str


def read_config() -> SimConfig:
    """Current settings from HCCL_BUFFSIZE, HCCL_EXEC_TIMEOUT, HCCL_CONNECT_TIMEOUT, HCOMM_SIM_CHECK.

    Parsed by ``hcomm_cffi.settings`` (one set of rules and error texts for the whole package); a bad
    value is HCCL_E_PARA, as in HCCL's init.  HCCL_EXEC_TIMEOUT=0 means "never" (the vendor's meaning on
    A2/A3, see settings.py).  HCCL_CONNECT_TIMEOUT below 120 s is accepted (the real range starts at
    120) so tests can exercise rendezvous failures quickly.
    """
    try:
        current = settings.current()
    except settings.SettingsError as exc:
        raise SimError(HcclResult.E_PARA, str(exc)) from None
    return SimConfig(current.buffsize_mb, current.exec_wait_s, current.connect_timeout_s, current.sim_check)
