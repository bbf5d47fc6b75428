"""Message sizes: ``-b/-e/-f/-i`` as hccl_test parses them, and the buffers each operation needs.

* ``parse_size("64K") == 65536``: a non-negative integer with an optional K, M or G suffix
  (2^10, 2^20, 2^30; case-insensitive; a trailing ``B``/``iB`` is accepted: ``4MiB``).
* ``size_sweep(minbytes, maxbytes, stepfactor, stepbytes)``: ``-f`` (multiplicative, must be > 1,
  wins over ``-i``) or ``-i`` (additive; default ``(max - min) / 10``, 1 when ``max == min``).
  hccl_test's ``-i 0`` ("repeat -b forever") is refused: a benchmark that never ends is not useful.
* :func:`layout`: element counts of the send and receive buffers of one operation, with S (the
  algbw numerator, docs/design/plan-model.md) in bytes.  For allgather, reduce_scatter and alltoall
  the size is the whole (gathered / to-be-scattered / all-to-all) buffer and each rank's block holds
  ``ceil(count / n)`` elements, after rounding the size up to a multiple of ``n x 512`` bytes above
  1 MiB, as hccl_test does; the reported size is the one actually moved (``block x n x element``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Union

from ..plan import parse_size as plan_parse_size

__all__ = ["SizeError", "parse_size", "format_size", "size_sweep", "Layout", "layout", "MAX_SIZES",
           "GATHER_TYPE_OPS", "bytes_per_rank", "available_memory", "check_memory"]

MAX_SIZES = 10_000
#: Operations whose size is a total over n per-rank blocks.
GATHER_TYPE_OPS = frozenset({"allgather", "reduce_scatter", "alltoall"})
_ROUND_ABOVE = 1 << 20
_ROUND_UNIT = 512

class SizeError(ValueError):
    """A size or step that cannot be used; the message names the flag, the value and what is expected."""

def parse_size(text: Union[str, int], flag: str = "size") -> int:
    """Bytes from ``'8'``, ``'64K'``, ``'4M'``, ``'1G'`` (K/M/G = 2^10/2^20/2^30) or an int (the planner's parser)."""
    try:
        return plan_parse_size(text, flag)
    except ValueError as exc:
        raise SizeError(str(exc)) from None

def format_size(nbytes: int) -> str:
    """``65536 -> '64K'``, ``12 -> '12'``: the shortest exact K/M/G spelling (for labels)."""
    for suffix, shift in (("G", 30), ("M", 20), ("K", 10)):
        if nbytes and nbytes % (1 << shift) == 0:
            return f"{nbytes >> shift}{suffix}"
    return str(nbytes)

def size_sweep(minbytes: int, maxbytes: int, stepfactor: Optional[float] = None,
               stepbytes: Optional[int] = None) -> List[int]:
    """The sizes of one sweep, from ``minbytes`` up to at most ``maxbytes`` (both >= 1)."""
    if minbytes < 1:
        raise SizeError(f"-b/--minbytes={minbytes}; expected at least 1 byte")
    if maxbytes < minbytes:
        raise SizeError(f"-e/--maxbytes={maxbytes} is below -b/--minbytes={minbytes}")
    sizes: List[int] = []
    if stepfactor is not None:
        if not stepfactor > 1.0:
            raise SizeError(f"-f/--stepfactor={stepfactor:g}; expected a factor > 1.0")
        size = minbytes
        while size <= maxbytes:
            sizes.append(size)
            if len(sizes) > MAX_SIZES:
                break
            size = max(size + 1, int(size * stepfactor))
    else:
        if stepbytes is None:
            stepbytes = (maxbytes - minbytes) // 10 or 1
        if stepbytes < 1:
            raise SizeError(f"-i/--stepbytes={stepbytes}; expected a step >= 1 byte "
                            "(hccl_test's 0, 'repeat -b forever', is not supported)")
        count = (maxbytes - minbytes) // stepbytes + 1
        if count <= MAX_SIZES:
            sizes = list(range(minbytes, maxbytes + 1, stepbytes))
        else:
            sizes = [0] * (MAX_SIZES + 1)
    if len(sizes) > MAX_SIZES:
        raise SizeError(f"-b {minbytes} -e {maxbytes} with this step gives more than {MAX_SIZES} sizes; "
                        "use a larger -i or -f")
    return sizes

@dataclass(frozen=True)
class Layout:
    """Buffers of one operation on one rank.

    ``count`` is S in elements (S = ``nbytes``, the algbw numerator); ``send_count`` and
    ``recv_count`` are the element counts of the send and receive buffers (0: no such buffer);
    ``block`` is the per-rank block of gather-type operations (else ``count``).
    """

    op: str
    nbytes: int
    count: int
    send_count: int
    recv_count: int
    block: int
    itemsize: int

def layout(op: str, nbytes: int, itemsize: int, nranks: int) -> Layout:
    """Buffers for ``op`` (a name from :data:`hcomm_cffi.bench.factors.OPS`) at ``nbytes`` on ``nranks`` ranks."""
    if itemsize < 1 or nranks < 1:
        raise ValueError(f"itemsize={itemsize} nranks={nranks}; expected both >= 1")
    if op == "barrier":
        return Layout(op, 0, 0, 0, 0, 0, itemsize)
    count = max(1, -(-nbytes // itemsize))
    if op in GATHER_TYPE_OPS:
        padded = nbytes
        if nbytes > _ROUND_ABOVE:
            unit = nranks * _ROUND_UNIT
            padded = -(-nbytes // unit) * unit
        block = max(1, -(-(-(-padded // itemsize)) // nranks))
        total = block * nranks
        if op == "allgather":
            return Layout(op, total * itemsize, total, block, total, block, itemsize)
        if op == "reduce_scatter":
            return Layout(op, total * itemsize, total, total, block, block, itemsize)
        return Layout(op, total * itemsize, total, total, total, block, itemsize)  # alltoall
    if op == "broadcast":
        return Layout(op, count * itemsize, count, count, 0, count, itemsize)  # in place: one buffer
    return Layout(op, count * itemsize, count, count, count, count, itemsize)


def bytes_per_rank(op: str, nbytes: int, itemsize: int, nranks: int, buffsize_mb: int) -> int:
    """Memory one rank needs for ``op`` at ``nbytes``: its send and receive buffers, the host copies the bench
    fills and checks (as many again), and the emulator's HCCL buffer and scratch (2 x 2 x HCCL_BUFFSIZE MiB)."""
    lay = layout(op, nbytes, itemsize, nranks)
    return 2 * (lay.send_count + lay.recv_count) * itemsize + 4 * buffsize_mb * (1 << 20)


def available_memory() -> Optional[int]:
    """Bytes of memory this host can still give (MemAvailable of /proc/meminfo; else free pages), or None."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        import os

        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (OSError, ValueError, AttributeError):
        return None


def check_memory(op: str, maxbytes: int, itemsize: int, nranks: int, local_ranks: int, buffsize_mb: int,
                 available: Optional[int] = None, typed: str = "") -> None:
    """SizeError naming -e/--maxbytes when ``local_ranks`` ranks of this host cannot hold the largest size.

    ``typed``: -e as the user spelled it (quoted as given; the sweep's largest size may be below it).

    Checked before anything is allocated: a size the machine cannot hold is refused with the numbers,
    instead of allocating until the kernel's OOM killer ends the job.
    """
    avail = available_memory() if available is None else available
    if avail is None:
        return
    per_rank = bytes_per_rank(op, maxbytes, itemsize, nranks, buffsize_mb)
    need = per_rank * local_ranks
    if need > avail:
        raise SizeError(f"-e/--maxbytes={typed or format_size(maxbytes)} (largest size {maxbytes} bytes): {op} on "
                        f"{nranks} ranks needs "
                        f"{per_rank} bytes per rank (send and receive buffers, their checked host copies, and "
                        f"4 x HCCL_BUFFSIZE={buffsize_mb} MiB of HCCL buffer and scratch), {need} bytes for the "
                        f"{local_ranks} rank(s) on this host, but only {avail} bytes of memory are available; "
                        "expected a smaller -e (or fewer ranks per host)")
