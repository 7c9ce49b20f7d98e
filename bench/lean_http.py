"""A minimal HTTP/1.1 keep-alive client for load: one socket, one request at
a time, the response's status and JSON body checked.

The throughput bench's baseline is psycopg, whose per-statement cost is a
few microseconds of C; httpx spends 0.5-0.8 ms of Python per request, and on
a machine whose cores the client shares with the service that cost comes out
of the service's share. This client spends a small fraction of that, so
the figure is the service's, as wrk's would be. It speaks only what the
bench needs: requests with a JSON body or none, responses with a
Content-Length (which is what the service sends to such requests).
"""

from __future__ import annotations

import json
import socket
from typing import Any
from urllib.parse import urlsplit


class LeanHttpError(Exception):
    """A response other than 2xx, or one this client does not read."""


class LeanClient:
    """One keep-alive connection with a bearer token."""

    def __init__(self, base_url: str, token: str, *, timeout: float = 60.0) -> None:
        parts = urlsplit(base_url)
        assert parts.hostname is not None and parts.port is not None
        self._socket = socket.create_connection(
            (parts.hostname, parts.port), timeout=timeout
        )
        self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._head = (
            f"Host: {parts.hostname}:{parts.port}\r\nAuthorization: Bearer {token}\r\n"
        ).encode()
        self._buffer = b""

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """Send one request; return its JSON body, or raise on a non-2xx."""
        content = b"" if body is None else json.dumps(body).encode()
        head = f"{method} {path} HTTP/1.1\r\n".encode() + self._head
        if body is not None:
            head += b"Content-Type: application/json\r\n"
        head += b"Content-Length: %d\r\n\r\n" % len(content)
        self._socket.sendall(head + content)
        status, _, payload = self._read_response()
        if not 200 <= status < 300:
            raise LeanHttpError(f"{method} {path}: {status} {payload[:200]!r}")
        return json.loads(payload) if payload else None

    def _read_response(self) -> tuple[int, dict[str, str], bytes]:
        while b"\r\n\r\n" not in self._buffer:
            self._receive()
        head, _, self._buffer = self._buffer.partition(b"\r\n\r\n")
        status_line, *lines = head.decode("latin-1").split("\r\n")
        status = int(status_line.split(" ", 2)[1])
        headers = {}
        for line in lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if "content-length" not in headers:
            raise LeanHttpError(f"a response without Content-Length: {headers}")
        length = int(headers["content-length"])
        while len(self._buffer) < length:
            self._receive()
        payload, self._buffer = self._buffer[:length], self._buffer[length:]
        if headers.get("connection", "").lower() == "close":
            raise LeanHttpError(f"the server closed the connection: {payload!r}")
        return status, headers, payload

    def _receive(self) -> None:
        chunk = self._socket.recv(65536)
        if not chunk:
            raise LeanHttpError("the server closed the connection")
        self._buffer += chunk

    def close(self) -> None:
        self._socket.close()
