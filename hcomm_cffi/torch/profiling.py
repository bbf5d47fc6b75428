"""torch.profiler events for the backend's operations, named as gloo's are (``hcomm:all_reduce``, ``hcomm:send``...).

An event starts when the operation is started and ends when its work completes (on the progress
thread for a work whose Future DDP waits on, so it is an asynchronous event, as gloo's are).  The
sizes of the operation's tensors (shapes, dtype, bytes) are the event's arguments (``args`` in a
trace).  torch offers Python no record that is both asynchronous and carries tensor inputs
(``record_function`` takes a string; ``_RecordFunctionFast`` takes tensors but cannot end on
another thread), so the shapes are in the arguments, not in ``input_shapes``.  Nothing is done
while no profiler is on.
"""
from __future__ import annotations

import functools
import threading
from typing import Any, Callable, Iterator, List, TypeVar

import torch

__all__ = ["profiled", "describe"]

F = TypeVar("F", bound=Callable[..., Any])
_NESTED = threading.local()   # an operation built of others (the coalesced forms) records one event


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)


def describe(args: Any) -> str:
    """The sizes of the tensors among ``args``: shapes, dtype and total bytes."""
    ts: List[torch.Tensor] = list(_tensors(args))
    shapes = [list(t.shape) for t in ts]
    dtypes = sorted({str(t.dtype).replace("torch.", "") for t in ts})
    nbytes = sum(t.numel() * t.element_size() for t in ts)
    return f"shapes={shapes} dtype={','.join(dtypes)} bytes={nbytes}"


def profiled(title: str) -> Callable[[F], F]:
    """Record ``hcomm:<title>`` around the operation until its work completes (only while profiling)."""
    def wrap(method: F) -> F:
        @functools.wraps(method)
        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            if not torch.autograd._profiler_enabled() or getattr(_NESTED, "on", False):
                return method(self, *args, **kwargs)
            record = torch.autograd.profiler.record_function(f"hcomm:{title}", describe(args))
            done: Any = torch.futures.Future()
            record.__enter__()
            record._call_end_callbacks_on_future(done)
            _NESTED.on = True
            try:
                work = method(self, *args, **kwargs)
            except BaseException:
                done.set_result(None)
                raise
            finally:
                _NESTED.on = False
                record.__exit__(None, None, None)
            work.when_finished(lambda: done.set_result(None))
            return work
        return run  # type: ignore[return-value]
    return wrap
