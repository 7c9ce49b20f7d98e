"""The HTTP/1.1 protocol `turnledger serve` runs: uvicorn's h11 protocol with
the request head bounded in bytes and in time, and long-polls released on stop.

uvicorn's default parser (httptools) puts no limit on the request head, and
neither parser limits how long a client may take to send one. Here, after
each read, the bytes of a request head still incomplete are measured with
h11's public `trailing_data`: a request line over
TURNLEDGER_HTTP_MAX_REQUEST_LINE_BYTES is answered 414, a head over
TURNLEDGER_HTTP_MAX_HEADER_BYTES 431, and a head not complete within
TURNLEDGER_HTTP_HEADER_TIMEOUT_SECONDS of its first byte (or of the
connection) 408; each then closes the connection. A head that arrives whole in
one read is measured by the HeadSizeLimit middleware instead. Other clients are served
all along: nothing waits on the slow or oversized one.
"""

from __future__ import annotations

import asyncio
import functools
import http
import json
from typing import Any

import h11
from uvicorn.config import Config
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

from turnledger.infra.http.notifier import release_long_polls
from turnledger.infra.settings import Settings

# After answering an oversized or slow head, keep reading (and dropping) what
# the client is still sending for this long before closing: closing a socket
# with unread data resets it, and the client could lose the answer.
_LINGER_SECONDS = 1.0
# h11's own limit is only a backstop: the checks here run after every read.
_H11_SLACK_BYTES = 1_048_576


@functools.cache
def _settings() -> Settings:
    """The process's settings (uvicorn builds one protocol per connection)."""
    return Settings()


def h11_max_incomplete_event_size(settings: Settings) -> int:
    return settings.http_max_header_bytes + _H11_SLACK_BYTES


class LimitedH11Protocol(H11Protocol):
    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        settings = _settings()
        self._max_line = settings.http_max_request_line_bytes
        self._max_head = settings.http_max_header_bytes
        self._head_timeout = settings.http_header_timeout_seconds
        self._head_timer: asyncio.TimerHandle | None = None
        self._discarding = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._discarding:
            return
        if self.conn.their_state is h11.IDLE and self._head_timer is None:
            self._arm_head_timer()
        super().data_received(data)
        if self.transport.is_closing():
            self._disarm_head_timer()
            return
        if self.conn.their_state is not h11.IDLE:
            self._disarm_head_timer()  # the head is complete
            return
        pending = self.conn.trailing_data[0]
        line_end = pending.find(b"\r\n")
        line = len(pending) if line_end < 0 else line_end
        if line > self._max_line:
            self._refuse(
                414,
                "request_line_too_long",
                f"the request line is over {self._max_line} bytes "
                "(TURNLEDGER_HTTP_MAX_REQUEST_LINE_BYTES)",
            )
        elif len(pending) > self._max_head:
            self._refuse(
                431,
                "headers_too_large",
                f"the request head is over {self._max_head} bytes "
                "(TURNLEDGER_HTTP_MAX_HEADER_BYTES)",
            )

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
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        if not self.conn.trailing_data[0]:
            self.transport.close()  # a connection that never sent a byte
            return
        self._refuse(
            408,
            "header_timeout",
            f"the request head did not arrive within {self._head_timeout:g} s "
            "(TURNLEDGER_HTTP_HEADER_TIMEOUT_SECONDS)",
        )

    def _refuse(self, status: int, code: str, message: str) -> None:
        self._disarm_head_timer()
        self._unset_keepalive_if_required()
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
