"""Declarative C-function tables compiled into checked methods (the binding's one call-and-check path).

A table entry (:class:`CFunction`) names a method, the C prototype it calls (as declared in
``build_ffi.py``), the Python parameters, the C arguments in order (a Python expression over the
parameters, or an :class:`Out` / :class:`OutArray` whose value the method returns), optional
pre-call statements (validation, element counts) and the detail an error carries.
:func:`install` compiles every entry, once, into a method whose body is the one call-and-check
template::

    rc = self._lib.<C name>(<args>)
    if rc:
        raise self._error(rc, "<C name>", <detail>)
    return <outputs>

This is exactly the code a hand-written method would have, so the per-call cost of the hot
data-plane methods is that of a hand-written one (a closure over ``*args`` would cost more).
The source of every generated method can be read with :func:`source_of` and shows in tracebacks.
"""
from __future__ import annotations

import __future__
import linecache
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Optional, Tuple, Union

from ._ffi import ffi

__all__ = ["CFunction", "Out", "OutArray", "install", "source_of", "c_pointer_type"]


@dataclass(frozen=True)
class Out:
    """An out-parameter: ``ffi.new(ctype)`` is passed to C; ``result`` (``{}`` = that cdata) is returned."""

    ctype: str
    result: str = "int({}[0])"


@dataclass(frozen=True)
class OutArray:
    """An out-array of ``n_from`` (an expression over the parameters) ``item`` elements; ``result`` is returned."""

    item: str
    n_from: str
    result: str = "list({})"


Arg = Union[str, Out, OutArray]


@dataclass(frozen=True)
class CFunction:
    """One C function of the table and the checked method that calls it."""

    method: str                          # Binding method name ('_' prefix: a raw call a hand-written method wraps)
    prototype: str                       # the C declaration, as in build_ffi.py's cdef
    params: str = ""                     # Python parameters after self (annotations, defaults)
    doc: str = ""                        # what the method does, after "<C name>: "
    returns: str = "None"                # the return annotation
    args: Optional[Tuple[Arg, ...]] = None  # the C arguments in order; None = the parameters in order
    checks: Tuple[str, ...] = ()         # statements run before the call (validation, counts)
    detail: Optional[str] = None         # f-string body appended to the error message
    checked: bool = True                 # False: the C return value is a result, not a status code
    accept: Tuple[str, ...] = ()         # nonzero codes that are not failures (expressions)
    result: Optional[str] = None         # the returned expression (may use ``rc``); None = the outputs

    @property
    def c_name(self) -> str:
        """The C function's name, read from the prototype."""
        return _split(self.prototype)[1]


def _split(prototype: str) -> Tuple[str, str, str]:
    """(return type, name, parameters) of a C declaration ``"ret name(params)"``."""
    head, _, rest = prototype.partition("(")
    params = rest.rstrip().rstrip(";").rstrip()
    names = head.replace("*", " ").split()
    if len(names) < 2 or not params.endswith(")"):
        raise ValueError(f"prototype={prototype!r} is not a C declaration 'ret name(params)'")
    return head[: head.rindex(names[-1])].strip(), names[-1], params[:-1].strip()


def c_pointer_type(prototype: str) -> str:
    """``"ret(*)(params)"``: the C function-pointer type of a prototype, for ``ffi.typeof``."""
    ret, _name, params = _split(prototype)
    return f"{ret}(*)({params or 'void'})"


def _param_names(params: str) -> List[str]:
    """The parameter names of a Python parameter list such as ``"a: int, b: Tuple[int, int] = (1, 2)"``."""
    names, depth, start = [], 0, 0
    for i, char in enumerate(params + ","):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == "," and depth == 0:
            part = params[start:i].strip()
            if part:
                names.append(part.split("=", 1)[0].split(":", 1)[0].strip().lstrip("*"))
            start = i + 1
    return names


def _method_source(entry: CFunction) -> str:
    """The source of the method for one table entry."""
    c_name = entry.c_name
    args = entry.args if entry.args is not None else tuple(_param_names(entry.params))
    declared = len(ffi.typeof(c_pointer_type(entry.prototype)).args)
    if len(args) != declared:
        raise ValueError(f"table entry {entry.method!r}: {len(args)} C arguments for {c_name}, "
                         f"whose prototype declares {declared}: {entry.prototype}")
    body: List[str] = list(entry.checks)
    call_args: List[str] = []
    outputs: List[str] = []
    for arg in args:
        if isinstance(arg, str):
            call_args.append(arg)
            continue
        var = f"_out{len(outputs)}"
        if isinstance(arg, Out):
            body.append(f"{var} = ffi.new({arg.ctype!r})")
        else:
            body.append(f"{var} = ffi.new({arg.item + '[]'!r}, {arg.n_from})")
        call_args.append(var)
        outputs.append(arg.result.format(var))
    body.append(f"# C: {entry.prototype}")
    body.append(f"rc = self._lib.{c_name}({', '.join(call_args)})")
    if entry.checked:
        condition = "rc" if not entry.accept else f"rc and rc not in ({', '.join(entry.accept)},)"
        detail = f", f{entry.detail!r}" if entry.detail else ""
        body += [f"if {condition}:", f"    raise self._error(rc, {c_name!r}{detail})"]
    if entry.result is not None:
        body.append(f"return {entry.result}")
    elif outputs:
        body.append(f"return {outputs[0] if len(outputs) == 1 else '(' + ', '.join(outputs) + ')'}")
    doc = f"{c_name}: {entry.doc}" if entry.doc else f"{c_name}."
    signature = f"self, {entry.params}" if entry.params else "self"
    lines = [f"def {entry.method}({signature}) -> {entry.returns}:", f"    {doc!r}"]
    lines += [f"    {line}" for line in body]
    return "\n".join(lines) + "\n"


_SOURCES: Dict[Tuple[str, str], str] = {}


def install(cls: type, table: Iterable[CFunction], namespace: Dict[str, Any]) -> None:
    """Compile every entry of ``table`` into a method of ``cls``; expressions resolve in ``namespace``.

    ``namespace`` (the caller's ``globals()``) must provide ``ffi`` for the out-parameters and every
    name the entries' expressions, checks and defaults use.

    Raises ValueError for an entry whose argument count differs from its prototype, a duplicated
    method name, or a name ``cls`` already defines by hand.
    """
    entries = list(table)
    names = [e.method for e in entries]
    duplicated = sorted({n for n in names if names.count(n) > 1})
    if duplicated:
        raise ValueError(f"table lists methods {duplicated} more than once")
    clashing = sorted(n for n in names if n in vars(cls))
    if clashing:
        raise ValueError(f"table methods {clashing} are also written by hand in {cls.__name__}")
    sources = {e.method: _method_source(e) for e in entries}
    source = "\n".join(sources.values())
    filename = f"<{namespace.get('__name__', '?')}.{cls.__name__}: generated from its C-function table>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)  # tracebacks show it
    methods: Dict[str, Any] = {}
    exec(compile(source, filename, "exec", flags=__future__.annotations.compiler_flag, dont_inherit=True),
         namespace, methods)
    for name, function in methods.items():
        function.__qualname__ = f"{cls.__name__}.{name}"
        function.__module__ = namespace.get("__name__", function.__module__)
        setattr(cls, name, function)
        _SOURCES[(cls.__qualname__, name)] = sources[name]


def source_of(cls: type, method: str) -> str:
    """The generated source of ``cls.method`` (KeyError if it was not generated from a table)."""
    try:
        return _SOURCES[(cls.__qualname__, method)]
    except KeyError:
        raise KeyError(f"{cls.__name__}.{method} was not generated from a C-function table") from None
