"""Root-info exchange: rank 0 publishes the 4108-byte blob, every rank registers its arrival and waits.

Channels (chosen by ``discover()``, see ``hcomm_cffi/bootstrap/__init__.py``):

* :class:`FileStore` - one file per key in a directory: ``hcomm run``'s private job directory, or
  ``$HCOMM_RENDEZVOUS_DIR`` (default the temp dir) ``/hcomm-rdzv-<uid>-<job id>`` elsewhere.  Writes are
  atomic (temp file + rename).  Local jobs, or several hosts sharing a file system.
* :class:`TcpStore` - a tiny key-value server that rank 0 runs in a daemon thread, and a client for it.
  Length-prefixed JSON over TCP; no authentication, so bind it to loopback or a trusted network.
* :class:`TorchStore` - the store behind an initialised ``torch.distributed`` default group.
* :func:`mpi_exchange` - point-to-point arrival messages and a broadcast over ``MPI.COMM_WORLD``.

Protocol over a key-value store (:func:`exchange_root_info`), under ``<job id>/<generation>/``:
``arrived/<rank>`` from every rank, ``root_info`` (or ``error``) from rank 0, then every rank waits until
all ranks arrived and the root info is there; ranks > 0 then write ``left/<rank>``, and rank 0 (which
may host the store) returns once all have left, deleting the generation's keys.  A rank that times out names the ranks that never arrived.
"""
from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import socket
import socketserver
import struct
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ..enums import HCCL_ROOT_INFO_BYTES

__all__ = [
    "BootstrapError", "RendezvousTimeout", "KeyValueStore", "FileStore", "TcpStore", "TcpStoreServer",
    "TorchStore", "exchange_root_info", "mpi_exchange", "next_generation", "format_ranks", "serve_tcp_store",
]


class BootstrapError(RuntimeError):
    """The rendezvous could not produce a root info (bad setup, rank 0 failed, store unreachable)."""


class RendezvousTimeout(BootstrapError, TimeoutError):
    """Some ranks did not arrive in time; ``missing`` lists them, ``arrived`` the others."""

    def __init__(self, message: str, missing: Sequence[int], arrived: Sequence[int]) -> None:
        super().__init__(message)
        self.missing = list(missing)
        self.arrived = list(arrived)


class StoreUnavailable(BootstrapError):
    """The store cannot be reached right now (e.g. rank 0's TCP server is not up yet)."""


def format_ranks(ranks: Sequence[int]) -> str:
    """``[0, 1, 2, 5, 7, 8]`` -> ``'0-2, 5, 7-8'`` (short, even for thousands of ranks)."""
    parts: List[str] = []
    for _, group in itertools.groupby(enumerate(sorted(ranks)), key=lambda t: t[1] - t[0]):
        run = [r for _, r in group]
        parts.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
    return ", ".join(parts)


_GENERATIONS: Dict[str, int] = {}
_GEN_LOCK = threading.Lock()


def next_generation(job_id: str) -> int:
    """0, 1, 2, ... per job id in this process: the n-th bootstrap of a job uses its own keys.

    Every rank must bootstrap the same number of times in the same order (as every collective call).
    """
    with _GEN_LOCK:
        gen = _GENERATIONS.get(job_id, 0)
        _GENERATIONS[job_id] = gen + 1
        return gen


# ---------------------------------------------------------------------------------------------- stores
class KeyValueStore:
    """The few operations the protocol needs.  Keys are ``/``-separated ASCII paths."""

    description = "key-value store"

    def set(self, key: str, value: bytes) -> None:
        raise NotImplementedError

    def get(self, key: str) -> Optional[bytes]:
        """The value, or None when the key is not set (never blocks)."""
        raise NotImplementedError

    def missing(self, keys: Sequence[str]) -> List[str]:
        """The keys of ``keys`` that are not set."""
        return [k for k in keys if self.get(k) is None]

    def delete_prefix(self, prefix: str) -> None:
        """Forget every key under ``prefix/`` (best effort)."""

    def close(self) -> None:
        """Release connections (the data stays)."""


