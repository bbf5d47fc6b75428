"""A tiny TCP key-value server (run by rank 0 in a daemon thread) and its client.

Length-prefixed JSON over TCP.  The store carries the root info, which on the emulator is the job's
access secret, so a client must prove it belongs before any request is served: the server greets every
connection with a random nonce, and accepts a client that is a process of this user on this host (the
kernel's socket table, ``/proc/net/tcp``, names the owner of the client's end) or that answers the nonce
with an HMAC keyed by ``HCOMM_JOB_SECRET`` (needed for clients on other hosts; every rank must then have
the same secret).  Anyone else gets an error naming why and is disconnected.

Nothing is read from a caller before it is admitted but its answer to the greeting, at most
:data:`AUTH_MAX_BYTES` within :data:`AUTH_TIMEOUT_S`; at most :data:`MAX_PENDING` connections wait for
admission at once (more are closed at once, without a thread), and a peer that sends garbage is dropped
without a word on stderr.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import json
import os
import secrets
import socket
import socketserver
import struct
import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .errors import BootstrapError, StoreUnavailable
from .kvstore import KeyValueStore

__all__ = ["TcpStore", "TcpStoreServer", "serve_tcp_store", "socket_owner"]


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
AUTH_MAX_BYTES = 1024       # an admission answer is {"op": "auth", "mac": <64 hex digits>}: far less
AUTH_TIMEOUT_S = 10.0       # a caller has this long to answer the greeting
MAX_PENDING = 64            # connections waiting for admission at once; more are closed without a thread


def _recv_msg(sock: socket.socket, limit: int = _MAX_MSG) -> Dict[str, Any]:
    (length,) = struct.unpack("!I", _recv_exact(sock, 4))
    if length > limit:
        raise ConnectionError(f"message of {length} bytes exceeds {limit}")
    try:
        obj = json.loads(_recv_exact(sock, length))
    except (ValueError, RecursionError):
        raise ConnectionError("malformed message") from None
    if not isinstance(obj, dict):
        raise ConnectionError("malformed message")
    return obj


def _proc_hex(addr: str, port: int) -> str:
    """An (address, port) as the kernel's socket table spells it (``0100007F:1F90``)."""
    ip = ipaddress.ip_address(addr.split("%", 1)[0])
    if ip.version == 4:
        return f"{struct.unpack('<I', ip.packed)[0]:08X}:{port:04X}"
    words = struct.unpack("<4I", ip.packed)
    return "".join(f"{w:08X}" for w in words) + f":{port:04X}"


def socket_owner(client: Tuple[Any, ...], server: Tuple[Any, ...]) -> Optional[int]:
    """The uid of the local process end of a TCP connection from ``client`` to ``server``; None if not local."""
    want = (_proc_hex(client[0], client[1]), _proc_hex(server[0], server[1]))
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as fh:
                next(fh, None)
                for line in fh:
                    f = line.split()
                    if len(f) > 7 and (f[1], f[2]) == want:
                        return int(f[7])
        except OSError:
            continue
    return None


def _mac(secret: str, nonce: str) -> str:
    return hmac.new(secret.encode(), b"hcomm-tcp-store/" + nonce.encode(), hashlib.sha256).hexdigest()


