"""The cffi ``FFI`` object holding the HCCL/HCOMM/ACL declarations.

Normally imported from the module that ``build_ffi.py`` generates at install time.  In a
source checkout that was never built (or an editable install whose build hook did not
write the module into the tree) the declarations are loaded from ``build_ffi.py`` next
to the package instead, so ``import hcomm_cffi`` always works.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

__all__ = ["ffi"]


def build_script() -> Any:
    """The ``build_ffi`` module of the source checkout (holds ``CDEF``); ImportError outside one."""
    script = Path(__file__).resolve().parent.parent / "build_ffi.py"
    if not script.is_file():
        raise ImportError(
            "hcomm_cffi._hcomm_ffi is missing and build_ffi.py was not found next to the "
            "package; reinstall with 'pip install hcomm_cffi' or run 'python build_ffi.py'"
        )
    spec = importlib.util.spec_from_file_location("_hcomm_cffi_build_ffi", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _ffi_from_build_script() -> Any:
    return build_script().ffibuilder


try:
    from ._hcomm_ffi import ffi  # type: ignore[import-not-found,unused-ignore]
except ImportError:  # source checkout without the generated module
    ffi = _ffi_from_build_script()