class FileStore(KeyValueStore):
    """Keys are files under ``root``; a value is published by an atomic rename."""

    def __init__(self, root: str, remove_root: bool = False) -> None:
        self.root = os.path.abspath(root)
        self.remove_root = remove_root  # delete_prefix also removes ``root`` once it is empty
        self.description = f"file rendezvous in {self.root}"

    def _path(self, key: str) -> str:
        if key.startswith("/") or ".." in key.split("/"):
            raise ValueError(f"key={key!r}; expected a relative path without '..'")
        return os.path.join(self.root, *key.split("/"))

    def set(self, key: str, value: bytes) -> None:
        path = self._path(key)
        for _ in range(20):  # a concurrent delete_prefix may remove the directory under us: retry
            try:
                os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
                tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
                with open(tmp, "wb") as fh:
                    fh.write(value)
                os.replace(tmp, path)
                return
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise BootstrapError(f"{self.description}: cannot write {path}: {exc.strerror}") from None
        raise BootstrapError(f"{self.description}: cannot write {path}: its directory keeps disappearing")

    def get(self, key: str) -> Optional[bytes]:
        try:
            with open(self._path(key), "rb") as fh:
                return fh.read()
        except FileNotFoundError:
            return None

    def missing(self, keys: Sequence[str]) -> List[str]:
        return [k for k in keys if not os.path.exists(self._path(k))]

    def delete_prefix(self, prefix: str) -> None:
        shutil.rmtree(self._path(prefix), ignore_errors=True)
        if self.remove_root:
            try:
                os.rmdir(self.root)
            except OSError:
                pass  # not empty: another generation is in use


def _send_msg(sock: socket.socket, obj: Dict[str, Any]) -> None:
    data = json.dumps(obj).encode()
    sock.sendall(struct.pack("!I", len(data)) + data)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks = []
    while n:
        chunk = sock.recv(n)
        if not chunk:
            raise ConnectionError("connection closed by the peer")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


_MAX_MSG = 1 << 22


def _recv_msg(sock: socket.socket) -> Dict[str, Any]:
    (length,) = struct.unpack("!I", _recv_exact(sock, 4))
    if length > _MAX_MSG:
        raise ConnectionError(f"message of {length} bytes exceeds {_MAX_MSG}")
    obj = json.loads(_recv_exact(sock, length))
    if not isinstance(obj, dict):
        raise ConnectionError("malformed message")
    return obj


class _Handler(socketserver.BaseRequestHandler):
    def handle(self) -> None:  # one connection, many requests
        server: TcpStoreServer = self.server  # type: ignore[assignment]
        while True:
            try:
                req = _recv_msg(self.request)
            except (ConnectionError, OSError, ValueError):
                return
            try:
                reply = server.apply(req)
            except (KeyError, TypeError, ValueError) as exc:
                reply = {"ok": False, "error": f"bad request: {exc}"}
            try:
                _send_msg(self.request, reply)
            except OSError:
                return


