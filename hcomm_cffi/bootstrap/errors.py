"""Errors of the bootstrap (rendezvous failures and timeouts) and the rank-list formatting their texts use."""
from __future__ import annotations

import itertools
from typing import List, Sequence

__all__ = ["BootstrapError", "JobClash", "RendezvousTimeout", "StoreUnavailable", "format_ranks"]


class BootstrapError(RuntimeError):
    """The rendezvous could not produce a root info (bad setup, rank 0 failed, store unreachable)."""


class RendezvousTimeout(BootstrapError, TimeoutError):
    """Some ranks did not arrive in time; ``missing`` lists them, ``arrived`` the others."""

    def __init__(self, message: str, missing: Sequence[int], arrived: Sequence[int]) -> None:
        super().__init__(message)
        self.missing = list(missing)
        self.arrived = list(arrived)


class JobClash(BootstrapError):
    """Two jobs reached the same rendezvous (a slot held by another job's live process): both stop."""


class StoreUnavailable(BootstrapError):
    """The store cannot be reached right now (e.g. rank 0's TCP server is not up yet).

    ``refused``: nothing listens at its address any more (a connection was refused), as opposed to a timeout.
    """

    def __init__(self, message: str, refused: bool = False) -> None:
        super().__init__(message)
        self.refused = refused


def format_ranks(ranks: Sequence[int]) -> str:
    """``[0, 1, 2, 5, 7, 8]`` -> ``'0-2, 5, 7-8'`` (short, even for thousands of ranks)."""
    parts: List[str] = []
    for _, group in itertools.groupby(enumerate(sorted(ranks)), key=lambda t: t[1] - t[0]):
        run = [r for _, r in group]
        parts.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
    return ", ".join(parts)
