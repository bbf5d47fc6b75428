"""The emulated AICPU: kernel binaries named by a JSON, kernel arguments, and launches in stream order.

A custom operator's host library (hicann/hccl@09300b70 examples/04_custom_ops_p2p/op_host/load_kernel.cc:35,
launch_kernel.cc:36) loads ``opp/vendors/<vendor>/aicpu/config/<kernel>.json`` with
``aclrtBinaryLoadFromFile`` (CPU kernel mode), looks a kernel up with ``aclrtBinaryGetFunction``, packs its
arguments with ``aclrtKernelArgsInit/Append/Finalize`` and launches it with ``aclrtLaunchKernelWithConfig``.

Here the JSON names the kernel ``.so`` and its function as on the device (hicann/runtime@681ef7610
src/runtime/core/src/kernel/json_parse.cc:47 GetCpuKernelFromJson; binary_loader.cc:180 SetCpuBinInfo: mode 0
needs only the JSON — the ``.so`` comes from the kernel package the device loaded —, mode 1 the ``.so`` next to
it).  The launch is a task on the stream: when the stream reaches it, the kernel runs on the AICPU thread of
the launching device (one OS thread per device and process), and the stream goes on when the kernel returns.
Its ``Hcomm*OnThread`` calls are ordinary emulator calls (batch mode, checker, tracing).  A kernel that returns
non-zero, crashes (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT in its own code: the emulated install's
``hcommsim_run_kernel`` catches the signal on the AICPU thread) or does not return within its launch timeout
fails the stream: ``aclrtSynchronizeStream`` returns the error and ``aclGetRecentErrMsg()`` names the kernel.
"""
from __future__ import annotations

import glob
import json
import os
import queue
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

import cffi

from .. import settings
from .._ffi import ffi
from ..acl_codes import VALUES as ACL_VALUES
from ..errors import ACL_ERROR_RT_FEATURE_NOT_SUPPORT
from .errors import (
    ACL_ERROR_INVALID_PARAM, ACL_ERROR_RT_INVALID_HANDLE, ACL_ERROR_RT_PARAM_INVALID,
    HcclResult, SimError, last_error,
)
from ..enums import Engine
from .acl import AclRuntime, acl_stream, current_device, require_device
from .dataplane import DataPlane
from .group import group_depth
from .hccl_res import HcclResCalls
from .part import Part, check_out
from .queues import Queue, SimEvent
from .runtime import EXECUTOR
from .state import SimState, c_string, key_of
from .tasks import EventWait, HostCall

__all__ = ["AicpuCalls", "KernelBinary", "KernelFunction", "KernelRunning", "CPU_KERNEL_MODES"]

ACL_ERROR_RT_AICPU_TIMEOUT = ACL_VALUES["ACL_ERROR_RT_AICPU_TIMEOUT"]
ACL_ERROR_RT_AICPU_EXCEPTION = ACL_VALUES["ACL_ERROR_RT_AICPU_EXCEPTION"]
ACL_ERROR_INVALID_FILE = ACL_VALUES["ACL_ERROR_INVALID_FILE"]
ACL_ERROR_KERNEL_NOT_FOUND = ACL_VALUES["ACL_ERROR_KERNEL_NOT_FOUND"]

