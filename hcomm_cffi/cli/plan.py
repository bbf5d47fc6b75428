"""``hcomm plan``: resources, steps, traffic and modelled time of one collective (or all algorithms).

Two kinds of plan, each saying in its first line which it is:

* the package's algorithm, as it runs here (the default: ``--algo ring``, a user's algorithm, ``auto``):
  exactly what that algorithm acquires -- its declared formula (shown beside what a dry run of its own
  schedule derives), or for an algorithm without one the derived plan -- plus the communicator's own
  channels, acquired once at init;
* the vendor's executor (``--algo native``, or any planner algorithm with ``--platform``): what the
  library's own collective acquires on that platform in that expansion mode (``--engine``), the layer
  chosen as the vendor chooses it (:mod:`hcomm_cffi.plan.vendor`).

``--compare`` shows both side by side for every algorithm.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..algorithms import registry
from ..algorithms.dryrun import DryRun, dry_run
from ..algorithms.formulas import comm_overhead, package_plan
from ..algorithms.interface import COLLECTIVES, Algorithm, CollectiveCall, UnsupportedError
from ..resources import ALGORITHM_NOTIFIES, ENGINE, channel_class
from .. import settings
from ..enums import DataType, Protocol, parse_dtype
from ..plan import (ALGORITHMS, DEFAULT_PLATFORM, INTER_ALGORITHMS, PLATFORM_NAMES, PLATFORMS, Collective, CostModel,
                    InvalidAlgorithm, Plan, RanktableError, Topology, expansion_of, layer_of, load_ranktable, make_plan,
                    native_algorithm, parse_collective, parse_engine, parse_size)
from . import CliError

__all__ = ["add_parser", "run"]


def add_parser(subparsers: Any) -> None:
    """Register the ``plan`` subcommand."""
    p = subparsers.add_parser("plan", help="plan threads/notifies/channels and model the time of a collective",
                              description=__doc__)
    p.add_argument("--algo", default="auto",
                   help=f"auto, one of the package's algorithms ({', '.join(registry.BUILTINS)}), a registered "
                        "algorithm or 'package.module:attr' / 'path/file.py:attr' (planned as it runs here), native "
                        f"(the vendor's executor on --platform), or a planner algorithm ({', '.join(ALGORITHMS)}) "
                        "with --platform (default auto)")
    p.add_argument("--inter", help=f"inter-server algorithm of hierarchical: "
                                                  f"{', '.join(INTER_ALGORITHMS)} (default nhr; the package's hierarchical runs a ring)")
    p.add_argument("--ranks", help="ranks in one server")
    p.add_argument("--servers", help="servers (with --devices)")
    p.add_argument("--devices", help="devices per server (with --servers)")
    p.add_argument("--ranktable", help="ranktable JSON file (version 1.0, 1.2 or 2.0)")
    p.add_argument("--intra-link", default="hccs", choices=("hccs", "pcie"), help="link inside a server")
    p.add_argument("--op", help=f"one of {', '.join(c.value for c in Collective)} (default allreduce; for a user "
                               "algorithm, the collective it implements when it implements one)")
    p.add_argument("--size", default="64M", help="message bytes, K/M/G suffix = 2^10/2^20/2^30 (default 64M)")
    p.add_argument("--out-size", help="output bytes of a user collective whose output differs from its input")
    p.add_argument("--engine", default="aicpu",
                   help="expansion mode of a vendor plan: cpu/cpu_ts (host), aicpu/aicpu_ts (AI CPU), aiv, ccu "
                        "(default aicpu); the package's algorithms run as they run here whatever it says")
    p.add_argument("--dtype", default="fp32", help="data type (default fp32)")
    p.add_argument("--root", default="0", help="root of broadcast/reduce, sender of sendrecv")
    p.add_argument("--peer", help="receiver of sendrecv (default root+1)")
    p.add_argument("--platform", choices=PLATFORMS,
                   help="plan the vendor's executor on this platform: a2 (910B), a3 (910_93), 910a (the legacy "
                        "executors), 950 (the AI CPU templates), doc (the package's model); unset: the "
                        f"package's algorithm as it runs here (--algo native: {DEFAULT_PLATFORM})")
    p.add_argument("--notifies-per-channel", help="notifies per channel (default: the profile's, 3 vendor, 2 doc)")
    p.add_argument("--buffsize-mb", help="HCCL buffer MiB per half (default: HCCL_BUFFSIZE, else 200)")
    p.add_argument("--alpha-us", action="append", default=[], metavar="CLASS=US",
                   help="per-step latency of a link class, e.g. hccs=15 (repeatable)")
    p.add_argument("--bw-gbps", action="append", default=[], metavar="CLASS=GBPS",
                   help="bandwidth of one link of a class, e.g. roce=12.5 (repeatable)")
    p.add_argument("--cost-model", help="JSON file of cost parameters")
    p.add_argument("--compare", action="store_true", help="all algorithms side by side")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--timeline", metavar="PNG",
                   help="also draw the planned schedule (every rank's tasks and notifies, from the dry run) as a "
                        "swimlane picture (needs matplotlib)")
    p.set_defaults(func=run)


#: Most ranks a plan may describe: the plan lists every rank, and no HCCL communicator is larger in practice.
MAX_PLAN_RANKS = 65536


def _int(name: str, text: Optional[str], minimum: int = 0, maximum: Optional[int] = None) -> Optional[int]:
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        raise CliError(f"--{name} {text!r}: expected an integer") from None
    if value < minimum or (maximum is not None and value > maximum):
        bound = f" and <= {maximum} (the plan lists every rank)" if maximum is not None else ""
        raise CliError(f"--{name} {value}: expected an integer >= {minimum}{bound}")
    return value


def _topology(args: argparse.Namespace) -> Topology:
    given = [n for n, v in (("--ranks", args.ranks), ("--servers", args.servers),
                            ("--ranktable", args.ranktable)) if v is not None]
    if len(given) > 1:
        raise CliError(f"give only one of --ranks, --servers/--devices, --ranktable (got {', '.join(given)})")
    intra = Protocol[args.intra_link.upper()]
    if args.ranktable is not None:
        try:
            topo = load_ranktable(args.ranktable)
        except RanktableError as exc:
            raise CliError(str(exc)) from None
        return Topology(topo.n_ranks, topo.servers, intra, topo.inter_link, topo.source,
                        topo.server_ids, topo.super_pods)
    if args.servers is not None or args.devices is not None:
        if args.servers is None or args.devices is None:
            raise CliError("--servers and --devices go together")
        servers = _int("servers", args.servers, 1, MAX_PLAN_RANKS)
        devices = _int("devices", args.devices, 1, MAX_PLAN_RANKS)
        assert servers is not None and devices is not None
        if servers * devices > MAX_PLAN_RANKS:
            raise CliError(f"--servers {servers} x --devices {devices} = {servers * devices} ranks; expected at most "
                           f"{MAX_PLAN_RANKS} (the plan lists every rank)")
        return Topology.from_shape(servers, devices, intra_link=intra)
    ranks = _int("ranks", args.ranks if args.ranks is not None else "8", 1, MAX_PLAN_RANKS)
    assert ranks is not None
    return Topology.single_server(ranks, intra)


def _pairs(flag: str, items: Sequence[str]) -> Dict[Protocol, float]:
    out: Dict[Protocol, float] = {}
    for item in items:
        key, sep, val = item.partition("=")
        try:
            proto = Protocol[key.strip().upper()]
            if not sep or proto not in (Protocol.HCCS, Protocol.ROCE, Protocol.PCIE):
                raise KeyError(key)
            out[proto] = float(val)
        except (KeyError, ValueError):
            raise CliError(f"{flag} {item!r}: expected CLASS=NUMBER with CLASS hccs, roce or pcie") from None
        if out[proto] < 0 or (flag == "--bw-gbps" and out[proto] == 0):
            raise CliError(f"{flag} {item!r}: expected a positive number")
    return out


def _cost(args: argparse.Namespace) -> CostModel:
    try:
        model = CostModel.from_json_file(args.cost_model) if args.cost_model else CostModel()
    except (OSError, ValueError) as exc:
        raise CliError(f"--cost-model {args.cost_model!r}: {exc}") from None
    return model.with_overrides(alpha_us=_pairs("--alpha-us", args.alpha_us),
                                bw_gbps=_pairs("--bw-gbps", args.bw_gbps))


def _fmt_bytes(n: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.4g} {unit}"
    return f"{int(n)} B"


#: what the columns of the role table mean (printed under it)
ROLE_LEGEND = ("columns: ranks = ranks in the role, then per rank: threads = HCOMM threads acquired; ntf/thr = notifies per thread; "
               "thr ntf = thread notifies in all; host = host-sync notifies; chans = channels; ch ntf = channel "
               "notifies; total = every notify; channels by link = channels per link class")
#: what the columns of --compare mean (printed under it)
COMPARE_LEGEND = ("columns: threads, ch ntf (channel notifies), chans (channels) = the most any rank acquires for the "
                  "algorithm (the package's plans leave out the communicator's own channels, the same for every "
                  "algorithm); time = the cost model's estimate (hcomm plan --algo NAME shows its breakdown)")


def _render(plan: Plan) -> str:
    topo = plan.topology.summary()
    algo = plan.algorithm + (f" (inter {plan.inter_algorithm})" if plan.inter_algorithm else "")
    lines = [
        f"{plan.collective.value} of {_fmt_bytes(plan.size_bytes)} {plan.dtype.name} on {topo['n_ranks']} ranks "
        f"({topo['n_servers']} server(s), {topo['source']}), engine {plan.engine.name}, algorithm {algo}",
        f"profile {plan.platform} ({PLATFORM_NAMES[plan.platform]}): {plan.source or 'no resources'}",
        "",
        f"{'role':<24} {'ranks':>7} {'threads':>7} {'ntf/thr':>7} {'thr ntf':>7} {'host':>4} "
        f"{'chans':>6} {'ch ntf':>7} {'total':>7}  channels by link",
    ]
    for r in plan.roles:
        by = ", ".join(f"{k} {v}" for k, v in r.channels_by_protocol) or "-"
        lines.append(f"{r.name:<24} {r.n_ranks:>7} {r.threads:>7} {r.notifies_per_thread:>7} "
                     f"{r.thread_notifies:>7} {r.host_sync_notifies:>4} {r.n_channels:>6} "
                     f"{r.channel_notifies:>7} {r.total_notifies:>7}  {by}")
    lines += [ROLE_LEGEND, "", f"steps {plan.steps} per piece x {plan.pieces} piece(s) = {plan.total_steps}"]
    for name, steps, t in plan.phases:
        lines.append(f"  {name:<36} {steps:>6} steps {t:>12.1f} us")
    traffic = ", ".join(f"{k} {_fmt_bytes(v)}" for k, v in plan.bytes_per_link_class) or "none"
    lines += [f"bytes sent by the busiest rank per link class: {traffic}",
              f"HCCL buffer (formula): one piece needs {_fmt_bytes(plan.buffer_bytes_needed)} in each of its two "
              f"halves, configured {_fmt_bytes(plan.buffer_half_bytes)} per half -> "
              f"{'fits' if plan.buffer_fits else 'does not fit'}; "
              f"suggested hcclBufferSize {plan.comm_config_buffer_mb()} MiB",
              f"modelled time: {plan.modelled_time_us:.1f} us"]
    if plan.explanation:
        lines.append(plan.explanation)
    lines += [f"warning: {w}" for w in plan.warnings]
    return "\n".join(lines)


#: Above this many ranks the dry run (O(ranks x tasks)) is skipped and only the formula is shown.
DRY_RUN_MAX_RANKS = 64
#: Collectives whose count is a per-rank block of the message.
_BLOCKED = ("allgather", "reduce_scatter", "alltoall")


def _buffer_mb(args: argparse.Namespace) -> int:
    """--buffsize-mb, else the HCCL_BUFFSIZE a job started here would use (settings), MiB per half."""
    if args.buffsize_mb is not None:
        return _int("buffsize-mb", args.buffsize_mb, 1) or 1
    try:
        return int(settings.value("HCCL_BUFFSIZE"))
    except ValueError as exc:
        raise CliError(str(exc)) from None


def _dry_run(alg: Algorithm, coll: str, topo: Topology, size: int, args: argparse.Namespace) -> DryRun:
    """The checked schedule of ``alg`` for this command line (CliError on a schedule or argument error)."""
    dtype = parse_dtype(args.dtype)
    count = size // dtype.itemsize
    if coll in _BLOCKED:
        count //= topo.n_ranks
    out = None if args.out_size is None else parse_size(args.out_size, "--out-size") // dtype.itemsize
    call = CollectiveCall(coll, 0, 0, max(1, count), dtype, root=_int("root", args.root) or 0, recv_count=out)
    buffer_bytes = 2 * _buffer_mb(args) * (1 << 20)
    registry.check_supported(alg, coll, topo, dtype, None)
    return dry_run(alg, topo, call, buffer_bytes, declared=False)


def _derived_dict(d: DryRun) -> Dict[str, Any]:
    summary = d.summary()
    summary["per_rank"] = [{"rank": r.rank, "threads": r.threads, "thread_notifies": list(r.thread_notifies),
                            "channels": [{"peer": p, "notifies": n} for p, n in r.channels],
                            "buffer_bytes": r.buffer_bytes, "tasks": r.tasks} for r in d.ranks]
    return summary


def _n(count: int, one: str, many: str = "") -> str:
    return f"{count} {one if count == 1 else (many or one + 's')}"


def _render_derived(d: DryRun) -> str:
    s = d.summary()
    return (f"derived from a dry run of the {d.algorithm} schedule: {_n(s['threads'], 'thread')}, "
            f"{_n(s['notifies'], 'channel notify', 'channel notifies')}, {_n(s['channels'], 'channel')}, "
            f"{_n(s['steps'], 'step')}, {_n(s['tasks'], 'task')} on all ranks, "
            f"writes up to {_fmt_bytes(s['buffer_bytes'])} into the HCCL buffer (the highest offset in both halves "
            "together, on the busiest rank: what the schedule touches, not what one piece needs)")


def _user_algorithm(alg: Algorithm, topo: Topology, size: int, args: argparse.Namespace) -> int:
    """``hcomm plan`` of a user algorithm: the derived plan (it has no formula)."""
    if args.op is not None:
        coll = args.op.strip().lower()
    elif alg.collectives is not None and len(alg.collectives) == 1:
        coll = next(iter(alg.collectives))    # no --op: the algorithm's only collective
    else:
        coll = "allreduce"
    try:
        d = _dry_run(alg, coll, topo, size, args)
    except (UnsupportedError, ValueError) as exc:
        raise CliError(f"--algo {args.algo}: {exc}") from None
    _timeline(d, args, coll, size)
    if args.json:
        json.dump({"plan_of": "package", "what": package_headline(alg.name, d.notifies_per_channel),
                   "algorithm": alg.name, "collective": coll, "size_bytes": size, "topology": topo.summary(),
                   "overhead": _overhead_json(topo), "formula": None, "derived": _derived_dict(d)}, sys.stdout, indent=2)
        print()
    else:
        print(package_headline(alg.name, d.notifies_per_channel))
        print(f"{coll} of {_fmt_bytes(size)} {parse_dtype(args.dtype).name} on {topo.n_ranks} ranks, user algorithm "
              f"{alg.name} (no formula: the plan is what its schedule uses)")
        print(_render_derived(d))
        for line in _overhead_lines(topo):
            print(line)
        for r in d.ranks:
            chans = ", ".join(f"{p}:{n}" for p, n in r.channels) or "-"
            print(f"  rank {r.rank:>4}: {_n(r.threads, 'thread')}, thread notifies {list(r.thread_notifies)}, "
                  f"channels (peer:notifies) {chans}")
    return 0


def _timeline(d: DryRun, args: argparse.Namespace, coll: str, size: int) -> None:
    """Draw the planned schedule of ``d`` to ``--timeline`` (nothing without the option)."""
    if not args.timeline:
        return
    from ..algorithms.plan_timeline import plan_events
    from ..timeline import render
    title = (f"planned {coll} of {_fmt_bytes(size)} with {d.algorithm} on {d.topology.n_ranks} ranks "
             f"(dry run: {d.steps} transfer steps)")
    try:
        render(plan_events(d), args.timeline, title, unit="steps")
    except (RuntimeError, OSError) as exc:
        raise CliError(f"--timeline {args.timeline}: {exc}") from None
    print(f"timeline: {args.timeline}", file=sys.stderr)


def _kwargs(args: argparse.Namespace, platform: str) -> Dict[str, Any]:
    return dict(engine=args.engine, dtype=args.dtype, root=_int("root", args.root), peer=_int("peer", args.peer),
                cost=_cost(args), notifies_per_channel=_int("notifies-per-channel", args.notifies_per_channel, 1),
                buffer_mb=_buffer_mb(args), inter_algorithm=args.inter or "nhr", platform=platform)


def _vendor_plan(algo: str, coll: str, topo: Topology, size: int, args: argparse.Namespace, platform: str) -> Plan:
    """The vendor's executor: ``algo`` (``native``: the one the library picks) on ``platform``, ``--engine`` expansion."""
    kwargs = _kwargs(args, platform)
    try:
        if algo == "native":
            algo, why = native_algorithm(platform, topo.n_servers, topo.devices_per_server or topo.n_ranks,
                                         parse_collective(coll))
            plan = make_plan(coll, topo, size, algo, **kwargs)
            return replace(plan, explanation=f"native: the library picks {algo}: {why}")
        return make_plan(coll, topo, size, algo, **kwargs)
    except InvalidAlgorithm as exc:
        raise CliError(f"--algo {algo}: {exc}") from None
    except ValueError as exc:
        raise CliError(str(exc)) from None


