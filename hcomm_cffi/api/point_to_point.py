"""Point-to-point lanes of a Comm: one lane (own stream + thread) per (peer, direction), so sends to one peer
proceed while a receive from another is pending ("everyone sends right, then receives left" cannot block).
The protocol (eager up to ``eager_limit`` bytes, rendezvous above; headers checked on receipt) is in
:mod:`hcomm_cffi.algorithms.p2p`.  A receive from any source (:meth:`PointToPoint.irecv_any`) watches the
inboxes in this rank's HCCL buffer for the next message of some peer, then receives it from that peer.
"""
from __future__ import annotations

import threading
import time
import warnings
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Dict, List, Optional, Set, Tuple

import numpy as np

from .._ffi import ffi
from ..algorithms import p2p
from ..algorithms.interface import COMM_ENGINE, IssueContext, region_bytes
from ..algorithms.formulas import p2p_plan
from ..algorithms.tasks import TaskBatch
from ..enums import DataType, MemcpyKind
from ..errors import HcclError
from ..resources import ResourceCache, Resources
from .buffers import NO_STAGING, Buffer, Staging, own_bytes
from . import observe
from .op import Call, LaunchBatch, as_buffer, lane_call
from .errors import CommTimeoutError, MessageMismatchError
from .requests import Pending, Request
from .engine import Engine
from .state import CommState
from .streams import sync_stream

__all__ = ["PointToPoint", "Lane", "AnySourceRequest"]

DRAIN_TIMEOUT_S = 10.0
PROBE_SLEEP_S = (20e-6, 1e-3)   # first and longest pause between two looks at the inboxes
RECORDS_PER_LANE = 64          # distinct message shapes a lane keeps the records of (more start over)


@dataclass
class Lane:
    """One direction to one peer: its stream, its resources and the protocol state."""

    peer: int
    direction: str
    stream: Any
    cache: ResourceCache
    res: Resources
    state: p2p.LaneState
    ctx: IssueContext      # the lane's issuing context, constant but for its task batch (``sink``), set per post
    # (op, elements, bytes, dtype) -> its flight record and encoded fields: a repeated message re-derives neither
    records: Dict[Tuple[str, int, int, DataType], Tuple[observe.Record, bytes]] = field(default_factory=dict)
    inflight: Set[Pending] = field(default_factory=set)  # its messages not yet seen complete (api/requests.py)


