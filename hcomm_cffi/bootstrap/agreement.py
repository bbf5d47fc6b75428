"""Settings every rank of a job must share, compared while the ranks rendezvous.

Each rank's claim in the root-info rendezvous carries :func:`local_settings`; once all ranks are there
every rank runs :func:`disagreement` over the same records, so all of them fail with the same text
naming the variable, the ranks and their values, instead of a wait of HCCL_EXEC_TIMEOUT or a misleading
"collective mismatch" later.  (The emulator also compares HCCL_BUFFSIZE and HCOMM_SIM_CHECK when a
communicator connects: that covers communicators made without this rendezvous.)
"""
from __future__ import annotations

from typing import Dict, List, Mapping, Optional

from .. import settings
from .errors import BootstrapError, format_ranks

__all__ = ["AGREED", "SettingsDisagree", "local_settings", "disagreement"]

#: Variables whose values must be equal on every rank: they shape the data each rank expects.
AGREED = ("HCCL_BUFFSIZE", "HCOMM_STEP_BYTES", "HCOMM_TOPOLOGY", "HCOMM_CHECK_COLLECTIVES", "HCOMM_SIM_CHECK")


class SettingsDisagree(BootstrapError):
    """Ranks of one job run with different values of a variable that must agree."""


def local_settings(environ: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """This process's value of each :data:`AGREED` variable, as text (``"unset"`` when it has none)."""
    out = {}
    for name in AGREED:
        out[name] = _text(settings.value(name, environ))
    return out


def _text(value: object) -> str:
    """A parsed value as people write it: ``1x2`` for a shape, ``1``/``0`` for a flag, ``unset`` for none."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, tuple):
        return "x".join(str(v) for v in value)
    return str(value)


def disagreement(records: Mapping[int, Mapping[str, str]]) -> Optional[str]:
    """None when every rank's record agrees (ranks without one are skipped), else the text naming each difference."""
    problems: List[str] = []
    for name in AGREED:
        groups: Dict[str, List[int]] = {}
        for rank in sorted(records):
            if name in records[rank]:
                groups.setdefault(str(records[rank][name]), []).append(rank)
        if len(groups) > 1:
            parts = [f"{'rank' if len(r) == 1 else 'ranks'} {format_ranks(r)} {'has' if len(r) == 1 else 'have'} "
                     f"{name}={value}" for value, r in sorted(groups.items(), key=lambda kv: kv[1][0])]
            problems.append(f"{name} differs between ranks: " + ", ".join(parts))
    if not problems:
        return None
    return ("; ".join(problems) + ". Every rank of a job must run with the same value (export it to all ranks, "
            "or to none): these settings shape what each rank sends and expects")
