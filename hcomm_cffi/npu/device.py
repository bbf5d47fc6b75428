"""``torch.npu`` of the emulated npu device: the module torch registers under the name ``npu``.

Devices, streams and events are the emulator's: ``set_device`` is ``aclrtSetDevice``, a :class:`Stream` is an
``aclrtStream`` (an :class:`hcomm_cffi.Stream`, accepted by every ``stream=`` of the package), an
:class:`Event` an ``aclrtEvent``.  Kernels of npu tensors run on the calling thread (torch's CPU kernels on
the device memory, see ``csrc/npu_device.cpp``), so work a stream waits for is always complete; collectives
issued on a stream are queued there as on CANN.
"""
from __future__ import annotations

import contextlib
import itertools
import threading
import warnings
from typing import Any, Dict, Iterator, List, Optional, Union

import torch

from .._ffi import ffi
from ..api.stream import Stream as _AclStream
from ..binding import Binding, get_binding
from ..errors import HcclError

__all__ = ["is_available", "device_count", "set_device", "current_device", "synchronize", "Stream", "Event",
           "empty_cache",
           "current_stream", "default_stream", "set_stream", "stream", "device", "get_device_name",
           "manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed", "get_rng_state", "get_rng_state_all",
           "set_rng_state", "set_rng_state_all", "is_initialized", "init",
           "get_amp_supported_dtype", "is_bf16_supported", "EMULATED"]

#: this torch.npu is the emulator's (a real torch_npu has no such name)
EMULATED = True

_ext: Any = None          # the compiled extension, loaded by _lazy_init
#: torch_npu's (and torch.cuda's) flag: set once the extension is loaded.  torch reads it, e.g. activation
#: checkpointing saves and restores the device generators' states only when it is set (torch/utils/checkpoint.py)
_initialized = False
_ext_lock = threading.Lock()
_keep: List[Any] = []     # the cffi callbacks the extension calls: alive as long as the process
_local = threading.local()
_defaults: Dict[int, "Stream"] = {}
_defaults_lock = threading.Lock()

DeviceLike = Union[int, str, Any, None]
_PRIVATEUSE1 = 20     # c10::DeviceType::PrivateUse1, torch.Stream's device_type of an npu stream


def _binding() -> Binding:
    return get_binding()


def _index(device: DeviceLike, what: str = "device") -> int:
    """The device index of ``device`` (int, "npu", "npu:N", torch.device; None: the current one)."""
    import torch

    if device is None:
        return current_device()
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "npu":
            raise ValueError(f"{what}={device!r}; expected an npu device")
        return current_device() if device.index is None else int(device.index)
    if isinstance(device, bool) or not isinstance(device, int):
        raise TypeError(f"{what}={device!r}; expected an int, 'npu:N' or a torch.device")
    return device


def is_available() -> bool:
    """True: the emulated device is there whenever this module is."""
    return True


def is_initialized() -> bool:
    return _initialized


def init() -> None:
    """Load the device's extension (built the first time), as torch_npu's ``init`` sets its device up."""
    _extension()


def _lazy_init() -> None:
    """torch calls this on a device module before its first tensor: :func:`init`."""
    init()


def _extension() -> Any:
    """The compiled extension, loaded (and built, the first time) on first use."""
    global _ext, _initialized
    if _ext is not None:
        return _ext
    with _ext_lock:
        if _ext is None:
            from . import build

            if not _binding().lib.capabilities.emulator:
                raise RuntimeError("the emulated npu device runs on the emulator only, but this process uses CANN's "
                                   "libraries (HCOMM_BACKEND / an installed CANN); with an NPU, install torch_npu and "
                                   "unset HCOMM_EMULATE_NPU")
            ext = build.load()
            _memory_hooks(ext)
            ext.register_hooks()
            _ext = ext
            _initialized = True
    return _ext


