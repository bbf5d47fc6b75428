"""``import torch_npu`` before ``import torch``, with the switch on and no real torch_npu installed.

The emulated device appears at ``import torch`` (torch's device-backend autoload calls :func:`hcomm_cffi.npu.autoload`),
and with it the name ``torch_npu``.  A script whose first import is ``torch_npu`` asks for that name before torch.
The package installs ``hcomm_cffi_npu.pth`` into site-packages; at interpreter start it appends to the *end* of
``sys.meta_path`` a finder made of the standard library alone (nothing of this package is imported then) that, for the
name ``torch_npu`` only, calls :func:`find_spec` here:

* every other finder is asked first, so an installed torch_npu is always the one imported (never shadowed);
* without the switch (``HCOMM_EMULATE_NPU`` unset or off) it finds nothing: ``import torch_npu`` fails as it does
  without this package;
* with it, the loader imports torch, which makes the device and the name (with torch's autoload off, the loader
  makes them itself), and the import gives the emulated ``torch_npu``; a device that cannot be made is the import's
  error, with the reason.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import types
from typing import Optional, Sequence

from .. import settings
from . import ALIAS, enable, enabled

__all__ = ["find_spec", "TorchNpuLoader"]


class TorchNpuLoader(importlib.abc.Loader):
    """Loads the name ``torch_npu`` as the emulated device's module, by importing torch."""

    #: how :func:`hcomm_cffi.npu.real_torch_npu_installed` tells this loader's spec from an installed torch_npu's
    hcomm_emulated = True

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        placeholder = types.ModuleType(ALIAS)
        placeholder.__hcomm_emulated__ = True  # type: ignore[attr-defined]  # not a real torch_npu while loading
        return placeholder

    def exec_module(self, module: types.ModuleType) -> None:
        import torch  # noqa: F401  # its autoload makes the device and replaces this module in sys.modules

        if not enabled():   # torch's autoload is off (TORCH_DEVICE_BACKEND_AUTOLOAD=0) or could not make the device
            try:
                enable()
            except Exception as exc:
                raise ModuleNotFoundError(f"No module named {ALIAS!r}: HCOMM_EMULATE_NPU is on but the emulated npu "
                                          f"device cannot be made: {exc}", name=ALIAS) from exc
        # importlib returns what sys.modules holds under the name once this returns: the emulated device's module


_LOADER = TorchNpuLoader()


def find_spec(fullname: str, path: Optional[Sequence[str]] = None,
              target: Optional[types.ModuleType] = None) -> Optional[importlib.machinery.ModuleSpec]:
    """The spec of the emulated ``torch_npu`` while the switch is on; None for any other name or without it."""
    if fullname != ALIAS or settings.value("HCOMM_EMULATE_NPU") == "off":
        return None
    return importlib.machinery.ModuleSpec(ALIAS, _LOADER)
