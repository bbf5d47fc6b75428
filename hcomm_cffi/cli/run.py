"""``hcomm run -n N [--timeout S] [--grace S] [--no-prefix] [--job-id ID] -- COMMAND ...``.

Starts N local ranks of COMMAND with RANK / WORLD_SIZE / LOCAL_RANK / LOCAL_WORLD_SIZE and a private
root-info rendezvous, prefixes their output with ``[rank]``, and stops every rank when one fails, on
Ctrl-C, or after ``--timeout``.  The exit status is the first failing rank's.  As torchrun, with N > 1
it sets OMP_NUM_THREADS=1 for every rank unless the variable is set (one intra-op thread per rank).  Details:
``hcomm_cffi/launch/runner.py``.
"""
from __future__ import annotations

import argparse
from typing import Any

from ..launch.runner import LaunchError, add_arguments, config_from_args, launch
from . import CliError

__all__ = ["add_parser", "run"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``hcomm run``."""
    parser = subparsers.add_parser(
        "run", help="start N local ranks of a command (like torchrun / mpirun)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Launch the job; the exit status is the job's (see the launcher)."""
    try:
        return launch(config_from_args(args))
    except LaunchError as exc:
        raise CliError(str(exc)) from None
