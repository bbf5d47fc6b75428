"""Gradient fusion: deterministic bucket layout, and fused allreduce equal to per-tensor results on every rank."""
from __future__ import annotations

from typing import Any, List

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hcomm_cffi.api.bucketing import plan_buckets
from hcomm_cffi.enums import DataType
from multiproc import run_ranks

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None


def test_buckets_respect_threshold_and_dtype() -> None:
    specs = [(DataType.FP32, 10), (DataType.FP32, 20), (DataType.FP32, 30), (DataType.FP16, 5), (DataType.FP32, 100)]
    b = plan_buckets(specs, bucket_bytes=160)
    assert [bk.indices for bk in b] == [(0, 1), (2,), (3,), (4,)]
    assert b[0].offsets == (0, 10) and b[0].count == 30 and b[0].nbytes == 120
    assert b[3].nbytes == 400  # a tensor above the threshold gets a bucket of its own


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([DataType.FP32, DataType.FP16, DataType.INT8]), st.integers(0, 300)),
                max_size=30), st.integers(1, 2000))
def test_bucket_plan_properties(specs: List[Any], limit: int) -> None:
    """Every tensor once, in order, one dtype per bucket, under the limit unless alone, and deterministic."""
    b = plan_buckets(specs, limit)
    assert [i for bk in b for i in bk.indices] == list(range(len(specs)))
    for bk in b:
        assert all(specs[i][0] == bk.dtype for i in bk.indices)
        assert len(bk.indices) == 1 or bk.nbytes <= limit
        assert list(bk.offsets) == list(np.cumsum([0] + [specs[i][1] for i in bk.indices])[:-1])
    assert plan_buckets(specs, limit) == b


def fused_body(rank: int, n: int, root_info: bytes, use_torch: bool) -> List[bytes]:
    """Many small tensors through 1 KiB buckets == tensor-by-tensor allreduce; bytes returned for comparison."""
    import hcomm_cffi as hcomm
    from hcomm_cffi.api.bucketing import allreduce_coalesced
    w = hcomm.init(rank=rank, world_size=n, root_info=root_info)
    try:
        rng = np.random.default_rng(rank)
        shapes = [(3, 5), (100,), (7,), (1,), (300,), (2, 2, 2)]
        arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes] + [np.arange(9, dtype=np.int32) * rank]
        ref = [w.allreduce(a.copy()) for a in arrays]
        grads = [torch.from_numpy(a.copy()) for a in arrays] if use_torch else [a.copy() for a in arrays]
        buckets = allreduce_coalesced(w, grads, bucket_bytes=1024)
        assert len(buckets) >= 3
        got = [g.numpy() if use_torch else g for g in grads]
        for g, r, a in zip(got, ref, arrays):
            assert g.shape == a.shape
            np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-5)
        return [g.tobytes() for g in got]
    finally:
        hcomm.finalize()


def test_fused_allreduce_numpy_same_bytes_everywhere() -> None:
    res = run_ranks(3, fused_body, False, timeout=60)
    assert res[0] == res[1] == res[2]


@pytest.mark.skipif(torch is None, reason="torch is not installed")
def test_fused_allreduce_torch() -> None:
    res = run_ranks(2, fused_body, True, timeout=60)
    assert res[0] == res[1]
