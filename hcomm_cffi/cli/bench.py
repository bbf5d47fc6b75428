"""``hcomm bench``: time a collective over a sweep of sizes, like hccl_test / nccl-tests.

    hcomm bench --op allreduce -b 8 -e 256M -f 2 -n 20 -w 10 -c 1 -d fp32 -o sum -N 4
    hcomm bench --op broadcast -b 1M -e 64M -f 4 -r 1 --json out.json --csv out.csv --plot out.png
    hcomm bench -b 8 -e 64M -f 4 --algo native,ring,auto --plot algos.png   # one table / plot line per algorithm
    hcomm run -n 4 -- hcomm bench --op alltoall -b 1K -e 1M -f 4      # inside any launched job

Flags follow hccl_test where it has them (``-b -e -i -f -n -w -c -d -r``; sizes take K/M/G = 2^10/2^20/
2^30).  hccl_test has one program per operation, so here ``--op`` names the operation and the reduce op
is ``-o/--redop`` (hccl_test's ``-o/--op``).  Without RANK/WORLD_SIZE (or another launcher's
variables) ``hcomm bench`` starts ``-N`` local ranks of itself; inside a job it runs on the job's ranks.

Output (rank 0): size (B), count (elements), type, redop, root, time (µs, the slowest rank's average
per iteration), algbw = S / time and busbw = algbw x factor (GB/s, GB = 10^9; nccl-tests factors:
allreduce 2(n-1)/n; allgather, reduce_scatter, alltoall (n-1)/n; broadcast, reduce, sendrecv 1),
#wrong (the worst rank's wrong elements, hccl_test's value patterns; N/A when the check is off or
disabled because the expected value would overflow).  On the emulator ``HCOMM_SIM_CHECK`` defaults to
``off`` here (its schedule checker costs time); the header says so.  Exit status 1 when any element
was wrong.
"""
from __future__ import annotations

import argparse
import os
import sys
import threading
from typing import Any, Dict, List, MutableMapping, Optional, Tuple

from .. import settings
from ..bench import factors, sizes
from ..bench.ops import ALGORITHMS, comm_api_available
from . import CliError

__all__ = ["add_parser", "run", "parse_config"]

