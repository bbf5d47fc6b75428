"""Test helper: count how often an algorithm's issue() runs (a replayed or cached call does not run it)."""
from __future__ import annotations

from typing import Any, List


def count_issues(name: str) -> List[int]:
    """Wrap the named algorithm's issue function; returns a one-element list counting its calls."""
    from hcomm_cffi.algorithms import resolve
    alg = resolve(name)
    calls = [0]
    fn = alg.fn

    def counted(ctx: Any, call: Any) -> None:
        calls[0] += 1
        fn(ctx, call)
    alg.fn = counted
    return calls
