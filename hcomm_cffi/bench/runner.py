"""The per-rank sweep of ``hcomm bench``.

For every size: fill the input with the check pattern (:mod:`.check`), prepare the buffers, run
``warmup`` untimed executions, wait, barrier, then ``iters`` back-to-back executions and one wait
(as hccl_test: no barrier inside the timed loop); the rank's time is ``elapsed / iters``.  With the
check on, the output is compared once after the timed loop.  Then one allgather of
``(elapsed_ns, wrong)`` gives every rank everybody's numbers: the reported time is the slowest rank's
(max), ``#wrong`` the worst rank's count.

Test hook: ``HCOMM_BENCH_CORRUPT=RANK[:COUNT]`` makes rank RANK perturb COUNT (default 1) elements
of its input after filling it, so that the check must find them.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .. import settings
from ..enums import DataType, ReduceOp
from ..api.average import AVERAGING_DTYPES
from .check import Pattern, count_wrong, disabled_reason, fill, pattern, perturb
from .factors import OPS, REDUCING_OPS, ROOTED_OPS, algbw_gbps, busbw_gbps
from .model import modelled_time_us
from .ops import Ops
from .sizes import check_memory, layout

__all__ = ["BenchConfig", "SizeResult", "run_sweep", "corrupt_hook", "ENV_CORRUPT", "Progress"]

ENV_CORRUPT = "HCOMM_BENCH_CORRUPT"
#: progress(size_index, n_sizes, iterations_done, iterations_total)
Progress = Callable[[int, int, int, int], None]


@dataclass(frozen=True)
class BenchConfig:
    """One sweep: operation, sizes, iterations, check, data type, reduce op, root, algorithm."""

    op: str
    sizes: Tuple[int, ...]
    iters: int = 20
    warmup: int = 10
    check: bool = True
    dtype: DataType = DataType.FP32
    redop: ReduceOp = ReduceOp.SUM
    root: int = 0
    algorithm: str = "native"
    average: bool = False          # -o avg: the sum divided by the number of ranks (the Comm API's op='avg')
    maxbytes_text: str = ""        # -e as typed (quoted by the memory check's error)

    def validate(self, nranks: int, local_ranks: Optional[int] = None) -> None:
        """ValueError naming the flag for anything this job cannot run (sizes beyond this host's memory too)."""
        if self.op not in OPS:
            raise ValueError(f"--op={self.op!r}; expected one of {', '.join(OPS)}")
        if self.iters < 1:
            raise ValueError(f"-n/--iters={self.iters}; expected at least 1 timed iteration")
        if self.warmup < 0:
            raise ValueError(f"-w/--warmup_iters={self.warmup}; expected 0 or more")
        if not self.sizes:
            raise ValueError("no sizes to run")
        if self.op in ROOTED_OPS and not 0 <= self.root < nranks:
            raise ValueError(f"-r/--root={self.root}; expected a rank in [0, {nranks})")
        if self.average and self.op in REDUCING_OPS:
            if self.algorithm == "native":
                raise ValueError("-o avg with --algo native: HCCL's reduce ops are sum, prod, max and min; the "
                                 "average is the Comm API's op='avg' (the sum divided by the number of ranks, as the "
                                 "torch backend's ReduceOp.AVG); expected --algo auto or another of the package's "
                                 "algorithms")
            if self.dtype not in AVERAGING_DTYPES:
                raise ValueError(f"-o avg -d {self.dtype.name.lower()}: the average of {self.dtype.name.lower()} "
                                 "values is not one (the sum divided by the number of ranks has a fraction); expected "
                                 f"-d {', '.join(d.name.lower() for d in AVERAGING_DTYPES)}")
        if self.op == "sendrecv" and nranks < 2:
            raise ValueError("--op sendrecv needs at least 2 ranks (each rank sends to its right neighbour)")
        if local_ranks is None:
            from ..bootstrap import detect   # the ranks on this host, as the launcher says (else all of them)

            launch = detect()
            local_ranks = min(launch.local_size, nranks) if launch is not None else nranks
        check_memory(self.op, max(self.sizes), self.dtype.itemsize, nranks, local_ranks,
                     int(settings.value("HCCL_BUFFSIZE")), typed=self.maxbytes_text)

    @property
    def redop_name(self) -> str:
        """The reduce op as printed ("none" for operations that do not reduce)."""
        if self.op not in REDUCING_OPS:
            return "none"
        return "avg" if self.average else self.redop.name.lower()

    @property
    def root_shown(self) -> int:
        """The root as printed (-1 for operations without one, as nccl-tests)."""
        return self.root if self.op in ROOTED_OPS else -1

    def to_dict(self) -> Dict[str, Any]:
        """JSON form (names instead of enums)."""
        d = asdict(self)
        d.update(sizes=list(self.sizes), dtype=self.dtype.name.lower(), redop=self.redop_name, root=self.root_shown)
        return d


@dataclass
class SizeResult:
    """One row: S in bytes and elements, the slowest rank's time, bandwidths, the worst rank's #wrong.

    ``wrong`` is None when nothing was checked (``check`` is then "off" or "disabled", with
    ``check_reason``); ``time_us_ranks`` / ``wrong_ranks`` hold every rank's numbers (-1: that rank
    checks nothing, e.g. a non-root of reduce).
    """

    size: int
    count: int
    time_us: float
    algbw: float
    busbw: Optional[float]
    wrong: Optional[int]
    check: str
    check_reason: Optional[str] = None
    time_us_ranks: List[float] = field(default_factory=list)
    wrong_ranks: List[int] = field(default_factory=list)
    model_us: Optional[float] = None
    model_algorithm: Optional[str] = None
    algorithm: str = ""

    def to_dict(self) -> Dict[str, Any]:
        """JSON form."""
        return asdict(self)


def corrupt_hook(rank: int, environ: Optional[Dict[str, str]] = None) -> int:
    """Elements this rank must perturb (``HCOMM_BENCH_CORRUPT=RANK[:COUNT]``); 0 when not this rank."""
    raw = settings.value(ENV_CORRUPT, environ) or ""
    if not raw:
        return 0
    head, _, tail = raw.partition(":")
    try:
        target = int(head)
        count = int(tail) if tail else 1
    except ValueError:
        raise ValueError(f"{ENV_CORRUPT}={raw!r}; expected RANK or RANK:COUNT (integers)") from None
    if target < 0 or count < 1:
        raise ValueError(f"{ENV_CORRUPT}={raw!r}; expected RANK >= 0 and COUNT >= 1")
    return count if target == rank else 0


def run_size(ops: Ops, cfg: BenchConfig, nbytes: int, index: int = 0, total: int = 1,
             progress: Optional[Progress] = None, corrupt: int = 0) -> SizeResult:
    """Measure one size on every rank (collective); every rank gets the same result."""
    n, rank, dt, op = ops.size, ops.rank, cfg.dtype, cfg.redop
    lay = layout(cfg.op, nbytes, dt.itemsize, n)
    pat = pattern(lay, dt, op, rank, n, cfg.root)
    reason = disabled_reason(cfg.op, dt, op, n) if cfg.check else "-c 0"
    host = fill(pat.input, lay.send_count, dt)
    if corrupt and host.size:
        perturb(host, corrupt, dt, op)
    average = cfg.average and cfg.op in REDUCING_OPS
    if average and pat.expected is not None:        # the sum's pattern, divided by the number of ranks
        pat = Pattern(pat.input, tuple((a, b, v / n) for a, b, v in pat.expected))
    prep = ops.prepare(lay, dt, op, cfg.root, host, average)
    try:
        for _ in range(cfg.warmup):
            prep.launch()
        prep.wait()
        ops.barrier()
        step = max(1, cfg.iters // 50)
        start = time.perf_counter_ns()
        if progress is not None:
            for i in range(cfg.iters):
                prep.launch()
                if i % step == 0:
                    progress(index, total, i, cfg.iters)
        else:
            for _ in range(cfg.iters):
                prep.launch()
        prep.wait()
        elapsed = time.perf_counter_ns() - start
        wrong = -1
        if reason is None and pat.expected is not None:
            out = prep.output()
            wrong = count_wrong(out if out is not None else np.empty(0), pat.expected, dt)
    finally:
        prep.close()
    if progress is not None:
        progress(index, total, cfg.iters, cfg.iters)
    table = ops.allgather_int64([elapsed, wrong])
    times = [float(t) / cfg.iters / 1e3 for t in table[:, 0]]
    wrongs = [int(w) for w in table[:, 1]]
    time_us = max(times)
    checked = [w for w in wrongs if w >= 0]
    status = "on" if reason is None else ("off" if not cfg.check else "disabled")
    model, model_algo = modelled_time_us(cfg.op, n, lay.nbytes, cfg.algorithm, dt, cfg.root)
    return SizeResult(
        size=lay.nbytes, count=lay.count, time_us=time_us, algbw=algbw_gbps(lay.nbytes, time_us),
        busbw=busbw_gbps(cfg.op, n, lay.nbytes, time_us), wrong=max(checked) if reason is None and checked else None,
        check=status, check_reason=reason, time_us_ranks=times, wrong_ranks=wrongs,
        model_us=model, model_algorithm=model_algo, algorithm=cfg.algorithm)


def run_sweep(ops: Ops, cfg: BenchConfig, progress: Optional[Progress] = None,
              on_result: Optional[Callable[[SizeResult], None]] = None) -> List[SizeResult]:
    """Every size of ``cfg`` in order (barrier: one row of size 0); collective over the job's ranks."""
    cfg.validate(ops.size)
    corrupt = corrupt_hook(ops.rank)
    sizes: Sequence[int] = (0,) if cfg.op == "barrier" else cfg.sizes
    results = []
    for i, nbytes in enumerate(sizes):
        res = run_size(ops, cfg, nbytes, i, len(sizes), progress, corrupt)
        results.append(res)
        if on_result is not None:
            on_result(res)
    return results