ENV_SIM_CHECK_DEFAULTED = "HCOMM_BENCH_SIM_CHECK_DEFAULTED"
ENV_SIGNATURE_CHECK_DEFAULTED = "HCOMM_BENCH_SIGNATURE_CHECK_DEFAULTED"
DTYPES = ("int8", "int16", "int32", "fp16", "fp32", "int64", "uint64", "uint8", "uint16", "uint32", "fp64", "bfp16")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``hcomm bench``.  Values are parsed by :func:`parse_config` (one-line errors)."""
    p = subparsers.add_parser("bench", help="benchmark a collective over a sweep of sizes (hccl_test style)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--op", default="allreduce", help=f"operation: {', '.join(factors.OPS)} (default allreduce)")
    p.add_argument("-b", "--minbytes", default="64M", help="first size, K/M/G suffix (default 64M)")
    p.add_argument("-e", "--maxbytes", default="64M", help="last size (default 64M)")
    p.add_argument("-f", "--stepfactor", help="multiply the size by this factor (> 1; wins over -i)")
    p.add_argument("-i", "--stepbytes", help="add this many bytes (default (max - min) / 10)")
    p.add_argument("-n", "--iters", default="20", help="timed iterations per size (default 20)")
    p.add_argument("-w", "--warmup_iters", "--warmup-iters", dest="warmup_iters", default="10",
                   help="untimed warm-up iterations per size (default 10)")
    p.add_argument("-c", "--check", default="1", help="check the results: 1 or 0 (default 1)")
    p.add_argument("-d", "--datatype", default="fp32", help=f"data type: {' '.join(DTYPES)} (default fp32)")
    p.add_argument("-o", "--redop", default="sum",
                   help="reduce op: sum, prod, max, min, avg (the sum divided by the ranks: floating-point types and "
                        "the Comm API --algo only, as the torch backend's ReduceOp.AVG; default sum)")
    p.add_argument("-r", "--root", default="0", help="root of broadcast/reduce (default 0)")
    p.add_argument("--algo", default=None,
                   help=f"{', '.join(ALGORITHMS)}: native = the vendor collectives (what hccl_test measures); "
                        "the others run this package's algorithms through the Comm API; a comma-separated list "
                        "runs each in turn (one table, one plot line each) (default native; auto with -o avg, "
                        "which HCCL's own collectives do not offer)")
    p.add_argument("-N", "--ranks", help="local ranks to start when not inside a launched job (default 2)")
    p.add_argument("--timeout", help="stop the launched job after this many seconds")
    p.add_argument("--json", metavar="FILE", help="write configuration, environment and results as JSON")
    p.add_argument("--csv", metavar="FILE", help="write one CSV row per size")
    p.add_argument("--plot", metavar="FILE", help="plot busbw and latency against size (PNG; needs matplotlib)")
    p.set_defaults(func=run)
    return p


# ---------------------------------------------------------------------------------------------- validation
def _algorithm_arg(algo: str, whole: str) -> str:
    """One ``--algo`` item: a built-in name (any case), or a registered / ``module:attr`` user algorithm."""
    if algo.lower() in ALGORITHMS:
        return algo.lower()
    if not algo:
        raise CliError(f"--algo {whole!r}: expected one of {', '.join(ALGORITHMS)}, a user algorithm "
                       "'package.module:attr', or a comma-separated list")
    from ..algorithms import registry
    try:
        registry.resolve(algo)
    except ValueError as exc:
        raise CliError(f"--algo {whole!r}: {exc}") from None
    return algo


def _int(flag: str, text: str, minimum: int) -> int:
    try:
        value = int(str(text).strip())
    except ValueError:
        raise CliError(f"{flag} {text!r}: expected an integer") from None
    if value < minimum:
        raise CliError(f"{flag} {value}: expected an integer >= {minimum}")
    return value


def _output_path(flag: str, path: Optional[str]) -> Optional[str]:
    if path is None:
        return None
    if not path.strip():
        raise CliError(f"{flag}: empty file name")
    full = os.path.abspath(path)
    parent = os.path.dirname(full)
    if os.path.isdir(full):
        raise CliError(f"{flag} {path!r} is a directory; expected a file name")
    if not os.path.isdir(parent):
        raise CliError(f"{flag} {path!r}: directory {parent!r} does not exist")
    if not os.access(parent, os.W_OK):
        raise CliError(f"{flag} {path!r}: directory {parent!r} is not writable")
    return full


def parse_config(args: argparse.Namespace, nranks: Optional[int] = None) -> Tuple[Any, Dict[str, Any]]:
    """(BenchConfig, extras) from the parsed flags; CliError naming the flag for any bad value.

    ``extras``: ``ranks`` (-N or None), ``timeout``, ``algorithms`` (every ``--algo``, in order; the config
    holds the first), ``json``/``csv``/``plot`` (absolute paths or None).
    ``nranks`` (when known) checks the root and the sendrecv minimum.
    """
    from ..bench.runner import BenchConfig
    from ..api.average import wanted
    from ..enums import ReduceOp, parse_dtype, parse_reduce_op

    try:
        op = factors.parse_op(args.op)
        minbytes = sizes.parse_size(args.minbytes, "-b/--minbytes")
        maxbytes = sizes.parse_size(args.maxbytes, "-e/--maxbytes")
        stepbytes = sizes.parse_size(args.stepbytes, "-i/--stepbytes") if args.stepbytes is not None else None
    except ValueError as exc:
        raise CliError(str(exc)) from None
    factor: Optional[float] = None
    if args.stepfactor is not None:
        try:
            factor = float(args.stepfactor)
        except ValueError:
            raise CliError(f"-f/--stepfactor {args.stepfactor!r}: expected a number > 1") from None
    try:
        sweep = sizes.size_sweep(minbytes, maxbytes, factor, stepbytes)
    except sizes.SizeError as exc:
        raise CliError(str(exc)) from None
    iters = _int("-n/--iters", args.iters, 1)
    warmup = _int("-w/--warmup_iters", args.warmup_iters, 0)
    check = _int("-c/--check", args.check, 0)
    if check not in (0, 1):
        raise CliError(f"-c/--check {check}: expected 0 or 1")
    key = str(args.datatype).strip().lower()
    try:
        dtype = parse_dtype(key)
    except ValueError:
        raise CliError(f"-d/--datatype {args.datatype!r}: expected one of {', '.join(DTYPES)}") from None
    if dtype.name.lower() not in DTYPES:
        raise CliError(f"-d/--datatype {args.datatype!r}: expected one of {', '.join(DTYPES)}")
    average = wanted(args.redop)
    try:
        redop = ReduceOp.SUM if average else parse_reduce_op(args.redop)
    except ValueError:
        raise CliError(f"-o/--redop {args.redop!r}: expected sum, prod, max, min or avg") from None
    root = _int("-r/--root", args.root, 0)
    if args.algo is None:              # the vendor's collectives, unless -o avg (a Comm API op): then auto
        args.algo = "auto" if wanted(args.redop) else "native"
    algos = list(dict.fromkeys(_algorithm_arg(a.strip(), args.algo) for a in str(args.algo).split(",") if a.strip()))
    for algo in algos or [_algorithm_arg("", args.algo)]:
        if algo != "native" and not comm_api_available():
            raise CliError(f"--algo {algo} runs this package's own algorithms through the Comm API (hcomm_cffi.api), "
                           "which is not in this build yet; use --algo native")
    ranks = _int("-N/--ranks", args.ranks, 1) if args.ranks is not None else None
    timeout: Optional[float] = None
    if args.timeout is not None:
        try:
            timeout = float(args.timeout)
        except ValueError:
            timeout = -1.0
        if not timeout > 0:
            raise CliError(f"--timeout {args.timeout!r}: expected a number of seconds > 0")
    cfg = BenchConfig(op=op, sizes=tuple(sweep), iters=iters, warmup=warmup, check=bool(check), dtype=dtype,
                      redop=redop, root=root, algorithm=algos[0], average=average,
                      maxbytes_text=str(args.maxbytes).strip())
    n = nranks if nranks is not None else (ranks if ranks is not None else 2)
    if nranks is None and ranks is not None:   # this command will start -N local ranks: the launcher's bound first
        from ..launch.runner import LaunchError, check_local_ranks

        try:
            check_local_ranks(ranks)
        except LaunchError as exc:
            raise CliError(f"-N/--ranks {ranks}: {exc}") from None
    try:
        cfg.validate(n)
    except ValueError as exc:
        raise CliError(f"{exc} (with {n} ranks)") from None
    extras = {"ranks": ranks, "timeout": timeout, "algorithms": algos, "json": _output_path("--json", args.json),
              "csv": _output_path("--csv", args.csv), "plot": _output_path("--plot", args.plot)}
    if extras["plot"] is not None:
        from ..bench.plot import PlotUnavailable, require_matplotlib

        try:
            require_matplotlib()
        except PlotUnavailable as exc:
            raise CliError(str(exc)) from None
    return cfg, extras


def _child_argv(args: argparse.Namespace, extras: Dict[str, Any], nranks: int) -> List[str]:
    argv = ["--op", args.op, "-b", str(args.minbytes), "-e", str(args.maxbytes), "-n", str(args.iters),
            "-w", str(args.warmup_iters), "-c", str(args.check), "-d", str(args.datatype), "-o", str(args.redop),
            "-r", str(args.root), "--algo", str(args.algo), "-N", str(nranks)]
    if args.stepfactor is not None:
        argv += ["-f", str(args.stepfactor)]
    if args.stepbytes is not None:
        argv += ["-i", str(args.stepbytes)]
    for flag in ("json", "csv", "plot"):
        if extras[flag] is not None:
            argv += [f"--{flag}", extras[flag]]
    return argv


# ---------------------------------------------------------------------------------------------- launching
def _launch(args: argparse.Namespace, extras: Dict[str, Any]) -> int:
    from ..bench.progress import ENV_PROGRESS, Bar, Relay
    from ..launch import LaunchConfig, LaunchError, launch

    nranks = extras["ranks"] or 2
    env: Dict[str, str] = {}
    _default_checks_off(env)
    stdout: Any = None
    stderr: Any = None
    relays: List[Relay] = []
    if sys.stderr.isatty():
        env[ENV_PROGRESS] = "relay"
        bar, lock = Bar(sys.stderr), threading.Lock()
        relays = [Relay(sys.stdout, bar, lock), Relay(sys.stderr, bar, lock)]
        stdout, stderr = relays
    command = [sys.executable, "-m", "hcomm_cffi", "bench", *_child_argv(args, extras, nranks)]
    config = LaunchConfig(nprocs=nranks, command=command, timeout=extras["timeout"], prefix=False, env=env)
    try:
        return launch(config, stdout=stdout, stderr=stderr)
    except LaunchError as exc:
        raise CliError(str(exc)) from None
    finally:
        for relay in relays:
            relay.close()


# ---------------------------------------------------------------------------------------------- one rank
def _default_checks_off(env: MutableMapping[str, str]) -> None:
    """Benchmark runs measure the algorithms: the emulator's checker and the signature check are off unless set."""
    raw = dict(settings.current().raw)
    if "HCOMM_SIM_CHECK" not in raw:
        env["HCOMM_SIM_CHECK"] = "off"
        env[ENV_SIM_CHECK_DEFAULTED] = "1"
    if "HCOMM_CHECK_COLLECTIVES" not in raw:
        env["HCOMM_CHECK_COLLECTIVES"] = "0"
        env[ENV_SIGNATURE_CHECK_DEFAULTED] = "1"


