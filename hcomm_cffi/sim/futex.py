"""Blocking waits on shared-memory words without burning a core: sched_yield polling, then futex.

Uses libc through its own small cffi ABI-mode declaration (no compiler).  A futex wait is a
syscall that sleeps until another process changes the word and wakes it, or a timeout passes.
"""
from __future__ import annotations

import cffi

_ffi = cffi.FFI()
_ffi.cdef(
    """
    long syscall(long number, ...);
    int sched_yield(void);
    struct hcomm_timespec { long tv_sec; long tv_nsec; };
    """
)
_libc = _ffi.dlopen(None)

_SYS_FUTEX = _ffi.cast("long", 202)   # x86_64; aarch64 is 98
import platform as _platform

if _platform.machine() in ("aarch64", "arm64"):
    _SYS_FUTEX = _ffi.cast("long", 98)
_FUTEX_WAIT = _ffi.cast("int", 0)
_FUTEX_WAKE = _ffi.cast("int", 1)
_NULL = _ffi.NULL
_ZERO = _ffi.cast("int", 0)
_ALL = _ffi.cast("int", 2**31 - 1)
_ts = _ffi.new("struct hcomm_timespec *")
_syscall = _libc.syscall
sched_yield = _libc.sched_yield

__all__ = ["futex_wait", "futex_wake", "sched_yield"]


def futex_wait(word_addr: int, expected: int, timeout_s: float) -> None:
    """Sleep while the 32-bit word at ``word_addr`` equals ``expected``, at most ``timeout_s``.

    Returns on a wake, a value change, a signal or the timeout; callers re-check their condition.
    """
    if timeout_s <= 0:
        return
    sec = int(timeout_s)
    _ts.tv_sec = sec
    _ts.tv_nsec = int((timeout_s - sec) * 1e9)
    _syscall(_SYS_FUTEX, _ffi.cast("int32_t *", word_addr), _FUTEX_WAIT,
             _ffi.cast("int", expected), _ts, _NULL, _ZERO)


def futex_wake(word_addr: int) -> None:
    """Wake every process sleeping on the 32-bit word at ``word_addr``."""
    _syscall(_SYS_FUTEX, _ffi.cast("int32_t *", word_addr), _FUTEX_WAKE, _ALL, _NULL, _NULL, _ZERO)
