"""Algorithm names -> :class:`Algorithm` objects: built-ins, registered user algorithms, ``"module:attr"``, and ``auto``.

``algorithm=`` anywhere (Comm collectives, ``hcomm plan --algo``, ``hcomm bench --algo``) takes

* a registered name: the built-ins ``ring``, ``mesh``, ``tree``, ``hierarchical``, ``native``, or a
  name a user registered with :func:`algorithm` / :func:`register`;
* ``"package.module:attr"`` (entry-point syntax) or ``"path/to/file.py:attr"``: imported on first use,
  no registration code needed; ``attr`` is an :class:`Algorithm` (what ``@algorithm`` makes) or a
  subclass of it;
* an :class:`Algorithm` object;
* ``"auto"``: the library's own collective for operands in device memory (always on CANN, which stages
  host buffers; NPU tensors on the emulator), for reductions the data plane cannot do (prod; 64-bit,
  unsigned types), for messages up to ``NATIVE_BELOW`` bytes and barriers: the library runs its schedule
  without issuing each task from the host, and on the emulator reads device memory of its peers in place
  (benchmarks/compare_allreduce.py).  Host buffers above ``NATIVE_BELOW`` on the emulator (which the library
  can only move through its HCCL buffer) take the library's collective too when the ranks outnumber the host's
  cores (an allreduce of 16 MiB on 3, 4 and 8 ranks on 2 cores: 9.7, 12.3 and 24.8 ms against 15.2, 15.8 and 35.3
  for the fastest built-in), else the built-in with the lowest modelled time in the planner for this collective,
  topology and the communicator's real HCCL buffer.  User algorithms are never picked by
  ``auto``.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from functools import lru_cache
from typing import Any, Callable, Dict, Iterable, Optional, Tuple

from ..enums import DataType, Engine, ReduceOp
from ..plan import RankResources, Topology, compare_algorithms
from . import alltoall_pairwise, double_ring, hierarchical, mesh, native, nb, ring, tree
from .interface import (COLLECTIVES, REDUCING, Algorithm, AlgorithmLike, FunctionAlgorithm, ResourcesFn,
                        UnsupportedError, UnsupportedFn, define)

__all__ = ["algorithm", "register", "resolve", "check_algorithm", "choose", "explain", "names", "BUILTINS",
           "BUILTIN_ALGORITHMS", "NATIVE_BELOW"]

#: The built-in algorithms (each made with ``interface.define``, as ``@algorithm`` makes a user's), in the
#: order ties are broken; registered below exactly as a user's algorithm is.
BUILTIN_ALGORITHMS: Tuple[Algorithm, ...] = (ring.ring, mesh.mesh, tree.tree, hierarchical.hierarchical, native.native,
                                             nb.nb, alltoall_pairwise.alltoall_pairwise, double_ring.double_ring)
#: Their names.
BUILTINS = tuple(alg.name for alg in BUILTIN_ALGORITHMS)
#: Up to this many bytes auto uses the library's own collective (measured on the emulator: it beats
#: every host-driven schedule up to ~1 MiB on 2 and 4 ranks; benchmarks/compare_allreduce.py).
NATIVE_BELOW = 1 << 20

_registered: Dict[str, Algorithm] = {}
_references: Dict[str, Algorithm] = {}


def register(alg: Algorithm, name: Optional[str] = None) -> Algorithm:
    """Make ``alg`` available as ``algorithm=name`` (default ``alg.name``); returns it.

    Registering the same function again (a re-imported module) replaces it; a different algorithm
    under a taken name, or a built-in's name, is an error.
    """
    if not isinstance(alg, Algorithm):
        raise TypeError(f"register({alg!r}): expected an Algorithm (made by @hcomm_cffi.algorithm or a subclass)")
    key = name or alg.name
    if not isinstance(key, str) or not key or ":" in key or key == "auto":
        raise ValueError(f"algorithm name {key!r}: expected a non-empty name without ':' other than 'auto'")
    old = _registered.get(key)
    same_origin = getattr(old, "origin", None) is not None and getattr(old, "origin", None) == getattr(alg, "origin", None)
    if old is not None and old is not alg and (key in BUILTINS or not same_origin):
        raise ValueError(f"algorithm name {key!r} is already registered ({old!r}); choose another name")
    alg.name = alg.name or key
    _registered[key] = alg
    return alg


for _builtin in BUILTIN_ALGORITHMS:
    register(_builtin)


def algorithm(name: Optional[str] = None, *, collectives: Optional[Iterable[str]] = COLLECTIVES,
              reduces_on_data_plane: bool = True, resources: Optional[ResourcesFn] = None,
              unsupported: Optional[UnsupportedFn] = None) -> Callable[[Callable[..., None]], Algorithm]:
    """Decorator: ``issue(ctx, call)`` becomes a registered :class:`Algorithm` named ``name`` (default: its name).

    ``collectives``: what it implements (None: any name, for ``Comm.run_algorithm``);
    ``resources(topology, call, rank)``: declared resources (default: derived from a dry run);
    ``unsupported(coll, dtype, op, topology)``: a reason it cannot run, or None.
    """
    make = define(name, collectives=collectives, reduces_on_data_plane=reduces_on_data_plane, resources=resources,
                  unsupported=unsupported)

    def wrap(fn: Callable[..., None]) -> Algorithm:
        return register(make(fn))
    return wrap


def names() -> Tuple[str, ...]:
    """Every name ``algorithm=`` accepts besides references: auto, the built-ins, then registered ones."""
    return ("auto",) + BUILTINS + tuple(sorted(k for k in _registered if k not in BUILTINS))


def _known() -> str:
    return ("one of " + ", ".join(names()) + ", or a reference 'package.module:attr' / 'path/file.py:attr' to an algorithm "
            "defined with @hcomm_cffi.algorithm")


def _import_module(ref: str, mod_name: str) -> Any:
    if mod_name.endswith(".py") or os.sep in mod_name:
        path = os.path.abspath(mod_name)
        if not os.path.isfile(path):
            raise ValueError(f"algorithm={ref!r}: file {path} does not exist")
        mod_id = "hcomm_user_algorithm_" + str(abs(hash(path)))
        if mod_id in sys.modules:
            return sys.modules[mod_id]
        spec = importlib.util.spec_from_file_location(mod_id, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[mod_id] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[mod_id]
            raise
        return module
    try:
        return importlib.import_module(mod_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not mod_name.startswith(exc.name) or os.getcwd() in sys.path:
            raise ValueError(f"algorithm={ref!r}: importing {mod_name!r} failed: {exc}") from exc
    sys.path.append(os.getcwd())   # like `python -m`, a module in the working directory is found
    try:
        return importlib.import_module(mod_name)
    except ImportError as exc:
        raise ValueError(f"algorithm={ref!r}: module {mod_name!r} does not import ({exc}); expected "
                         "'package.module:attr' importable from sys.path or the working directory, or "
                         "'path/to/file.py:attr'") from exc


def _load_reference(ref: str) -> Algorithm:
    mod_name, _, attr = ref.rpartition(":")
    if not mod_name or not attr:
        raise ValueError(f"algorithm={ref!r}: expected 'package.module:attr' or 'path/to/file.py:attr'")
    module = _import_module(ref, mod_name)
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            found = sorted(k for k, v in vars(module).items() if isinstance(v, Algorithm)
                           or isinstance(v, type) and issubclass(v, Algorithm) and v is not Algorithm
                           and v is not FunctionAlgorithm)
            raise ValueError(f"algorithm={ref!r}: {mod_name} has no attribute {attr!r}; algorithms it defines: "
                             f"{', '.join(found) or 'none'}")
        obj = getattr(obj, part)
    if isinstance(obj, type) and issubclass(obj, Algorithm):
        obj = obj()
    if not isinstance(obj, Algorithm):
        raise ValueError(f"algorithm={ref!r}: {attr} is a {type(obj).__name__}, not an algorithm; define it with "
                         "@hcomm_cffi.algorithm(...) on a function issue(ctx, call), or subclass "
                         "hcomm_cffi.Algorithm")
    if not obj.name:
        obj.name = ref
    return obj


def resolve(spec: AlgorithmLike) -> Algorithm:
    """The :class:`Algorithm` named by ``spec`` (not ``auto``); ValueError names the alternatives."""
    if isinstance(spec, Algorithm):
        return spec
    if not isinstance(spec, str):
        raise ValueError(f"algorithm={spec!r} is not an algorithm; expected {_known()}")
    alg = _registered.get(spec) or _references.get(spec)
    if alg is not None:
        return alg
    if ":" in spec:
        alg = _references[spec] = _load_reference(spec)
        return alg
    alg = _registered.get(spec)
    if alg is None:
        raise ValueError(f"algorithm={spec!r} is not known; expected {_known()}")
    return alg


def check_algorithm(spec: Any) -> AlgorithmLike:
    """Validate an ``algorithm=`` argument before any work (references are imported now)."""
    if spec.__class__ is str and (spec == "auto" or spec in _registered):   # the per-call fast path
        return spec
    resolve(spec)
    return spec


def check_supported(alg: Algorithm, coll: str, topo: Topology, dtype: DataType, op: Optional[ReduceOp]) -> None:
    """Raise UnsupportedError when ``alg`` cannot run this call, naming the algorithms that can."""
    reason = alg.unsupported(coll, dtype, op, topo)
    if reason is None:
        return
    others = [n for n in BUILTINS if _registered[n] is not alg and _registered[n].unsupported(coll, dtype, op, topo)
              is None]
    raise UnsupportedError(f"{reason}; algorithms that can: {', '.join(others) or 'none'} (or 'auto')")


@lru_cache(maxsize=1024)
def _fastest(coll: str, topo: Topology, nbytes: int, root: int, buffer_mb: int) -> str:
    cands = compare_algorithms(coll, topo, nbytes, engine=Engine.CPU_TS, dtype=DataType.INT8, root=root,
                               inter_algorithm="ring", buffer_mb=buffer_mb)
    ok = [c for c in cands if c.plan is not None and c.algorithm in _registered
          and _registered[c.algorithm].unsupported(coll, DataType.INT8, None, topo) is None]
    if not ok:
        return "native"
    best = min(ok, key=lambda c: (c.plan.modelled_time_us, c.plan.n_channels))  # type: ignore[union-attr]
    return best.algorithm


def choose(spec: AlgorithmLike, coll: str, topo: Topology, nbytes: int, dtype: DataType, op: Optional[ReduceOp],
           root: int = 0, buffer_mb: int = 200, device_operands: bool = True) -> Algorithm:
    """Resolve ``spec`` (maybe "auto") to an algorithm that supports this call, or raise UnsupportedError."""
    return explain(spec, coll, topo, nbytes, dtype, op, root, buffer_mb, device_operands)[0]


def explain(spec: AlgorithmLike, coll: str, topo: Topology, nbytes: int, dtype: DataType, op: Optional[ReduceOp],
            root: int = 0, buffer_mb: int = 200, device_operands: bool = True,
            ranks_share_cores: bool = False) -> Tuple[Algorithm, str]:
    """:func:`choose`, and why: the algorithm and a one-line reason (what ``HCOMM_DEBUG=INFO`` logs).

    ``device_operands``: the library takes the call's buffers as they are, device memory (see the module doc).
    ``ranks_share_cores``: the ranks' schedules run on host cores, fewer than the ranks (the emulator)."""
    if spec != "auto":
        alg = resolve(spec)
        check_supported(alg, coll, topo, dtype, op)
        return alg, "requested by the caller"
    native = _registered["native"]
    if coll in REDUCING and op is not None and _registered["ring"].unsupported(coll, dtype, op, topo) is not None:
        return native, f"auto: the data plane cannot reduce {dtype.name.lower()} with {op.name.lower()}"
    if topo.n_ranks == 1:
        return _registered["ring"], "auto: one rank (a local copy)"
    if coll == "barrier" or coll not in COLLECTIVES:
        return native, f"auto: {coll} is the library's own"
    if device_operands:
        return native, "auto: the operands are device memory: the library's collective is faster"
    if nbytes <= NATIVE_BELOW:
        return native, f"auto: {nbytes} bytes <= {NATIVE_BELOW} (NATIVE_BELOW): the library's collective is faster"
    if ranks_share_cores:
        return native, (f"auto: {topo.n_ranks} ranks share fewer host cores: every step of a host-driven schedule "
                        "waits for a context switch, the library's collective moves the message in a few pieces")
    best = _fastest(coll, topo, nbytes, root, buffer_mb)
    return _registered[best], (f"auto: lowest modelled time in the planner for {nbytes} bytes on "
                               f"{topo.n_ranks} ranks on {topo.n_servers} server(s)")