def _notes(backend: str) -> List[str]:
    current = settings.current()
    on = current.check_collectives
    said = ("HCOMM_CHECK_COLLECTIVES=0 (set by hcomm bench: it is one allgather more per call; export "
            "HCOMM_CHECK_COLLECTIVES=1 to measure with it)" if current.bench_signature_check_defaulted else
            f"HCOMM_CHECK_COLLECTIVES={'unset (the backend default)' if on is None else int(on)}")
    notes = [f"signature check (Comm API paths; --algo native calls the library directly): {said}"]
    if backend == "sim":
        current = settings.current()
        check = current.sim_check
        if current.bench_sim_check_defaulted:
            notes.append(f"emulator schedule checker: HCOMM_SIM_CHECK={check} (set by hcomm bench because it costs "
                         "time; export HCOMM_SIM_CHECK=warn to keep it on)")
        else:
            notes.append(f"emulator schedule checker: HCOMM_SIM_CHECK={check}")
    return notes


def _relay_progress(index: int, total: int, done: int, iters: int) -> None:
    """Rank 0's progress when the launching ``hcomm bench`` draws the bar: one marker line on stderr."""
    from ..bench.progress import marker_line

    sys.stderr.write(marker_line(index, total, done, iters))
    sys.stderr.flush()


def _open(algorithm: str) -> Any:
    from ..bench.ops import OpsUnavailable, open_ops

    try:
        return open_ops(algorithm)
    except (OpsUnavailable, ValueError) as exc:
        raise CliError(str(exc)) from None
    except Exception as exc:  # HcclError, BootstrapError, ...: one line naming the cause
        raise CliError(f"cannot set up the communicator: {type(exc).__name__}: {exc}") from None


