"""``hcomm sim build-libs --out DIR [--force]``: the emulator as an emulated CANN install (C libraries, header, set_env.sh).

DIR gets lib64/libhcomm.so, libhccl.so, libacl_rt.so and libascendcl.so (the emulator, through cffi's
embedding mode), include/hcomm_sim.h (plus include/hccl/hccl.h etc.) and set_env.sh.  Then
``source DIR/set_env.sh`` (or ``HCOMM_CANN_LIB_DIR=DIR/lib64``) makes the ``cann`` backend and C
programs (``cc prog.c -IDIR/include -LDIR/lib64 -lhcomm -lhccl -lacl_rt``) run on the emulator.
Needs a C compiler and the Python headers; an up-to-date DIR is reused.  See docs/guide/vendor-programs.md.
"""
from __future__ import annotations

import argparse
from typing import Any

from . import CliError

__all__ = ["add_parser", "run_build_libs", "run_build_ops"]

BUILD_OPS_HELP = """\
Build a custom communication operator package (op_host/, op_kernel_aicpu/, inc/, as hicann/hccl's
examples/04_custom_ops_p2p) against the emulated CANN install ASCEND_HOME (made by build-libs), and install
it there in the vendor's layout: opp/vendors/VENDOR/{include,lib64/libhccl_custom_OPS.so,aicpu/config/*.json,
aicpu/kernel/...}.  The emulator's counterpart of the vendor's `bash build.sh --vendor=VENDOR --ops=OPS
--custom_ops_path=DIR` and installing the .run it makes.  See docs/guide/custom-operators.md."""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``hcomm sim`` and its subcommand ``build-libs``."""
    parser = subparsers.add_parser("sim", help="emulator tools (build-libs: an emulated CANN install for C programs)",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="sim_command", metavar="SIM_COMMAND")
    build = sub.add_parser("build-libs", help="build the emulated CANN libraries, header and set_env.sh into DIR",
                           description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    build.add_argument("--out", required=True, metavar="DIR", help="install directory (created if missing)")
    build.add_argument("--force", action="store_true", help="rebuild even if DIR is up to date")
    build.set_defaults(func=run_build_libs)
    ops = sub.add_parser("build-ops", help="build a custom operator package and install it into an emulated install",
                         description=BUILD_OPS_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    ops.add_argument("--vendor", required=True, help="vendor name: installs into opp/vendors/VENDOR (the samples: cust)")
    ops.add_argument("--ops", required=True, help="operator name: the host library is libhccl_custom_OPS.so")
    ops.add_argument("--custom-ops-path", required=True, metavar="DIR", help="the operator package's directory")
    ops.add_argument("--install-path", required=True, metavar="ASCEND_HOME",
                     help="the emulated CANN install (hcomm sim build-libs --out ASCEND_HOME)")
    ops.set_defaults(func=run_build_ops)
    parser.set_defaults(func=lambda args: parser.print_help() or 2)
    return parser


def run_build_libs(args: argparse.Namespace) -> int:
    """Build (or reuse) the install and say how to use it."""
    from ..cannlib.build import BuildError, build_libs

    try:
        result = build_libs(args.out, force=args.force)
    except BuildError as exc:
        raise CliError(str(exc)) from None
    print(f"{'built' if result.built else 'up to date'}: emulated CANN install in {result.root}")
    print(f"  use it:   source {result.set_env}      (or HCOMM_CANN_LIB_DIR={result.lib_dir})")
    print(f"  C:        cc prog.c -I{result.include_dir} -L{result.lib_dir} -lhcomm -lhccl -lacl_rt")
    return 0


def run_build_ops(args: argparse.Namespace) -> int:
    """Build and install the operator package; say what was installed where."""
    from ..cannlib.build import BuildError
    from ..cannlib.build_ops import build_ops

    try:
        package = build_ops(args.vendor, args.ops, args.custom_ops_path, args.install_path)
    except BuildError as exc:
        raise CliError(str(exc)) from None
    print(f"installed: custom operator package {args.ops!r} of vendor {args.vendor!r} in {package.root}")
    print(f"  host library:  {package.host_library}")
    for path in package.kernel_libraries:
        print(f"  AICPU kernel:  {path}")
    for path in package.configs:
        print(f"  kernel JSON:   {path}")
    for path in package.headers:
        print(f"  header:        {path}")
    return 0