class _Handler(socketserver.BaseRequestHandler):
    def _admit(self, server: "TcpStoreServer") -> bool:
        """Greet with a nonce; True if the client is this user's local process or proves the job secret."""
        nonce = secrets.token_hex(16)
        local_uid = socket_owner(self.client_address, self.request.getsockname())
        self.request.settimeout(AUTH_TIMEOUT_S)
        _send_msg(self.request, {"hello": nonce})
        req = _recv_msg(self.request, AUTH_MAX_BYTES)    # every client answers: {"op": "auth", "mac": <hmac or None>}
        mac = req.get("mac") if req.get("op") == "auth" else None
        self.request.settimeout(None)
        if local_uid == os.getuid() or (
                server.secret and isinstance(mac, str) and hmac.compare_digest(mac, _mac(server.secret, nonce))):
            _send_msg(self.request, {"ok": True})
            return True
        who = (f"a process of uid {local_uid} on this host" if local_uid is not None
               else f"{self.client_address[0]}, another host")
        why = ("its HCOMM_JOB_SECRET proof is wrong" if server.secret and mac else
               "it did not prove HCOMM_JOB_SECRET" if server.secret else
               "only this user's processes on this host are served when HCOMM_JOB_SECRET is unset; export the "
               "same HCOMM_JOB_SECRET to every rank of a job spanning hosts")
        _send_msg(self.request, {"ok": False, "error": f"refused {who} (not uid {os.getuid()} here): {why}"})
        return False

    def handle(self) -> None:  # one connection, many requests
        server: TcpStoreServer = self.server  # type: ignore[assignment]
        try:
            if not self._admit(server):
                return
        except (ConnectionError, OSError, ValueError):
            return
        finally:
            server.pending.release()
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
    request_queue_size = 256        # every rank connects at once: socketserver's 5 leaves the rest retrying for 1 s

    def __init__(self, host: str, port: int, secret: Optional[str] = None) -> None:
        self.secret = secret if secret is not None else _env_secret()
        self.data: Dict[str, bytes] = {}
        self.data_lock = threading.Lock()
        self.pending = threading.BoundedSemaphore(MAX_PENDING)   # connections not yet admitted (or refused)
        try:
            super().__init__((host, port), _Handler)
        except OSError as exc:
            raise BootstrapError(
                f"rank 0 cannot serve the TCP store on {host}:{port}: {exc.strerror}; "
                "choose another port with HCOMM_MASTER_PORT (or a free MASTER_PORT)") from None

    def process_request(self, request: Any, client_address: Any) -> None:
        """A thread for the connection while fewer than MAX_PENDING wait for admission; else it is closed now."""
        if not self.pending.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.pending.release()
            raise

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A peer that broke the protocol is dropped quietly (socketserver would print its traceback)."""

    def apply(self, req: Dict[str, Any]) -> Dict[str, Any]:
        """Execute one request: set / claim / get / missing / delete_prefix."""
        op = req["op"]
        with self.data_lock:
            if op == "set":
                self.data[str(req["key"])] = base64.b64decode(req["value"])
                return {"ok": True}
            if op == "claim":
                key = str(req["key"])
                held = self.data.get(key)
                if held is None:
                    self.data[key] = base64.b64decode(req["value"])
                return {"ok": True, "value": None if held is None else base64.b64encode(held).decode()}
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


def _env_secret() -> str:
    from .. import settings

    return str(settings.value("HCOMM_JOB_SECRET") or "")


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


class _Refused(Exception):
    """The server is not an hcomm TCP store, or it refused this client."""


class TcpStore(KeyValueStore):
    """Client of a :class:`TcpStoreServer`; reconnects on demand, raises StoreUnavailable while unreachable."""

    def __init__(self, host: str, port: int, served_by: str = "rank 0", secret: Optional[str] = None) -> None:
        self.host = host
        self.port = port
        self.secret = secret if secret is not None else _env_secret()
        self.description = f"TCP store at {host}:{port} (served by {served_by})"
        self._sock: Optional[socket.socket] = None
        self._lock = threading.Lock()

    def _call(self, req: Dict[str, Any]) -> Dict[str, Any]:
        with self._lock:
            for attempt in (0, 1):  # a stale connection gets one fresh retry
                try:
                    if self._sock is None:
                        self._sock = self._connect()
                    _send_msg(self._sock, req)
                    reply = _recv_msg(self._sock)
                    break
                except _Refused as exc:
                    self.close_locked()
                    raise BootstrapError(str(exc)) from None
                except (OSError, ConnectionError, ValueError) as exc:
                    self.close_locked()
                    if attempt:
                        raise StoreUnavailable(f"{self.description} is not reachable: {exc}",
                                               refused=isinstance(exc, ConnectionRefusedError)) from None
        if not reply.get("ok"):
            raise BootstrapError(f"{self.description}: {reply.get('error', 'request failed')}")
        return reply

    def _connect(self) -> socket.socket:
        """A connection the server has admitted (see the module doc); BootstrapError if it refuses us."""
        sock = socket.create_connection((self.host, self.port), timeout=5.0)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            hello = _recv_msg(sock)
            nonce = hello.get("hello")
            if not isinstance(nonce, str):
                raise _Refused(f"{self.description} did not greet as an hcomm TCP store: {hello.get('error', hello)}")
            _send_msg(sock, {"op": "auth", "mac": _mac(self.secret, nonce) if self.secret else None})
            admitted = _recv_msg(sock)
            if not admitted.get("ok"):
                raise _Refused(f"{self.description} refused this process: {admitted.get('error', 'not admitted')}")
        except BaseException:
            sock.close()
            raise
        return sock

    def set(self, key: str, value: bytes) -> None:
        self._call({"op": "set", "key": key, "value": base64.b64encode(value).decode()})

    def get(self, key: str) -> Optional[bytes]:
        value = self._call({"op": "get", "key": key}).get("value")
        return None if value is None else base64.b64decode(value)

    def claim(self, key: str, value: bytes) -> Optional[bytes]:
        held = self._call({"op": "claim", "key": key, "value": base64.b64encode(value).decode()}).get("value")
        return None if held is None else base64.b64decode(held)

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
