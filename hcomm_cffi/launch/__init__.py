"""The process launcher behind ``hcomm run`` / ``python -m hcomm_cffi.run`` (see ``runner.py``)."""
from __future__ import annotations

from .runner import EXIT_TIMEOUT, LaunchConfig, LaunchError, add_arguments, config_from_args, launch, main

__all__ = ["LaunchConfig", "LaunchError", "launch", "add_arguments", "config_from_args", "main", "EXIT_TIMEOUT"]
