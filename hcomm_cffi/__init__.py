"""hcomm_cffi: HCCL/HCOMM from Python, with a shared-memory emulator for machines without an NPU.

``import hcomm_cffi as hcomm`` is light and never needs CANN: the Comm API is loaded on first use
of ``hcomm.init``, ``hcomm.Comm``, ... (PEP 562 module ``__getattr__``).  For a line-by-line port of
a C program the headers' inline initializers (``hcomm.HcclChannelDescInit``, ...) and constants
(``hcomm.HCCL_ROOT_INFO_BYTES``, the magic words, ...) are here under their C names too, loaded on
first use from :mod:`hcomm_cffi.initializers` and :mod:`hcomm_cffi.constants`.
"""
from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING, Any, Dict, List

from . import constants, enums, errors

if TYPE_CHECKING:  # pragma: no cover  (what __getattr__ below returns, spelled out for type checkers and IDEs;
    # tests/test_typed_generated.py checks these lists equal _LAZY)
    from .algorithms import Algorithm, CollectiveCall, IssueContext, algorithm, register_algorithm
    from .api import (CollectiveMismatchError, Comm, CommError, CommTimeoutError, ForeignProcessError, MembershipError,
                      MessageMismatchError, NotInitializedError, NotMemberError, Request, finalize, get_world, init,
                      is_initialized, set_device, wait_all)
    from .api import Graph, Stream, empty, graph, zeros
    from .constants import *  # noqa: F401,F403  (constants.__all__)
    from .initializers import (CommLinkInit, EndpointDescInit, HcclChannelDescInit, HcclCommConfigInit,
                               HcclKernelLaunchCfgInit, HcclOpDescInit, HcclTeamCreateChannelsDescInit,
                               HcclTeamCreateDescInit, HcommChannelDescInit, ThreadConfigInit)

__version__ = "0.1.0"

_API = ("init", "finalize", "set_device", "get_world", "is_initialized", "Comm", "Request", "wait_all",
        "CommError", "CommTimeoutError", "MessageMismatchError", "NotInitializedError", "NotMemberError",
        "CollectiveMismatchError", "MembershipError", "ForeignProcessError", "Stream", "Graph", "graph",
        "empty", "zeros")
#: Writing one's own algorithm (hcomm_cffi.algorithms; docs/guide/own-algorithm.md).
_ALGORITHMS = ("algorithm", "Algorithm", "IssueContext", "CollectiveCall", "register_algorithm")
_C_INITIALIZERS = ("HcclCommConfigInit", "HcclChannelDescInit", "EndpointDescInit", "ThreadConfigInit",
                   "HcommChannelDescInit", "CommLinkInit", "HcclOpDescInit", "HcclKernelLaunchCfgInit",
                   "HcclTeamCreateDescInit", "HcclTeamCreateChannelsDescInit")

# exported name -> the submodule that defines it (imported on first use)
_LAZY: Dict[str, str] = {
    **{name: "api" for name in _API},
    **{name: "algorithms" for name in _ALGORITHMS},
    **{name: "initializers" for name in _C_INITIALIZERS},
    **{name: "constants" for name in constants.__all__},
}

# spelled out, so type checkers (mypy --strict: no implicit re-export) see what the package exports;
# tests/test_typed_generated.py checks that it lists exactly _LAZY's names
__all__ = ["enums", "errors", "constants", "__version__",
           "init", "finalize", "set_device", "get_world", "is_initialized", "Comm", "Request", "wait_all",
           "CommError", "CommTimeoutError", "MessageMismatchError", "NotInitializedError", "NotMemberError",
           "CollectiveMismatchError", "MembershipError", "ForeignProcessError", "Stream", "Graph", "graph",
           "empty", "zeros", "algorithm", "Algorithm", "IssueContext", "CollectiveCall", "register_algorithm",
           "HcclCommConfigInit", "HcclChannelDescInit", "EndpointDescInit", "ThreadConfigInit",
           "HcommChannelDescInit", "CommLinkInit", "HcclOpDescInit", "HcclKernelLaunchCfgInit",
           "HcclTeamCreateDescInit", "HcclTeamCreateChannelsDescInit"]
__all__ += constants.__all__


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is not None:
        return getattr(importlib.import_module(f".{module}", __name__), name)
    raise AttributeError(f"module 'hcomm_cffi' has no attribute {name!r}")


def __dir__() -> List[str]:
    """The package's names: what it exports, its loaded submodules and the module dunders (not the helpers this
    file imports for itself, such as ``importlib`` or ``typing.Any``)."""
    here = globals()
    subs = (n for n, v in here.items() if isinstance(v, ModuleType) and v.__name__ == f"{__name__}.{n}")
    return sorted({*__all__, *subs, *(n for n in here if n.startswith("__") and n.endswith("__"))})
