"""Communication algorithms: one interface (``interface.py``) for the built-ins and a user's own.

``ring``, ``mesh``, ``tree``, ``hierarchical`` and ``native`` are registered by name; a user's
algorithm is registered with :func:`algorithm` or referenced as ``"package.module:attr"``.
"""
from __future__ import annotations

from .interface import (ACK, COLLECTIVES, DATA, ALGORITHM_NOTIFIES, P2P_CREDIT, P2P_DATA, Algorithm, AlgorithmArg,
                        AlgorithmName, AlgorithmRef, CollectiveCall, IssueContext, UnsupportedError)
from .dryrun import DryRun, ScheduleError, dry_run
from .registry import algorithm, choose, names, register, resolve

register_algorithm = register   # the name hcomm_cffi exports it under

__all__ = ["ACK", "DATA", "P2P_DATA", "P2P_CREDIT", "ALGORITHM_NOTIFIES", "IssueContext", "CollectiveCall",
           "Algorithm", "UnsupportedError", "ScheduleError", "DryRun", "dry_run", "algorithm", "register",
           "resolve", "choose", "names", "COLLECTIVES", "register_algorithm", "AlgorithmArg", "AlgorithmName",
           "AlgorithmRef"]
