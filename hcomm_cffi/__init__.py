"""hcomm_cffi: HCCL/HCOMM from Python, with a shared-memory emulator for machines without an NPU.

``import hcomm_cffi as hcomm`` is light and never needs CANN: the Comm API is loaded on first use
of ``hcomm.init``, ``hcomm.Comm``, ... (PEP 562 module ``__getattr__``).
"""
from __future__ import annotations

from typing import Any

from . import enums, errors

__version__ = "0.1.0"

_API = ("init", "finalize", "set_device", "get_world", "is_initialized", "Comm", "Request", "wait_all",
        "CommError", "CommTimeoutError", "MessageMismatchError", "NotInitializedError", "NotMemberError")

#: Writing one's own algorithm (hcomm_cffi.algorithms; docs/ALGORITHMS.md).
_ALGORITHMS = ("algorithm", "Algorithm", "IssueContext", "CollectiveCall", "register_algorithm")

__all__ = ["enums", "errors", "__version__", *_API, *_ALGORITHMS]


def __getattr__(name: str) -> Any:
    if name in _API:
        from . import api
        return getattr(api, name)
    if name in _ALGORITHMS:
        from . import algorithms
        return getattr(algorithms, "register" if name == "register_algorithm" else name)
    raise AttributeError(f"module 'hcomm_cffi' has no attribute {name!r}")


def __dir__() -> list:
    return sorted(list(globals()) + list(_API) + list(_ALGORITHMS))
