"""An emulated CANN install: the emulator compiled into libhcomm.so / libhccl.so / libacl_rt.so (cffi embedding).

``build_libs(DIR)`` (``hcomm sim build-libs --out DIR``) lays DIR out like a CANN install; with
``source DIR/set_env.sh`` (or ``HCOMM_CANN_LIB_DIR=DIR/lib64``) the ``cann`` backend and C programs
run on the emulator through real ``dlopen``ed libraries.  See docs/guide/vendor-programs.md.
"""
from ..lib.emulated import MARKER_FILE, emulated_install, read_marker

__all__ = ["MARKER_FILE", "emulated_install", "read_marker"]
