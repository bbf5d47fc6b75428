"""Every ``HCCL_*`` / ``HCOMM_*`` environment variable the package honours, parsed by one set of rules.

:func:`current` reads ``os.environ`` (or a given mapping) *at call time* and returns a frozen
:class:`Settings`; callers read it when they create a communicator, as HCCL does at init.  A variable
that is set but unusable raises :class:`SettingsError` (a ``ValueError``) whose text names the
variable, its value and what is expected, e.g.
``HCOMM_EAGER_LIMIT='abc' is not an integer number of bytes; expected an integer number of bytes >= 0``.
An unset or empty variable takes its default.  :func:`value` parses a single variable (for callers that
must not fail on an unrelated bad one, e.g. ``hcomm info``).

Vendor facts followed here (hcomm ``src/legacy/ascend910/platform/common/externalinput.cc`` @ 8958adb):

* ``HCCL_BUFFSIZE``: decimal digits only, at most 10 of them, >= 1 MiB, and it must fit a ``u32``
  (``ParseCclBufferSize``, lines 1496-1530, and ``SalStrToULong`` in ``sal.cc``:185-206 which rejects
  values above 0xFFFFFFFF).  So the accepted range is 1..4294967295 MiB.
* ``HCCL_EXEC_TIMEOUT``: seconds with at most two decimals (``IsValidExecTimeOutMs``, line 496); on
  A2/A3 (910B / 910_93) the range is 0..2147483647 and **0 means "never time out"**
  (``SetHccLExecTimeOut``, lines 972-1000).  The package uses that meaning everywhere: 0 is accepted
  and waits use :data:`EXEC_TIMEOUT_NEVER_S` (see :attr:`Settings.exec_wait_s`).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

from .enums import DEFAULT_CONNECT_TIMEOUT_S, DEFAULT_EXEC_TIMEOUT_S, HCCL_COMM_DEFAULT_BUFFSIZE_MB

__all__ = [
    "Settings", "SettingsError", "Variable", "VARIABLES", "current", "value", "describe", "parse_int",
    "exec_wait_s",
    "BUFFSIZE_MAX_MB", "EXEC_TIMEOUT_MAX_S", "EXEC_TIMEOUT_NEVER_S", "DEFAULT_EAGER_LIMIT", "STEP_MIN_BYTES",
    "CHECK_MODES", "BACKENDS", "RENDEZVOUS_CHANNELS", "LOG_LEVELS",
]

BUFFSIZE_MAX_MB = 0xFFFFFFFF            # u32 (vendor sal.cc SalStrToULong)
EXEC_TIMEOUT_MAX_S = 2147483647         # vendor A2/A3 maximum
EXEC_TIMEOUT_NEVER_S = float(EXEC_TIMEOUT_MAX_S)  # what "0 = never" waits for: longer than any allowed value
DEFAULT_EAGER_LIMIT = 64 << 10
STEP_MIN_BYTES = 128                    # one aligned landing slot (algorithms.interface.ALIGN)
CHECK_MODES = ("off", "warn", "strict")
BACKENDS = ("sim", "cann")
#: the platforms the emulator can stand for (sim/product.py maps each to its SoC name and links)
SIM_PLATFORMS = ("a2", "a3", "910a", "950")
RENDEZVOUS_CHANNELS = ("file", "tcp", "torch", "mpi")
LOG_LEVELS = ("WARN", "INFO", "DEBUG")
_SIZE_UNITS = {"": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
               "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30}
_SIZE_RE = re.compile(r"^(\d+)\s*([a-z]*)$", re.ASCII)
_SECONDS_RE = re.compile(r"^[0-9]+(\.[0-9]{1,2})?$")     # the vendor's format: ASCII digits, at most 2 decimals
_DECIMAL_RE = re.compile(r"^([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?$")   # ASCII only (float() takes any digits)
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


class SettingsError(ValueError):
    """An environment variable that is set but unusable; the text names it, its value and what was expected."""


def _fail(name: str, raw: str, what: str, expected: str) -> SettingsError:
    return SettingsError(f"{name}={raw!r} {what}; expected {expected}")


# ---------------------------------------------------------------------------------------------- parsers
def parse_int(name: str, raw: str, low: int, high: Optional[int] = None, unit: str = "") -> int:
    """``raw`` (decimal digits) as an int in [low, high]; SettingsError naming ``name`` otherwise."""
    bounds = f"an integer{unit} >= {low}" + (f" and <= {high}" if high is not None else "")
    if not raw.isdigit() or not raw.isascii():
        raise _fail(name, raw, f"is not an integer{unit}", bounds)
    number = int(raw)
    if number < low or (high is not None and number > high):
        raise _fail(name, raw, "is out of range", bounds)
    return number


def _seconds(name: str, raw: str, low: float, high: float, strict_low: bool, vendor_format: bool) -> float:
    expected = f"a number of seconds {'>' if strict_low else '>='} {low:g} and <= {high:g}"
    if vendor_format and not _SECONDS_RE.match(raw):
        raise _fail(name, raw, "is not a number of seconds", expected + " in ASCII digits with at most 2 decimals")
    if not _DECIMAL_RE.match(raw):
        raise _fail(name, raw, "is not a number of seconds", expected + " in ASCII digits")
    number = float(raw)
    if not (number > low if strict_low else number >= low) or not number <= high:
        raise _fail(name, raw, "is out of range", expected)
    return number


def _size(name: str, raw: str) -> int:
    expected = "an integer number of bytes >= 0, optionally with a K/M/G (KiB/MiB/GiB) suffix, e.g. 65536 or 64K"
    m = _SIZE_RE.match(raw.lower())
    if m is None or m.group(2) not in _SIZE_UNITS:
        raise _fail(name, raw, "is not an integer number of bytes", expected)
    return int(m.group(1)) * _SIZE_UNITS[m.group(2)]


def _step(name: str, raw: str) -> int:
    value = _size(name, raw)
    if 0 < value < STEP_MIN_BYTES:
        raise _fail(name, raw, f"is below {STEP_MIN_BYTES} bytes", "0 (steps as large as the HCCL buffer allows) "
                    f"or at least {STEP_MIN_BYTES} bytes (one aligned slot)")
    return value


def _choice(name: str, raw: str, choices: Tuple[str, ...], what: str) -> str:
    low = raw.lower()
    if low not in choices:
        raise _fail(name, raw, f"is not {what}", f"one of {', '.join(choices)}")
    return low


def _level(name: str, raw: str) -> str:
    up = raw.upper()
    up = "WARN" if up == "WARNING" else up
    if up not in LOG_LEVELS:
        raise _fail(name, raw, "is not a log level", f"one of {', '.join(LOG_LEVELS)}")
    return up


def _flag(name: str, raw: str) -> bool:
    low = raw.lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise _fail(name, raw, "is not a boolean", f"one of {', '.join(_TRUE + _FALSE)}")


def _switch(name: str, raw: str) -> str:
    """on / off (a boolean's spellings), or auto: on where possible, else a warning and off."""
    if raw.lower() == "auto":
        return "auto"
    try:
        return "on" if _flag(name, raw) else "off"
    except SettingsError:
        raise _fail(name, raw, "is not a switch", f"auto or one of {', '.join(_TRUE + _FALSE)}") from None


def _shape(name: str, raw: str) -> Tuple[int, int]:
    parts = raw.lower().split("x")
    if len(parts) != 2 or not all(p.isascii() and p.isdigit() and int(p) > 0 for p in parts):
        raise _fail(name, raw, "is not a topology shape", "SERVERSxDEVICES with both >= 1, e.g. 2x4")
    return int(parts[0]), int(parts[1])


def _path(name: str, raw: str) -> str:
    if "\0" in raw:
        raise _fail(name, raw, "is not a path", "a file system path without NUL characters")
    return os.path.abspath(os.path.expanduser(raw))


def _text(name: str, raw: str) -> str:
    return raw


@dataclass(frozen=True)
class Variable:
    """One variable: its name, the Settings field it fills, its parser and its default."""

    name: str
    field: str
    parse: Callable[[str, str], Any]
    default: Any
    doc: str


VARIABLES: Tuple[Variable, ...] = (
    Variable("HCCL_BUFFSIZE", "buffsize_mb",
             lambda n, r: parse_int(n, r, 1, BUFFSIZE_MAX_MB, " number of MiB"), HCCL_COMM_DEFAULT_BUFFSIZE_MB,
             "HCCL buffer half size in MiB (the buffer is 2x this)"),
    Variable("HCCL_EXEC_TIMEOUT", "exec_timeout_s",
             lambda n, r: _seconds(n, r, 0, EXEC_TIMEOUT_MAX_S, False, True), float(DEFAULT_EXEC_TIMEOUT_S),
             "notify/execution wait limit in seconds; 0 = never"),
    Variable("HCCL_CONNECT_TIMEOUT", "connect_timeout_s",
             lambda n, r: _seconds(n, r, 0, EXEC_TIMEOUT_MAX_S, True, False), float(DEFAULT_CONNECT_TIMEOUT_S),
             "rendezvous / link set-up limit in seconds (values under the vendor's 120 are accepted, for tests)"),
    Variable("HCOMM_EAGER_LIMIT", "eager_limit", _size, DEFAULT_EAGER_LIMIT,
             "point-to-point messages up to this many bytes are sent eagerly"),
    Variable("HCOMM_STEP_BYTES", "step_bytes", _step, None,
             "most bytes an algorithm stages per step and peer (its landing slot); 0: as many as the HCCL buffer "
             "holds; unset: the backend's preference (1M on the emulator, the HCCL buffer on CANN)"),
    Variable("HCOMM_TOPOLOGY", "topology", _shape, None, "SERVERSxDEVICES shape of the world communicator"),
    Variable("HCOMM_CHECK_COLLECTIVES", "check_collectives", _flag, True,
             "library collectives carry the package's signature handshake where the backend does not check them "
             "itself (CANN); the package's algorithms always carry it, and the emulator's collectives always check"),
    Variable("HCOMM_BACKEND", "backend", lambda n, r: _choice(n, r, BACKENDS, "a backend"), None, "force sim or cann"),
    Variable("HCOMM_CANN_LIB_DIR", "cann_lib_dir", _path, None, "directory holding the CANN libraries"),
    Variable("HCOMM_SIM_CHECK", "sim_check", lambda n, r: _choice(n, r, CHECK_MODES, "a checker mode"), "warn",
             "emulator checker: off, warn (reports; no race analysis) or strict (fails; adds the race analysis)"),
    Variable("HCOMM_SIM_ENGINE", "sim_engine", lambda n, r: _choice(n, r, ("python", "compiled", "auto"),
                                                                     "an executor engine"), "auto",
             "what runs the emulator's data plane: python (the reference), compiled (C built on first use with the "
             "system compiler; an error without one) or auto (compiled when a C compiler is found)"),
    Variable("HCOMM_SIM_SHM_DIR", "sim_shm_dir", _path, "/dev/shm", "directory of the emulator's segments"),
    Variable("HCOMM_SIM_DEVICE_COUNT", "sim_device_count",
             lambda n, r: parse_int(n, r, 1, 1 << 16, " number of devices"), 16, "devices the emulator reports"),
    Variable("HCOMM_SIM_PLATFORM", "sim_platform", lambda n, r: _choice(n, r, SIM_PLATFORMS, "an emulated platform"),
             "a2", "the platform the emulator stands for: its aclrtGetSocName (a2 Ascend910B1, a3 Ascend910_9391, "
             "910a Ascend910A, 950 Ascend950PR_9599) and its links (HCCS; UB on 950)"),
    Variable("HCOMM_SIM_ABI_CHECK", "sim_abi_check", _flag, False, "call the emulator through C function pointers"),
    Variable("HCOMM_SIM_LEDGER", "sim_ledger", _path, None,
             "directory where the emulator keeps ledger-<pid>.json: every thread, channel and buffer it handed out"),
    Variable("HCOMM_JOB_ID", "job_id", _text, None, "job id shared by every rank of a job"),
    Variable("HCOMM_JOB_SECRET", "job_secret", _text, None,
             "random secret of one launch (set by hcomm run); ranks prove membership of the job with it"),
    Variable("HCOMM_RENDEZVOUS", "rendezvous", lambda n, r: _choice(n, r, RENDEZVOUS_CHANNELS, "a rendezvous channel"), None,
             "force a root-info channel"),
    Variable("HCOMM_RENDEZVOUS_DIR", "rendezvous_dir", _path, None, "parent of file rendezvous directories"),
    Variable("HCOMM_MASTER_ADDR", "master_addr", _text, None, "host of the TCP store"),
    Variable("HCOMM_MASTER_PORT", "master_port", lambda n, r: parse_int(n, r, 1, 65535, " TCP port"), None,
             "port of the TCP store"),
    Variable("HCOMM_RUN_ID", "run_id", _text, None, "job id of an hcomm run job (set by the launcher)"),
    Variable("HCOMM_RUN_JOB_DIR", "run_job_dir", _path, None, "private job directory (set by the launcher)"),
    Variable("HCOMM_RUN_BIND", "run_bind", _text, None, "CPU binding hcomm run gave this rank (set by the launcher)"),
    Variable("HCOMM_RUN_NPROCS", "run_nprocs", lambda n, r: parse_int(n, r, 1, None, " number of ranks"), None,
             "rank count of an hcomm run job (set by the launcher)"),
    Variable("HCOMM_BENCH_PROGRESS", "bench_progress", lambda n, r: _choice(n, r, ("relay",), "a progress mode"), None,
             "hcomm bench internal: rank 0 relays progress marks"),
    Variable("HCOMM_BENCH_CORRUPT", "bench_corrupt", _text, None, "hcomm bench internal: corrupt a rank's result"),
    Variable("HCOMM_BENCH_SIM_CHECK_DEFAULTED", "bench_sim_check_defaulted", _flag, False,
             "hcomm bench internal: HCOMM_SIM_CHECK was defaulted to off by hcomm bench"),
    Variable("HCOMM_BENCH_SIGNATURE_CHECK_DEFAULTED", "bench_signature_check_defaulted", _flag, False,
             "hcomm bench internal: HCOMM_CHECK_COLLECTIVES was defaulted to 0 by hcomm bench"),
    Variable("HCOMM_MAX_RANKS", "max_ranks", lambda n, r: parse_int(n, r, 1, None, " number of ranks"), None,
             "most local ranks hcomm run / hcomm bench start (default: a multiple of the CPU count)"),
    Variable("HCOMM_MAX_STREAMS", "max_streams", lambda n, r: parse_int(n, r, 1, 64, " number of streams"), 4,
             "most user streams one communicator runs stream-ordered collectives on (each keeps its threads)"),
    Variable("HCOMM_DEBUG", "debug", _level, None,
             "log the package's decisions on every rank: WARN, INFO (backend, communicators, algorithms) or "
             "DEBUG (every call); unset: quiet"),
    Variable("HCOMM_DEBUG_FILE", "debug_file", _text, None,
             "write the HCOMM_DEBUG log to this file instead of stderr; %r is replaced by the rank"),
    Variable("HCOMM_FR_SIZE", "fr_size", lambda n, r: parse_int(n, r, 0, 1 << 20, " number of operations"), 256,
             "operations the flight recorder keeps per communicator (0: off)"),
    Variable("HCOMM_FR_DIR", "fr_dir", _path, None,
             "where every rank writes its flight recorder on a timeout, a peer's death or SIGUSR1 (default: "
             "a directory hcomm run keeps after the job, hcomm-<uid>-flight-<job id>-XXXXXXXX in the temp dir)"),
    Variable("HCOMM_STUCK_REPORT_S", "stuck_report_s", lambda n, r: _seconds(n, r, 0, EXEC_TIMEOUT_MAX_S, False, False),
             60.0, "seconds without progress on any rank of a communicator after which the desync report is "
             "written (by hcomm run, else by each rank) while the job keeps waiting; 0 = never"),
    Variable("HCOMM_TRACE", "trace", _path, None,
             "write a Chrome trace-event timeline of every task per rank into this directory"),
    Variable("HCOMM_EMULATE_NPU", "emulate_npu", _switch, "off",
             "at `import torch`, without torch_npu installed: torch's device 'npu' over the emulator, torch.npu, "
             "backend 'hccl' and the name torch_npu (docs/guide/npu-on-a-laptop.md; hcomm run sets auto, 1 with "
             "--emulate-npu, 0 with --no-emulate-npu); "
             "auto: the same, or a warning where the device cannot be made"),
    Variable("HCOMM_NPU_EXT_DIR", "npu_ext_dir", _path, None,
             "where the emulated npu device's compiled extension is cached (default: a private directory of this "
             "user under $XDG_CACHE_HOME or ~/.cache)"),
)
_BY_NAME: Dict[str, Variable] = {v.name: v for v in VARIABLES}


@dataclass(frozen=True)
class Settings:
    """The package's settings as read from the environment at one moment (see :data:`VARIABLES`)."""

    buffsize_mb: int
    exec_timeout_s: float
    connect_timeout_s: float
    eager_limit: int
    step_bytes: Optional[int]
    topology: Optional[Tuple[int, int]]
    check_collectives: Optional[bool]
    backend: Optional[str]
    cann_lib_dir: Optional[str]
    sim_check: str
    sim_engine: str
    sim_shm_dir: str
    sim_device_count: int
    sim_platform: str
    sim_abi_check: bool
    sim_ledger: Optional[str]
    job_id: Optional[str]
    job_secret: Optional[str]
    rendezvous: Optional[str]
    rendezvous_dir: Optional[str]
    master_addr: Optional[str]
    master_port: Optional[int]
    run_id: Optional[str]
    run_job_dir: Optional[str]
    run_nprocs: Optional[int]
    run_bind: Optional[str]
    bench_progress: Optional[str]
    bench_corrupt: Optional[str]
    bench_sim_check_defaulted: bool
    bench_signature_check_defaulted: bool
    max_ranks: Optional[int]
    max_streams: int
    debug: Optional[str]
    debug_file: Optional[str]
    fr_size: int
    fr_dir: Optional[str]
    stuck_report_s: float
    trace: Optional[str]
    emulate_npu: str
    npu_ext_dir: Optional[str]
    raw: Tuple[Tuple[str, str], ...] = ()

    @property
    def exec_wait_s(self) -> float:
        """Seconds a wait may last: HCCL_EXEC_TIMEOUT, or EXEC_TIMEOUT_NEVER_S for 0 ("never")."""
        return exec_wait_s(self.exec_timeout_s)

    def source(self, name: str) -> str:
        """``'NAME=value'`` when the variable was set, ``'NAME default'`` otherwise (for error texts)."""
        found = dict(self.raw).get(name)
        return f"{name}={found}" if found is not None else f"{name} default"


def exec_wait_s(exec_timeout_s: float) -> float:
    """An execution timeout (HCCL_EXEC_TIMEOUT or config.hcclExecTimeOut) as wait seconds: 0 means never."""
    return EXEC_TIMEOUT_NEVER_S if exec_timeout_s == 0 else float(exec_timeout_s)


def _raw(environ: Mapping[str, str], name: str) -> Optional[str]:
    found = environ.get(name)
    if found is None or not found.strip():
        return None
    return found.strip()


def value(name: str, environ: Optional[Mapping[str, str]] = None) -> Any:
    """One variable, parsed (its default when unset or empty); SettingsError when set but unusable."""
    var = _BY_NAME.get(name)
    if var is None:
        raise KeyError(f"{name!r} is not a setting of hcomm_cffi; expected one of {', '.join(_BY_NAME)}")
    raw = _raw(os.environ if environ is None else environ, name)
    return var.default if raw is None else var.parse(name, raw)


def current(environ: Optional[Mapping[str, str]] = None) -> Settings:
    """Every setting, read from ``environ`` (default ``os.environ``) now; SettingsError for a bad one."""
    env = os.environ if environ is None else environ
    fields: Dict[str, Any] = {}
    raw = []
    for var in VARIABLES:
        text = _raw(env, var.name)
        if text is not None:
            raw.append((var.name, text))
        fields[var.field] = var.default if text is None else var.parse(var.name, text)
    return Settings(raw=tuple(raw), **fields)


def describe() -> Dict[str, str]:
    """Variable name -> one-line meaning (for ``hcomm info`` and docs)."""
    return {v.name: v.doc for v in VARIABLES}
