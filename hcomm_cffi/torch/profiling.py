"""torch.profiler events for the backend's operations, named as gloo's are (``hcomm:all_reduce``, ``hcomm:send``...).

An event starts when the operation is started and ends when its work completes (on the progress
thread for a work whose Future DDP waits on, so it is an asynchronous event, as gloo's are).  It
carries the operation's tensors as inputs (``input_shapes`` with ``record_shapes=True``) and their
total ``bytes`` as a keyword input.  Nothing is done while no profiler is on.
"""
from __future__ import annotations

import functools
import threading
from typing import Any, Callable, Iterator, TypeVar

import torch
from torch._C._profiler import _RecordFunctionFast

__all__ = ["profiled"]

F = TypeVar("F", bound=Callable[..., Any])
_NESTED = threading.local()   # an operation built of others (the coalesced forms) records one event


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)


def profiled(title: str) -> Callable[[F], F]:
    """Record ``hcomm:<title>`` around the operation until its work completes (only while profiling)."""
    def wrap(method: F) -> F:
        @functools.wraps(method)
        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            if not torch.autograd._profiler_enabled() or getattr(_NESTED, "on", False):
                return method(self, *args, **kwargs)
            ts = list(_tensors(args))
            record = _RecordFunctionFast(f"hcomm:{title}", input_values=ts,
                                         keyword_values={"bytes": sum(t.numel() * t.element_size() for t in ts)})
            record.__enter__()
            _NESTED.on = True
            try:
                work = method(self, *args, **kwargs)
            except BaseException:
                record.__exit__(None, None, None)
                raise
            finally:
                _NESTED.on = False
            work.when_finished(lambda: record.__exit__(None, None, None))
            return work
        return run  # type: ignore[return-value]
    return wrap
