"""The root info over an mpi4py communicator (imported only when the MPI channel is chosen)."""
from __future__ import annotations

import struct
import time
from typing import Any, Callable, Optional

from ..enums import HCCL_ROOT_INFO_BYTES
from .errors import BootstrapError
from .rendezvous import timeout_error

__all__ = ["mpi_exchange"]

_MPI_TAG = 0x4843  # "HC"
_OK, _FAILED, _TIMEOUT = 1, 2, 3


def mpi_exchange(comm: Any, make_root_info: Callable[[], bytes], timeout: float, generation: int,
                 timeout_src: str = "HCCL_CONNECT_TIMEOUT") -> bytes:
    """The root info over an mpi4py communicator (rank 0 of ``comm`` is the root).

    Ranks send an arrival message to rank 0; rank 0 waits for all of them (up to ``timeout``), then sends
    every rank that arrived a status + root info (or the missing-rank list).  Point-to-point rather than a
    broadcast, so that a rank that never arrives cannot block the others inside MPI: it is reported by
    name on every rank instead.
    """
    from mpi4py import MPI  # imported only when this channel was chosen

    rank, size = comm.Get_rank(), comm.Get_size()
    arrive_tag = _MPI_TAG + 2 * (generation % 1000)
    reply_tag = arrive_tag + 1
    deadline = time.monotonic() + timeout
    msg = bytearray(8 + HCCL_ROOT_INFO_BYTES + size)  # status u32, length u32, blob, missing-rank flags
    what = f"MPI rendezvous over COMM_WORLD ({size} ranks)"
    error: Optional[str] = None
    if rank == 0:
        recvs = {r: comm.Irecv([bytearray(1), MPI.BYTE], source=r, tag=arrive_tag) for r in range(1, size)}
        missing = set(recvs)
        while missing and time.monotonic() < deadline:
            missing = {r for r in missing if not recvs[r].Test()}
            if missing:
                time.sleep(0.005)
        blob = b""
        if missing:
            status = _TIMEOUT
            for r in missing:
                msg[8 + HCCL_ROOT_INFO_BYTES + r] = 1
                recvs[r].Cancel()
        else:
            try:
                blob = bytes(make_root_info())
                if len(blob) != HCCL_ROOT_INFO_BYTES:
                    raise BootstrapError(f"the root info is {len(blob)} bytes; expected {HCCL_ROOT_INFO_BYTES}")
                status = _OK
            except Exception as exc:
                status, error = _FAILED, f"{type(exc).__name__}: {exc}"
                blob = error.encode()[:HCCL_ROOT_INFO_BYTES]
        struct.pack_into("<II", msg, 0, status, len(blob))
        msg[8:8 + len(blob)] = blob
        sends = [comm.Isend([msg, MPI.BYTE], dest=r, tag=reply_tag) for r in range(1, size) if r not in missing]
        MPI.Request.Waitall(sends)
    else:
        comm.Isend([bytearray(1), MPI.BYTE], dest=0, tag=arrive_tag).Wait()
        req = comm.Irecv([msg, MPI.BYTE], source=0, tag=reply_tag)
        while not req.Test():
            if time.monotonic() >= deadline + 5.0:  # rank 0 answers at its own deadline at the latest
                req.Cancel()
                raise timeout_error(what, [0], size, timeout, timeout_src, " (no answer from rank 0)")
            time.sleep(0.005)
    status, length = struct.unpack_from("<II", msg, 0)
    payload = bytes(msg[8:8 + length])
    if status == _TIMEOUT:
        flags = msg[8 + HCCL_ROOT_INFO_BYTES:]
        raise timeout_error(what, [r for r in range(size) if flags[r]], size, timeout, timeout_src)
    if status == _FAILED:
        text = error if rank == 0 and error is not None else payload.decode(errors="replace")
        raise BootstrapError(f"rank 0 could not create the root info: {text}")
    if status != _OK or length != HCCL_ROOT_INFO_BYTES:
        raise BootstrapError(f"{what}: malformed message from rank 0 (status {status}, {length} bytes)")
    return payload