def _sweep(ops: Any, cfg: Any, env: Dict[str, Any], notes: List[str]) -> List[Any]:
    """Header, rows (as they come), footer on rank 0 for one algorithm; the results on every rank."""
    from ..bench import report
    from ..bench.progress import ENV_PROGRESS, Bar
    from ..bench.runner import Progress, run_sweep

    rank, n = ops.rank, ops.size
    try:
        cfg.validate(n)
    except ValueError as exc:
        raise CliError(f"{exc} (with {n} ranks)") from None
    progress: Optional[Progress] = None
    bar: Optional[Bar] = None
    if rank == 0:
        for line in report.header_lines(cfg, n, {**env, "path": ops.path}, notes):
            print(line, flush=True)
        if settings.value(ENV_PROGRESS) == "relay":
            progress = _relay_progress
        elif sys.stderr.isatty():
            bar = Bar(sys.stderr)
            progress = bar.update

    def on_result(res: Any) -> None:
        if rank == 0:
            if bar is not None:
                bar.clear()
            print(report.format_row(cfg, res), flush=True)

    try:
        results = run_sweep(ops, cfg, progress, on_result)
    except ValueError as exc:
        raise CliError(f"rank {rank}: {exc}") from None
    except Exception as exc:
        raise CliError(f"rank {rank}: {cfg.op} (--algo {cfg.algorithm}) failed: {type(exc).__name__}: {exc}") from None
    finally:
        if bar is not None:
            bar.clear()
    if rank == 0:
        for line in report.footer_lines(results):
            print(line, flush=True)
    return results


