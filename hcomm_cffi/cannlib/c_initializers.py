"""The headers' ``static inline`` initializers as C, generated from the Python ones in initializers.py.

No shared library exports HcclChannelDescInit and friends: they are inline functions of the vendor
headers.  The generated header must give C programs the same bytes as
:mod:`hcomm_cffi.initializers`, so the C bodies are derived from it rather than written twice: each
Python initializer is run on two scratch structs prefilled with different patterns; a byte equal in
both results was written (with that value), a byte that differs was left alone.  The C function
copies exactly the written runs, so it reproduces the Python function byte for byte, including the
bytes it leaves untouched (HcclCommConfigInit keeps the tails of its char arrays).
"""
from __future__ import annotations

import re
from typing import Any, Callable, List, Tuple

from .. import initializers
from .._ffi import ffi

__all__ = ["C_INITIALIZERS", "written_runs", "initializer_source", "initializers_source"]

#: The C-named initializers of initializers.py, in header order.
C_INITIALIZERS: Tuple[str, ...] = (
    "HcclCommConfigInit", "HcclChannelDescInit", "EndpointDescInit", "ThreadConfigInit", "HcommChannelDescInit",
    "CommLinkInit", "HcclOpDescInit", "HcclKernelLaunchCfgInit", "HcclTeamCreateDescInit",
    "HcclTeamCreateChannelsDescInit",
)

_PROTO = re.compile(r"``((\w+) (\w+)\((\w+) \*(\w+)(?:, uint32_t (\w+))?\))``")
_PATTERNS = (0x5A, 0xA5)


def _signature(func: Callable[..., Any]) -> Tuple[str, str, str, str, str]:
    """(return type, name, struct type, pointer name, count name or '') from the function's docstring."""
    m = _PROTO.search(func.__doc__ or "")
    if m is None:
        raise ValueError(f"{func.__name__}'s docstring does not start with its C prototype in ``...``")
    ret, name, ctype, ptr, count = m.group(2), m.group(3), m.group(4), m.group(5), m.group(6) or ""
    return ret, name, ctype, ptr, count


def written_runs(name: str) -> Tuple[str, List[Tuple[int, bytes]]]:
    """(struct type, [(offset, bytes written), ...]) of one element after the Python initializer ``name``."""
    func = getattr(initializers, name)
    _, _, ctype, _, count = _signature(func)
    size = ffi.sizeof(ctype)
    images = []
    for pattern in _PATTERNS:
        scratch = ffi.new(f"{ctype} *")
        ffi.memmove(scratch, bytes((pattern,)) * size, size)
        rc = func(scratch, 1) if count else func(scratch)
        if rc not in (None, 0):
            raise RuntimeError(f"{name} returned {rc} on a valid {ctype}")
        images.append(bytes(ffi.buffer(scratch)))
    runs: List[Tuple[int, bytes]] = []
    start = None
    for i in range(size + 1):
        same = i < size and images[0][i] == images[1][i]
        if same and start is None:
            start = i
        elif not same and start is not None:
            runs.append((start, images[0][start:i]))
            start = None
    return ctype, runs


def _c_bytes(data: bytes) -> str:
    return ", ".join(f"0x{b:02x}" for b in data)


def initializer_source(name: str) -> str:
    """The ``static inline`` C definition of initializer ``name``."""
    ret, cname, ctype, ptr, count = _signature(getattr(initializers, name))
    _, runs = written_runs(name)
    lines = [f"static inline {ret} {cname}({ctype} *{ptr}" + (f", uint32_t {count})" if count else ")"), "{"]
    for k, (off, data) in enumerate(runs):
        lines.append(f"    static const unsigned char run{k}[{len(data)}] = {{{_c_bytes(data)}}};")
    elem = "e"
    body = [f"    memcpy((unsigned char *){elem} + {off}, run{k}, sizeof run{k});" for k, (off, _) in enumerate(runs)]
    if ret == "void":                      # HcclCommConfigInit: returns nothing, ignores NULL
        lines += [f"    {ctype} *{elem} = {ptr};", f"    if ({ptr} == NULL) return;"] + body + ["}"]
        return "\n".join(lines)
    if count:                              # NULL is an error only when there is something to initialise
        lines += ["    uint32_t i;", f"    if ({count} == 0) return ({ret})0;", f"    if ({ptr} == NULL) return ({ret})2; /* HCCL_E_PTR */",
                  f"    for (i = 0; i < {count}; i++) {{", f"        {ctype} *{elem} = &{ptr}[i];"]
        lines += ["    " + b for b in body] + ["    }", f"    return ({ret})0;", "}"]
        return "\n".join(lines)
    lines += [f"    {ctype} *{elem} = {ptr};", f"    if ({ptr} == NULL) return ({ret})2; /* HCCL_E_PTR */"] + body
    lines += [f"    return ({ret})0;", "}"]
    return "\n".join(lines)


def initializers_source() -> str:
    """Every initializer of :data:`C_INITIALIZERS` as C."""
    return "\n\n".join(initializer_source(name) for name in C_INITIALIZERS)
