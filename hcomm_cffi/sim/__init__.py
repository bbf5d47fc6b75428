"""The emulator: HCCL/HCOMM/ACL implemented over shared memory between local processes.

``SimLibrary()`` has the same function names, cdata arguments and return codes as the CANN
libraries, so everything above the lib layer runs unchanged on a machine without an NPU.
"""
from .library import SimLibrary, shutdown
from .config import CheckerWarning
from .shm import list_segments, sweep_stale

__all__ = ["SimLibrary", "CheckerWarning", "shutdown", "list_segments", "sweep_stale"]
