"""``hcomm doctor [FR_DIR]``: read every rank's flight recorder and print the desync report.

FR_DIR is where the ranks wrote their flight recorders (``HCOMM_FR_DIR``; the directory ``hcomm
run`` prints in its report): the dumps written on a timeout, a peer's death, a collective mismatch,
SIGUSR1, SIGTERM or ``comm.dump_flight_recorder()``, and every rank's ring.  Without FR_DIR: the
newest of ``HCOMM_FR_DIR`` and this user's directories ``hcomm run`` kept in the temp directory.
The report names the first collective the ranks disagree on, who waits in which operation (at
which line of the user's code) and for how long, the ranks that never entered it with their
Python stack as taken then, how each rank ended (finalised cleanly, raised an error and exited,
killed, still alive), and the next step (:mod:`hcomm_cffi.desync`).  Times are as of the
directory's newest file, so the same directory gives the same report every time.  Only files
named as the package names them are read; nothing is removed.
"""
from __future__ import annotations

import argparse
import os
from typing import Any, List, Optional

from .. import settings
from ..desync import owned, report
from ..launch.flightwatch import kept, pattern
from . import CliError

__all__ = ["add_parser", "run"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``hcomm doctor``."""
    parser = subparsers.add_parser("doctor", help="explain a hung or failed job from its flight recorders",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("directory", metavar="FR_DIR", nargs="?",
                        help="the job's HCOMM_FR_DIR (default: the newest flight directory of this user)")
    parser.set_defaults(func=run)
    return parser


def _candidates() -> List[str]:
    """HCOMM_FR_DIR (when it holds flight files) and the directories hcomm run kept, newest first."""
    found: List[str] = []
    chosen: Optional[str] = None
    try:
        chosen = settings.value("HCOMM_FR_DIR")
    except settings.SettingsError:
        chosen = None
    if chosen and any(owned(chosen)):
        found.append(str(chosen))
    found += kept()
    return sorted(found, key=lambda p: os.path.getmtime(p) if os.path.exists(p) else 0.0, reverse=True)


def run(args: argparse.Namespace) -> int:
    """Print the report; exit 2 with one line when there is no flight recorder to read."""
    directory = args.directory
    if directory is None:
        found = _candidates()
        if not found:
            raise CliError(f"no flight recorder directory found: looked in HCOMM_FR_DIR "
                           f"({settings.value('HCOMM_FR_DIR') or 'unset'}) and {pattern()}; expected the directory "
                           "a report of hcomm run names, or HCOMM_FR_DIR of a job; give it as `hcomm doctor DIR`")
        directory = found[0]
        others = f" ({len(found) - 1} older: {', '.join(found[1:4])}{', ...' if len(found) > 4 else ''})" \
            if len(found) > 1 else ""
        print(f"hcomm doctor: the newest flight directory of this user: {directory}{others}")
    try:
        text = report(directory)
    except (ValueError, OSError) as exc:
        newest = kept(directory) if os.path.isdir(directory) else []
        hint = f"; the newest flight directory in it is {newest[0]}: `hcomm doctor {newest[0]}`" if newest else ""
        raise CliError(f"{exc}{hint}") from None
    print(text)
    return 0
