"""The tensors every backend operation moves (hcomm_cffi/torch/operands.py), on one process: an
AsyncCollectiveTensor becomes its tensor wherever it sits in the arguments, a wrapper without storage is
refused naming the argument, plain tensors pass untouched (the same argument objects)."""
from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from hcomm_cffi.torch.operands import argument_names, storage_keywords, storage_operands  # noqa: E402
from torch.distributed._functional_collectives import AsyncCollectiveTensor  # noqa: E402


class Wrapper(torch.Tensor):
    """A tensor subclass with no storage of its own (as DTensor)."""

    @staticmethod
    def __new__(cls, elem: Any) -> "Wrapper":
        return torch.Tensor._make_wrapper_subclass(cls, elem.shape, dtype=elem.dtype)  # type: ignore[attr-defined]

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        raise NotImplementedError(func)


def allgather(self: Any, output_lists: Any, input_list: Any, opts: Any = None) -> None:
    """A backend method's signature (names only)."""


def label() -> str:
    return "rank 0 of process group 'g': hcomm all_gather"


def test_plain_tensors_pass_as_the_same_objects() -> None:
    args = ([[torch.ones(2), torch.nn.Parameter(torch.ones(2))]], [torch.zeros(2)], None)
    assert storage_operands(args, argument_names(allgather), label) is args
    kwargs = {"input_list": [torch.zeros(1)], "split_sizes": [1, 2]}
    assert all(storage_keywords(kwargs, label)[k] is v for k, v in kwargs.items())


def test_an_async_collective_tensor_becomes_its_tensor_at_any_depth() -> None:
    elem = torch.arange(4.0)
    plain = torch.ones(4)
    out = storage_operands(([[plain, AsyncCollectiveTensor(elem)]], [AsyncCollectiveTensor(elem)]),
                           argument_names(allgather), label)
    assert out[0][0][0] is plain and out[0][0][1] is elem and out[1][0] is elem
    assert storage_keywords({"input_list": [AsyncCollectiveTensor(elem)]}, label)["input_list"][0] is elem


def test_a_tensor_without_storage_is_refused_naming_the_argument() -> None:
    with pytest.raises(TypeError, match=r"rank 0 of process group 'g': hcomm all_gather: output_lists\[0\]\[1\] "
                                        r"is a test_torch_operands.Wrapper, a tensor subclass without storage"):
        storage_operands(([[torch.ones(2), Wrapper(torch.ones(2))]], [torch.ones(2)]), argument_names(allgather),
                         label)
    with pytest.raises(TypeError, match=r"hcomm all_gather: input_list\[0\] is a .*Wrapper"):
        storage_keywords({"input_list": [Wrapper(torch.ones(2))]}, label)
