"""The ``hcomm`` command: subcommands info, plan, run, bench, doctor, trace, sim (one module each)."""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import List, Optional

# subcommand name -> module (relative to this package) exposing add_parser() and run()
SUBCOMMANDS = {
    "info": ".info",
    "plan": ".plan",
    "run": ".run",
    "bench": ".bench",
    "doctor": ".doctor",
    "trace": ".trace",
    "sim": ".sim",
}


EXIT_BROKEN_PIPE = 128 + 13   # as a program killed by SIGPIPE, which a shell pipeline expects


class CliError(Exception):
    """A user error: printed as one line, exit status 2, no traceback."""


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every subcommand that is installed."""
    parser = argparse.ArgumentParser(prog="hcomm", description=__doc__)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, modname in SUBCOMMANDS.items():
        try:
            module = importlib.import_module(modname, __name__)
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith(__name__):
                continue  # subcommand not built yet
            raise
        module.add_parser(sub)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of the ``hcomm`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()                  # a closed pipe shows here, not at interpreter exit
        return code
    except BrokenPipeError:                 # `hcomm info | head`: the reader has what it wanted
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())   # nothing left to flush at exit
        return EXIT_BROKEN_PIPE
    except CliError as exc:
        print(f"hcomm {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"hcomm {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
