"""setuptools hook: generate hcomm_cffi/_hcomm_ffi.py from build_ffi.py at build time.

``cffi_modules`` writes the module into regular builds (wheels, ``pip install .``).  An
editable install imports the package straight from the source tree, so the module is
also written there, next to ``__init__.py`` (it is git-ignored).
"""
import os
import sys

from setuptools import setup

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import build_ffi  # noqa: E402

build_ffi.ffibuilder.compile(tmpdir=HERE, verbose=False)

setup(cffi_modules=["build_ffi.py:ffibuilder"])
