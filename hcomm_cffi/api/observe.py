"""What a Comm tells logging, the flight recorder and the trace: one small function per event, so the call path only calls them.

Each takes the communicator's :class:`~hcomm_cffi.api.state.CommState`; every operation opens with :func:`issue`
and ends with :func:`done` (or :func:`failed`), so the trace closes each one.
"""
from __future__ import annotations

import logging
import sys
from typing import Any, Optional

from .. import callsite, flight, log, settings, stallwatch, trace
from ..algorithms.interface import ROOTED
from ..enums import DataType, ReduceOp
from ..errors import HcclError
from . import live
from .launch_order import Record
from .consistency import CollectiveMismatchError
from .errors import CommError, failure_error
from .state import CommState

__all__ = ["Record", "record_of", "fixed_of", "created", "destroyed", "chose", "issue", "running", "done", "fail",
           "failed", "NO_SLOT"]

LOG = log.get("comm")
CALLS = log.get("calls")
NO_SLOT = -1
# the flight record's integer codes: a dict lookup costs a tenth of int() on an IntEnum, per call
_CODE = {member: int(member) for enum in (DataType, ReduceOp) for member in enum}
_PEER_GONE_CODES = frozenset({21, 13, 14, 507056, 507057})   # HCCL_E_REMOTE, transfer and link errors
_logged_backend = [False]


def record_of(call: Any) -> Record:
    """The record of a resolved collective :class:`~hcomm_cffi.api.op.Call`."""
    return Record(call.coll, call.alg.name, call.count, call.nbytes, call.dtype, call.op,
                  call.root if call.coll in ROOTED else -1)


def _backend(state: CommState) -> None:
    """INFO, once per process: the backend, its libraries and why it was chosen."""
    _logged_backend[0] = True
    lib = state.binding.lib
    from ..lib import backend_reason      # the choice load() made (never loads anything)
    paths = getattr(lib, "paths", None)
    libs = ", ".join(f"{k}={v}" for k, v in sorted(paths.items())) if paths else "the emulator (hcomm_cffi.sim)"
    name, _, why = backend_reason().partition(": ")
    LOG.info("backend %s (%s); libraries: %s", name, why, libs)


def created(state: CommState, channels: int) -> Optional[flight.FlightRecorder]:
    """A member communicator is set up (``channels`` peer channels opened): log it, give it its flight recorder."""
    world = live.current_world()
    world_rank = world.rank if world is not None else state.rank
    log.configure(world_rank)
    trace.start(world_rank, host_side=not state.binding.lib.capabilities.emulator)
    if LOG.isEnabledFor(logging.INFO):
        if not _logged_backend[0]:
            _backend(state)
        LOG.info("communicator %r created: rank %d of %d (parent ranks %s), topology %s, HCCL buffer %d bytes, "
                 "1 stream, %d peer channel(s) opened, exec timeout %s s, eager limit %d bytes, signatures of library "
                 "collectives checked by %s",
                 state.name, state.rank, state.size, state.parent_ranks or "all", _shape(state.topology),
                 state.buffer_bytes, channels, state.timeout or "never", state.eager_limit,
                 "the package's handshake" if state.checks_library_collectives else "the backend (or not at all)")
    capacity = settings.value("HCOMM_FR_SIZE")
    if not capacity:
        return None
    recorder = flight.FlightRecorder(state.name, state.rank, state.size, world_rank, capacity, flight.directory())
    stallwatch.start()          # stall reports of this rank when no launcher watches (HCOMM_STUCK_REPORT_S)
    return recorder


def _shape(topo: Any) -> str:
    """'2x4 (2 servers)' or '4 ranks on 1 server'."""
    per = topo.devices_per_server
    return f"{topo.n_servers}x{per}" if per is not None else f"{topo.n_ranks} ranks on {topo.n_servers} servers"


def destroyed(state: CommState) -> None:
    """The communicator is gone: its ring is dropped (kept only in a dump already written)."""
    fr, state.flight = state.flight, None
    if fr is not None:
        fr.close()
    LOG.info("communicator %r destroyed (rank %d)", state.name, state.rank)
    if trace.ACTIVE:
        trace.flush()


def chose(state: CommState, coll: str, nbytes: int, alg: Any, reason: str) -> None:
    """INFO: the algorithm of a new call signature, and why."""
    LOG.info("%s of %d bytes on %r (%d ranks): algorithm %s (%s)", coll, nbytes, state.name, state.size, alg.name,
             reason)