def vendor_headline(plan: Plan) -> str:
    """The one line saying a plan is the vendor's executor (text and JSON)."""
    if plan.platform == "doc":
        return f"the package's model of {plan.algorithm} (docs/design/plan-model.md), not what runs"
    return (f"the vendor's {plan.algorithm} executor on {PLATFORM_NAMES[plan.platform]}, "
            f"{expansion_of(plan.engine.name)} expansion: {layer_of(plan.platform)}")


def package_headline(name: str, notifies: int = ALGORITHM_NOTIFIES) -> str:
    """The one line saying a plan is the package's algorithm as it runs here."""
    engine, what = channel_class(notifies)[1], ": ACK, DATA" if notifies == ALGORITHM_NOTIFIES else ""
    return (f"the package's {name}, as it runs here: threads engine {ENGINE.name} (the first wraps the stream), "
            f"channels engine {engine.name} ({notifies} notifies each{what})")


def _overhead_lines(topo: Topology) -> List[str]:
    out = []
    for purpose, kind, engine, count, notifies in comm_overhead(topo, 0):
        if kind == "channel":
            out.append(f"communicator overhead ({purpose}, once per communicator at init, whatever runs): {count} "
                       f"channel(s) x {notifies} notifies, engine {engine} (signature handshake + point-to-point)")
        elif purpose == "comm:p2p":
            out.append(f"communicator overhead ({purpose}, per peer and direction a send/recv uses): {count} thread x "
                       f"{notifies} notify wrapping the lane's own stream, engine {engine}")
        else:
            out.append(f"communicator overhead ({purpose}, at its first handshake): the stream's thread, {notifies} "
                       f"notify, engine {engine} (the algorithms' main thread: counted in their threads above); the "
                       "library collectives' own links are the library's (hcomm plan --algo native)")
    return out