def _memory_hooks(ext: Any) -> None:
    """The extension's malloc/free: the emulator's aclrtMalloc/aclrtFree (aclrtMallocHost/FreeHost when pinned)."""
    b = _binding()

    @ffi.callback("void *(size_t, int, int)")
    def malloc(nbytes: int, device: int, host: int) -> Any:
        try:
            return ffi.cast("void *", b.malloc_host(nbytes) if host else b.malloc(nbytes))
        except Exception as exc:   # the extension turns NULL into torch's error; this says why
            warnings.warn(f"the emulated npu device: {'aclrtMallocHost' if host else 'aclrtMalloc'} of {nbytes} "
                          f"bytes failed: {exc}", RuntimeWarning, stacklevel=1)
            return ffi.NULL

    @ffi.callback("void(void *, int, int)")
    def free(ptr: Any, device: int, host: int) -> None:
        try:
            b.free_host(ptr) if host else b.free(ptr)
        except Exception as exc:
            warnings.warn(f"the emulated npu device: freeing 0x{int(ffi.cast('uintptr_t', ptr)):x} failed: {exc}",
                          RuntimeWarning, stacklevel=1)

    @ffi.callback("int(void)")
    def acl_get_device() -> int:
        try:
            return b.get_device()
        except Exception:       # no device on this thread yet (ACL_ERROR_RT_CONTEXT_NULL)
            return -1

    @ffi.callback("int(int)")
    def acl_set_device(index: int) -> int:
        try:
            b.set_device(index)
        except HcclError as exc:
            return exc.code
        return 0

    _keep.extend((malloc, free, acl_get_device, acl_set_device))
    ext.set_device_count(b.get_device_count())
    ext.set_memory_hooks(int(ffi.cast("uintptr_t", malloc)), int(ffi.cast("uintptr_t", free)))
    changes = getattr(b.lib, "device_changes", None)      # the in-process emulator counts device changes
    ext.set_device_hooks(int(ffi.cast("uintptr_t", acl_get_device)), int(ffi.cast("uintptr_t", acl_set_device)),
                         0 if changes is None else int(ffi.cast("uintptr_t", changes)))
    # the extension stops calling these when the interpreter starts finalizing (tensors alive then go with the process)


def _is_in_bad_fork() -> bool:
    return False


def device_count() -> int:
    """The emulator's device count (``HCOMM_SIM_DEVICE_COUNT``, default 16)."""
    return int(_binding().get_device_count())


def current_device() -> int:
    """This thread's current npu (0 until :func:`set_device`)."""
    return int(_extension().current_device())


def set_device(device: DeviceLike) -> None:
    """Make ``device`` this thread's current npu: ACL's (aclrtSetDevice), which torch's is (as with torch_npu).

    So ``hcomm.set_device(n)`` does the same: ``device="npu"`` then means ``npu:n``.
    """
    index = _index(device)
    if not 0 <= index < device_count():
        raise ValueError(f"device={device!r}; the emulator has npu:0..npu:{device_count() - 1} "
                         "(HCOMM_SIM_DEVICE_COUNT)")
    _extension().set_current_device(index)


def synchronize(device: DeviceLike = None) -> None:
    """Wait for everything queued on ``device``'s streams (aclrtSynchronizeDevice)."""
    index = _index(device)
    if index != current_device():
        with _Device(index):
            _binding().synchronize_device()
        return
    _ensure_acl_device()
    _binding().synchronize_device()


def _ensure_acl_device() -> None:
    """ACL needs a current device on this thread for device-wide calls: the torch current device."""
    b = _binding()
    try:
        b.get_device()
    except Exception:
        b.set_device(current_device())


def empty_cache() -> None:
    """Hand the blocks the device keeps for reuse back to the emulator's aclrtFree."""
    _extension().empty_cache()


def get_device_name(device: DeviceLike = None) -> str:
    _index(device)
    return f"{_binding().get_soc_name() or 'Ascend'} (hcomm emulator)"


class _Device:
    """``with torch.npu.device(i):`` the current device inside, the old one after."""

    def __init__(self, device: DeviceLike) -> None:
        self.index = _index(device) if device is not None else -1
        self.prev = -1

    def __enter__(self) -> None:
        self.prev = current_device()
        if self.index >= 0 and self.index != self.prev:
            set_device(self.index)

    def __exit__(self, *exc: Any) -> None:
        if self.index >= 0 and self.index != self.prev:
            set_device(self.prev)


device = _Device


_stream_ids = itertools.count(1)


# the ACL stream's methods win over torch.Stream's (they take and give torch.npu Events, as torch_npu's Stream does)
class Stream(_AclStream, torch.Stream):  # type: ignore[misc]
    """``torch.npu.Stream``: an ``aclrtStream`` of the emulator on ``device`` (default: the current one).

    Also a ``torch.Stream`` of the npu device (what ``Tensor.record_stream`` and torch's stream-generic code take);
    its methods are the ACL stream's.
    """

    def __new__(cls, device: DeviceLike = None, priority: int = 0, **kwargs: Any) -> "Stream":
        return super().__new__(cls, stream_id=next(_stream_ids), device_index=_index(device),
                               device_type=_PRIVATEUSE1)

    def __init__(self, device: DeviceLike = None, priority: int = 0, **kwargs: Any) -> None:
        with _Device(self.device_index):       # torch.Stream's, set by __new__
            _ensure_acl_device()
            _AclStream.__init__(self, _binding())

    def query(self) -> bool:
        """True when everything queued has run (checked without blocking)."""
        return bool(self.synchronize(timeout=0.001))

    def wait_event(self, event: "Event") -> None:  # type: ignore[override]
        """Work queued here later starts after ``event`` (aclrtStreamWaitEvent)."""
        self.binding.stream_wait_event(self.handle, event.handle)

    def wait_stream(self, other: "Stream") -> None:  # type: ignore[override]
        """Work queued here later starts after what ``other`` has queued now."""
        self.wait_event(other.record_event())

    def record_event(self, event: Optional["Event"] = None) -> "Event":  # type: ignore[override]
        event = event if event is not None else Event()
        event.record(self)
        return event

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stream) and other.handle == self.handle

    def __hash__(self) -> int:
        return hash(self.npu_stream)

    def __repr__(self) -> str:
        return f"<torch.npu.Stream device=npu:{self.device_index} npu_stream=0x{self.npu_stream:x}>"


