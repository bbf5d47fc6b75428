"""hcomm bench sizes: -b/-e/-f/-i parsing (K/M/G = 2^10/2^20/2^30), sweeps, per-op buffer layouts."""
from __future__ import annotations

import pytest

from hcomm_cffi.bench.sizes import MAX_SIZES, SizeError, format_size, layout, parse_size, size_sweep


@pytest.mark.parametrize("text, expected", [
    ("8", 8), ("0", 0), ("64K", 65536), ("64k", 65536), ("4M", 4 << 20), ("256M", 256 << 20), ("1G", 1 << 30),
    (" 2G ", 2 << 30), ("4MiB", 4 << 20), ("16KB", 16 << 10), ("12b", 12), (65536, 65536),
])
def test_parse_size(text, expected) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "abc", "1.5M", "-8", "8T", "M", "64 K B x", True])
def test_parse_size_rejects(text) -> None:
    with pytest.raises(SizeError, match="-b"):
        parse_size(text, "-b")


def test_negative_int_rejected() -> None:
    with pytest.raises(SizeError, match="negative"):
        parse_size(-1)


def test_factor_sweep() -> None:
    assert size_sweep(8, 256 << 20, 2.0) == [8 << k for k in range(26)]
    assert size_sweep(8, 100, 2.0) == [8, 16, 32, 64]          # stops before exceeding -e
    assert size_sweep(1, 4, 1.5) == [1, 2, 3, 4]               # always progresses by at least 1 byte


def test_factor_wins_over_step() -> None:
    assert size_sweep(1024, 8192, 2.0, 1) == [1024, 2048, 4096, 8192]


def test_additive_sweep_defaults_to_tenth() -> None:
    assert size_sweep(10, 110) == list(range(10, 111, 10))
    assert size_sweep(64 << 20, 64 << 20) == [64 << 20]        # hccl_test's default: one size
    assert size_sweep(100, 130, None, 15) == [100, 115, 130]


@pytest.mark.parametrize("args, match", [
    ((0, 8), "at least 1 byte"),
    ((16, 8), "below -b"),
    ((8, 64, 1.0), "> 1.0"),
    ((8, 64, 0.5), "> 1.0"),
    ((8, 64, None, 0), "repeat -b forever"),
    ((1, 1 << 30, None, 1), "more than"),
])
def test_sweep_errors(args, match) -> None:
    with pytest.raises(SizeError, match=match):
        size_sweep(*args)


def test_sweep_cap_is_exact() -> None:
    assert len(size_sweep(1, MAX_SIZES, None, 1)) == MAX_SIZES
    with pytest.raises(SizeError, match="more than"):
        size_sweep(1, MAX_SIZES + 1, None, 1)


def test_format_size() -> None:
    assert [format_size(v) for v in (8, 1024, 65536, 4 << 20, 1 << 30, 1536)] == ["8", "1K", "64K", "4M", "1G", "1536"]


def test_layout_allreduce_and_rounding_up_to_elements() -> None:
    lay = layout("allreduce", 8, 4, 2)
    assert (lay.nbytes, lay.count, lay.send_count, lay.recv_count) == (8, 2, 2, 2)
    lay = layout("allreduce", 6, 4, 2)                          # 6 bytes of fp32 -> 2 elements
    assert (lay.nbytes, lay.count) == (8, 2)
    assert layout("allreduce", 1, 8, 4).count == 1              # never zero elements


def test_layout_gather_types() -> None:
    ag = layout("allgather", 64, 4, 4)                          # 16 elements total, 4 per rank
    assert (ag.nbytes, ag.count, ag.send_count, ag.recv_count, ag.block) == (64, 16, 4, 16, 4)
    rs = layout("reduce_scatter", 64, 4, 4)
    assert (rs.send_count, rs.recv_count, rs.block) == (16, 4, 4)
    a2a = layout("alltoall", 64, 4, 4)
    assert (a2a.send_count, a2a.recv_count, a2a.block) == (16, 16, 4)
    odd = layout("allgather", 8, 4, 3)                          # 2 elements over 3 ranks -> 1 each
    assert (odd.block, odd.count, odd.nbytes) == (1, 3, 12)
    big = layout("allgather", (1 << 20) + 4, 4, 3)              # > 1 MiB: multiple of 3 x 512 B
    assert big.nbytes % (3 * 512) == 0 and big.nbytes >= (1 << 20) + 4
    assert big.block * 3 == big.count


def test_layout_broadcast_barrier() -> None:
    bc = layout("broadcast", 4096, 2, 8)
    assert (bc.send_count, bc.recv_count, bc.nbytes) == (2048, 0, 4096)
    assert layout("barrier", 1 << 20, 4, 8).nbytes == 0
