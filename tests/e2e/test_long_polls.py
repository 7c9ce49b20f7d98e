"""Long-polls against the real server: released at once when the service stops,
and within a second of their device's revocation, whichever process revokes."""

from __future__ import annotations

import signal
import socket
import threading
import time
from collections.abc import Callable

import httpx
import pytest

from tests.e2e.conftest import Server, client
from tests.e2e.test_outage import read_response
from turnledger.infra.settings import Settings

pytestmark = pytest.mark.postgres

LONG_POLLS = 100
POLL_SECONDS = 120


@pytest.fixture
def service_settings(postgres_settings: Settings) -> Settings:
    # 100 long-polls of one user: lift the per-user cap for this file.
    return postgres_settings.model_copy(
        update={
            "postgres_pool_size": 10,
            "http_max_long_polls_per_device": 4,
            "http_max_long_polls_per_user": 200,
        }
    )


def test_a_stopping_service_answers_100_long_polls_at_once_and_exits_in_2_s(
    server: Server, add_device: Callable[[str, str], str]
) -> None:
    tokens = [add_device(f"user{n % 40}", f"d{n}") for n in range(LONG_POLLS // 4)]
    answers: list[tuple[int, float]] = []
    lock = threading.Lock()

    # The polls wait far longer than connecting all of them can take on a
    # loaded machine, and the client longer than the poll: no poll may end
    # on its own before the service is stopped.
    def long_poll(token: str) -> None:
        with client(server, token, timeout=POLL_SECONDS + 30) as http:
            response = http.get("/v1/sync", params={"timeout": POLL_SECONDS})
        with lock:
            answers.append((response.status_code, time.monotonic()))

    threads = [
        threading.Thread(target=long_poll, args=(token,))
        for token in tokens
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    # Every long-poll connected (on a loaded machine 100 threads take a while
    # to get there), then a moment for the last requests to reach the handler.
    wait_for_connections(server, LONG_POLLS, seconds=POLL_SECONDS / 2)
    time.sleep(1.0)
    assert not answers
    stopping = time.monotonic()
    server.process.send_signal(signal.SIGTERM)
    server.process.wait(timeout=30)
    stopped = time.monotonic() - stopping
    for thread in threads:
        thread.join(timeout=30)
    assert len(answers) == LONG_POLLS
    assert {status for status, _ in answers} == {200}
    slowest = max(at for _, at in answers) - stopping
    print(f"stopped in {stopped:.2f} s; last long-poll answered after {slowest:.2f} s")
    assert stopped < 2.0, stopped
    assert slowest < 2.0, slowest


def established_connections(port: int) -> int:
    """Connections to `port` on this machine that the server has accepted
    (Linux: /proc/net/tcp and tcp6, state 01 = ESTABLISHED)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as lines:
                next(lines)
                for line in lines:
                    fields = line.split()
                    local_port = int(fields[1].rsplit(":", 1)[1], 16)
                    if local_port == port and fields[3] == "01":
                        count += 1
        except FileNotFoundError:
            continue
    return count


def wait_for_connections(server: Server, count: int, *, seconds: float) -> None:
    port = httpx.URL(server.base_url).port
    assert port is not None
    deadline = time.monotonic() + seconds
    while established_connections(port) < count:
        assert time.monotonic() < deadline, "the long-polls never all connected"
        time.sleep(0.05)


@pytest.mark.parametrize("revoked_through", ["same process", "other process"])
def test_a_long_poll_is_released_within_1_s_of_its_devices_revocation(
    launch: Callable[[], Server],
    add_device: Callable[[str, str], str],
    revoked_through: str,
) -> None:
    first = launch()
    second = launch() if revoked_through == "other process" else first
    lost = client(first, add_device("alice", "lost phone"))
    laptop = client(second, add_device("alice", "laptop"))
    conversation = laptop.post("/v1/conversations").json()["conversation_id"]
    cursor = lost.get("/v1/sync").json()["next_cursor"]
    lost_id = next(
        d["device_id"]
        for d in laptop.get("/v1/devices").json()["devices"]
        if d["name"] == "lost phone"
    )
    outcome: list[tuple[httpx.Response, float]] = []

    def long_poll() -> None:
        response = lost.get("/v1/sync", params={"since": cursor, "timeout": 20})
        outcome.append((response, time.monotonic()))

    thread = threading.Thread(target=long_poll)
    thread.start()
    time.sleep(1.0)
    assert not outcome
    revoked_at = time.monotonic()
    assert laptop.delete(f"/v1/devices/{lost_id}").status_code == 200
    # A turn written right after the revocation must never reach the lost phone.
    secret = laptop.put(
        f"/v1/conversations/{conversation}/turns/after",
        json={"question": "after the revocation", "answer": "secret"},
    )
    assert secret.status_code == 200
    thread.join(timeout=20)
    response, answered_at = outcome[0]
    assert response.status_code == 401, response.text
    assert "secret" not in response.text
    assert answered_at - revoked_at < 1.0, answered_at - revoked_at


def test_a_request_in_flight_when_the_service_stops_is_completed(
    server: Server, add_device: Callable[[str, str], str]
) -> None:
    """Stopping answers long-polls at once but lets other requests finish."""
    token = add_device("alice", "phone")
    host, port = server.base_url.removeprefix("http://").split(":")
    body = b'{"client_key": "in-flight"}'
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/conversations HTTP/1.1\r\nHost: x\r\n"
            b"Authorization: Bearer " + token.encode() + b"\r\n"
            b"Content-Type: application/json\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body[:5]
        )
        time.sleep(0.5)
        server.process.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        sock.sendall(body[5:])
        status, _, answer = read_response(sock)
        assert status == 201, answer
        assert sock.recv(1) == b""  # then the stopping server closes it
    server.process.wait(timeout=10)


def test_an_idle_keep_alive_connection_is_closed_after_5_s(server: Server) -> None:
    host, port = server.base_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_response(sock)[0] == 200
        idle_from = time.monotonic()
        assert sock.recv(1) == b""
        idle = time.monotonic() - idle_from
    assert 4.5 < idle < 7.0, idle
