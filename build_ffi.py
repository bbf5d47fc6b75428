"""Build script for hcomm_cffi's C declarations.

Compiles the cdef of the CANN HCCL / HCOMM / ACL host ABI (``hcomm_cffi/_cdef.py``, loaded here
by file path so building never imports the package) with cffi in out-of-line ABI mode
(``set_source(..., None)``): the result is a pure-Python module, ``hcomm_cffi/_hcomm_ffi.py``, so
installing needs no compiler and the wheel is ``py3-none-any``.

Run ``python build_ffi.py`` to regenerate the module by hand; ``pip install .`` does it
through the ``cffi_modules`` hook in setup.py.
"""
from __future__ import annotations

import importlib.util
import os

import cffi

MODULE_NAME = "hcomm_cffi._hcomm_ffi"
CDEF_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hcomm_cffi", "_cdef.py")


def _load_cdef(path: str = CDEF_PATH) -> str:
    """The CDEF text of hcomm_cffi/_cdef.py, executed from its file alone (not as part of the package)."""
    spec = importlib.util.spec_from_file_location("_hcomm_cffi_cdef", path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load the cdef from {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return str(module.CDEF)


CDEF = _load_cdef()

ffibuilder = cffi.FFI()
ffibuilder.set_source(MODULE_NAME, None)
ffibuilder.cdef(CDEF)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
