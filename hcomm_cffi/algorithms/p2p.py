"""Point-to-point: messages through a per-sender inbox in the receiver's HCCL buffer, with credits.

Every (sender, receiver) pair owns an inbox in the receiver's HCCL buffer: second half, slot
``[sender rank]``.  A message is a 64-byte header (magic, sequence number, bytes, dtype) plus the
payload, cut into inbox-sized pieces.  Sender per piece: ``[wait P2P_CREDIT]`` (skipped while it
holds the credit), write header/payload from the user's buffer straight into the inbox,
``record P2P_DATA``.  Receiver per piece: ``wait P2P_DATA``, copy out, ``record P2P_CREDIT``.

The sender starts with one credit (the inbox is empty), so a message of one piece completes
without the receiver: that is the *eager* protocol, which keeps "everyone sends right, then
receives left" deadlock-free.  Above the eager limit the sender also waits for the credit of its
last piece (*rendezvous*: it returns only once the receiver has the data).  The outstanding credit
of an eager message is consumed by the next send, or by :func:`drain` when the lane closes, so no
notify stays set.  Notify indices 2/3 keep lanes independent of collectives on the same channel.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, List, Tuple

import numpy as np

from ..enums import DataType
from .interface import ALIGN, P2P_CREDIT, P2P_DATA, IssueContext, signature_area

__all__ = ["HEADER_BYTES", "MAGIC", "LaneState", "inbox", "inbox_at", "announces", "pieces", "make_header",
           "parse_header", "issue_send", "issue_recv", "drain"]

HEADER_BYTES = 64
MAGIC = 0x50325048  # "HP2P"
HEADER_DTYPE = np.dtype([("magic", "<u4"), ("seq", "<u4"), ("nbytes", "<u8"), ("dtype", "<u4"),
                         ("src", "<u4"), ("pad", "V40")])
CData = Any


@dataclass
class LaneState:
    """Host-side protocol state of one direction of one pair (identical bookkeeping on both ends)."""

    seq: int = 0
    credit: bool = True   # sender side: may write the inbox without waiting


@lru_cache(maxsize=256)    # a few (region, sender, ranks) per communicator; asked per message
def inbox_at(region: int, sender: int, n_ranks: int) -> Tuple[int, int]:
    """(byte offset, size) of ``sender``'s inbox when the collective region is ``region`` bytes (the half's end
    holds signature slots)."""
    size = ((region - signature_area(n_ranks)) // n_ranks) // ALIGN * ALIGN
    if size <= HEADER_BYTES:
        raise ValueError(f"HCCL buffer too small for point-to-point inboxes ({region} bytes per half, "
                         f"{n_ranks} ranks); raise HCCL_BUFFSIZE")
    return region + sender * size, size


def announces(raw: np.ndarray, sender: int, seq: int) -> bool:
    """True when an inbox's header is that of message ``seq`` from ``sender`` (it has been sent, at least begun)."""
    h = parse_header(raw)
    return h["magic"] == MAGIC and h["seq"] == seq & 0xFFFFFFFF and h["src"] == sender


def pieces(nbytes: int, cap: int) -> List[Tuple[int, int]]:
    """(offset, length) of the pieces of a message: at least one (zero-byte messages carry a header)."""
    if nbytes <= cap:
        return [(0, nbytes)]
    return [(o, min(cap, nbytes - o)) for o in range(0, nbytes, cap)]


def make_header(seq: int, nbytes: int, dtype: DataType, src: int) -> np.ndarray:
    """The 64-byte header of a message (kept alive by the caller until the send completes)."""
    h = np.zeros(1, HEADER_DTYPE)
    h["magic"], h["seq"], h["nbytes"], h["dtype"], h["src"] = MAGIC, seq & 0xFFFFFFFF, nbytes, int(dtype), src
    return h


def parse_header(raw: np.ndarray) -> dict:
    """Fields of a received header."""
    h = raw.view(HEADER_DTYPE)[0]
    return {"magic": int(h["magic"]), "seq": int(h["seq"]), "nbytes": int(h["nbytes"]), "dtype": int(h["dtype"]),
            "src": int(h["src"])}


def issue_send(ctx: IssueContext, th: int, dst: int, n_ranks: int, st: LaneState, header: CData, payload: CData,
               nbytes: int, eager: bool) -> None:
    """Tasks of one message to ``dst`` on lane thread ``th``; updates ``st``."""
    off, size = inbox_at(ctx.region_bytes, ctx.rank, n_ranks)   # our inbox in the receiver's HCCL buffer
    cap = size - HEADER_BYTES
    for j, (o, n) in enumerate(pieces(nbytes, cap)):
        if not st.credit:
            ctx.wait(th, dst, P2P_CREDIT)
        if j == 0:
            ctx.put(th, dst, off, header, HEADER_BYTES)
        ctx.put(th, dst, off + HEADER_BYTES, payload + o, n)
        ctx.record(th, dst, P2P_DATA)
        st.credit = False
    if not eager:
        ctx.wait(th, dst, P2P_CREDIT)
        st.credit = True
    st.seq += 1


def issue_recv(ctx: IssueContext, th: int, src: int, n_ranks: int, st: LaneState, header_out: CData, buf: CData,
               nbytes: int) -> None:
    """Tasks of one message from ``src`` on lane thread ``th`` (the header is copied to ``header_out``)."""
    off, size = inbox_at(ctx.region_bytes, src, n_ranks)
    cap = size - HEADER_BYTES
    for j, (o, n) in enumerate(pieces(nbytes, cap)):
        ctx.wait(th, src, P2P_DATA)
        if j == 0:
            ctx.copy(th, header_out, ctx.mine(off), HEADER_BYTES)
        ctx.copy(th, buf + o, ctx.mine(off + HEADER_BYTES), n)
        ctx.record(th, src, P2P_CREDIT)
    st.seq += 1


def drain(ctx: IssueContext, th: int, dst: int, st: LaneState) -> bool:
    """Consume the credit still owed by ``dst`` (True if a task was issued)."""
    if st.credit:
        return False
    ctx.wait(th, dst, P2P_CREDIT)
    st.credit = True
    return True

