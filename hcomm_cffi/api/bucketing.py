"""Gradient fusion: pack many small tensors into buckets, allreduce each bucket, unpack.

Buckets are formed in the given order, one dtype per bucket, closing a bucket before it would
exceed ``bucket_bytes`` (a tensor larger than that gets a bucket of its own).  The layout depends
only on the list of (dtype, size), so every rank packs the same bytes at the same offsets and the
reduced results are identical across ranks.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from .buffers import as_buffer, is_torch
from ..enums import DataType

__all__ = ["Bucket", "plan_buckets", "allreduce_coalesced", "DEFAULT_BUCKET_BYTES"]

DEFAULT_BUCKET_BYTES = 32 << 20


@dataclass(frozen=True)
class Bucket:
    """Indices of the tensors fused into one allreduce, their dtype and element offsets."""

    dtype: DataType
    indices: Tuple[int, ...]
    offsets: Tuple[int, ...]
    count: int

    @property
    def nbytes(self) -> int:
        """Size of the fused buffer in bytes."""
        return self.count * self.dtype.itemsize


def plan_buckets(specs: Sequence[Tuple[DataType, int]], bucket_bytes: int = DEFAULT_BUCKET_BYTES) -> List[Bucket]:
    """Deterministic buckets for tensors described by (dtype, element count), in order."""
    if isinstance(bucket_bytes, bool) or not isinstance(bucket_bytes, int) or bucket_bytes < 1:
        raise ValueError(f"bucket_bytes={bucket_bytes!r}; expected a positive number of bytes")
    out: List[Bucket] = []
    cur_dt: Optional[DataType] = None
    idx: List[int] = []
    offs: List[int] = []
    count = 0

    def close() -> None:
        if idx:
            assert cur_dt is not None
            out.append(Bucket(cur_dt, tuple(idx), tuple(offs), count))

    for i, (dt, n) in enumerate(specs):
        nbytes = n * dt.itemsize
        if idx and (dt != cur_dt or (count * dt.itemsize + nbytes) > bucket_bytes):
            close()
            idx, offs, count = [], [], 0
        if not idx:
            cur_dt = dt
        idx.append(i)
        offs.append(count)
        count += n
    close()
    return out


def _flat(t: Any) -> Any:
    return t.reshape(-1) if is_torch(t) else np.asarray(t).reshape(-1)


def allreduce_coalesced(comm: Any, tensors: Sequence[Any], op: Any = "sum",
                        bucket_bytes: int = DEFAULT_BUCKET_BYTES, algorithm: str = "auto") -> List[Bucket]:
    """Allreduce every tensor in place through fused buckets; returns the buckets used."""
    if not isinstance(tensors, (list, tuple)):
        raise TypeError(f"tensors is a {type(tensors).__name__}; expected a list or tuple of arrays/tensors")
    bufs = [as_buffer(t, f"tensors[{i}]", writable=True) for i, t in enumerate(tensors)]
    buckets = plan_buckets([(b.dtype, b.count) for b in bufs], bucket_bytes)
    for bk in buckets:
        first = tensors[bk.indices[0]]
        if is_torch(first):
            import torch
            fused: Any = torch.empty(bk.count, dtype=first.dtype, device=first.device)
            for i, off in zip(bk.indices, bk.offsets):
                fused[off:off + bufs[i].count].copy_(_flat(tensors[i]))
        else:
            fused = np.empty(bk.count, dtype=np.asarray(first).dtype)
            for i, off in zip(bk.indices, bk.offsets):
                fused[off:off + bufs[i].count] = _flat(tensors[i])
        comm.allreduce(fused, op, algorithm=algorithm)
        for i, off in zip(bk.indices, bk.offsets):
            n = bufs[i].count
            if is_torch(tensors[i]):
                _flat(tensors[i]).copy_(fused[off:off + n])
            else:
                _flat(tensors[i])[...] = fused[off:off + n]
    return buckets