#: aclrtBinaryLoadOptionType values (acl_rt.h:478) and the CPU kernel modes a file load accepts (binary_loader.cc:184)
_OPT_CPU_KERNEL_MODE = 3
CPU_KERNEL_MODES = (0, 1)
#: aclrtLaunchKernelAttrId values (acl_rt.h:522)
_ATTR_TIMEOUT = 7
_ATTR_TIMEOUT_US = 8
#: where a mode-0 JSON's kernel .so is, relative to the JSON's directory (``aicpu/config``): the kernel
#: package as the device unpacks it (its tar's root directory, hicann/hccl examples/04_custom_ops_p2p/CMakeLists.txt:104)
DEVICE_KERNEL_DIR = os.path.join("..", "kernel", "aicpu_kernels_device")
_SIGNALS = {4: "SIGILL", 6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE", 11: "SIGSEGV"}

_dl = cffi.FFI()
_dl.cdef("""
    void *dlopen(const char *filename, int flags);
    void *dlsym(void *handle, const char *symbol);
    int dlclose(void *handle);
    char *dlerror(void);
""")
_libdl = _dl.dlopen(None)
_RTLD_NOW = 2
_runner = cffi.FFI()
_runner.cdef("int hcommsim_run_kernel(void *fn, void *args, uint32_t *result);")
_CORE_SONAME = b"libhcomm_sim_core.so"


def _dlerror() -> str:
    err = _libdl.dlerror()
    return _dl.string(err).decode("utf-8", "replace") if err != _dl.NULL else "unknown dlopen error"


@dataclass
class KernelBinary:
    """A loaded kernel JSON: kernel name -> (kernel .so path, function name)."""

    handle: int
    path: str
    mode: int
    kernels: Dict[str, Tuple[str, str]]


@dataclass
class KernelFunction:
    """A kernel found in a binary: its .so opened, its entry point resolved."""

    handle: int
    binary: KernelBinary
    name: str
    so_path: str
    symbol: str
    address: int

    @property
    def label(self) -> str:
        """``HcclLaunchP2PAicpuKernel (libp2p_aicpu_kernel.so)``: how messages name it."""
        return f"{self.symbol} ({os.path.basename(self.so_path)})"


@dataclass
class KernelArgs:
    """aclrtArgsHandle: the appended parameters, packed back to back as the kernel reads them."""

    handle: int
    function: KernelFunction
    blob: bytearray = field(default_factory=bytearray)
    finalized: bool = False


class _Registry:
    """The process's kernel objects by handle (handles are fake pointers, as streams' are)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.binaries: Dict[int, KernelBinary] = {}
        self.functions: Dict[int, KernelFunction] = {}
        self.args: Dict[int, KernelArgs] = {}
        self.so_handles: Dict[str, Any] = {}

    def add(self, table: Dict[int, Any], obj: Any, out: Any, ctype: str) -> None:
        """Keep ``obj`` in ``table`` under its handle and hand the handle out through ``out[0]``."""
        with self.lock:
            table[obj.handle] = obj
        out[0] = ffi.cast(ctype, obj.handle)

    @staticmethod
    def find(table: Dict[int, Any], handle: Any, what: str) -> Any:
        """The object behind ``handle``; ACL_ERROR_RT_INVALID_HANDLE naming ``what`` it should have been."""
        obj = table.get(key_of(handle))
        if obj is None:
            raise SimError(ACL_ERROR_RT_INVALID_HANDLE, f"0x{key_of(handle):x} is not {what}")
        return obj


_REG = _Registry()


def _parse_json(path: str) -> Dict[str, Tuple[str, str]]:
    """The CPU kernels of a kernel JSON: {key: (kernelSo, functionName)}, as json_parse.cc:47 reads them."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as exc:
        raise SimError(ACL_ERROR_INVALID_FILE, f"binPath={path!r} cannot be read: {exc.strerror}") from None
    except ValueError as exc:
        raise SimError(ACL_ERROR_INVALID_FILE, f"binPath={path!r} is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise SimError(ACL_ERROR_INVALID_FILE, f"binPath={path!r}: expected a JSON object of kernels")
    kernels = {}
    for key, value in doc.items():
        info = value.get("opInfo") if isinstance(value, dict) else None
        if not isinstance(info, dict):
            continue                      # json_parse.cc:52: an entry without opInfo is skipped
        so, fn = info.get("kernelSo", ""), info.get("functionName", "")
        if isinstance(so, str) and isinstance(fn, str):
            kernels[key] = (so, fn)
    if not kernels:
        raise SimError(ACL_ERROR_INVALID_FILE, f"binPath={path!r} declares no kernel (no entry with an opInfo "
                                               "holding kernelSo and functionName)")
    return kernels


def _kernel_so(binary: KernelBinary, so_name: str) -> str:
    """Where the kernel .so of a binary is: next to the JSON (mode 1) or in the unpacked kernel package (mode 0)."""
    if binary.mode == 1:
        return os.path.splitext(binary.path)[0] + ".so"     # binary_loader.cc:198 GetFilePathByExtension
    return os.path.normpath(os.path.join(os.path.dirname(binary.path), DEVICE_KERNEL_DIR, so_name))


def _resolve(binary: KernelBinary, name: str) -> Tuple[str, str, int]:
    """(so path, symbol, address) of kernel ``name``; ACL_ERROR_KERNEL_NOT_FOUND naming what is missing."""
    entry_ = binary.kernels.get(name)
    if entry_ is None:
        raise SimError(ACL_ERROR_KERNEL_NOT_FOUND, f"kernelName={name!r} is not in {binary.path} (it declares "
                                                   f"{', '.join(sorted(binary.kernels))})")
    so_name, symbol = entry_
    so_path = _kernel_so(binary, so_name)
    with _REG.lock:
        handle = _REG.so_handles.get(so_path)
        if handle is None:
            if not os.path.isfile(so_path):
                raise SimError(ACL_ERROR_KERNEL_NOT_FOUND,
                               f"kernel {name!r}: its kernelSo {so_name!r} is not at {so_path} (install the operator "
                               "package with `hcomm sim build-ops`)")
            handle = _libdl.dlopen(so_path.encode(), _RTLD_NOW)
            if handle == _dl.NULL:
                raise SimError(ACL_ERROR_KERNEL_NOT_FOUND, f"kernel {name!r}: dlopen({so_path}) failed: {_dlerror()}")
            _REG.so_handles[so_path] = handle
    address = _libdl.dlsym(handle, symbol.encode())
    if address == _dl.NULL:
        raise SimError(ACL_ERROR_KERNEL_NOT_FOUND, f"kernel {name!r}: {so_path} does not export functionName "
                                                   f"{symbol!r} (declare it extern \"C\")")
    return so_path, symbol, int(_dl.cast("uintptr_t", address))


def _builtin(name: str) -> KernelFunction:
    """One of the HCCL device library's own kernels (emulated in Python: they only issue a notify task)."""
    binary = KernelBinary(0, "libccl_kernel.so", 0, {})
    return KernelFunction(0, binary, name, "the HCCL device library", name, 0)


def _device_kernel(so_name: str, symbol: str) -> Tuple[str, int]:
    """(path, address) of ``symbol`` in the kernel .so ``so_name`` of a kernel package the device loaded.

    The device loads the packages of every vendor (opp/vendors/*/aicpu/kernel, unpacked in aicpu_kernels_device/)
    of the install at ASCEND_HOME_PATH; a path or a name the dynamic loader finds is taken as it is.
    """
    candidates = [so_name] if "/" in so_name else []
    home = os.environ.get("ASCEND_HOME_PATH")
    if home and "/" not in so_name:
        candidates += sorted(glob.glob(os.path.join(home, "opp", "vendors", "*", "aicpu", "kernel",
                                                    "aicpu_kernels_device", so_name)))
    path = candidates[0] if candidates else so_name
    # as a mode-1 binary whose JSON sits next to the .so: _resolve opens and checks it like any kernel's
    binary = KernelBinary(0, os.path.splitext(path)[0] + ".json", 1, {symbol: (so_name, symbol)})
    try:
        found, _, address = _resolve(binary, symbol)
    except SimError as exc:
        raise SimError(HcclResult.E_RUNTIME, f"funcInfo (kernelSoName={so_name!r}, kernelFuncName={symbol!r}): "
                                             f"{exc.message}") from None
    return found, address


def _timeout_s(cfg: Any) -> Optional[float]:
    """The launch's ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT (s) or _TIMEOUT_US, or None; both at once is an error."""
    if cfg == ffi.NULL:
        return None
    n = int(cfg.numAttrs)
    if n and cfg.attrs == ffi.NULL:
        raise SimError(ACL_ERROR_INVALID_PARAM, f"cfg->numAttrs={n} but cfg->attrs is NULL")
    seconds: Optional[float] = None
    ids = set()
    for i in range(n):
        attr = cfg.attrs[i]
        ids.add(int(attr.id))
        if attr.id == _ATTR_TIMEOUT:
            seconds = float(attr.value.timeout)
        elif attr.id == _ATTR_TIMEOUT_US:
            us = (int(attr.value.timeoutUs.timeoutHigh) << 32) | int(attr.value.timeoutUs.timeoutLow)
            seconds = us / 1e6
    if {_ATTR_TIMEOUT, _ATTR_TIMEOUT_US} <= ids:       # acl_rt.h:533: they cannot be carried at the same time
        raise SimError(ACL_ERROR_INVALID_PARAM, "cfg carries both ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT and _TIMEOUT_US")
    return seconds or None


class KernelRunning(EventWait):
    """The stream's task while its launched AICPU kernel runs: an event wait named for the trace and the checker."""

    __slots__ = ()

    @property
    def name(self) -> str:
        """``AicpuKernel`` (HCOMM_TRACE slices and checker messages)."""
        return "AicpuKernel"


class _KernelRun:
    """One launch: what the stream's tasks start and wait for."""

    def __init__(self, lib: "AicpuCalls", function: KernelFunction, args: Any, blocks: int, device: int,
                 stream: Queue, timeout_s: float, body: Optional[Callable[[], Tuple[int, int]]] = None) -> None:
        self.lib = lib                    # whose calls the AICPU thread makes (aclrtSetDevice, its batch)
        self.function = function
        self.args = args                  # the device copy of the arguments: alive until the kernel returns
        # (return value, signal) of one block: the C function at function.address, or an emulator kernel
        self.body = body or (lambda: _call_kernel(function.address, args))
        self.blocks = blocks
        self.device = device
        self.stream = stream
        self.timeout_s = timeout_s
        self.done = SimEvent(0)
        self.finished = False
        self.timer: Optional[threading.Timer] = None

    def start(self) -> None:
        """The stream reached the launch: hand the kernel to its device's AICPU thread (never blocks the stream)."""
        with EXECUTOR.lock:
            EXECUTOR.kernels_running += 1
        self.timer = threading.Timer(self.timeout_s, self._expired)
        self.timer.daemon = True
        self.timer.start()
        _aicpu_thread(self.device, self.lib).jobs.put(self)

    def where(self) -> str:
        return f"AICPU kernel {self.function.label} on device {self.device} ({self.stream.name})"

    def finish(self, failure: Optional[str]) -> None:
        """The kernel returned (``failure`` None) or failed: the stream goes on, or fails naming the kernel."""
        if self.timer is not None:
            self.timer.cancel()
        with EXECUTOR.lock:
            EXECUTOR.kernels_running -= 1
            if self.finished:
                return                     # the timeout already failed the stream
            self.finished = True
            if failure is None:
                self.done.completed += 1
            else:
                EXECUTOR.fail_queue(self.stream, HcclResult.E_INTERNAL, ACL_ERROR_RT_AICPU_EXCEPTION,
                                    f"{self.where()} {failure}")
        if self.stream.comm is not None:
            self.stream.comm.ring_self()   # a host thread may sleep on this rank's doorbell

    def _expired(self) -> None:
        with EXECUTOR.lock:
            if self.finished:
                return
            self.finished = True
            EXECUTOR.fail_queue(self.stream, HcclResult.E_TIMEOUT, ACL_ERROR_RT_AICPU_TIMEOUT,
                                f"{self.where()} did not return within its launch timeout of {self.timeout_s:g} s "
                                "(ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT, else HCCL_EXEC_TIMEOUT); its AICPU thread is "
                                "abandoned")
        _abandon(self.device)
        if self.stream.comm is not None:
            self.stream.comm.ring_self()


class _AicpuThread:
    """The AICPU of one device: an OS thread that runs that device's kernels one after another."""

    def __init__(self, device: int, lib: "AicpuCalls") -> None:
        self.device = device
        self.lib = lib
        self.jobs: "queue.Queue[_KernelRun]" = queue.Queue()
        self.thread = threading.Thread(target=self._serve, name=f"hcomm-aicpu-device{device}", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        self.lib.acl.aclrtSetDevice(self.device)           # the kernel's calls see the device it was launched on
        while True:
            run = self.jobs.get()
            try:
                failure = self._run(run)
            except Exception as exc:       # an emulator bug: still never leave the stream waiting
                failure = f"could not run: {exc!r}"
            run.finish(failure)

    def _run(self, run: _KernelRun) -> Optional[str]:
        for block in range(run.blocks):
            code, signal = run.body()
            self.lib.primitives.sim_discard_batch()                 # a kernel that stopped mid-batch launched nothing
            if signal:
                name = _SIGNALS.get(signal, f"signal {signal}")
                return (f"crashed with {name} in its own code (block {block}); the emulator caught it on the AICPU "
                        "thread")
            if code != 0:
                detail = last_error()
                return (f"returned {code} (block {block}); a kernel returns 0 on success"
                        + (f"; the last emulator error on the AICPU thread: {detail}" if detail else ""))
        return None


_LAUNCH_ERRORS = threading.local()      # the last <<<>>> launch error of each OS thread (aclrtGetLastError)
_THREADS: Dict[int, _AicpuThread] = {}
_THREADS_LOCK = threading.Lock()


def _aicpu_thread(device: int, lib: "AicpuCalls") -> _AicpuThread:
    with _THREADS_LOCK:
        th = _THREADS.get(device)
        if th is None:
            th = _THREADS[device] = _AicpuThread(device, lib)
        return th


def _abandon(device: int) -> None:
    """A kernel never returned: its thread is left to it, the device's next kernel gets a new thread."""
    with _THREADS_LOCK:
        _THREADS.pop(device, None)


_RUN_KERNEL: List[Any] = []


def _call_kernel(address: int, args: Any) -> Tuple[int, int]:
    """(return value, signal number or 0) of ``unsigned kernel(void *args)`` at ``address``.

    Through the emulated install's ``hcommsim_run_kernel`` (libhcomm_sim_core.so, which a kernel linked with
    -lhcomm has loaded), which catches a crash of the kernel; directly when that library is not loaded.
    """
    if not _RUN_KERNEL:
        core = _libdl.dlopen(_CORE_SONAME, 1 | 4)          # RTLD_LAZY | RTLD_NOLOAD: only if already loaded
        _RUN_KERNEL.append(_runner.cast("int(*)(void *, void *, uint32_t *)",
                                        _libdl.dlsym(core, b"hcommsim_run_kernel")) if core != _dl.NULL else None)
    runner = _RUN_KERNEL[0]
    if runner is None or runner == _runner.NULL:
        fn = ffi.cast("uint32_t(*)(void *)", address)
        return int(fn(args)), 0
    result = _runner.new("uint32_t *")
    signal = runner(_runner.cast("void *", address), _runner.cast("void *", int(ffi.cast("uintptr_t", args))),
                    result)
    return int(result[0]), int(signal)


class AicpuCalls(Part):
    """aclrtBinary*/aclrtKernelArgs*/aclrtLaunchKernelWithConfig (acl/acl_rt.h) and HcclAicpuKernelLaunch
    (hccl/hccl_launch.h); a kernel's calls go to the ACL, resource and data-plane parts it is given."""

    HEADERS = ("hccl/hccl_launch.h", "acl/acl_rt.h")

    def __init__(self, state: SimState, acl: AclRuntime, res: HcclResCalls, primitives: DataPlane) -> None:
        super().__init__(state)
        self.acl = acl
        self.res = res
        self.primitives = primitives

    # ------------------------------------------------------------------ binaries and functions
    def aclrtBinaryLoadFromFile(self, binPath: Any, options: Any, binHandle: Any) -> int:
        if binPath == ffi.NULL or binHandle == ffi.NULL:
            raise SimError(ACL_ERROR_INVALID_PARAM, "binPath or binHandle is NULL")
        path = c_string(binPath).decode("utf-8", "replace")
        mode = None
        if options != ffi.NULL:
            if options.numOpt and options.options == ffi.NULL:
                raise SimError(ACL_ERROR_INVALID_PARAM, f"options->numOpt={options.numOpt} but options->options is NULL")
            for i in range(int(options.numOpt)):
                opt = options.options[i]
                if int(opt.type) == _OPT_CPU_KERNEL_MODE:
                    mode = int(opt.value.cpuKernelMode)
        if mode is None:
            raise SimError(ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                           f"binPath={path!r}: the emulator loads AICPU kernels only (pass the option "
                           "ACL_RT_BINARY_LOAD_OPT_CPU_KERNEL_MODE); AI Core binaries need an NPU")
        if mode not in CPU_KERNEL_MODES:
            raise SimError(ACL_ERROR_RT_PARAM_INVALID, f"cpuKernelMode={mode}: a file load accepts 0 (the JSON only) "
                                                       "or 1 (the .so next to the JSON)")
        binary = KernelBinary(self.state.new_ptr_key(), os.path.realpath(path), mode, _parse_json(path))
        _REG.add(_REG.binaries, binary, binHandle, "aclrtBinHandle")
        return 0

    def aclrtBinaryUnLoad(self, binHandle: Any) -> int:
        binary = _REG.find(_REG.binaries, binHandle, "a loaded binary (binHandle of aclrtBinaryLoadFromFile)")
        with _REG.lock:
            _REG.binaries.pop(binary.handle, None)
            for h in [h for h, f in _REG.functions.items() if f.binary is binary]:
                del _REG.functions[h]
        return 0

    def aclrtBinaryGetFunction(self, binHandle: Any, kernelName: Any, funcHandle: Any) -> int:
        if kernelName == ffi.NULL or funcHandle == ffi.NULL:
            raise SimError(ACL_ERROR_INVALID_PARAM, "kernelName or funcHandle is NULL")
        binary = _REG.find(_REG.binaries, binHandle, "a loaded binary (binHandle of aclrtBinaryLoadFromFile)")
        name = c_string(kernelName).decode("utf-8", "replace")
        so_path, symbol, address = _resolve(binary, name)
        function = KernelFunction(self.state.new_ptr_key(), binary, name, so_path, symbol, address)
        _REG.add(_REG.functions, function, funcHandle, "aclrtFuncHandle")
        return 0

    def _function(self, handle: Any) -> KernelFunction:
        return _REG.find(_REG.functions, handle, "a kernel function (funcHandle of aclrtBinaryGetFunction)")

    # ------------------------------------------------------------------ arguments
    def aclrtKernelArgsInit(self, funcHandle: Any, argsHandle: Any) -> int:
        check_out(argsHandle, "argsHandle", ACL_ERROR_INVALID_PARAM)
        args = KernelArgs(self.state.new_ptr_key(), self._function(funcHandle))
        _REG.add(_REG.args, args, argsHandle, "aclrtArgsHandle")
        return 0

    def _args(self, handle: Any) -> KernelArgs:
        return _REG.find(_REG.args, handle, "kernel arguments (argsHandle of aclrtKernelArgsInit)")

    def aclrtKernelArgsAppend(self, argsHandle: Any, param: Any, paramSize: int, paramHandle: Any) -> int:
        args = self._args(argsHandle)
        if args.finalized:
            raise SimError(ACL_ERROR_INVALID_PARAM, "the arguments were finalized (aclrtKernelArgsFinalize)")
        if param == ffi.NULL or paramSize == 0:
            raise SimError(ACL_ERROR_INVALID_PARAM, f"param={'NULL' if param == ffi.NULL else 'set'}, "
                                                    f"paramSize={paramSize}; expected data and a size > 0")
        offset = len(args.blob)
        args.blob += ffi.buffer(ffi.cast("char *", param), paramSize)[:]   # copied now, as the runtime does
        if paramHandle != ffi.NULL:
            paramHandle[0] = ffi.cast("aclrtParamHandle", offset + 1)
        return 0

    def aclrtKernelArgsFinalize(self, argsHandle: Any) -> int:
        self._args(argsHandle).finalized = True
        return 0

    # ------------------------------------------------------------------ launch
    def aclrtLaunchKernelWithConfig(self, funcHandle: Any, numBlocks: int, stream: Any, cfg: Any, argsHandle: Any,
                                    reserve: Any) -> int:
        function = self._function(funcHandle)
        args = self._args(argsHandle)
        if args.function is not function:
            raise SimError(ACL_ERROR_INVALID_PARAM, f"argsHandle was made for kernel {args.function.name!r}, not "
                                                    f"{function.name!r}")
        if not args.finalized:
            raise SimError(ACL_ERROR_INVALID_PARAM, "the arguments are not finalized (aclrtKernelArgsFinalize)")
        self._launch_on(stream, function, bytes(args.blob), "numBlocks", numBlocks, _timeout_s(cfg))
        return 0

    def _launch_on(self, stream: Any, function: KernelFunction, args: bytes, blocks_name: str, blocks: int,
                   timeout_s: Optional[float]) -> None:
        """Launch ``function`` with a device copy of ``args`` on ``stream`` for the calling thread's device."""
        if blocks < 1:
            raise SimError(ACL_ERROR_INVALID_PARAM, f"{blocks_name}={blocks}; expected >= 1")
        q = acl_stream(self.state, stream)
        device = require_device()
        blob = ffi.new("char[]", args or b"\0")
        self._launch_kernel(_KernelRun(self, function, blob, int(blocks), device, q,
                                       timeout_s or float(settings.value("HCCL_EXEC_TIMEOUT"))))

    @staticmethod
    def _launch_kernel(run: _KernelRun) -> None:
        EXECUTOR.submit(run.stream, [HostCall(run.start), KernelRunning(run.done, 1)])
        EXECUTOR.settle()

    def aclrtGetLastError(self, level: int) -> int:
        """The calling OS thread's last kernel-launch error (a ``<<<>>>`` launch has no return code), then cleared."""
        code = getattr(_LAUNCH_ERRORS, "code", 0)
        _LAUNCH_ERRORS.code = 0
        return int(code)

    def HcommSimAscLaunchAicpu(self, fn: Any, name: Any, blockDim: int, stream: Any, args: Any, argsSize: int) -> int:
        """Emulator only: ``kernel<<<blockDim, l2ctrl, stream>>>(args, argsSize)`` of an AICPU kernel in an ASC source.

        `hcomm sim build-ops` rewrites the launch syntax of a package's ``.asc`` sources into this call (the
        bisheng compiler's job on CANN); the kernel, compiled from the package's ``.aicpu`` source into the host
        library, runs as an aclrtLaunchKernelWithConfig launch does.  Errors are kept for aclrtGetLastError.
        """
        try:
            return self._asc_launch(fn, name, blockDim, stream, args, argsSize)
        except Exception as exc:        # the code entry returns, kept for aclrtGetLastError too
            _LAUNCH_ERRORS.code = exc.code if isinstance(exc, SimError) else int(HcclResult.E_INTERNAL)
            raise

    def _asc_launch(self, fn: Any, name: Any, blockDim: int, stream: Any, args: Any, argsSize: int) -> int:
        if fn == ffi.NULL:
            raise SimError(ACL_ERROR_INVALID_PARAM, "the kernel function is NULL")
        if argsSize and args == ffi.NULL:
            raise SimError(ACL_ERROR_INVALID_PARAM, f"args is NULL but argsSize={argsSize}")
        label = c_string(name).decode("utf-8", "replace")
        binary = KernelBinary(0, "the host library, from an .aicpu source", -1, {})
        function = KernelFunction(0, binary, label, binary.path, label, int(ffi.cast("uintptr_t", fn)))
        data = ffi.buffer(ffi.cast("char *", args), argsSize)[:] if argsSize else b""
        self._launch_on(stream, function, data, "blockDim", blockDim, None)
        return 0

    # ------------------------------------------------------------------ hccl/hccl_launch.h
    def HcclAicpuKernelLaunch(self, comm: Any, opInfo: Any, funcInfo: Any, aicpuThreadHandle: int, userStream: Any,
                              kernelLaunchCfg: Any) -> int:
        """The user's AICPU kernel between a host-to-device and a device-to-host notify, as the vendor's host does.

        hicann/hcomm (mirror @8958adbf) src/coll_communicator_mgr/resource_mgr/local/my_rank/comm_engine/
        kernel_launch/hccl_kernel_launch_aicpu.cc:319 HcclAicpuKernelLaunch -> :282 AicpuKernelLaunchDirect: the
        user stream's thread (CPU_TS, 3 notifies) records the AICPU thread's last notify; on
        ``opInfo->p2p.unfoldStream`` a kernel waits on it, the user's kernel (``funcInfo``: a .so of the device's
        kernel packages and its function, called with a copy of ``args``) runs, a kernel records the stream
        thread's notify 0; the host stream waits on that.  Group mode (inside HcclGroupStart) is not emulated.
        """
        for name, value in (("comm", comm), ("opInfo", opInfo), ("funcInfo", funcInfo), ("userStream", userStream),
                            ("kernelLaunchCfg", kernelLaunchCfg)):
            check_out(value, name)
        c = self.state.comm(comm)
        size = int(funcInfo.argSize)
        if size and funcInfo.args == ffi.NULL:
            raise SimError(HcclResult.E_PTR, f"funcInfo->args is NULL but funcInfo->argSize={size}")
        if group_depth():
            raise SimError(HcclResult.E_NOT_SUPPORT, "inside HcclGroupStart/End (group mode) the vendor queues the "
                                                     "launch as a grouped P2P task; the emulator does not")
        unfold = opInfo.p2p.unfoldStream
        if unfold == ffi.NULL:
            raise SimError(HcclResult.E_PTR, "opInfo->p2p.unfoldStream is NULL (the stream the kernels run on)")
        aicpu = self.state.thread(aicpuThreadHandle)
        if aicpu.comm is not c or not aicpu.notifies:
            raise SimError(HcclResult.E_PARA, f"aicpuThreadHandle 0x{aicpuThreadHandle:x} is not a thread of {c.name} "
                                              "with a notify (HcclThreadAcquire(comm, COMM_ENGINE_AICPU_TS, ...))")
        so_name = ffi.string(funcInfo.kernelSoName).decode("utf-8", "replace")
        symbol = ffi.string(funcInfo.kernelFuncName).decode("utf-8", "replace")
        so_path, address = _device_kernel(so_name, symbol)
        device = current_device()
        q = acl_stream(self.state, unfold)
        out = ffi.new("ThreadHandle *")
        code = self.res.HcclThreadAcquireWithStream(comm, int(Engine.CPU_TS), userStream, 3, out)
        if code:
            return int(code)
        cpu = self.state.thread(int(out[0]))
        last = len(aicpu.notifies) - 1
        timeout = int(kernelLaunchCfg.timeOut)
        timeout_s = float(timeout) if 0 < timeout <= 0xFFFF else float(settings.value("HCCL_EXEC_TIMEOUT"))
        blob = ffi.new("char[]", ffi.buffer(ffi.cast("char *", funcInfo.args), size)[:] if size else b"\0")
        user = KernelFunction(0, KernelBinary(0, so_path, 0, {}), symbol, so_path, symbol, address)
        for function, body in (
                (_builtin("RunAicpuNotifyWait"), lambda: (self._batched(
                    lambda: self.primitives.HcommThreadNotifyWaitOnThread(aicpu.handle, last, 0)), 0)),
                (user, None),
                (_builtin("RunAicpuNotifyRecord"), lambda: (self._batched(
                    lambda: self.primitives.HcommThreadNotifyRecordOnThread(aicpu.handle, cpu.handle, 0)), 0))):
            self._launch_kernel(_KernelRun(self, function, blob, 1, device, q, timeout_s, body))
        # the h2d record and the host's wait, one batch on the user stream (after the launches, which are on the
        # other stream: the record never sits set on an idle rank, which the checker would report)
        return self._batched(lambda: self.primitives.HcommThreadNotifyRecordOnThread(cpu.handle, aicpu.handle, last),
                             lambda: self.primitives.HcommThreadNotifyWaitOnThreadWithDefaultTimeout(cpu.handle, 0))

    def _batched(self, *issues: Callable[[], int]) -> int:
        """Each of ``issues`` (data-plane calls) between HcommBatchModeStart and End; the first error, else End's."""
        self.primitives.HcommBatchModeStart(b"hccl_aicpu_kernel_launch")
        codes = [issue() for issue in issues]
        end = self.primitives.HcommBatchModeEnd(b"hccl_aicpu_kernel_launch")
        return int(next((code for code in codes if code), end))