def fixed_of(rec: Record) -> bytes:
    """The flight-record fields of ``rec`` encoded once (a blocking call repeated on the fast path keeps them)."""
    return flight.fixed_fields(rec.collective, rec.algorithm, rec.count, rec.nbytes, _CODE[rec.dtype],
                               -1 if rec.redop is None else _CODE[rec.redop], rec.peer)


def issue(state: CommState, seq: int, rec: Record, fixed: Optional[bytes] = None, name: Optional[str] = None,
          launched: bool = False) -> int:
    """Operation #``seq`` starts: its flight record (the slot, or NO_SLOT when the recorder is off) and a DEBUG line.

    ``fixed``: ``fixed_of(rec)``, when the caller kept it.  ``name``: the operation's name in the trace
    (default ``rec.collective``); :func:`done` with the same name and ``seq`` closes it.  ``launched``: it
    was launched already (a graph replay): recorded running too, without :func:`running`.
    """
    if CALLS.isEnabledFor(logging.DEBUG):
        peer = rec.peer
        CALLS.debug("%s #%d on %r: %d x %s = %d bytes%s%s, algorithm %s", rec.collective, seq, state.name, rec.count,
                    rec.dtype.name.lower(), rec.nbytes, "" if rec.redop is None else f", op {rec.redop.name.lower()}",
                    "" if peer < 0 else (f", root {peer}" if rec.collective in ROOTED else f", peer {peer}"),
                    rec.algorithm)
    if trace.ACTIVE:
        trace.op_begin(state.name, name or rec.collective, seq, {"algorithm": rec.algorithm, "count": rec.count,
                                                                "bytes": rec.nbytes, "dtype": rec.dtype.name.lower(),
                                                                "peer": rec.peer})
    fr = state.flight
    if fr is None:
        return NO_SLOT
    return fr.issue_fixed(seq, fixed_of(rec) if fixed is None else fixed, callsite.here(), launched)


def running(state: CommState, slot: int) -> None:
    """The operation of ``slot`` was launched."""
    fr = state.flight
    if fr is not None and slot >= 0:
        fr.running(slot)


def done(state: CommState, slot: int, name: str, seq: int) -> None:
    """Operation #``seq`` (``name`` as given to :func:`issue`) completed, whichever way: its flight record, and its
    trace slice."""
    fr = state.flight
    if fr is not None and slot >= 0:
        fr.done(slot)
    if trace.ACTIVE:
        trace.op_end(state.name, name, seq)


def fail(state: CommState, exc: HcclError, where: str) -> CommError:
    """The library failed in ``where``: the communicator becomes unusable; the error to raise (a mismatch when
    the signature handshake saw one)."""
    err = failure_error(exc, f"{state.where()}: {where}", live.library_names(), state.mismatch,
                        CollectiveMismatchError)
    state.mark_broken(str(err))          # nothing queued runs later (api/state.py)
    failed(state, exc, err)
    return err


def failed(state: CommState, exc: Optional[HcclError], err: BaseException) -> None:
    """The communicator failed with ``err``: open records fail; a timeout, a dead peer or a detected desync dumps every ring."""
    fr = state.flight
    if fr is not None:
        fr.fail_open()
    if trace.ACTIVE:                 # its open operations end here, failed (the timeline closes every operation)
        trace.ops_failed(state.name)
    timeout = isinstance(err, TimeoutError) or isinstance(exc, TimeoutError)
    gone = exc is not None and exc.code in _PEER_GONE_CODES
    desync = isinstance(err, CollectiveMismatchError)   # a library's in-band report became one (api/errors.py)
    if not (timeout or gone or desync):
        return
    try:
        path = flight.dump_all(f"{type(err).__name__}: {err}", failed_comm=state.name)
    except (OSError, ValueError) as dump_err:      # a full disk or an unusable directory must not hide ``err``
        path = None
        sys.stderr.write(f"hcomm: rank {state.rank}: could not write the flight recorder: {dump_err}\n")
    LOG.warning("%s; flight recorder %s", err, f"written to {path}" if path else
                "not written (set HCOMM_FR_DIR to keep it)")
    if path is not None and not settings.value("HCOMM_RUN_JOB_DIR"):   # hcomm run prints the report itself
        world = live.current_world()
        sys.stderr.write(f"hcomm: rank {world.rank if world is not None else state.rank} wrote its flight recorder to "
                         f"{path}; `hcomm doctor {flight.directory()}` explains the failure once every rank wrote "
                         "its own\n")
