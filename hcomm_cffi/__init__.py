"""hcomm_cffi: HCCL/HCOMM from Python, with a shared-memory emulator for machines without an NPU."""
from __future__ import annotations

__version__ = "0.1.0"