def _overhead_json(topo: Topology) -> List[Dict[str, Any]]:
    return [{"purpose": p, "kind": k, "engine": e, "count": c, "notifies": n,
             **({"per": "peer and direction a send/recv uses"} if p == "comm:p2p" else {})}
            for p, k, e, c, n in comm_overhead(topo, 0)]


def _package_choice(algo: str, coll: str, topo: Topology, size: int, args: argparse.Namespace) -> Algorithm:
    """The package algorithm ``--algo`` names (``auto``: the one the Comm API would pick for this call)."""
    try:
        dtype = parse_dtype(args.dtype)
        alg, _ = registry.explain(algo, coll, topo, size, dtype, None, _int("root", args.root) or 0, _buffer_mb(args))
        return alg
    except (UnsupportedError, ValueError) as exc:
        raise CliError(f"--algo {algo}: {exc}") from None


def run(args: argparse.Namespace) -> int:
    """Build the topology, plan (or compare), print a table or JSON."""
    raw = args.algo.strip()
    algo = raw.lower()
    topo = _topology(args)
    try:
        size = parse_size(args.size)
        parse_engine(args.engine)
    except ValueError as exc:
        what = f"--size {args.size!r}: expected bytes or a number with K, M or G (e.g. 64M)" if "size" in str(exc) \
            else str(exc)
        raise CliError(what) from None
    coll = args.op or "allreduce"
    if args.compare:
        return _compare(coll, topo, size, args)
    if algo == "native" or (args.platform is not None and algo in ALGORITHMS + ("auto",)):
        platform = args.platform or DEFAULT_PLATFORM
        if algo == "auto":
            algo = "native"
        return _print_vendor(_vendor_plan(algo, coll, topo, size, args, platform), args)
    if algo in ALGORITHMS and algo not in registry.BUILTINS:
        raise CliError(f"--algo {algo} is the vendor's, not a package algorithm: give --platform "
                       f"({', '.join(p for p in PLATFORMS if p != 'doc')}) to plan its executor")
    if algo == "auto":
        try:
            parse_collective(coll)
        except ValueError as exc:
            raise CliError(str(exc)) from None
        alg = _package_choice(algo, coll, topo, size, args)
    else:
        try:
            alg = registry.resolve(raw)
        except ValueError as exc:
            raise CliError(f"--algo {raw!r}: {exc}") from None
    if alg.name == "native":      # the library's own collective: the vendor's executor
        return _print_vendor(_vendor_plan("native", coll, topo, size, args, args.platform or DEFAULT_PLATFORM), args)
    if alg.name not in registry.BUILTINS or getattr(alg, "profile", None) is None:
        return _user_algorithm(alg, topo, size, args)
    return _print_package(alg, coll, topo, size, args)


