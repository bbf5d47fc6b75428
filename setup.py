"""setuptools hooks: generate hcomm_cffi/_hcomm_ffi.py from build_ffi.py at build time; install the
emulated npu device's ``hcomm_cffi_npu.pth`` into site-packages.

``cffi_modules`` writes the module into regular builds (wheels, ``pip install .``).  An
editable install imports the package straight from the source tree, so the module is
also written there, next to ``__init__.py`` (it is git-ignored).

The ``.pth`` file (hcomm_cffi/npu/early_import.py says what it does) goes to the top of the
wheel, which is site-packages once installed: ``build_lib`` for a regular build; for an
editable one, the unpacked wheel's root, where setuptools' editable_wheel points
``install_lib`` (setuptools/command/editable_wheel.py, ``_configure_build``).
"""
import os
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import build_ffi  # noqa: E402

build_ffi.ffibuilder.compile(tmpdir=HERE, verbose=False)

PTH = os.path.join("hcomm_cffi", "npu", "hcomm_cffi_npu.pth")


class BuildPyWithPth(build_py):
    """build_py, plus the .pth file at the top of what it builds."""

    def run(self) -> None:
        super().run()
        top = (self.get_finalized_command("install").install_lib if getattr(self, "editable_mode", False)
               else self.build_lib)
        self.mkpath(top)
        self.copy_file(os.path.join(HERE, PTH), os.path.join(top, os.path.basename(PTH)))

    def get_outputs(self, include_bytecode: bool = True) -> list:
        outputs = list(super().get_outputs(include_bytecode))
        if not getattr(self, "editable_mode", False):
            outputs.append(os.path.join(self.build_lib, os.path.basename(PTH)))
        return outputs


setup(cffi_modules=["build_ffi.py:ffibuilder"], cmdclass={"build_py": BuildPyWithPth})
