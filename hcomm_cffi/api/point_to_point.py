"""Point-to-point for a Comm (composition, not a mixin): one lane (own stream + thread) per (peer, direction).

Lanes let sends to one peer proceed while a receive from another is pending, so the classic
"everyone sends right, then receives left" pattern cannot block behind another operation.  The
protocol (eager up to ``eager_limit`` bytes, rendezvous above; headers checked on receipt) is in
:mod:`hcomm_cffi.algorithms.p2p`.

``stream=`` send/recv (:meth:`PointToPoint.on_stream`) are the library's own HcclSend/HcclRecv on the caller's
stream instead, taken by the engine as stream-ordered collectives are.

A receive from any source (:meth:`PointToPoint.irecv_any`) first watches the inboxes in this rank's
HCCL buffer (one device-to-host copy of each header) for the next message of some peer, then posts
an ordinary receive from that peer: the sender is whoever's message arrives first.
"""
from __future__ import annotations

import threading
import time
import warnings
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple, cast

import numpy as np

from .._ffi import ffi
from ..algorithms import p2p
from ..algorithms.interface import COMM_ENGINE, IssueContext, region_bytes
from ..algorithms.formulas import p2p_plan
from ..algorithms.tasks import TaskBatch
from ..enums import DataType, MemcpyKind
from ..errors import HcclError
from ..resources import ResourceCache, Resources
from .buffers import NO_STAGING, Buffer, Staging, as_buffer, own_bytes
from . import observe
from .call import LaunchBatch, Call
from .errors import CommTimeoutError, MessageMismatchError
from .requests import Pending, Request, request_for, timeout_arg
from .engine import Engine
from .state import CommState
from .streams import stream_handle, sync_stream

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
    """send/recv/isend/irecv/send_multi/recv_multi of one :class:`Comm` (which delegates to it)."""

    def __init__(self, state: CommState) -> None:
        self.state = state        # the communicator's state (api/state.py)
        self.engine: Optional[Engine] = None   # the communicator's engine, once it has a handle (Comm._setup)
        self.lanes: Dict[Tuple[int, str], Lane] = {}   # (peer, direction): at most two per peer, no bound needed
        # per thread: messages whose lane state it advanced (its interrupted blocking call breaks if it moved one;
        # another thread's posts in the meantime are not this call's)
        self._posted = threading.local()

    # ------------------------------------------------------------------ public API
    def send(self, x: Any, dst: int, *, timeout: Optional[float] = None) -> None:
        """Send ``x`` to ``dst``; returns once ``x`` may be reused (eager) or the peer has it (rendezvous)."""
        if timeout is not None:       # every argument is checked before anything is posted
            timeout = timeout_arg(timeout)
        self._blocking(partial(self._post_send, [x], dst, "isend", True), timeout, dst, "recv")

    def recv(self, buf: Any, src: int, *, timeout: Optional[float] = None) -> Any:
        """Receive into ``buf`` from ``src`` (sizes and dtypes must match the send); returns ``buf``."""
        if timeout is not None:
            timeout = timeout_arg(timeout)
        return self._blocking(partial(self._post_recv, [buf], src, "irecv", True), timeout, src, "send")

    def isend(self, x: Any, dst: int) -> Request[Any]:
        """Start sending ``x`` to ``dst``; do not modify ``x`` before the request completes."""
        return self._post_send([x], dst, "isend", single=True)

    def irecv(self, buf: Any, src: int) -> Request[Any]:
        """Start receiving into ``buf`` from ``src``; wait() returns ``buf``."""
        return self._post_recv([buf], src, "irecv", single=True)

    def send_multi(self, items: Sequence[Any], dst: int, *, timeout: Optional[float] = None) -> None:
        """Send several buffers to ``dst`` as consecutive messages in one launch."""
        timeout = timeout_arg(timeout)
        self._blocking(lambda: self._post_send(self._items(items, "send_multi"), dst, "send_multi", single=False),
                       timeout, dst, "recv_multi")

    def recv_multi(self, items: Sequence[Any], src: int, *, timeout: Optional[float] = None) -> List[Any]:
        """Receive consecutive messages from ``src`` into the given buffers; returns them."""
        timeout = timeout_arg(timeout)
        got = self._blocking(lambda: self._post_recv(self._items(items, "recv_multi"), src, "recv_multi",
                                                     single=False), timeout, src, "send_multi")
        return cast(List[Any], got)

    def on_stream(self, direction: str, x: Any, peer: int, stream: Any) -> Request[Any]:
        """Enqueue the library's HcclSend (``direction`` "send": ``x`` to ``peer``) or HcclRecv ("recv": into ``x``
        from ``peer``) on ``stream``, after the work there, and return its Request without waiting -- so it can be
        captured into an ACL graph (:mod:`.graphs`).  Not the lanes' protocol (no header checked on receipt): sizes
        and dtypes must match the peer's call, as for HcclSend/HcclRecv.  The engine takes it as a started
        collective (one flight record and trace entry, closed by its Pending's completion)."""
        state, engine = self.state, self.engine
        sending = direction == "send"
        peer = state.rank_arg("dst" if sending else "src", peer)
        if peer == state.rank:
            raise ValueError(f"{'dst' if sending else 'src'}={peer} is this rank; expected another rank of "
                             f"communicator {state.name!r}")
        buf = as_buffer(x, "x" if sending else "buf", writable=not sending)
        stream_handle(stream)                  # a stream of this process (refused before anything is issued)
        if engine is None:                     # a null communicator: refused as every call on it
            state.check_usable(direction)
        assert engine is not None
        c = Call(direction, "native", stream=stream)   # the library's own send/recv
        c.data(buf if sending else None, None if sending else buf, buf.count, buf.nbytes)
        c.dtype = buf.dtype
        c.direct = state.binding.send if sending else state.binding.recv
        c.peer = peer
        c.announces = False
        c.what = f"{direction} of {buf.nbytes} bytes {'to' if sending else 'from'} rank {peer} (stream-ordered)"
        c.record = observe.Record(direction, "p2p", buf.count, buf.nbytes, buf.dtype, None, peer)
        return engine.start(c, lambda pending: request_for(pending, None if sending else x))

    def irecv_any(self, buf: Any) -> "AnySourceRequest":
        """Start receiving into ``buf`` from whichever rank's next message arrives first (its ``source`` once done)."""
        self.state.check_usable("irecv_any")
        as_buffer(buf, "buf", writable=True)   # the argument is checked before anything is waited for
        if self.state.size < 2:
            raise ValueError("irecv_any: the communicator has one rank; there is no other rank to receive from")
        return AnySourceRequest(self, buf)

    def announced(self, start: int = 0) -> Optional[int]:
        """The first peer (from ``start`` on, cyclically) whose next unreceived message has reached this rank's inbox."""
        with self.state.lock:       # the lanes and their message numbers, as the posts leave them
            return self._announced(start)

    def _announced(self, start: int) -> Optional[int]:
        c = self.state
        c.check_usable("irecv_any")
        local, local_size = self._local_buffer()
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

    def _local_buffer(self) -> Tuple[Any, int]:
        """This rank's HCCL buffer (address, bytes)."""
        if self.lanes:
            return next(iter(self.lanes.values())).cache.local_buffer()
        return self.state.binding.get_hccl_buffer(self.state.handle)

    # ------------------------------------------------------------------ helpers
    def _blocking(self, post: Callable[[], Request[Any]], timeout: Optional[float], peer: int, matching: str) -> Any:
        """Post a blocking call (``post``) and wait for its request; on timeout say what to check.

        The transfer stays queued (it could still land in the buffer later), so the communicator is
        marked unusable rather than left to corrupt a buffer the caller reuses.  Posting and waiting are
        one region: an exception between them (Ctrl-C, an alarm) once something was launched breaks the
        communicator too (api/engine.py); one before the launch (a refused argument) does not.
        """
        posted = getattr(self._posted, "n", 0)
        req: Optional[Request[Any]] = None
        try:
            req = post()
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

    @staticmethod
    def _items(items: Any, what: str) -> List[Any]:
        if not isinstance(items, (list, tuple)):
            raise TypeError(f"{what}: items is a {type(items).__name__}; expected a list or tuple of buffers")
        if not items:
            raise ValueError(f"{what}: items is empty; expected at least one buffer")
        return list(items)

    def _peer_arg(self, name: str, value: Any, what: str) -> int:
        state = self.state
        peer = value if value.__class__ is int and 0 <= value < state.size else state.rank_arg(name, value)
        if peer == self.state.rank:
            raise ValueError(f"{what}: {name}={peer} is this rank; sending to oneself is not supported "
                             "(copy locally instead)")
        return peer

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

    def _request(self, lanes: List[Lane], keep: Any, finish: Any, c: Call, _: Optional[Pending]) -> Request[Any]:
        """The request of send/recv ``c`` posted on ``lanes[0]`` (its flight slot, trace name and number are ``c``'s)."""
        lane = lanes[0]
        pending = Pending(self.state, c.what, lane.stream, keep, lane.inflight, (c.slot, c.name or c.coll, c.seq),
                          peer=lane.peer)
        return Request(c.what, pending.sync, finish)

    def _post_send(self, items: List[Any], dst: Any, what: str, single: bool) -> Request[Any]:
        with self.state.lock:       # the call lock while the lane's state advances and the batch launches (state.py)
            dst = self._peer_arg("dst", dst, what)
            bufs = [as_buffer(items[0], "x")] if single else [as_buffer(x, f"items[{i}]") for i, x in enumerate(items)]
            staging = Staging(self.state.binding, True) if self.state.stages else NO_STAGING
            keep: List[Any] = list(bufs)  # the request owns the buffers (temporaries must outlive the transfer)
            count, nbytes = (bufs[0].count, bufs[0].nbytes) if single else _total(bufs)
            desc = f"{what} of {nbytes} bytes to rank {dst}"

            def issue(ctx: IssueContext, lane: Lane, declared: List[Buffer]) -> None:
                for buf in bufs:
                    header = p2p.make_header(lane.state.seq, buf.nbytes, buf.dtype, self.state.rank)
                    keep.append(header)
                    hb = own_bytes(header.view(np.uint8))
                    declared += (hb, buf)          # emulator: device memory (what staging makes them on CANN)
                    hp, bp = (staging.device_ptr(hb), staging.device_ptr(buf)) if staging.needed else (hb.ptr, buf.ptr)
                    p2p.issue_send(ctx, lane.res.main, dst, self.state.size, lane.state, hp, bp, buf.nbytes,
                                   eager=buf.nbytes <= self.state.eager_limit)

            def finish() -> None:
                keep.clear()
                if staging.needed:
                    staging.finish()
            return self._post(what, "send" if single else "send_multi", dst, "send", bufs, (count, nbytes), desc, issue,
                              keep, finish)

    def _post_recv(self, items: List[Any], src: Any, what: str, single: bool) -> Request[Any]:
        with self.state.lock:       # as _post_send
            src = self._peer_arg("src", src, what)
            bufs = [as_buffer(items[0], "buf", writable=True)] if single else [
                as_buffer(x, f"items[{i}]", writable=True) for i, x in enumerate(items)]
            staging = Staging(self.state.binding, True) if self.state.stages else NO_STAGING
            headers = np.zeros((len(bufs), p2p.HEADER_BYTES), np.uint8)
            first = [0]
            count, nbytes = (bufs[0].count, bufs[0].nbytes) if single else _total(bufs)
            desc = f"{what} of {nbytes} bytes from rank {src}"

            def issue(ctx: IssueContext, lane: Lane, declared: List[Buffer]) -> None:
                first[0] = lane.state.seq
                for k, buf in enumerate(bufs):
                    hb = own_bytes(headers[k])
                    declared += (hb, buf)          # emulator: device memory (what staging makes them on CANN)
                    p2p.issue_recv(ctx, lane.res.main, src, self.state.size, lane.state,
                                   staging.device_ptr(hb, False, True), staging.device_ptr(buf, False, True),
                                   buf.nbytes)

            def finish() -> Any:
                staging.finish()
                for k, buf in enumerate(bufs):
                    self._check_header(headers[k], buf, src, first[0] + k, what)
                return items[0] if single else items
            return self._post(what, "recv" if single else "recv_multi", src, "recv", bufs, (count, nbytes), desc,
                              issue, (bufs, headers), finish)

    def _post(self, what: str, op: str, peer: int, direction: str, bufs: List[Buffer], total: Tuple[int, int],
              desc: str, issue: Callable[[IssueContext, Lane, List[Buffer]], None], keep: Any, finish: Any) -> Request[Any]:
        """Post ``op`` of ``bufs`` to/from ``peer`` (the caller's ``what``) on its lane through the engine (api/engine.py: checked, recorded,
        launched, guarded); ``issue`` adds the protocol's tasks; the request completes it (``finish``)."""
        engine = self.engine
        if engine is None:                    # a null communicator: refused as every call on it
            self.state.check_usable(what)
        assert engine is not None
        c = Call(what, "native", async_op=True)
        c.announces = False
        c.what = desc
        lanes: List[Lane] = []

        def post(c: Call, declared: List[Buffer]) -> LaunchBatch:
            lane = self.lanes.get((peer, direction)) or self._new_lane(peer, direction)
            lanes.append(lane)
            ctx = lane.ctx    # with a new task batch (under the call lock: one post at a time issues on a lane)
            batch = ctx.sink = TaskBatch(self.state.binding)
            c.seq = lane.state.seq            # lanes number their messages apart: the trace name carries the peer
            c.name = f"{op} {'to' if direction == 'send' else 'from'} {peer}"
            shape = (op, total[0], total[1], bufs[0].dtype)
            kept = lane.records.get(shape)
            if kept is None:
                if len(lane.records) >= RECORDS_PER_LANE:
                    lane.records.clear()
                record = observe.Record(op, "p2p", total[0], total[1], bufs[0].dtype, None, peer)
                kept = lane.records[shape] = (record, observe.fixed_of(record))
            c.record, c.fixed = kept
            posted = self._posted
            posted.n = getattr(posted, "n", 0) + 1
            c.moves = True                    # the lane's state advances from here: cut short, it is out of step
            issue(ctx, lane, declared)
            return LaunchBatch(batch, None)
        c.post = post
        return engine.start(c, partial(self._request, lanes, keep, finish, c))

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


def _total(bufs: List[Buffer]) -> Tuple[int, int]:
    """(elements, bytes) of the messages ``bufs``."""
    return sum(b.count for b in bufs), sum(b.nbytes for b in bufs)


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
                self._inner = self._p2p.irecv(self._buf, peer)
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