class TcpStoreServer(socketserver.ThreadingTCPServer):
    """The key-value server (run by rank 0).  ``serve_in_background()`` starts a daemon thread."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, host: str, port: int) -> None:
        self.data: Dict[str, bytes] = {}
        self.data_lock = threading.Lock()
        try:
            super().__init__((host, port), _Handler)
        except OSError as exc:
            raise BootstrapError(
                f"rank 0 cannot serve the TCP store on {host}:{port}: {exc.strerror}; "
                "choose another port with HCOMM_MASTER_PORT (or a free MASTER_PORT)") from None

    def apply(self, req: Dict[str, Any]) -> Dict[str, Any]:
        """Execute one request: set / get / missing / delete_prefix."""
        op = req["op"]
        with self.data_lock:
            if op == "set":
                self.data[str(req["key"])] = base64.b64decode(req["value"])
                return {"ok": True}
            if op == "get":
                value = self.data.get(str(req["key"]))
                return {"ok": True, "value": None if value is None else base64.b64encode(value).decode()}
            if op == "missing":
                return {"ok": True, "keys": [k for k in req["keys"] if k not in self.data]}
            if op == "delete_prefix":
                prefix = str(req["prefix"]) + "/"
                for k in [k for k in self.data if k.startswith(prefix)]:
                    del self.data[k]
                return {"ok": True}
        raise ValueError(f"unknown op {op!r}")

    def serve_in_background(self) -> threading.Thread:
        thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.2},
                                  name="hcomm-tcp-store", daemon=True)
        thread.start()
        return thread


_SERVERS: Dict[Tuple[str, int], TcpStoreServer] = {}
_SERVERS_LOCK = threading.Lock()


def serve_tcp_store(host: str, port: int) -> TcpStoreServer:
    """The TCP store served by this process on ``host:port``, started on first use (then kept for the process)."""
    with _SERVERS_LOCK:
        server = _SERVERS.get((host, port))
        if server is None:
            server = TcpStoreServer(host, port)
            server.serve_in_background()
            _SERVERS[(host, port)] = server
        return server


class TcpStore(KeyValueStore):
    """Client of a :class:`TcpStoreServer`; reconnects on demand, raises StoreUnavailable while unreachable."""

    def __init__(self, host: str, port: int, served_by: str = "rank 0") -> None:
        self.host = host
        self.port = port
        self.description = f"TCP store at {host}:{port} (served by {served_by})"
        self._sock: Optional[socket.socket] = None
        self._lock = threading.Lock()

    def _call(self, req: Dict[str, Any]) -> Dict[str, Any]:
        with self._lock:
            for attempt in (0, 1):  # a stale connection gets one fresh retry
                try:
                    if self._sock is None:
                        self._sock = socket.create_connection((self.host, self.port), timeout=5.0)
                        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    _send_msg(self._sock, req)
                    reply = _recv_msg(self._sock)
                    break
                except (OSError, ConnectionError, ValueError) as exc:
                    self.close_locked()
                    if attempt:
                        raise StoreUnavailable(f"{self.description} is not reachable: {exc}") from None
        if not reply.get("ok"):
            raise BootstrapError(f"{self.description}: {reply.get('error', 'request failed')}")
        return reply

    def set(self, key: str, value: bytes) -> None:
        self._call({"op": "set", "key": key, "value": base64.b64encode(value).decode()})

    def get(self, key: str) -> Optional[bytes]:
        value = self._call({"op": "get", "key": key}).get("value")
        return None if value is None else base64.b64decode(value)

    def missing(self, keys: Sequence[str]) -> List[str]:
        return list(self._call({"op": "missing", "keys": list(keys)})["keys"])

    def delete_prefix(self, prefix: str) -> None:
        try:
            self._call({"op": "delete_prefix", "prefix": prefix})
        except BootstrapError:
            pass

    def close_locked(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None

    def close(self) -> None:
        with self._lock:
            self.close_locked()


class TorchStore(KeyValueStore):
    """A ``torch.distributed.Store`` (e.g. the default group's) seen through the protocol's interface."""

    def __init__(self, store: Any, description: str = "torch.distributed store") -> None:
        self.store = store
        self.description = description

    def set(self, key: str, value: bytes) -> None:
        self.store.set(key, value)

    def get(self, key: str) -> Optional[bytes]:
        if not self.store.check([key]):
            return None
        return bytes(self.store.get(key))

    def missing(self, keys: Sequence[str]) -> List[str]:
        if self.store.check(list(keys)):
            return []
        return [k for k in keys if not self.store.check([k])]


# ---------------------------------------------------------------------------------------------- protocol
def _timeout_error(what: str, missing: Sequence[int], size: int, timeout: float, timeout_src: str,
                   extra: str = "") -> RendezvousTimeout:
    arrived = [r for r in range(size) if r not in set(missing)]
    msg = (f"bootstrap rendezvous: rank(s) {format_ranks(missing)} of {size} did not arrive within "
           f"{timeout:g} s ({timeout_src}) at the {what}"
           f"{'; arrived: ' + format_ranks(arrived) if arrived else '; no rank arrived'}{extra}. "
           "Every rank must call hcomm.init() / bootstrap.discover() the same number of times; "
           "look for a rank that crashed, hangs before init, or took another code path "
           "(raise HCCL_CONNECT_TIMEOUT if it is only slow)")
    return RendezvousTimeout(msg, missing, arrived)


def _until(deadline: float, op: Callable[[], Any]) -> Any:
    """Run ``op`` until it stops raising StoreUnavailable or the deadline passes (then re-raise)."""
    delay = 0.01
    while True:
        try:
            return op()
        except StoreUnavailable:
            if time.monotonic() >= deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.25)


def exchange_root_info(store: KeyValueStore, rank: int, size: int, make_root_info: Callable[[], bytes],
                       timeout: float, namespace: str, timeout_src: str = "HCCL_CONNECT_TIMEOUT") -> bytes:
    """Register this rank, publish (rank 0) or fetch the root info, and wait for every rank.

    Returns the root info once all ``size`` ranks have arrived.  Raises RendezvousTimeout naming the
    missing ranks after ``timeout`` seconds, BootstrapError if rank 0 failed to make the root info.
    """
    deadline = time.monotonic() + timeout
    ns = namespace.strip("/")
    arrived_key = f"{ns}/arrived/{{}}".format
    try:
        _until(deadline, lambda: store.set(arrived_key(rank), f"{socket.gethostname()} pid {os.getpid()}".encode()))
    except StoreUnavailable:
        raise _timeout_error(store.description, [0] if rank else [], size, timeout, timeout_src,
                             extra=" (rank 0 never served the store)") from None
    blob: Optional[bytes] = None
    if rank == 0:
        try:
            blob = bytes(make_root_info())
            if len(blob) != HCCL_ROOT_INFO_BYTES:
                raise BootstrapError(f"the root info is {len(blob)} bytes; expected {HCCL_ROOT_INFO_BYTES}")
        except Exception as exc:
            store.set(f"{ns}/error", f"{type(exc).__name__}: {exc}".encode())  # the others fail fast
            raise
        store.set(f"{ns}/root_info", blob)
    waiting = [arrived_key(r) for r in range(size)]
    delay = 0.002
    while True:
        try:
            waiting = store.missing(waiting)
            if blob is None:
                blob = store.get(f"{ns}/root_info")
                if blob is None:
                    err = store.get(f"{ns}/error")
                    if err is not None:
                        raise BootstrapError(f"rank 0 could not create the root info: {err.decode(errors='replace')}")
        except StoreUnavailable:
            if time.monotonic() >= deadline:
                raise _timeout_error(store.description, [0], size, timeout, timeout_src,
                                     extra=" (the store went away)") from None
        else:
            if not waiting and blob is not None:
                break
        if time.monotonic() >= deadline:
            missing = sorted(int(k.rsplit("/", 1)[1]) for k in waiting)
            extra = "" if missing or blob is not None else " (rank 0 arrived but never published the root info)"
            raise _timeout_error(store.description, missing or [0], size, timeout, timeout_src, extra)
        time.sleep(delay)
        delay = min(delay * 1.5, 0.05)
    if len(blob) != HCCL_ROOT_INFO_BYTES:
        raise BootstrapError(f"the root info in the {store.description} is {len(blob)} bytes; "
                             f"expected {HCCL_ROOT_INFO_BYTES}")
    _leave(store, ns, rank, size, deadline)
    return blob


def _leave(store: KeyValueStore, ns: str, rank: int, size: int, deadline: float) -> None:
    """Ranks > 0 mark themselves done; rank 0 waits for them, then deletes the generation's keys.

    Rank 0 may host the store (TCP server, torch's store), so it must not go away before every rank
    has read the root info.  A rank that never leaves only costs rank 0 the rest of the deadline.
    """
    try:
        if rank:
            store.set(f"{ns}/left/{rank}", b"")
            return
        waiting = [f"{ns}/left/{r}" for r in range(1, size)]
        delay = 0.002
        while waiting and time.monotonic() < deadline:
            waiting = store.missing(waiting)
            if waiting:
                time.sleep(delay)
                delay = min(delay * 1.5, 0.05)
        if not waiting:
            store.delete_prefix(ns)
    except BootstrapError:
        pass


# ---------------------------------------------------------------------------------------------- MPI
_MPI_TAG = 0x4843  # "HC"
_OK, _FAILED, _TIMEOUT = 1, 2, 3


def mpi_exchange(comm: Any, make_root_info: Callable[[], bytes], timeout: float, generation: int,
                 timeout_src: str = "HCCL_CONNECT_TIMEOUT") -> bytes:
    """The root info over an mpi4py communicator (rank 0 of ``comm`` is the root).

    Ranks send an arrival message to rank 0; rank 0 waits for all of them (up to ``timeout``), then sends
    every rank that arrived a status + root info (or the missing-rank list).  Point-to-point rather than a
    broadcast, so that a rank that never arrives cannot block the others inside MPI: it is reported by
    name on every rank instead.
    """
    from mpi4py import MPI  # imported only when this channel was chosen

    rank, size = comm.Get_rank(), comm.Get_size()
    arrive_tag = _MPI_TAG + 2 * (generation % 1000)
    reply_tag = arrive_tag + 1
    deadline = time.monotonic() + timeout
    msg = bytearray(8 + HCCL_ROOT_INFO_BYTES + size)  # status u32, length u32, blob, missing-rank flags
    what = f"MPI rendezvous over COMM_WORLD ({size} ranks)"
    error: Optional[str] = None
    if rank == 0:
        recvs = {r: comm.Irecv([bytearray(1), MPI.BYTE], source=r, tag=arrive_tag) for r in range(1, size)}
        missing = set(recvs)
        while missing and time.monotonic() < deadline:
            missing = {r for r in missing if not recvs[r].Test()}
            if missing:
                time.sleep(0.005)
        blob = b""
        if missing:
            status = _TIMEOUT
            for r in missing:
                msg[8 + HCCL_ROOT_INFO_BYTES + r] = 1
                recvs[r].Cancel()
        else:
            try:
                blob = bytes(make_root_info())
                if len(blob) != HCCL_ROOT_INFO_BYTES:
                    raise BootstrapError(f"the root info is {len(blob)} bytes; expected {HCCL_ROOT_INFO_BYTES}")
                status = _OK
            except Exception as exc:
                status, error = _FAILED, f"{type(exc).__name__}: {exc}"
                blob = error.encode()[:HCCL_ROOT_INFO_BYTES]
        struct.pack_into("<II", msg, 0, status, len(blob))
        msg[8:8 + len(blob)] = blob
        sends = [comm.Isend([msg, MPI.BYTE], dest=r, tag=reply_tag) for r in range(1, size) if r not in missing]
        MPI.Request.Waitall(sends)
    else:
        comm.Isend([bytearray(1), MPI.BYTE], dest=0, tag=arrive_tag).Wait()
        req = comm.Irecv([msg, MPI.BYTE], source=0, tag=reply_tag)
        while not req.Test():
            if time.monotonic() >= deadline + 5.0:  # rank 0 answers at its own deadline at the latest
                req.Cancel()
                raise _timeout_error(what, [0], size, timeout, timeout_src, " (no answer from rank 0)")
            time.sleep(0.005)
    status, length = struct.unpack_from("<II", msg, 0)
    payload = bytes(msg[8:8 + length])
    if status == _TIMEOUT:
        flags = msg[8 + HCCL_ROOT_INFO_BYTES:]
        raise _timeout_error(what, [r for r in range(size) if flags[r]], size, timeout, timeout_src)
    if status == _FAILED:
        text = error if rank == 0 and error is not None else payload.decode(errors="replace")
        raise BootstrapError(f"rank 0 could not create the root info: {text}")
    if status != _OK or length != HCCL_ROOT_INFO_BYTES:
        raise BootstrapError(f"{what}: malformed message from rank 0 (status {status}, {length} bytes)")
    return payload
