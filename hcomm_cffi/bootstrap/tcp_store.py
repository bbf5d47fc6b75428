"""A tiny TCP key-value server (run by rank 0 in a daemon thread) and its client.

Length-prefixed JSON over TCP; no authentication, so bind it to loopback or a trusted network.
"""
from __future__ import annotations

import base64
import json
import socket
import socketserver
import struct
import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .errors import BootstrapError, StoreUnavailable
from .kvstore import KeyValueStore

__all__ = ["TcpStore", "TcpStoreServer", "serve_tcp_store"]


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
