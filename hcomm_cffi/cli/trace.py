"""``hcomm trace DIR [-o PNG] [--json OUT]``: merge the ranks' HCOMM_TRACE files and draw the swimlane.

DIR is the directory a run wrote with ``HCOMM_TRACE=DIR``.  The merged Chrome trace
(``DIR/merged.trace.json`` unless ``--json``) opens in https://ui.perfetto.dev or chrome://tracing;
the PNG (``DIR/timeline.png`` unless ``-o``) needs matplotlib and shows one lane per rank and
thread, every task, and an arrow from each notify record to the wait it released.
"""
from __future__ import annotations

import argparse
import os
from typing import Any

from ..timeline import merge, render
from . import CliError

__all__ = ["add_parser", "run"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``hcomm trace``."""
    parser = subparsers.add_parser("trace", help="merge HCOMM_TRACE files and draw the timeline PNG",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("directory", metavar="DIR", help="the HCOMM_TRACE directory of a run")
    parser.add_argument("-o", "--output", metavar="PNG", help="the picture (default DIR/timeline.png)")
    parser.add_argument("--json", metavar="OUT", help="the merged trace (default DIR/merged.trace.json)")
    parser.add_argument("--title", default="", help="title of the picture")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Merge, then draw; one-line errors for a bad directory.  The merged JSON is the product: without matplotlib
    the PNG is skipped with a note (exit 0), unless ``-o`` asked for it (exit 2)."""
    try:
        merged, events = merge(args.directory, args.json)
    except (ValueError, OSError) as exc:
        raise CliError(str(exc)) from None
    print(f"merged trace: {merged} (open in https://ui.perfetto.dev)")
    try:
        png = render(events, args.output or os.path.join(args.directory, "timeline.png"),
                     args.title or f"hcomm timeline of {os.path.basename(os.path.abspath(args.directory))}")
    except RuntimeError as exc:        # no matplotlib
        if args.output:
            raise CliError(f"{exc}; the merged trace was written") from None
        print("timeline: no PNG drawn: it needs matplotlib (pip install 'hcomm_cffi[plot]'); the merged trace above "
              "has everything")
        return 0
    except (ValueError, OSError) as exc:
        raise CliError(str(exc)) from None
    print(f"timeline: {png}")
    return 0
