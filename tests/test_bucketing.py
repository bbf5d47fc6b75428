"""Gradient fusion: the bucket layout is deterministic, in order, one dtype per bucket, under the limit."""
from __future__ import annotations

from typing import Any, List

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from hcomm_cffi.api.bucketing import plan_buckets
from hcomm_cffi.enums import DataType


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
