"""Hostile and careless clients, on raw sockets, against the real server.

Oversized request heads are refused (414, 431), heads and bodies that never
finish are cut after their configured time (408), and all the while other
clients keep being served promptly.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import httpx
import pytest

from tests.e2e.conftest import Server, client
from tests.e2e.test_outage import read_response
from turnledger.infra.settings import Settings

pytestmark = pytest.mark.postgres

HEADER_TIMEOUT = 1.5
BODY_TIMEOUT = 1.5
MAX_LINE = 4_096
MAX_HEAD = 8_192


@pytest.fixture
def service_settings(postgres_settings: Settings) -> Settings:
    return postgres_settings.model_copy(
        update={
            "http_header_timeout_seconds": HEADER_TIMEOUT,
            "http_body_timeout_seconds": BODY_TIMEOUT,
            "http_max_request_line_bytes": MAX_LINE,
            "http_max_header_bytes": MAX_HEAD,
            "http_max_long_polls_per_device": 2,
            "http_max_long_polls_per_user": 3,
        }
    )


def connect(server: Server) -> socket.socket:
    host, port = server.base_url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=30)


@contextmanager
def bystander(server: Server) -> Iterator[list[float]]:
    """Another client asking /v1/health all along; yields its latencies."""
    latencies: list[float] = []
    stop = threading.Event()

    def run() -> None:
        with httpx.Client(base_url=server.base_url, timeout=10) as http:
            while not stop.is_set() and len(latencies) < 10_000:
                started = time.monotonic()
                assert http.get("/v1/health").status_code == 200
                latencies.append(time.monotonic() - started)
                time.sleep(0.02)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        yield latencies
    finally:
        stop.set()
        thread.join(timeout=30)
    assert latencies, "the other client was never answered"


def closed_by_server(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_a_32_mb_header_is_refused_431_without_stalling_anyone(
    server: Server,
) -> None:
    with bystander(server) as latencies:
        time.sleep(0.2)
        sock = connect(server)
        head = b"GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Big: "
        started = time.monotonic()
        # The server may stop reading once it has answered.
        with contextlib.suppress(OSError):
            sock.sendall(head + b"a" * (32 * 1_048_576) + b"\r\n\r\n")
        status, headers, body = read_response(sock)
        took = time.monotonic() - started
        assert status == 431, body
        assert headers["connection"] == "close"
        assert b"headers_too_large" in body
        assert closed_by_server(sock)
        sock.close()
        time.sleep(0.3)
    assert took < 5, took
    assert max(latencies) < 1.0, max(latencies)


def test_a_request_line_over_the_limit_is_refused_414(server: Server) -> None:
    sock = connect(server)
    sock.sendall(b"GET /v1/health?" + b"x" * MAX_LINE + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    status, headers, body = read_response(sock)
    assert status == 414, body
    assert headers["connection"] == "close"
    sock.close()


def test_a_head_over_the_limit_in_one_piece_is_refused_431(server: Server) -> None:
    sock = connect(server)
    filler = b"X-Fill: " + b"y" * MAX_HEAD + b"\r\n"
    sock.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n" + filler + b"\r\n")
    status, headers, body = read_response(sock)
    assert status == 431, body
    assert headers["connection"] == "close"
    sock.close()


def test_a_head_just_under_the_limits_is_served(server: Server) -> None:
    sock = connect(server)
    line = b"GET /v1/health?" + b"x" * (MAX_LINE - 40) + b" HTTP/1.1\r\n"
    assert len(line) - 2 <= MAX_LINE
    filler = b"X-Fill: " + b"y" * (MAX_HEAD - len(line) - 40) + b"\r\n"
    request = line + b"Host: x\r\n" + filler + b"\r\n"
    assert len(request) <= MAX_HEAD
    sock.sendall(request)
    status, _, body = read_response(sock)
    assert status == 200, body
    sock.close()


def test_a_head_that_never_finishes_is_cut_at_the_header_timeout(
    server: Server,
) -> None:
    with bystander(server) as latencies:
        sock = connect(server)
        started = time.monotonic()
        sock.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n")
        # Trickle a header a byte at a time: each byte is "progress", but the
        # head as a whole must be done within the timeout.
        sock.settimeout(0.2)
        answer = b""
        while time.monotonic() - started < HEADER_TIMEOUT * 4:
            try:
                sock.sendall(b"X")
                chunk = sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                break
            if not chunk:
                break
            answer += chunk
        took = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 408"), answer
    assert HEADER_TIMEOUT - 0.1 <= took < HEADER_TIMEOUT + 1.0, took
    assert max(latencies) < 1.0, max(latencies)
    sock.close()


def test_a_connection_that_sends_nothing_is_closed_at_the_header_timeout(
    server: Server,
) -> None:
    sock = connect(server)
    started = time.monotonic()
    assert closed_by_server(sock)
    took = time.monotonic() - started
    assert HEADER_TIMEOUT - 0.1 <= took < HEADER_TIMEOUT + 1.0, took
    sock.close()


def test_a_body_that_never_finishes_is_cut_at_the_body_timeout(
    server: Server, add_device: Callable[[str, str], str]
) -> None:
    token = add_device("alice", "phone")
    with bystander(server) as latencies:
        sock = connect(server)
        sock.sendall(
            b"POST /v1/conversations HTTP/1.1\r\nHost: x\r\n"
            b"Authorization: Bearer " + token.encode() + b"\r\n"
            b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
        )
        started = time.monotonic()
        status, headers, body = read_response(sock)
        took = time.monotonic() - started
        assert status == 408, body
        assert headers["connection"] == "close"
        assert closed_by_server(sock)
        sock.close()
    assert BODY_TIMEOUT - 0.1 <= took < BODY_TIMEOUT + 1.0, took
    assert max(latencies) < 1.0, max(latencies)
    # Nothing was created by the half-sent request.
    with client(server, token) as http:
        assert http.get("/v1/conversations").json()["conversations"] == []


def test_long_polls_are_capped_per_device_and_per_user(
    server: Server, add_device: Callable[[str, str], str]
) -> None:
    phone = client(server, add_device("alice", "phone"))
    laptop = client(server, add_device("alice", "laptop"))
    other = client(server, add_device("bob", "phone"))
    results: list[int] = []

    def long_poll(http: httpx.Client) -> None:
        results.append(http.get("/v1/sync", params={"timeout": 3}).status_code)

    waiting = [
        threading.Thread(target=long_poll, args=(http,))
        for http in (phone, phone, laptop)
    ]
    for thread in waiting:
        thread.start()
    time.sleep(1.0)
    over_device = phone.get("/v1/sync", params={"timeout": 3})
    assert over_device.status_code == 429, over_device.text
    assert over_device.json()["error"]["code"] == "too_many_long_polls"
    assert over_device.headers["retry-after"]
    over_user = laptop.get("/v1/sync", params={"timeout": 3})
    assert over_user.status_code == 429, over_user.text
    # A sync that does not wait is never capped, and other users are not.
    assert phone.get("/v1/sync").status_code == 200
    assert other.get("/v1/sync", params={"timeout": 0.5}).status_code == 200
    for thread in waiting:
        thread.join(timeout=10)
    assert results == [200, 200, 200]
    # Once they are answered, the device may wait again.
    assert phone.get("/v1/sync", params={"timeout": 0.2}).status_code == 200


def test_pipelined_requests_are_answered_and_a_later_head_is_bounded_too(
    server: Server,
) -> None:
    sock = connect(server)
    request = b"GET /v1/health HTTP/1.1\r\nHost: x\r\n"
    sock.sendall(
        request + b"\r\n" + request + b"\r\n" + request + b"Connection: close\r\n\r\n"
    )
    answers = b""
    while chunk := sock.recv(65536):
        answers += chunk
    assert answers.count(b"HTTP/1.1 200 OK\r\n") == 3, answers
    sock.close()
    # On a kept-alive connection, the next head is counted as it arrives.
    sock = connect(server)
    sock.sendall(request + b"\r\n")
    assert read_response(sock)[0] == 200
    sock.sendall(request + b"X-Big: ")
    with contextlib.suppress(OSError):  # the server may stop reading once it answered
        for _ in range(MAX_HEAD // 1024 + 2):
            sock.sendall(b"a" * 1024)
            time.sleep(0.01)
    status, headers, body = read_response(sock)
    assert status == 431, body
    assert headers["connection"] == "close"
    sock.close()


def test_a_long_poll_whose_client_went_away_stops_counting_at_once(
    server: Server, add_device: Callable[[str, str], str]
) -> None:
    """A phone that loses its network and reconnects must not find its own
    dead long-polls holding the device's cap until they time out."""
    token = add_device("alice", "phone")
    host, port = server.base_url.removeprefix("http://").split(":")

    def open_long_poll() -> socket.socket:
        sock = socket.create_connection((host, int(port)))
        sock.sendall(
            b"GET /v1/sync?timeout=60 HTTP/1.1\r\nHost: t\r\n"
            b"Authorization: Bearer " + token.encode() + b"\r\n\r\n"
        )
        return sock

    phone = client(server, token)
    dead = [open_long_poll(), open_long_poll()]
    time.sleep(0.5)
    # The cap (2 per device) is reached while they wait.
    assert phone.get("/v1/sync", params={"timeout": 1}).status_code == 429
    for sock in dead:
        sock.close()
    closed_at = time.monotonic()
    statuses: list[int] = []
    while time.monotonic() - closed_at < 5:
        status = phone.get("/v1/sync", params={"timeout": 0.2}).status_code
        statuses.append(status)
        if status == 200:
            break
    assert statuses[-1] == 200, statuses
    assert time.monotonic() - closed_at < 1.0, statuses
    # And the cap is whole again: two may wait at once.
    waiting = [open_long_poll(), open_long_poll()]
    time.sleep(0.5)
    assert phone.get("/v1/sync", params={"timeout": 1}).status_code == 429
    for sock in waiting:
        sock.close()
