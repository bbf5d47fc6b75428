"""Point-to-point for a Comm (composition, not a mixin): one lane (own stream + thread) per (peer, direction).

Lanes let sends to one peer proceed while a receive from another is pending, so the classic
"everyone sends right, then receives left" pattern cannot block behind another operation.  The
protocol (eager up to ``eager_limit`` bytes, rendezvous above; headers checked on receipt) is in
:mod:`hcomm_cffi.algorithms.p2p`.

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
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple, cast

import numpy as np

from .._ffi import ffi
from ..algorithms import p2p
from ..algorithms.interface import COMM_ENGINE, IssueContext, region_bytes
from ..algorithms.formulas import p2p_plan
from ..algorithms.tasks import TaskBatch
from ..enums import DataType, MemcpyKind
from ..errors import HcclError
from ..resources import ResourceCache, Resources
from .buffers import Buffer, Staging, as_buffer
from . import observe
from .errors import CommError, CommTimeoutError, MessageMismatchError
from .interrupts import interrupted
from .request import Request, timeout_arg
from .streams import sync_stream

if TYPE_CHECKING:
    from .port import CommPort

__all__ = ["PointToPoint", "Lane", "AnySourceRequest"]

DRAIN_TIMEOUT_S = 10.0
PROBE_SLEEP_S = (20e-6, 1e-3)   # first and longest pause between two looks at the inboxes


@dataclass
class Lane:
    """One direction to one peer: its stream, its resources and the protocol state."""

    peer: int
    direction: str
    stream: Any
    cache: ResourceCache
    res: Resources
    state: p2p.LaneState
    inflight: List[Any] = field(default_factory=list)  # buffers of issued, unsynchronised messages


class PointToPoint:
    """send/recv/isend/irecv/send_multi/recv_multi of one :class:`Comm` (which delegates to it)."""

    def __init__(self, port: "CommPort") -> None:
        self.port = port          # the communicator's CommPort (api/port.py)
        self.lanes: Dict[Tuple[int, str], Lane] = {}   # (peer, direction): at most two per peer, no bound needed
        # per thread: messages whose lane state it advanced (its interrupted blocking call breaks if it moved one;
        # another thread's posts in the meantime are not this call's)
        self._posted = threading.local()
        self._books = threading.Lock()   # the lanes' in-flight lists: posts append, waits trim (never held in a wait)

    @property
    def posted(self) -> int:
        """Messages this thread posted so far (their lane state advanced)."""
        return getattr(self._posted, "n", 0)

    def _count_post(self) -> None:
        self._posted.n = self.posted + 1

    # ------------------------------------------------------------------ public API
    def send(self, x: Any, dst: int, *, timeout: Optional[float] = None) -> None:
        """Send ``x`` to ``dst``; returns once ``x`` may be reused (eager) or the peer has it (rendezvous)."""
        timeout = timeout_arg(timeout)   # every argument is checked before anything is posted
        self._blocking(lambda: self.isend(x, dst), timeout, dst, "recv")

    def recv(self, buf: Any, src: int, *, timeout: Optional[float] = None) -> Any:
        """Receive into ``buf`` from ``src`` (sizes and dtypes must match the send); returns ``buf``."""
        timeout = timeout_arg(timeout)
        return self._blocking(lambda: self.irecv(buf, src), timeout, src, "send")

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

    def irecv_any(self, buf: Any) -> "AnySourceRequest":
        """Start receiving into ``buf`` from whichever rank's next message arrives first (its ``source`` once done)."""
        self.port.check_usable("irecv_any")
        as_buffer(buf, "buf", writable=True)   # the argument is checked before anything is waited for
        if self.port.size < 2:
            raise ValueError("irecv_any: the communicator has one rank; there is no other rank to receive from")
        return AnySourceRequest(self, buf)

    def announced(self, start: int = 0) -> Optional[int]:
        """The first peer (from ``start`` on, cyclically) whose next unreceived message has reached this rank's inbox."""
        with self.port.lock:       # the lanes and their message numbers, as the posts leave them
            return self._announced(start)

    def _announced(self, start: int) -> Optional[int]:
        c = self.port
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
                raise c.fail(exc, "irecv_any (reading the inbox headers)") from exc
            if p2p.announces(raw, peer, lane.state.seq if lane is not None else 0):
                return peer
        return None

    def _local_buffer(self) -> Tuple[Any, int]:
        """This rank's HCCL buffer (address, bytes)."""
        if self.lanes:
            return next(iter(self.lanes.values())).cache.local_buffer()
        return self.port.binding.get_hccl_buffer(self.port.handle)

    # ------------------------------------------------------------------ helpers
    def _blocking(self, post: Callable[[], Request[Any]], timeout: Optional[float], peer: int, matching: str) -> Any:
        """Post a blocking call (``post``) and wait for its request; on timeout say what to check.

        The transfer stays queued (it could still land in the buffer later), so the communicator is
        marked unusable rather than left to corrupt a buffer the caller reuses.  Posting and waiting are
        one region: an exception between them (Ctrl-C, an alarm) once something was launched breaks the
        communicator too (api/interrupts.py); one before the launch (a refused argument) does not.
        """
        posted = self.posted
        req: Optional[Request[Any]] = None
        try:
            req = post()
            return req.wait(timeout)
        except CommTimeoutError:
            if timeout is None or self.port.broken or req is None:   # the library's own timeout: says everything
                raise
            msg = (f"rank {self.port.rank} of communicator {self.port.name!r}: {req.what} did not complete within "
                   f"{timeout:g} s; check that rank {peer} posts the matching {matching}")
            self.port.mark_broken(msg)
            err = CommTimeoutError(msg)
            observe.failed(self.port, None, err)
            raise err from None
        except BaseException as exc:       # Ctrl-C, an alarm handler...: the queued transfer must never land
            if self.posted != posted:
                what = f"{'send to' if matching.startswith('recv') else 'receive from'} rank {peer}"
                interrupted(self.port, req.what if req is not None else what, exc)
            raise

    @staticmethod
    def _items(items: Any, what: str) -> List[Any]:
        if not isinstance(items, (list, tuple)):
            raise TypeError(f"{what}: items is a {type(items).__name__}; expected a list or tuple of buffers")
        if not items:
            raise ValueError(f"{what}: items is empty; expected at least one buffer")
        return list(items)

    def _peer_arg(self, name: str, value: Any, what: str) -> int:
        peer = self.port.rank_arg(name, value)
        if peer == self.port.rank:
            raise ValueError(f"{what}: {name}={peer} is this rank; sending to oneself is not supported "
                             "(copy locally instead)")
        return peer

    def _lane(self, peer: int, direction: str) -> Lane:
        key = (peer, direction)
        lane = self.lanes.get(key)
        if lane is None:
            b = self.port.binding
            stream = b.create_stream()
            src, dst = (self.port.rank, peer) if direction == "send" else (peer, self.port.rank)
            spec = p2p_plan(self.port.topology, src, dst).resources_for(self.port.rank)
            cache = ResourceCache(b, self.port.handle, stream)
            try:
                res = cache.get("p2p", spec, "comm:p2p", COMM_ENGINE)
            except BaseException:
                b.destroy_stream(stream)
                raise
            lane = self.lanes[key] = Lane(peer, direction, stream, cache, res, p2p.LaneState())
        return lane

    def _ctx(self, lane: Lane) -> Tuple[IssueContext, TaskBatch]:
        c = self.port
        batch = TaskBatch(c.binding)
        return IssueContext(batch, lane.res, rank=c.rank, size=c.size, topology=c.topology, timeout_s=c.timeout,
                            dtype=DataType.INT8), batch

    def _request(self, lane: Lane, what: str, finish: Any, op: Tuple[int, str, int]) -> Request[Any]:
        """The request of a posted send/recv; ``op``: its flight slot, trace name and sequence number (observe)."""
        slot, name, seq = op

        def sync(timeout: Optional[float]) -> bool:
            self.port.check_process(what)
            if self.port.destroyed:     # its lanes' streams are gone: say so instead of "invalid stream handle"
                raise CommError(f"rank {self.port.rank}: {what} on communicator {self.port.name!r} can no longer "
                                "complete: the communicator was destroyed (hcomm.finalize() or destroy()) while it "
                                "was pending; wait for requests before destroying their communicator")
            try:
                with self._books:             # what was posted before this wait (other threads may post more)
                    issued = list(lane.inflight)
                if timeout is None:           # committed: published if it lasts (api/announce.py)
                    done = self.port.announcer.waiting(partial(sync_stream, self.port.binding, lane.stream),
                                                       peer=lane.peer, text=what)
                else:
                    done = sync_stream(self.port.binding, lane.stream, timeout)
                if done:                      # everything issued on the lane before the wait has completed
                    gone = {id(item) for item in issued}
                    with self._books:
                        lane.inflight[:] = [item for item in lane.inflight if id(item) not in gone]
                    observe.done(self.port, slot, name, seq)
                return done
            except HcclError as exc:
                raise self.port.fail(exc, what) from exc
            except BaseException as exc:    # Ctrl-C, an alarm...: the queued transfer must never land later
                interrupted(self.port, what, exc)
                raise
        return Request(what, sync, finish)

    def _post_send(self, items: List[Any], dst: Any, what: str, single: bool) -> Request[Any]:
        # the call lock while the lane's state advances and the batch launches (port.py)
        return self._post_locked(lambda: self._send_locked(items, dst, what, single), f"{what} to rank {dst}")

    def _send_locked(self, items: List[Any], dst: Any, what: str, single: bool) -> Request[Any]:
        self.port.check_usable(what)
        dst = self._peer_arg("dst", dst, what)
        bufs = [as_buffer(x, "x" if single else f"items[{i}]") for i, x in enumerate(items)]
        lane = self._lane(dst, "send")
        op = self._record("send" if single else "send_multi", lane, bufs)
        ctx, batch = self._ctx(lane)
        staging = Staging(self.port.binding, self.port.stages)
        keep: List[Any] = list(bufs)  # the request owns the buffers (temporaries must outlive the transfer)
        desc = f"{what} of {sum(b.nbytes for b in bufs)} bytes to rank {dst}"

        def finish() -> None:
            keep.clear()
            staging.finish()
        self._count_post()
        try:                 # the lane's state advances from here: cut short before it is returned, out of step
            for buf in bufs:
                header = p2p.make_header(lane.state.seq, buf.nbytes, buf.dtype, self.port.rank)
                keep.append(header)
                hb = as_buffer(header.view(np.uint8), "header")
                self.port.declare_device_memory(hb)      # emulator: what staging makes them on CANN
                self.port.declare_device_memory(buf)
                p2p.issue_send(ctx, lane.res.main, dst, self.port.size, lane.state, staging.device_ptr(hb),
                               staging.device_ptr(buf), buf.nbytes, eager=buf.nbytes <= self.port.eager_limit)
            self._launch(batch, desc, op[0])
            with self._books:
                lane.inflight.append(keep)
            return self._request(lane, desc, finish, op)
        except BaseException as exc:
            interrupted(self.port, desc, exc)
            raise

    def _post_recv(self, items: List[Any], src: Any, what: str, single: bool) -> Request[Any]:
        return self._post_locked(lambda: self._recv_locked(items, src, what, single), f"{what} from rank {src}")

    def _post_locked(self, post: Callable[[], Request[Any]], what: str) -> Request[Any]:
        """``post()`` under the call lock: one guarded region up to its Request handed back.  An exception once it
        posted (Ctrl-C, an alarm; also in the lock's release, after the launch) breaks the communicator, as the
        caller then holds no Request to wait for the queued transfer with (api/interrupts.py)."""
        posted: Optional[int] = None
        try:
            with self.port.lock:
                posted = self.posted
                req = post()
            return req
        except BaseException as exc:
            if posted is not None and self.posted != posted:
                interrupted(self.port, what, exc)
            raise

    def _recv_locked(self, items: List[Any], src: Any, what: str, single: bool) -> Request[Any]:
        self.port.check_usable(what)
        src = self._peer_arg("src", src, what)
        bufs = [as_buffer(x, "buf" if single else f"items[{i}]", writable=True) for i, x in enumerate(items)]
        lane = self._lane(src, "recv")
        op = self._record("recv" if single else "recv_multi", lane, bufs)
        ctx, batch = self._ctx(lane)
        staging = Staging(self.port.binding, self.port.stages)
        headers = np.zeros((len(bufs), p2p.HEADER_BYTES), np.uint8)
        first_seq = lane.state.seq
        desc = f"{what} of {sum(b.nbytes for b in bufs)} bytes from rank {src}"

        def finish() -> Any:
            staging.finish()
            for k, buf in enumerate(bufs):
                self._check_header(headers[k], buf, src, first_seq + k, what)
            return items[0] if single else items
        self._count_post()
        try:                 # the lane's state advances from here: cut short before it is returned, out of step
            for k, buf in enumerate(bufs):
                hb = as_buffer(headers[k], "header", writable=True)
                self.port.declare_device_memory(hb)      # emulator: what staging makes them on CANN
                self.port.declare_device_memory(buf)
                p2p.issue_recv(ctx, lane.res.main, src, self.port.size, lane.state,
                               staging.device_ptr(hb, False, True), staging.device_ptr(buf, False, True), buf.nbytes)
            self._launch(batch, desc, op[0])
            with self._books:
                lane.inflight.append((bufs, headers))
            return self._request(lane, desc, finish, op)
        except BaseException as exc:
            interrupted(self.port, desc, exc)
            raise

    def _record(self, op: str, lane: Lane, bufs: List[Buffer]) -> Tuple[int, str, int]:
        """The flight record (and DEBUG line, trace slice) of a send/recv of ``bufs`` on ``lane``: (slot, trace name,
        sequence number), what observe.done closes it with.  Lanes number their messages separately, so the
        trace name carries the peer."""
        name = f"{op} {'to' if lane.direction == 'send' else 'from'} {lane.peer}"
        seq = lane.state.seq
        slot = observe.issue(self.port, seq, observe.Record(op, "p2p", sum(b.count for b in bufs),
                             sum(b.nbytes for b in bufs), bufs[0].dtype, None, lane.peer), name=name)
        return slot, name, seq

    def _launch(self, batch: TaskBatch, desc: str, slot: int = observe.NO_SLOT) -> None:
        try:
            batch.launch()
        except HcclError as exc:
            raise self.port.fail(exc, desc) from exc
        observe.running(self.port, slot)

    def _check_header(self, raw: np.ndarray, buf: Buffer, src: int, seq: int, what: str) -> None:
        h = p2p.parse_header(raw)
        where = f"rank {self.port.rank} of communicator {self.port.name!r}: {what} from rank {src}"
        if h["magic"] != p2p.MAGIC:
            self.port.mark_broken(f"{where}: corrupt message header")
            raise MessageMismatchError(f"{where}: no valid message header arrived (magic 0x{h['magic']:08x}); "
                                       "the sender did not send a message of this kind")
        if h["nbytes"] != buf.nbytes or h["dtype"] != int(buf.dtype) or h["seq"] != (seq & 0xFFFFFFFF):
            self.port.mark_broken(f"{where}: message/buffer mismatch")
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
            self.port.binding.destroy_stream(lane.stream)
        self.lanes.clear()

    def drain(self) -> None:
        """Consume credits still owed to eager senders so no notify outlives the communicator."""
        for lane in list(self.lanes.values()):
            if lane.direction != "send" or lane.state.credit:
                continue
            ctx, batch = self._ctx(lane)
            p2p.drain(ctx, lane.res.main, lane.peer, lane.state)
            try:
                batch.launch()
                if not sync_stream(self.port.binding, lane.stream, min(DRAIN_TIMEOUT_S, self.port.timeout or DRAIN_TIMEOUT_S)):
                    warnings.warn(f"rank {self.port.rank}: destroy of {self.port.name!r}: rank {lane.peer} never received "
                                  "an eager message sent to it", RuntimeWarning, stacklevel=3)
            except HcclError as exc:
                warnings.warn(f"rank {self.port.rank}: destroy of {self.port.name!r}: draining the lane to rank {lane.peer} "
                              f"failed: {exc}", RuntimeWarning, stacklevel=3)