def _print_vendor(plan: Plan, args: argparse.Namespace) -> int:
    if args.json:
        doc = plan.to_dict()
        doc["plan_of"] = "vendor"
        doc["what"] = vendor_headline(plan)
        json.dump(doc, sys.stdout, indent=2)
        print()
    else:
        print(vendor_headline(plan))
        print(_render(plan))
    return 0


def _print_package(alg: Algorithm, coll: str, topo: Topology, size: int, args: argparse.Namespace) -> int:
    try:
        plan = package_plan(alg, coll, topo, size, root=_int("root", args.root) or 0, dtype=args.dtype,
                            buffer_mb=_buffer_mb(args), cost=_cost(args))
    except (UnsupportedError, ValueError) as exc:
        raise CliError(f"--algo {alg.name}: {exc}") from None
    assert plan is not None
    try:
        derived, why = _builtin_dry_run(plan, topo, size, args)
    except (UnsupportedError, ValueError) as exc:
        derived, why = None, str(exc)
    if args.timeline:
        if derived is None:
            raise CliError(f"--timeline: no schedule to draw: {why}")
        _timeline(derived, args, plan.collective.value, size)
    if args.json:
        doc = plan.to_dict()
        doc["plan_of"] = "package"
        doc["what"] = package_headline(alg.name, plan.notifies_per_channel)
        doc["engines"] = {"threads": ENGINE.name, "channels": channel_class(plan.notifies_per_channel)[1].name}
        doc["overhead"] = _overhead_json(topo)
        doc["formula"] = {"threads": plan.threads, "notifies": plan.channel_notifies, "channels": plan.n_channels}
        doc["derived"] = _derived_dict(derived) if derived is not None else None
        if derived is None:
            doc["derived_skipped"] = why
        json.dump(doc, sys.stdout, indent=2)
        print()
    else:
        print(package_headline(alg.name, plan.notifies_per_channel))
        if plan.inter_algorithm is not None and args.inter is not None and plan.inter_algorithm != args.inter:
            print(f"note: the package's {alg.name} runs {plan.inter_algorithm} between servers; --inter {args.inter} "
                  "plans the vendor's (with --platform)")
        print(_render(plan))
        for line in _overhead_lines(topo):
            print(line)
        print(_render_derived(derived) if derived is not None else f"derived: none ({why})")
    return 0


