"""The HTTP/1.1 protocol `turnledger serve` runs: uvicorn's httptools protocol
with the request head bounded in bytes and in time, and long-polls released on
stop.

httptools (a C parser) keeps a header it has not seen the end of in a buffer
of its own, with no limit, and neither of uvicorn's parsers limits how long a
client may take to send a head. So this protocol counts the bytes of every
read that leaves a request head incomplete: a request line over
TURNLEDGER_HTTP_MAX_REQUEST_LINE_BYTES is answered 414, a head over
TURNLEDGER_HTTP_MAX_HEADER_BYTES 431, and a head not complete within
TURNLEDGER_HTTP_HEADER_TIMEOUT_SECONDS of its first byte (or of the
connection) 408; each then closes the connection. A head that arrives whole
in one read (or whose last read completes it) is measured by the
HeadSizeLimit middleware instead, on what the parser made of it. Other
clients are served all along: nothing waits on the slow or oversized one.
"""

from __future__ import annotations

import asyncio
import functools
import http
import json
from enum import Enum
from typing import Any

from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from turnledger.infra.http.notifier import release_long_polls
from turnledger.infra.library_compat import stop_keep_alive
from turnledger.infra.settings import Settings

# After answering an oversized or slow head, keep reading (and dropping) what
# the client is still sending for this long before closing: closing a socket
# with unread data resets it, and the client could lose the answer.
_LINGER_SECONDS = 1.0


@functools.cache
def _settings() -> Settings:
    """The process's settings (uvicorn builds one protocol per connection)."""
    return Settings()


class _Reading(Enum):
    HEAD = "head"
    """Everything that arrives belongs to a request head (or is the next one's)."""
    BODY = "body"
    """The head is complete: the rest of the request is its body."""


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        settings = _settings()
        self._max_line = settings.http_max_request_line_bytes
        self._max_head = settings.http_max_header_bytes
        self._head_timeout = settings.http_header_timeout_seconds
        self._head_timer: asyncio.TimerHandle | None = None
        self._discarding = False
        self._reading = _Reading.HEAD
        self._head_bytes = 0
        self._line_bytes = 0
        self._line_complete = False
        self._head_begun = False
        self._messages_ended = 0
        super().__init__(config, server_state, app_state, _loop)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._discarding:
            return
        whole_read_is_head = self._reading is _Reading.HEAD
        ended_before = self._messages_ended
        super().data_received(data)
        if self.transport.is_closing() or self._reading is not _Reading.HEAD:
            return
        if ended_before != self._messages_ended:
            # A request ended within this read: the next one's head began
            # somewhere inside it. Its bytes from this read are not counted
            # (one read at most); the next reads and the middleware are.
            return
        if whole_read_is_head:
            self._count_head(data)

    def _count_head(self, data: bytes) -> None:
        self._head_bytes += len(data)
        if not self._line_complete:
            line_end = data.find(b"\r\n")
            if line_end < 0:
                self._line_bytes += len(data)
            else:
                self._line_bytes += line_end
                self._line_complete = True
        if self._line_bytes > self._max_line:
            self._refuse(
                414,
                "request_line_too_long",
                f"the request line is over {self._max_line} bytes "
                "(TURNLEDGER_HTTP_MAX_REQUEST_LINE_BYTES)",
            )
        elif self._head_bytes > self._max_head:
            self._refuse(
                431,
                "headers_too_large",
                f"the request head is over {self._max_head} bytes "
                "(TURNLEDGER_HTTP_MAX_HEADER_BYTES)",
            )

    # Parser callbacks (httptools calls them while it parses a read).

    def on_message_begin(self) -> None:
        self._head_begun = True
        if self._head_timer is None:
            self._arm_head_timer()  # the first byte of a keep-alive request
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        self._reading = _Reading.BODY
        self._disarm_head_timer()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._reading = _Reading.HEAD
        self._head_bytes = self._line_bytes = 0
        self._line_complete = self._head_begun = False
        self._messages_ended += 1
        super().on_message_complete()

    def shutdown(self) -> None:
        # uvicorn calls this on every open connection when it starts to stop:
        # long-polls must answer now rather than hold the stop for their timeout.
        release_long_polls()
        super().shutdown()

    def _arm_head_timer(self) -> None:
        self._disarm_head_timer()
        self._head_timer = self.loop.call_later(self._head_timeout, self._head_late)

    def _disarm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_late(self) -> None:
        self._head_timer = None
        if self.transport.is_closing() or self._reading is not _Reading.HEAD:
            return
        if not self._head_begun:
            if self._messages_ended == 0:
                self.transport.close()  # a connection that never sent a byte
            # Otherwise a keep-alive connection between requests: uvicorn's
            # keep-alive timeout is the one that applies.
            return
        self._refuse(
            408,
            "header_timeout",
            f"the request head did not arrive within {self._head_timeout:g} s "
            "(TURNLEDGER_HTTP_HEADER_TIMEOUT_SECONDS)",
        )

    def _refuse(self, status: int, code: str, message: str) -> None:
        self._disarm_head_timer()
        stop_keep_alive(self)
        body = json.dumps({"error": {"code": code, "message": message}}).encode()
        head = (
            f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}\r\n"
            "content-type: application/json\r\n"
            f"content-length: {len(body)}\r\n"
            "connection: close\r\n\r\n"
        ).encode("ascii")
        self.logger.warning("refused a request head: %s", message)
        self.transport.write(head + body)
        self._discarding = True
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(_LINGER_SECONDS, self.transport.close)
