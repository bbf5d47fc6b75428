"""``hcomm doctor FR_DIR``: read every rank's flight recorder and print the desync report.

FR_DIR is where the ranks wrote their flight recorders (``HCOMM_FR_DIR``; the directory ``hcomm
run`` prints in its report): the dumps written on a timeout, a peer's death, a collective mismatch,
SIGUSR1, SIGTERM or ``comm.dump_flight_recorder()``, and every rank's ring.  The report names the
first collective the ranks disagree on, who waits in which operation and for how long, the ranks
that never entered it, and how each rank ended: finalised cleanly, raised an error and exited,
killed (gone), or still alive (:mod:`hcomm_cffi.desync`).
"""
from __future__ import annotations

import argparse
from typing import Any

from ..desync import report
from . import CliError

__all__ = ["add_parser", "run"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``hcomm doctor``."""
    parser = subparsers.add_parser("doctor", help="explain a hung or failed job from its flight recorders",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("directory", metavar="FR_DIR", help="the job's HCOMM_FR_DIR")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Print the report; exit 2 with one line when the directory holds no flight recorder."""
    try:
        text = report(args.directory)
    except (ValueError, OSError) as exc:
        raise CliError(str(exc)) from None
    print(text)
    return 0
