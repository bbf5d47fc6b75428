"""``hcomm plan``: resources, steps, traffic and modelled time of one collective (or all algorithms).

Built-in algorithms show the planner's formulas and, beside them, what a dry run of the
algorithm's own schedule derives; a user's algorithm (a registered name or ``module:attr``) has
no formula: its plan is the derived one, and a schedule error is reported before anything runs.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..algorithms import registry
from ..algorithms.dryrun import DryRun, dry_run
from ..algorithms.interface import COLLECTIVES, Algorithm, CollectiveCall, UnsupportedError
from .. import settings
from ..enums import DataType, Protocol, parse_dtype
from ..plan import (ALGORITHMS, DEFAULT_PLATFORM, INTER_ALGORITHMS, PLATFORM_NAMES, PLATFORMS, Collective, CostModel,
                    InvalidAlgorithm, Plan, RanktableError, Topology, compare_algorithms, load_ranktable, make_plan,
                    parse_size)
from . import CliError

__all__ = ["add_parser", "run"]


def add_parser(subparsers: Any) -> None:
    """Register the ``plan`` subcommand."""
    p = subparsers.add_parser("plan", help="plan threads/notifies/channels and model the time of a collective",
                              description=__doc__)
    p.add_argument("--algo", default="auto",
                   help=f"auto, one of {', '.join(ALGORITHMS)}, a registered algorithm, or a user algorithm as "
                        "'package.module:attr' / 'path/file.py:attr' (default auto)")
    p.add_argument("--inter", default="nhr", help=f"inter-server algorithm of hierarchical: "
                                                  f"{', '.join(INTER_ALGORITHMS)} (default nhr)")
    p.add_argument("--ranks", help="ranks in one server")
    p.add_argument("--servers", help="servers (with --devices)")
    p.add_argument("--devices", help="devices per server (with --servers)")
    p.add_argument("--ranktable", help="ranktable JSON file (version 1.0, 1.2 or 2.0)")
    p.add_argument("--intra-link", default="hccs", choices=("hccs", "pcie"), help="link inside a server")
    p.add_argument("--op", help=f"one of {', '.join(c.value for c in Collective)} (default allreduce; for a user "
                               "algorithm, the collective it implements when it implements one)")
    p.add_argument("--size", default="64M", help="message bytes, K/M/G suffix = 2^10/2^20/2^30 (default 64M)")
    p.add_argument("--out-size", help="output bytes of a user collective whose output differs from its input")
    p.add_argument("--engine", default="aicpu", help="cpu, cpu_ts, aicpu, aicpu_ts, aiv, ccu (default aicpu)")
    p.add_argument("--dtype", default="fp32", help="data type (default fp32)")
    p.add_argument("--root", default="0", help="root of broadcast/reduce, sender of sendrecv")
    p.add_argument("--peer", help="receiver of sendrecv (default root+1)")
    p.add_argument("--platform", default=DEFAULT_PLATFORM, choices=PLATFORMS,
                   help="resource profile: a2 (910B), a3 (910_93), 910a: what the vendor's executors acquire; doc: the "
                        f"seed document's model, which the emulator's built-ins implement (default {DEFAULT_PLATFORM}, "
                        "the most widely deployed training server)")
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
COMPARE_LEGEND = ("columns: threads, chans (channels), ch ntf (channel notifies), thr ntf (thread notifies) = the most "
                  "any rank acquires; steps = transfer steps per piece; pieces = parts the message is cut into to fit "
                  "the HCCL buffer; time = the cost model's estimate (hcomm plan --algo NAME shows its breakdown)")


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


def _render_compare(cands: Sequence[Any], title: str = "", footer: str = "") -> str:
    """The --compare table: the title, one row per algorithm, the footer (the profile), the column legend."""
    head = (f"{'algorithm':<13} {'threads':>7} {'chans':>6} {'ch ntf':>7} {'thr ntf':>7} {'steps':>6} "
            f"{'pieces':>6} {'time (us)':>12}  note")
    lines = ([title, ""] if title else []) + [head]
    valid = [c for c in cands if c.plan is not None]
    best = min(valid, key=lambda c: c.plan.modelled_time_us) if valid else None
    for c in cands:
        if c.plan is None:
            lines.append(f"{c.algorithm:<13} {'-':>7} {'-':>6} {'-':>7} {'-':>7} {'-':>6} {'-':>6} {'-':>12}  "
                         f"invalid: {c.reason}")
            continue
        p = c.plan
        note = "fastest" if c is best else ""
        if p.warnings:
            note = (note + "; " if note else "") + f"{len(p.warnings)} warning(s)"
        lines.append(f"{c.algorithm:<13} {p.threads:>7} {p.n_channels:>6} {p.channel_notifies:>7} "
                     f"{p.thread_notifies:>7} {p.steps:>6} {p.pieces:>6} {p.modelled_time_us:>12.1f}  {note}")
    return "\n".join(lines + ([footer] if footer else []) + [COMPARE_LEGEND])


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
        json.dump({"algorithm": alg.name, "collective": coll, "size_bytes": size, "topology": topo.summary(),
                   "formula": None, "derived": _derived_dict(d)}, sys.stdout, indent=2)
        print()
    else:
        print(f"{coll} of {_fmt_bytes(size)} {parse_dtype(args.dtype).name} on {topo.n_ranks} ranks, user algorithm "
              f"{alg.name} (no formula: the plan is what its schedule uses)")
        print(_render_derived(d))
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


def _builtin_dry_run(plan: Plan, topo: Topology, size: int, args: argparse.Namespace) -> Tuple[Optional[DryRun], str]:
    """The dry run of the runnable built-in behind ``plan`` (None and why when there is none)."""
    if plan.algorithm not in registry.BUILTINS:
        return None, f"{plan.algorithm} is planned but not runnable here"
    if plan.algorithm == "hierarchical" and plan.inter_algorithm != "ring":
        return None, "the runnable hierarchical algorithm uses a ring between servers (--inter ring)"
    if topo.n_ranks > DRY_RUN_MAX_RANKS:
        return None, f"dry run skipped above {DRY_RUN_MAX_RANKS} ranks"
    if plan.collective.value not in COLLECTIVES:
        return None, f"{plan.collective.value} is not a collective of the algorithms"
    return _dry_run(registry.resolve(plan.algorithm), plan.collective.value, topo, size, args), ""


def run(args: argparse.Namespace) -> int:
    """Build the topology, plan (or compare), print a table or JSON."""
    raw = args.algo.strip()
    algo = raw.lower()
    topo = _topology(args)
    try:
        size = parse_size(args.size)
    except ValueError:
        raise CliError(f"--size {args.size!r}: expected bytes or a number with K, M or G (e.g. 64M)") from None
    if algo != "auto" and algo not in ALGORITHMS:
        try:
            alg = registry.resolve(raw)
        except ValueError as exc:
            raise CliError(f"--algo {raw!r}: {exc}") from None
        return _user_algorithm(alg, topo, size, args)
    kwargs: Dict[str, Any] = dict(engine=args.engine, dtype=args.dtype, root=_int("root", args.root),
                  peer=_int("peer", args.peer), cost=_cost(args),
                  notifies_per_channel=_int("notifies-per-channel", args.notifies_per_channel, 1),
                  buffer_mb=_buffer_mb(args), inter_algorithm=args.inter, platform=args.platform)
    try:
        if args.compare:
            cands = compare_algorithms(args.op or "allreduce", topo, size, algorithms=ALGORITHMS, **kwargs)
            if args.json:
                out: List[Dict[str, Any]] = [{"algorithm": c.algorithm, "valid": c.plan is not None,
                                              "reason": c.reason,
                                              "plan": c.plan.to_dict() if c.plan else None} for c in cands]
                json.dump(out, sys.stdout, indent=2)
                print()
            else:
                print(_render_compare(cands, f"{args.op or 'allreduce'} of {_fmt_bytes(size)} "
                                             f"{parse_dtype(args.dtype).name} on {topo.n_ranks} ranks "
                                             f"({topo.n_servers} server(s)): every algorithm planned, the quickest "
                                             "modelled time marked",
                                      f"resources: profile {args.platform} ({PLATFORM_NAMES[args.platform]}); "
                                      "--platform doc for the seed document's model"))
            return 0
        plan = make_plan(args.op or "allreduce", topo, size, algo, **kwargs)
    except InvalidAlgorithm as exc:
        raise CliError(f"--algo {algo}: {exc}") from None
    except ValueError as exc:
        raise CliError(str(exc)) from None
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
        doc["formula"] = {"threads": plan.threads, "notifies": plan.channel_notifies, "channels": plan.n_channels}
        doc["derived"] = _derived_dict(derived) if derived is not None else None
        if derived is None:
            doc["derived_skipped"] = why
        json.dump(doc, sys.stdout, indent=2)
        print()
    else:
        print(_render(plan))
        seed = _seed_line(plan, kwargs)
        if seed:
            print(seed)
        print(_render_derived(derived) + _profile_note(plan) if derived is not None else f"derived: none ({why})")
    return 0


def _profile_note(plan: Plan) -> str:
    """Which profile the runnable built-in implements, when it is not the one planned."""
    profile = registry.resolve(plan.algorithm).profile
    if profile is None or profile == plan.platform:
        return ""
    return f" (the emulator's built-in implements the {profile} profile: --platform {profile} plans what it acquires)"


def _seed_line(plan: Plan, kwargs: Dict[str, Any]) -> str:
    """The seed document's figures beside a vendor profile's, where the document's example applies, and why they differ."""
    if plan.algorithm not in ("ring", "mesh") or plan.collective is not Collective.ALLREDUCE:
        return ""
    doc = plan if plan.platform == "doc" else make_plan(plan.collective, plan.topology, plan.size_bytes, plan.algorithm,
                                                       **{**kwargs, "platform": "doc", "notifies_per_channel": None})
    line = (f"seed document ({DOC_SOURCE_SHORT}): {plan.algorithm} {doc.threads} threads / {doc.channel_notifies} "
            f"notifies / {doc.n_channels} channels")
    if plan.platform == "doc":
        return line
    why = []
    if plan.threads != doc.threads:
        why.append(f"{_n(plan.threads, 'thread')}, as its executor requests ({plan.source.rsplit('/', 1)[-1]})")
    if plan.notifies_per_channel != doc.notifies_per_channel:
        why.append(f"{plan.notifies_per_channel} notifies per channel (hicann/hccl channel.h:19) where the document "
                   f"has {doc.notifies_per_channel}")
    if plan.n_channels != doc.n_channels:
        why.append(f"{plan.n_channels} channels")
    return line + (f"; profile {plan.platform} differs: " + "; ".join(why) if why else f"; profile {plan.platform} agrees")


DOC_SOURCE_SHORT = "HCOMM_SEMANTICS.md §3.4, its example: one server of 4 ranks, AI CPU engine; --platform doc"
