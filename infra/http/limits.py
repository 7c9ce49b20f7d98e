"""Limits on the request body, size and time, enforced before anything parses it."""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from turnledger.infra.http.errors import error_response


class BodySizeLimit:
    """Reject bodies over `max_bytes` with 413, by Content-Length or by count,
    and bodies not complete within `timeout` seconds with 408.

    The body is read in full (up to the limit) before the route runs, so a
    route never sees a truncated body and never writes half of a request. The
    time limit runs from the first read of the body: a client that trickles
    its body, or stops sending it, is answered and disconnected instead of
    holding a connection and a buffer for as long as it likes.
    """

    def __init__(self, app: ASGIApp, max_bytes: int, timeout: float) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout = timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await self._reject(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        try:
            # One deadline for the whole body (a timer, not a task per read).
            async with asyncio.timeout(self.timeout):
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        return
                    chunk = message.get("body", b"")
                    size += len(chunk)
                    if size > self.max_bytes:
                        break
                    chunks.append(chunk)
                    if not message.get("more_body", False):
                        break
        except TimeoutError:
            await self._time_out(scope, receive, send)
            return
        if size > self.max_bytes:
            await self._reject(scope, receive, send)
            return
        await self.app(scope, replay_body(b"".join(chunks), receive), send)

    async def _reject(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = error_response(
            413,
            "body_too_large",
            f"the request body is over the {self.max_bytes}-byte limit "
            "(TURNLEDGER_HTTP_MAX_BODY_BYTES)",
            # The rest of the body is not read: the connection cannot be reused.
            headers={"Connection": "close"},
        )
        await response(scope, receive, send)

    async def _time_out(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = error_response(
            408,
            "body_timeout",
            f"the request body did not arrive within {self.timeout:g} s "
            "(TURNLEDGER_HTTP_BODY_TIMEOUT_SECONDS)",
            headers={"Connection": "close"},
        )
        await response(scope, receive, send)


def replay_body(body: bytes, receive: Receive) -> Receive:
    """A `receive` that hands the app `body`, already read, as one message
    (and then whatever the connection sends next, such as a disconnect)."""
    delivered = False

    async def replay() -> Message:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def _content_length(scope: dict[str, Any]) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


class HeadSizeLimit:
    """Refuse a request line over `max_line` bytes (414) or a request head over
    `max_head` bytes (431), measured as sent on the wire.

    The protocol (infra/http/protocol.py) cuts heads that are still arriving;
    this catches the ones that arrived complete in a single read.
    """

    def __init__(self, app: ASGIApp, max_line: int, max_head: int) -> None:
        self.app = app
        self.max_line = max_line
        self.max_head = max_head

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        query = scope.get("query_string", b"")
        target = len(scope.get("raw_path") or scope["path"].encode()) + (
            len(query) + 1 if query else 0
        )
        line = len(scope["method"]) + 1 + target + len(" HTTP/1.1")
        head = line + 4 + sum(len(n) + len(v) + 4 for n, v in scope["headers"])
        if line > self.max_line:
            response = error_response(
                414,
                "request_line_too_long",
                f"the request line is over {self.max_line} bytes "
                "(TURNLEDGER_HTTP_MAX_REQUEST_LINE_BYTES)",
                headers={"Connection": "close"},
            )
        elif head > self.max_head:
            response = error_response(
                431,
                "headers_too_large",
                f"the request head is over {self.max_head} bytes "
                "(TURNLEDGER_HTTP_MAX_HEADER_BYTES)",
                headers={"Connection": "close"},
            )
        else:
            await self.app(scope, receive, send)
            return
        await response(scope, receive, send)