def _compare(coll: str, topo: Topology, size: int, args: argparse.Namespace) -> int:
    """Every algorithm: the package's plan (where it runs here) and the vendor's executor on --platform, side by side."""
    platform = args.platform or DEFAULT_PLATFORM
    rows: List[Tuple[str, Optional[Plan], str, Optional[Plan], str]] = []
    for name in ALGORITHMS + ("native",):
        pkg: Optional[Plan] = None
        pwhy = "not a package algorithm"
        if name in registry.BUILTINS:
            try:
                pkg = package_plan(registry.resolve(name), coll, topo, size, root=_int("root", args.root) or 0,
                                   dtype=args.dtype, buffer_mb=_buffer_mb(args), cost=_cost(args))
                pwhy = ""
            except (UnsupportedError, ValueError) as exc:
                pwhy = str(exc)
        elif name == "native":
            pwhy = "the library's own: see the vendor's"
        try:
            ven: Optional[Plan] = _vendor_plan(name, coll, topo, size, args, platform)
            vwhy = ""
        except CliError as exc:
            ven, vwhy = None, str(exc).split(": ", 1)[-1]
        rows.append((name, pkg, pwhy, ven, vwhy))
    if args.json:
        json.dump([{"algorithm": n, "package": p.to_dict() if p else None, "package_reason": pw or None,
                    "vendor": v.to_dict() if v else None, "vendor_reason": vw or None,
                    "vendor_what": vendor_headline(v) if v else None}
                   for n, p, pw, v, vw in rows], sys.stdout, indent=2)
        print()
        return 0
    def cells(p: Optional[Plan]) -> str:
        if p is None:
            return f"{'-':>7} {'-':>7} {'-':>6} {'-':>10}"
        return f"{p.threads:>7} {p.channel_notifies:>7} {p.n_channels:>6} {p.modelled_time_us:>10.1f}"
    print(f"{coll} of {_fmt_bytes(size)} {parse_dtype(args.dtype).name} on {topo.n_ranks} ranks "
          f"({topo.n_servers} server(s)): the package's algorithms as they run here, beside the vendor's executors "
          f"on {PLATFORM_NAMES[platform]}, {expansion_of(parse_engine(args.engine).name)} expansion")
    print()
    print(f"{'':<18} {'package (as it runs here)':^34}   {'vendor ' + platform:^34}")
    print(f"{'algorithm':<18} {'threads':>7} {'ch ntf':>7} {'chans':>6} {'time (us)':>10}   "
          f"{'threads':>7} {'ch ntf':>7} {'chans':>6} {'time (us)':>10}  note")
    timed = [p for _, p, _, _, _ in rows if p is not None]
    best = min(timed, key=lambda p: p.modelled_time_us) if timed else None
    for n, p, pw, v, vw in rows:
        note = "; ".join(x for x in ("the package's quickest" if p is not None and p is best else "",
                                     f"package: {pw}" if pw and p is None and n in registry.BUILTINS else "",
                                     f"vendor: {vw}" if v is None else (v.explanation or "")) if x)
        print(f"{n:<18} {cells(p)}   {cells(v)}  {note}")
    print(COMPARE_LEGEND)
    return 0


def _builtin_dry_run(plan: Plan, topo: Topology, size: int, args: argparse.Namespace) -> Tuple[Optional[DryRun], str]:
    """The dry run of the runnable built-in behind ``plan`` (None and why when there is none)."""
    if topo.n_ranks > DRY_RUN_MAX_RANKS:
        return None, f"dry run skipped above {DRY_RUN_MAX_RANKS} ranks"
    if plan.collective.value not in COLLECTIVES:
        return None, f"{plan.collective.value} is not a collective of the algorithms"
    return _dry_run(registry.resolve(plan.algorithm), plan.collective.value, topo, size, args), ""
