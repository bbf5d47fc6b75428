"""The small unclear errors of the fourth reliability round (issue 36.6): each names what was wrong and what is expected."""
from __future__ import annotations

import numpy as np
import pytest

import hcomm_cffi as hcomm
from hcomm_cffi.bench.sizes import SizeError, check_memory
from hcomm_cffi.enums import parse_reduce_op
from test_cached_validation import world  # noqa: F401 -- the one-rank world fixture


def test_a_topology_from_hcomm_topology_that_does_not_fit_names_the_variable(world, monkeypatch) -> None:
    monkeypatch.setenv("HCOMM_TOPOLOGY", "2x4")
    with pytest.raises(ValueError, match=r"HCOMM_TOPOLOGY=2x4 \(from the environment\) has 8 ranks but the "
                                         r"communicator has 1"):
        hcomm.Comm("shaped")


@pytest.mark.parametrize("op", [99, -1, 4])
def test_an_unknown_op_number_lists_the_valid_ops(op: int, world) -> None:
    with pytest.raises(ValueError, match=rf"op={op} is not an HcclReduceOp value; expected one of 'sum', 'prod', "
                                         r"'max', 'min' \(or ReduceOp.SUM, PROD, MAX, MIN: 0, 1, 2, 3\)"):
        world.allreduce(np.ones(4, np.float32), op)
    with pytest.raises(ValueError, match="expected one of 'sum'"):
        parse_reduce_op(op)


@pytest.mark.parametrize("dtype", ["bool", "complex64", "complex128"])
def test_a_torch_tensor_of_an_unsupported_dtype_lists_the_supported_ones(dtype: str, world) -> None:
    torch = pytest.importorskip("torch")
    t = torch.ones(4, dtype=getattr(torch, dtype))
    with pytest.raises(TypeError, match=rf"x has dtype torch.{dtype}, which HCCL cannot carry; expected one of "
                                        r"torch.int8, .*torch.float32.*torch.bfloat16"):
        world.allreduce(t)


def test_the_memory_check_quotes_maxbytes_as_typed() -> None:
    with pytest.raises(SizeError, match=r"^-e/--maxbytes=1000000G \(largest size \d+ bytes\)"):
        check_memory("allreduce", 1000000 << 30, 4, 2, 2, 8, available=10 ** 9, typed="1000000G")
