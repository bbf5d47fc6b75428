"""Collective algorithms over HCOMM channels: ring, mesh, tree, p2p, hierarchical, native (see base.py)."""
from __future__ import annotations

from .base import ACK, DATA, NOTIFIES_PER_CHANNEL, P2P_CREDIT, P2P_DATA, Ctx, OpArgs, UnsupportedError

__all__ = ["ACK", "DATA", "P2P_DATA", "P2P_CREDIT", "NOTIFIES_PER_CHANNEL", "Ctx", "OpArgs", "UnsupportedError"]