class AnySourceRequest(Request[Any]):
    """A receive from any source: watches the inboxes until a peer's message arrives, then receives it from that peer."""

    def __init__(self, p2p_: PointToPoint, buf: Any) -> None:
        super().__init__(f"irecv_any on rank {p2p_.port.rank}", self._step, result=buf)
        self._p2p = p2p_
        self._buf = buf
        self._inner: Optional[Request[Any]] = None
        self._limit = p2p_.port.timeout          # a message from nobody fails after the communicator's timeout
        self._began = time.monotonic()
        self.source: Optional[int] = None        # the sender, once its message was seen

    def _step(self, timeout: Optional[float]) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = PROBE_SLEEP_S[0]
        while self._inner is None:
            peer = self._p2p.announced((self._p2p.port.rank + 1) % self._p2p.port.size)
            if peer is not None:
                self.source = peer
                self._inner = self._p2p.irecv(self._buf, peer)
                self.what = f"irecv_any (from rank {peer}) on rank {self._p2p.port.rank}"
                break
            now = time.monotonic()
            if self._limit and now - self._began > self._limit:
                c = self._p2p.port
                raise CommTimeoutError(f"rank {c.rank} of communicator {c.name!r}: irecv_any: no message from any "
                                       f"rank arrived within {self._limit:g} s (the communicator's timeout)")
            if deadline is not None and now >= deadline:
                return False
            time.sleep(pause if deadline is None else min(pause, max(0.0, deadline - now)))
            pause = min(pause * 2, PROBE_SLEEP_S[1])
        return self._inner.poll(None if deadline is None else max(0.0, deadline - time.monotonic()))
