"""Type aliases for what arguments may be: buffers, reduce ops, streams, cdata, paths (for annotations only).

The public API and the binding annotate with these so mypy and IDEs show one name for one kind of
argument; the checks that run stay where they are (``api/op.as_buffer``,
``enums.parse_reduce_op``, ``api/streams.stream_handle``).  ``AlgorithmLike`` needs the
``Algorithm`` class and so lives in ``algorithms/interface.py``.  Importing this module costs
nothing: numpy and the buffer protocol's type are imported for type checkers only.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Literal, Protocol, Union

from .enums import ReduceOp

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    from typing_extensions import Buffer

__all__ = ["CData", "PathLike", "SupportsDLPack", "BufferLike", "ReduceOpName", "AverageName", "ReduceOpLike", "StreamLike"]

#: a cffi cdata object (pointer, array, handle); cffi is untyped, so to a type checker this is Any
CData = Any

#: a file-system path, as ``os.fsencode`` takes it
PathLike = Union[str, bytes, "os.PathLike[str]"]


class SupportsDLPack(Protocol):
    """An array that exports itself through DLPack (a torch tensor, a JAX or CuPy array, ...)."""

    def __dlpack__(self, *, stream: Any = ...) -> Any: ...


#: what a collective reads or writes: a NumPy array, a torch tensor or another DLPack exporter, or
#: any buffer-protocol object (bytearray, memoryview, array.array); C-contiguous, writable when written
BufferLike = Union["np.ndarray[Any, Any]", SupportsDLPack, "Buffer"]

#: the reduce ops' names (``enums.parse_reduce_op``), so that a misspelt ``op="summ"`` fails type-checking
ReduceOpName = Literal["sum", "prod", "product", "max", "min"]
#: 'avg': the sum divided by the number of ranks, as torch's AVG (api/average.py; HCCL has no such op)
AverageName = Literal["avg"]
#: a reduce op: a :class:`~hcomm_cffi.enums.ReduceOp`, its HcclReduceOp value, or its name
ReduceOpLike = Union[ReduceOp, ReduceOpName, AverageName, int]

#: where stream-ordered work goes: an ``aclrtStream`` cdata, its address as an int, or a torch_npu
#: stream (its ``npu_stream``); None is the communicator's own stream.  A cdata is Any to mypy.
StreamLike = Union[CData, int]
