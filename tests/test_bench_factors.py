"""hcomm bench: operation names, algbw and the nccl-tests busbw factors."""
from __future__ import annotations

import pytest

from hcomm_cffi.bench.factors import OPS, algbw_gbps, busbw_factor, busbw_gbps, parse_op


@pytest.mark.parametrize("n", [1, 2, 3, 4, 8, 16, 1000])
def test_factors(n) -> None:
    assert busbw_factor("allreduce", n) == pytest.approx(2 * (n - 1) / n)
    for op in ("allgather", "reduce_scatter", "alltoall"):
        assert busbw_factor(op, n) == pytest.approx((n - 1) / n)
    for op in ("broadcast", "reduce", "sendrecv"):
        assert busbw_factor(op, n) == 1.0
    assert busbw_factor("barrier", n) is None


def test_known_values() -> None:
    assert busbw_factor("allreduce", 2) == 1.0
    assert busbw_factor("allreduce", 4) == 1.5
    assert busbw_factor("allreduce", 8) == 1.75
    assert busbw_factor("allgather", 4) == 0.75


def test_algbw_is_bytes_per_microsecond_over_1000() -> None:
    assert algbw_gbps(64 << 20, 1000.0) == pytest.approx(67.108864)   # GB = 1e9
    assert algbw_gbps(1_000_000, 1_000_000.0) == pytest.approx(0.001)
    assert algbw_gbps(8, 0.0) == 0.0
    assert busbw_gbps("allreduce", 4, 1_000_000, 100.0) == pytest.approx(10.0 * 1.5)
    assert busbw_gbps("barrier", 4, 0, 10.0) is None


def test_errors() -> None:
    with pytest.raises(ValueError, match="nranks"):
        busbw_factor("allreduce", 0)
    with pytest.raises(ValueError, match="not a benchmarked operation"):
        busbw_factor("gather", 4)


@pytest.mark.parametrize("text, name", [
    ("allreduce", "allreduce"), ("all_reduce", "allreduce"), ("AllReduce", "allreduce"),
    ("all-gather", "allgather"), ("reducescatter", "reduce_scatter"), ("reduce_scatter", "reduce_scatter"),
    ("ALLTOALL", "alltoall"), ("send_recv", "sendrecv"), ("barrier", "barrier"), ("Broadcast", "broadcast"),
])
def test_parse_op(text, name) -> None:
    assert parse_op(text) == name
    assert name in OPS


@pytest.mark.parametrize("text", ["scatter", "allreducev", "", "all reduce"])
def test_parse_op_rejects(text) -> None:
    with pytest.raises(ValueError, match="--op"):
        parse_op(text)
