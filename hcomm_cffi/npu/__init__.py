"""The emulated npu device: torch_npu-shaped scripts on a machine without an NPU (docs/guide/npu-on-a-laptop.md).

Switched on by ``HCOMM_EMULATE_NPU=1`` and only when torch_npu is not installed, :func:`autoload` (torch's
device-backend autoload calls it at ``import torch`` through the entry-point group ``torch.backends``) makes:

* torch's PrivateUse1 device, renamed ``npu``, real: a C++ extension (built the first time, then loaded from a
  cache, see :mod:`hcomm_cffi.npu.build`) with a device guard, an allocator over the emulator's ``aclrtMalloc``
  and torch's CPU kernels running on that memory;
* ``torch.npu`` (:mod:`hcomm_cffi.npu.device`), ``Tensor.npu()``, ``Module.npu()``;
* ``dist.init_process_group(backend="hccl")``: this package's torch backend on npu tensors;
* ``import torch_npu`` / ``torch_npu.npu``: names for the above, for scripts that import it (also before torch:
  :mod:`hcomm_cffi.npu.early_import`).

Without the switch (or with a real torch_npu) nothing here runs and nothing is registered.

Why C++ and not torch's Python-only route (``torch.utils.backend_registration._setup_privateuseone_for_python_backend``,
torch/utils/backend_registration.py:542 in torch 2.13): its device guard is answered in C++ and counts one device
whatever the Python guard says (measured: a guard answering 4 still gives ``torch.accelerator.device_count() == 1``),
so autograd keeps one device queue and a backward pass on ``npu:1`` fails, and with it DDP on rank 1.
"""
from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import types
import warnings
from typing import Any

from .. import settings

__all__ = ["autoload", "enable", "enabled", "real_torch_npu_installed", "ALIAS"]

#: the name scripts import; an alias of torch.npu's owner, present only while the emulated device is on
ALIAS = "torch_npu"
_enabled = False


def real_torch_npu_installed() -> bool:
    """True when a torch_npu other than this package's alias can be imported."""
    found = sys.modules.get(ALIAS)
    if found is not None:
        return not getattr(found, "__hcomm_emulated__", False)
    spec = importlib.util.find_spec(ALIAS)   # the early-import finder's spec (hcomm_cffi.npu.early_import) is not one
    return spec is not None and not getattr(spec.loader, "hcomm_emulated", False)


def enabled() -> bool:
    """True once :func:`enable` has made the emulated device."""
    return _enabled


def autoload() -> None:
    """torch's ``torch.backends`` entry point: the emulated device when switched on and torch_npu is absent.

    ``HCOMM_EMULATE_NPU=1`` (what ``hcomm run --emulate-npu`` sets): a device that cannot be made is an error at
    ``import torch``; ``auto`` (what plain ``hcomm run`` sets): a warning saying why, and torch as without the switch.
    """
    mode = settings.value("HCOMM_EMULATE_NPU")
    if mode == "off" or real_torch_npu_installed():
        return
    try:
        enable()
    except Exception as exc:
        if mode == "on":
            raise
        warnings.warn(f"HCOMM_EMULATE_NPU=auto: no emulated npu device in this process: {exc}", RuntimeWarning,
                      stacklevel=2)


def _alias_module(npu: types.ModuleType) -> None:
    """``torch_npu`` and ``torch_npu.npu``: names for the emulated device (never over a real torch_npu)."""
    mod = types.ModuleType(ALIAS, "The emulated npu device under torch_npu's name (hcomm_cffi.npu); not torch_npu.")
    mod.__spec__ = importlib.machinery.ModuleSpec(ALIAS, None)
    mod.__hcomm_emulated__ = True  # type: ignore[attr-defined]
    mod.__version__ = "0+hcomm.emulated"  # type: ignore[attr-defined]
    mod.npu = npu  # type: ignore[attr-defined]
    sys.modules[ALIAS] = mod
    sys.modules[f"{ALIAS}.npu"] = npu


def _hccl_backend() -> None:
    """``backend="hccl"``: this package's torch backend, on npu tensors (torch_npu's name for its own)."""
    import torch.distributed as dist

    def create(opts: Any, backend_options: Any) -> Any:
        from ..torch import create_backend    # the backend module, imported when a group is made
        return create_backend(opts, backend_options)

    if "hccl" not in dist.Backend.backend_list:
        dist.Backend.register_backend("hccl", create, extended_api=True, devices=["npu"])


def enable() -> None:
    """Make the emulated npu device (idempotent); refused when a real torch_npu is installed."""
    global _enabled
    if _enabled:
        return
    if real_torch_npu_installed():
        raise RuntimeError("torch_npu is installed: the emulated npu device would shadow it; uninstall torch_npu or "
                           "unset HCOMM_EMULATE_NPU")
    import torch

    name = torch._C._get_privateuse1_backend_name()
    if name not in ("privateuseone", "npu"):
        raise RuntimeError(f"torch's PrivateUse1 device is already named {name!r}: the emulated npu device cannot "
                           "take it")
    from . import device

    # loaded now, not at the first npu tensor: torch asks the device's hooks as soon as the device has a name
    # (torch._C._get_accelerator(), which dist.barrier() and others call, fails without them)
    device.init()
    if name != "npu":
        torch.utils.rename_privateuse1_backend("npu")
    torch._register_device_module("npu", device)
    torch.utils.generate_methods_for_privateuse1_backend(for_tensor=True, for_module=True, for_storage=True)
    _hccl_backend()
    _alias_module(device)
    _enabled = True