class Event:
    """``torch.npu.Event``: an ``aclrtEvent`` of the emulator."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> None:
        if interprocess:
            raise NotImplementedError("torch.npu.Event(interprocess=True): the emulated npu device has no IPC events")
        self.binding = _binding()
        self.handle: Any = self.binding.create_event()
        self.recorded = False

    def record(self, stream: Optional[Stream] = None) -> None:
        self.binding.record_event(self.handle, (stream or current_stream()).handle)
        self.recorded = True

    def wait(self, stream: Optional[Stream] = None) -> None:
        (stream or current_stream()).wait_event(self)

    def synchronize(self) -> None:
        self.binding.synchronize_event(self.handle)

    def query(self) -> bool:
        """True once what was queued before the record has run (synchronising: the kernels are already done)."""
        self.synchronize()
        return True

    def __del__(self) -> None:
        handle, self.handle = getattr(self, "handle", None), None
        if handle is not None:
            with contextlib.suppress(Exception):
                self.binding.destroy_event(handle)


def default_stream(device: DeviceLike = None) -> Stream:
    """``device``'s default stream (one per device and process, created on first use)."""
    index = _index(device)
    with _defaults_lock:
        found = _defaults.get(index)
        if found is None:
            found = _defaults[index] = Stream(index)
        return found


def current_stream(device: DeviceLike = None) -> Stream:
    """This thread's current stream of ``device``: the one :func:`stream` / :func:`set_stream` chose, else the default."""
    index = _index(device)
    chosen: Dict[int, Stream] = getattr(_local, "streams", {})
    return chosen.get(index) or default_stream(index)


def set_stream(s: Stream) -> None:
    if not hasattr(_local, "streams"):
        _local.streams = {}
    _local.streams[s.device_index] = s


@contextlib.contextmanager
def stream(s: Optional[Stream]) -> Iterator[Optional[Stream]]:
    """``with torch.npu.stream(s):`` ``s`` is the current stream of its device inside."""
    if s is None:
        yield None
        return
    prev = current_stream(s.device_index)
    set_stream(s)
    try:
        yield s
    finally:
        set_stream(prev)


# random numbers: every npu device has a default generator of its own (csrc/npu_device.cpp, default_generator),
# apart from torch.default_generator, as torch_npu's devices do; npu tensors draw from their device's.  Shaped as
# torch.cuda's (torch/cuda/random.py): manual_seed and seed act on the current device, the *_all forms on every one;
# torch.manual_seed / torch.seed reach manual_seed_all through torch/random.py's _seed_custom_device.
def _generator(device: DeviceLike = None) -> "torch.Generator":
    return _extension().default_generator(_index(device))


def __getattr__(name: str) -> Any:
    if name == "default_generators":   # torch_npu's name: one generator per device, npu:0 first
        return tuple(_generator(i) for i in range(device_count()))
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def get_rng_state(device: DeviceLike = "npu") -> "torch.Tensor":
    """The state of ``device``'s generator (a CPU ByteTensor; default: the current device)."""
    return _generator(device).get_state()


def get_rng_state_all() -> List["torch.Tensor"]:
    """The states of every device's generator, npu:0 first."""
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state(new_state: "torch.Tensor", device: DeviceLike = "npu") -> None:
    """Restore ``device``'s generator to ``new_state`` (what :func:`get_rng_state` returned)."""
    if not isinstance(new_state, torch.Tensor) or new_state.dtype != torch.uint8:
        raise TypeError(f"new_state={type(new_state).__name__}; expected the torch.uint8 tensor get_rng_state returns")
    _generator(device).set_state(new_state.clone(memory_format=torch.contiguous_format))


def set_rng_state_all(new_states: List["torch.Tensor"]) -> None:
    """Restore every device's generator, npu:0 first."""
    for i, state in enumerate(new_states):
        set_rng_state(state, i)


def manual_seed(seed: int) -> None:
    """Seed the current device's generator."""
    _generator().manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    """Seed every device's generator."""
    for i in range(device_count()):
        _generator(i).manual_seed(int(seed))


def seed() -> None:
    """Seed the current device's generator with a non-deterministic number."""
    _generator().seed()


def seed_all() -> None:
    """Seed every device's generator with one non-deterministic number."""
    manual_seed_all(_generator(0).seed())


def initial_seed() -> int:
    """The seed of the current device's generator."""
    return int(_generator().initial_seed())


def get_amp_supported_dtype() -> List[Any]:
    import torch
    return [torch.float16, torch.bfloat16]


def is_bf16_supported() -> bool:
    return True