class PointToPoint:
    """The lanes of one :class:`Comm`: they bind its send/recv operations (api/op.py: ``lane_call``) for the engine."""

    def __init__(self, state: CommState) -> None:
        self.state = state        # the communicator's state (api/state.py)
        self.engine: Optional[Engine] = None   # the communicator's engine, once it has a handle (Comm._setup)
        self.lanes: Dict[Tuple[int, str], Lane] = {}   # (peer, direction): at most two per peer, no bound needed
        # per thread: messages whose lane state it advanced (its interrupted blocking call breaks if it moved one;
        # another thread's posts in the meantime are not this call's)
        self._posted = threading.local()

    def irecv_any(self, buf: Any) -> "AnySourceRequest":
        """Start receiving into ``buf`` from whichever rank's next message arrives first (its ``source`` once done)."""
        self.state.check_usable("irecv_any")
        as_buffer(buf, "buf", writable=True)   # the argument is checked before anything is waited for
        if self.state.size < 2:
            raise ValueError("irecv_any: the communicator has one rank; there is no other rank to receive from")
        return AnySourceRequest(self, buf)

    def announced(self, start: int = 0) -> Optional[int]:
        """The first peer (from ``start`` on, cyclically) whose next unreceived message has reached this rank's inbox."""
        c = self.state
        with c.lock:       # the lanes and their message numbers, as the posts leave them
            c.check_usable("irecv_any")
            local, local_size = (next(iter(self.lanes.values())).cache.local_buffer() if self.lanes   # its HCCL
                                 else c.binding.get_hccl_buffer(c.handle))                           # buffer
            raw = np.zeros(p2p.HEADER_BYTES, np.uint8)
            dst = ffi.from_buffer(raw)
            for k in range(c.size):
                peer = (start + k) % c.size
                if peer == c.rank:
                    continue
                lane = self.lanes.get((peer, "recv"))
                smallest = lane.res.smallest_buffer if lane is not None else local_size
                off, _ = p2p.inbox_at(region_bytes(smallest), peer, c.size)
                try:
                    c.binding.memcpy(dst, p2p.HEADER_BYTES, local + off, p2p.HEADER_BYTES, MemcpyKind.DEVICE_TO_HOST)
                except HcclError as exc:
                    raise observe.fail(c, exc, "irecv_any (reading the inbox headers)") from exc
                if p2p.announces(raw, peer, lane.state.seq if lane is not None else 0):
                    return peer
        return None

    # ------------------------------------------------------------------ helpers
    def blocking(self, c: Call, timeout: Optional[float], matching: str) -> Any:
        """Post the blocking send/recv ``c`` and wait for its request; on timeout say what to check.  A
        timed-out or interrupted transfer stays queued (it could land later in a buffer the caller reuses), so the
        communicator breaks; a call refused before its launch does not."""
        posted = getattr(self._posted, "n", 0)
        req: Optional[Request[Any]] = None
        peer = c.peer
        try:
            req = self.post(c)
            return req.wait(timeout)
        except CommTimeoutError:
            if timeout is None or self.state.broken or req is None:   # the library's own timeout: says everything
                raise
            msg = (f"rank {self.state.rank} of communicator {self.state.name!r}: {req.what} did not complete within "
                   f"{timeout:g} s; check that rank {peer} posts the matching {matching}")
            self.state.mark_broken(msg)
            err = CommTimeoutError(msg)
            observe.failed(self.state, None, err)
            raise err from None
        except BaseException as exc:       # Ctrl-C, an alarm handler...: the queued transfer must never land
            if getattr(self._posted, "n", 0) != posted:
                what = f"{'send to' if matching.startswith('recv') else 'receive from'} rank {peer}"
                self.state.interrupted(req.what if req is not None else what, exc)
            raise

    def _new_lane(self, peer: int, direction: str) -> Lane:
        """The lane to/from ``peer`` (``direction`` "send" or "recv"), made on its first message."""
        c, b = self.state, self.state.binding
        stream = b.create_stream()
        src, dst = (c.rank, peer) if direction == "send" else (peer, c.rank)
        spec = p2p_plan(c.topology, src, dst).resources_for(c.rank)
        cache = ResourceCache(b, c.handle, stream)
        try:
            res = cache.get("p2p", spec, "comm:p2p", COMM_ENGINE)
        except BaseException:
            b.destroy_stream(stream)
            raise
        ctx = IssueContext(TaskBatch(b), res, rank=c.rank, size=c.size, topology=c.topology, timeout_s=c.timeout,
                           dtype=DataType.INT8)
        lane = self.lanes[(peer, direction)] = Lane(peer, direction, stream, cache, res, p2p.LaneState(), ctx)
        return lane

    def _request(self, lanes: List[Lane], keep: Any, finish: Any, landed: Optional[List[bool]], c: Call,
                 _: Optional[Pending]) -> Request[Any]:
        """The request of send/recv ``c`` posted on ``lanes[0]`` (its flight slot, trace name and number are ``c``'s;
        ``landed``: set by a task right after its own, where the backend runs host tasks)."""
        lane = lanes[0]
        pending = Pending(self.state, c.what, lane.stream, keep, lane.inflight, (c.slot, c.name or c.coll, c.seq),
                          peer=lane.peer, landed=landed)
        return Request(c.what, pending.sync, finish)

    def post(self, c: Call) -> Request[Any]:
        """Post the lane send/recv ``c`` (api/op.py: ``lane_call``) through the engine (api/engine.py: checked, recorded,
        launched, guarded): a send's request completes once its buffers may be reused, a receive's once its messages
        arrived and their headers matched (it returns ``c.result``)."""
        with self.state.lock:       # the call lock while the lane's state advances and the batch launches (state.py)
            state, engine, bufs, peer, op = self.state, self.engine, c.items, c.peer, c.message
            assert engine is not None             # (a null communicator's call was refused by lane_call)
            direction = op[:4]                    # "send" or "recv": how lane_call names its operation
            staging = Staging(state.binding, True) if state.stages else NO_STAGING
            keep: Any
            if direction == "send":
                sent: List[Any] = list(bufs)  # the request owns the buffers (temporaries must outlive the transfer)
                keep = sent

                def issue(ctx: IssueContext, lane: Lane, declared: List[Buffer]) -> None:
                    for buf in bufs:
                        header = p2p.make_header(lane.state.seq, buf.nbytes, buf.dtype, state.rank)
                        sent.append(header)
                        hb = own_bytes(header.view(np.uint8))
                        declared += (hb, buf)          # emulator: device memory (what staging makes them on CANN)
                        hp, bp = (staging.device_ptr(hb), staging.device_ptr(buf)) if staging.needed else (hb.ptr, buf.ptr)
                        p2p.issue_send(ctx, lane.res.main, peer, state.size, lane.state, hp, bp, buf.nbytes,
                                       eager=buf.nbytes <= state.eager_limit)

                def finish() -> Any:
                    sent.clear()
                    if staging.needed:
                        staging.finish()
            else:
                headers = np.zeros((len(bufs), p2p.HEADER_BYTES), np.uint8)
                keep, first = (bufs, headers), [0]

                def issue(ctx: IssueContext, lane: Lane, declared: List[Buffer]) -> None:
                    first[0] = lane.state.seq
                    for k, buf in enumerate(bufs):
                        hb = own_bytes(headers[k])
                        declared += (hb, buf)          # emulator: device memory (what staging makes them on CANN)
                        p2p.issue_recv(ctx, lane.res.main, peer, state.size, lane.state,
                                       staging.device_ptr(hb, False, True), staging.device_ptr(buf, False, True),
                                       buf.nbytes)

                def finish() -> Any:
                    staging.finish()
                    for k, buf in enumerate(bufs):
                        self._check_header(headers[k], buf, peer, first[0] + k, c.coll)
                    return c.result
            lanes: List[Lane] = []
            # its wait ends once its own tasks ran, not when other threads' later posts on the lane did (requests.py)
            landed: Optional[List[bool]] = [False] if engine.caps.host_tasks else None

            def post(c: Call, declared: List[Buffer]) -> LaunchBatch:
                lane = self.lanes.get((peer, direction)) or self._new_lane(peer, direction)
                lanes.append(lane)
                ctx = lane.ctx    # with a new task batch (under the call lock: one post at a time issues on a lane)
                batch = ctx.sink = TaskBatch(state.binding)
                c.seq = lane.state.seq            # lanes number their messages apart: the trace name carries the peer
                c.name = f"{op} {'to' if direction == 'send' else 'from'} {peer}"
                shape = (op, c.count, c.nbytes, c.dtype)
                kept = lane.records.get(shape)
                if kept is None:
                    if len(lane.records) >= RECORDS_PER_LANE:
                        lane.records.clear()
                    record = observe.Record(op, "p2p", c.count, c.nbytes, c.dtype, None, peer)
                    kept = lane.records[shape] = (record, observe.fixed_of(record))
                c.record, c.fixed = kept
                posted = self._posted
                posted.n = getattr(posted, "n", 0) + 1
                c.moves = True                    # the lane's state advances from here: cut short, it is out of step
                issue(ctx, lane, declared)
                if landed is not None:
                    batch.calls.append(state.binding.lib.host_task(lane.res.main, partial(landed.__setitem__, 0, True)))
                return LaunchBatch(batch, None)
            c.post = post
            return engine.start(c, partial(self._request, lanes, keep, finish, landed, c))

    def _check_header(self, raw: np.ndarray, buf: Buffer, src: int, seq: int, what: str) -> None:
        h = p2p.parse_header(raw)
        where = f"rank {self.state.rank} of communicator {self.state.name!r}: {what} from rank {src}"
        if h["magic"] != p2p.MAGIC:
            self.state.mark_broken(f"{where}: corrupt message header")
            raise MessageMismatchError(f"{where}: no valid message header arrived (magic 0x{h['magic']:08x}); "
                                       "the sender did not send a message of this kind")
        if h["nbytes"] != buf.nbytes or h["dtype"] != int(buf.dtype) or h["seq"] != (seq & 0xFFFFFFFF):
            self.state.mark_broken(f"{where}: message/buffer mismatch")
            try:
                sent = DataType(h["dtype"]).name.lower()
            except ValueError:
                sent = f"dtype {h['dtype']}"
            raise MessageMismatchError(
                f"{where}: message #{h['seq']} is {h['nbytes']} bytes of {sent} but the receive buffer is "
                f"{buf.nbytes} bytes of {buf.dtype.name.lower()} (message #{seq} expected); sends and "
                "receives must match in order, size and dtype")

    def pending(self) -> int:
        """Sends and receives posted and not yet known complete (the caller never waited for them)."""
        return sum(len(lane.inflight) for lane in self.lanes.values())

    def close(self) -> None:
        """Destroy every lane's stream (the communicator is destroyed; its resources went with the handle)."""
        for lane in self.lanes.values():
            self.state.binding.destroy_stream(lane.stream)
        self.lanes.clear()

    def drain(self) -> None:
        """Consume credits still owed to eager senders so no notify outlives the communicator."""
        for lane in list(self.lanes.values()):
            if lane.direction != "send" or lane.state.credit:
                continue
            ctx = lane.ctx
            batch = ctx.sink = TaskBatch(self.state.binding)
            p2p.drain(ctx, lane.res.main, lane.peer, lane.state)
            try:
                batch.launch()
                if not sync_stream(self.state.binding, lane.stream, min(DRAIN_TIMEOUT_S, self.state.timeout or DRAIN_TIMEOUT_S)):
                    warnings.warn(f"rank {self.state.rank}: destroy of {self.state.name!r}: rank {lane.peer} never received "
                                  "an eager message sent to it", RuntimeWarning, stacklevel=3)
            except HcclError as exc:
                warnings.warn(f"rank {self.state.rank}: destroy of {self.state.name!r}: draining the lane to rank {lane.peer} "
                              f"failed: {exc}", RuntimeWarning, stacklevel=3)


