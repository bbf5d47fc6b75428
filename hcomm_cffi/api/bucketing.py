"""Gradient fusion's layout: which small tensors share a bucket, at which offsets.

Buckets are formed in the given order, one dtype per bucket, closing a bucket before it would
exceed ``bucket_bytes`` (a tensor larger than that gets a bucket of its own).  The layout depends
only on the list of (dtype, size), so every rank packs the same bytes at the same offsets and the
reduced results are identical across ranks.  (The torch backend fuses a list into one allreduce: its
``ProcessGroupHcomm.allreduce_coalesced``, hcomm_cffi/torch/process_group.py.)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from ..enums import DataType

__all__ = ["Bucket", "plan_buckets", "DEFAULT_BUCKET_BYTES"]

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
