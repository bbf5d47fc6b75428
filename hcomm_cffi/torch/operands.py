"""The tensors a backend operation moves: plain tensors with storage, never a wrapper subclass.

torch hands a Python process group its arguments as the caller passed them: ``dist.isend(t)`` calls
``ProcessGroup.send([t], ...)`` on the Python object (torch/distributed/distributed_c10d.py, ``isend``),
with no trip through the c10d dispatcher that unwraps tensor subclasses for gloo's C++ backend.  A
wrapper subclass has no storage of its own: its data pointer is 0.  Under pipeline x tensor parallel a
stage's output is functional collectives' ``AsyncCollectiveTensor``
(torch/distributed/_functional_collectives.py:1064) and the pipeline sends it as is.

:func:`storage_operands` is applied by ``profiling.operation`` (the entry of every operation) to every
tensor argument, nested lists included: an ``AsyncCollectiveTensor`` is waited for and its tensor used
(what its ``__torch_dispatch__`` does for any op, ``trigger_wait``); any other tensor without storage of
its own (a DTensor, any other wrapper subclass) is refused with a TypeError naming the argument.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, Dict, Sequence, Tuple

import torch
from torch.distributed._functional_collectives import AsyncCollectiveTensor

__all__ = ["argument_names", "storage_operands", "storage_keywords"]

_PLAIN = (torch.Tensor, torch.nn.Parameter)   # exact types: their storage is their own


def argument_names(method: Callable[..., Any]) -> Tuple[str, ...]:
    """The names of ``method``'s positional arguments after ``self`` (for messages)."""
    params = list(inspect.signature(method).parameters.values())[1:]
    return tuple(p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))


def _stored(t: torch.Tensor, where: str, label: Callable[[], str]) -> torch.Tensor:
    """``t`` itself, an AsyncCollectiveTensor's waited tensor, or a TypeError for a tensor without storage."""
    if isinstance(t, AsyncCollectiveTensor):
        return _stored(t.trigger_wait(), where, label)
    try:
        t.untyped_storage().data_ptr()
    except RuntimeError:
        raise TypeError(f"{label()}: {where} is a {type(t).__module__}.{type(t).__name__}, a tensor subclass without "
                        "storage of its own (a wrapper such as DTensor); expected a tensor with storage (for a "
                        "DTensor pass .to_local() or .full_tensor())") from None
    return t


def _wrapped(value: Any) -> bool:
    """True if ``value`` is, or (in lists, at any depth) holds, a tensor that is not a plain one."""
    if type(value) in _PLAIN:
        return False
    if isinstance(value, torch.Tensor):
        return True
    return isinstance(value, (list, tuple)) and any(_wrapped(v) for v in value)


def _operand(value: Any, where: str, label: Callable[[], str]) -> Any:
    """``value`` with its wrapped tensors replaced (called only when :func:`_wrapped`; ``where`` names it)."""
    if isinstance(value, torch.Tensor):
        return value if type(value) in _PLAIN else _stored(value, where, label)
    if isinstance(value, (list, tuple)):
        items = [_operand(v, f"{where}[{i}]", label) if _wrapped(v) else v for i, v in enumerate(value)]
        return items if isinstance(value, list) else tuple(items)
    return value


def storage_operands(args: Sequence[Any], names: Sequence[str], label: Callable[[], str]) -> Sequence[Any]:
    """``args`` with every tensor (in lists too) one with storage; ``args`` itself when all are plain already.

    ``names``: the positional arguments' names for messages; ``label()`` the operation's label (made only for
    an error).  Keyword arguments: :func:`storage_keywords`.
    """
    for a in args:      # the common case, plain tensors only, in a loop of its own: it runs on every call
        if _wrapped(a):
            break
    else:
        return args
    return [_operand(a, names[i] if i < len(names) else f"argument {i}", label) if _wrapped(a) else a
            for i, a in enumerate(args)]


def storage_keywords(kwargs: Dict[str, Any], label: Callable[[], str]) -> Dict[str, Any]:
    """:func:`storage_operands` of keyword arguments (named by their keys)."""
    return {k: _operand(v, k, label) if _wrapped(v) else v for k, v in kwargs.items()}