class AnySourceRequest(Request[Any]):
    """A receive from any source: watches the inboxes until a peer's message arrives, then receives it from that peer."""

    def __init__(self, p2p_: PointToPoint, buf: Any) -> None:
        super().__init__(f"irecv_any on rank {p2p_.state.rank}", self._step, lambda: buf)
        self._p2p = p2p_
        self._buf = buf
        self._inner: Optional[Request[Any]] = None
        self._limit = p2p_.state.timeout          # a message from nobody fails after the communicator's timeout
        self._began = time.monotonic()
        self.source: Optional[int] = None        # the sender, once its message was seen

    def _step(self, timeout: Optional[float]) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = PROBE_SLEEP_S[0]
        while self._inner is None:
            peer = self._p2p.announced((self._p2p.state.rank + 1) % self._p2p.state.size)
            if peer is not None:
                self.source = peer
                self._inner = self._p2p.post(lane_call(self._p2p.state, False, "irecv", peer, self._buf))
                self.what = f"irecv_any (from rank {peer}) on rank {self._p2p.state.rank}"
                break
            now = time.monotonic()
            if self._limit and now - self._began > self._limit:
                c = self._p2p.state
                raise CommTimeoutError(f"rank {c.rank} of communicator {c.name!r}: irecv_any: no message from any "
                                       f"rank arrived within {self._limit:g} s (the communicator's timeout)")
            if deadline is not None and now >= deadline:
                return False
            time.sleep(pause if deadline is None else min(pause, max(0.0, deadline - now)))
            pause = min(pause * 2, PROBE_SLEEP_S[1])
        return self._inner.poll(None if deadline is None else max(0.0, deadline - time.monotonic()))