def _run_rank(cfg: Any, extras: Dict[str, Any]) -> int:
    """This rank's part: every ``--algo`` in turn (one communicator each), then rank 0 writes the files."""
    from dataclasses import replace

    from ..bench import report
    from ..bench.ops import hccl_environment, versions
    from ..lib import choose_backend

    _default_checks_off(os.environ)
    try:
        backend = choose_backend().name
    except ValueError as exc:
        raise CliError(str(exc)) from None
    results: List[Any] = []
    env: Dict[str, Any] = {}
    paths: Dict[str, str] = {}
    n = rank = 0
    for i, algo in enumerate(extras.get("algorithms") or [cfg.algorithm]):
        ops = _open(algo)
        try:
            n = ops.size
            if not env:
                env = report.environment(ops.describe(), n, versions(), hccl_environment(), backend)
            paths[algo] = ops.path
            if i and ops.rank == 0:
                print("#", flush=True)
            results += _sweep(ops, replace(cfg, algorithm=algo), env, _notes(backend) if i == 0 else [])
            rank = ops.rank
        finally:
            ops.close()
    env["paths"] = paths
    if rank == 0:
        _write_outputs(cfg, n, env, results, extras)
    return 1 if any(r.wrong for r in results) else 0


def _write_outputs(cfg: Any, n: int, env: Dict[str, Any], results: List[Any], extras: Dict[str, Any]) -> None:
    from ..bench import report
    from ..bench.plot import PlotUnavailable, plot_series, points_of

    try:
        if extras["json"]:
            report.write_json(extras["json"], cfg, n, env, results)
            print(f"# wrote {extras['json']}", flush=True)
        if extras["csv"]:
            report.write_csv(extras["csv"], cfg, n, env, results)
            print(f"# wrote {extras['csv']}", flush=True)
        if extras["plot"]:
            series = {}
            for algo in report.algorithms_of(cfg, results):
                label = algo if algo != "native" else f"native ({env.get('backend')})"
                series[label] = points_of([r for r in results if (r.algorithm or cfg.algorithm) == algo])
            plot_series(extras["plot"], series, f"hcomm bench {cfg.op}, {n} ranks, {cfg.dtype.name.lower()}")
            print(f"# wrote {extras['plot']}", flush=True)
    except OSError as exc:
        raise CliError(f"cannot write {exc.filename or 'output'}: {exc.strerror or exc}") from None
    except PlotUnavailable as exc:
        raise CliError(str(exc)) from None


def _check_algorithms_locally(cfg: Any, algorithms: List[str], nranks: int) -> None:
    """CliError when the planner says an ``--algo`` cannot run ``--op`` on ``nranks`` local ranks (one server)."""
    from ..plan import InvalidAlgorithm, Topology, make_plan

    for algo in algorithms:
        if algo in ("native", "auto") or nranks < 2:
            continue
        try:
            make_plan(cfg.op, Topology.single_server(nranks), cfg.sizes[0] if cfg.op != "barrier" else 0,
                      algo, dtype=cfg.dtype)
        except InvalidAlgorithm as exc:
            raise CliError(f"--algo {algo} --op {cfg.op} on {nranks} local ranks: {exc}") from None
        except ValueError:
            pass  # not the algorithm's fault (e.g. a size the planner rejects); the run itself will tell


def _launch_env() -> Any:
    """The enclosing launcher's view of this process (None: not inside a launched job)."""
    from ..bootstrap.env import detect

    try:
        return detect()
    except ValueError as exc:
        raise CliError(str(exc)) from None


def run(args: argparse.Namespace) -> int:
    """Validate everything, then run on this job's ranks or launch ``-N`` local ranks of ``hcomm bench``.

    Inside a job only rank 0 reports a bad flag (the others exit with status 2 silently).
    """
    job = _launch_env()
    if job is None:
        cfg, extras = parse_config(args)
        _check_algorithms_locally(cfg, extras["algorithms"], extras["ranks"] or 2)
        return _launch(args, extras)
    try:
        cfg, extras = parse_config(args, job.size)
        if extras["ranks"] is not None and extras["ranks"] != job.size:
            raise CliError(f"-N/--ranks {extras['ranks']} but this job has {job.size} ranks; "
                           "drop -N inside a launched job")
    except CliError:
        if job.rank != 0:
            return 2
        raise
    return _run_rank(cfg, extras)
