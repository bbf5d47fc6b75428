"""Schedule capture and replay: a recorded task list launched again with only its buffer addresses patched.

The first call of an algorithm for a call signature (collective, count, dtype, op, root, and
whether it runs in place) on a given set of resources records its tasks in a :class:`TaskBatch`.
:func:`capture` turns that batch into a :class:`Schedule`: every pointer argument that falls in
one of the call's buffers (send, receive, scratch) is remembered as (buffer, offset); everything
else — thread and channel handles, HCCL buffer addresses, counts — is fixed by the signature
and the resources.  Later calls :meth:`Schedule.bind` the new buffers: with the same buffers the
recorded calls are launched as they are, otherwise only the remembered arguments are rebuilt.
The algorithm's Python code does not run again.  A schedule must therefore depend only on the
signature, which is the rule for every algorithm (``Algorithm.replayable = False`` opts out).
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

from .._ffi import ffi
from .tasks import TaskBatch

__all__ = ["Schedule", "capture", "address"]

CData = Any
Base = Tuple[Optional[CData], int]   # (pointer or None, bytes)


def address(ptr: Any) -> int:
    """The integer address of a cdata pointer (0 for None / NULL)."""
    if ptr is None:
        return 0
    return int(ffi.cast("uintptr_t", ptr))


class Schedule:
    """A captured task list: the calls, which of their arguments are buffer addresses, and the buffers then."""

    __slots__ = ("calls", "unbatched", "patches", "ptrs", "tasks")

    def __init__(self, calls: List[Tuple[Any, tuple]], unbatched: Sequence[int],
                 patches: List[Tuple[int, Tuple[Tuple[int, int, int], ...]]], ptrs: Tuple[Any, ...]) -> None:
        self.calls = calls
        self.unbatched = frozenset(unbatched)
        self.patches = patches      # (call index, ((arg index, base index, offset), ...)), calls that need it
        self.ptrs = ptrs            # the bases' pointers at capture (cdata compare by address)
        self.tasks = len(calls)

    def _same_buffers(self, bases: Sequence[Base]) -> bool:
        for (p, _), q in zip(bases, self.ptrs):
            if p is None or q is None:
                if p is not q:
                    return False
            elif p != q:
                return False
        return True

    def bind(self, binding: Any, bases: Sequence[Base]) -> TaskBatch:
        """A batch of the recorded calls for ``bases`` (the same buffers: the recorded calls themselves)."""
        batch = TaskBatch(binding)
        if self.unbatched:
            batch.unbatched = set(self.unbatched)
        if not self.patches or self._same_buffers(bases):
            batch.calls = self.calls           # launch only reads it
            return batch
        calls = list(self.calls)
        ptrs = [p for p, _ in bases]
        for i, fixes in self.patches:
            fn, args = calls[i]
            new = list(args)
            for arg, base, off in fixes:
                new[arg] = ffi.cast("char *", ptrs[base]) + off
            calls[i] = (fn, tuple(new))
        batch.calls = calls
        return batch


def capture(batch: TaskBatch, bases: Sequence[Base]) -> Schedule:
    """The schedule of a just-issued ``batch`` whose buffers were ``bases`` (send, receive, scratch...)."""
    ranges = [(address(p), n) for p, n in bases]
    patches = []
    for i, (_, args) in enumerate(batch.calls):
        fixes = []
        for j, a in enumerate(args):
            if not isinstance(a, ffi.CData) or ffi.typeof(a).kind != "pointer":
                continue
            at = address(a)
            for b, (lo, n) in enumerate(ranges):
                if lo and lo <= at < lo + max(n, 1):
                    fixes.append((j, b, at - lo))
                    break
        if fixes:
            patches.append((i, tuple(fixes)))
    return Schedule(list(batch.calls), sorted(batch.unbatched), patches, tuple(p for p, _ in bases))
