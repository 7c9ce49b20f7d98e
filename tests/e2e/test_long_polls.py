"""Long-polls against the real server: released at once when the service stops,
and within a second of their device's revocation, whichever process revokes."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable

import httpx
import pytest

from tests.e2e.conftest import Server, client

pytestmark = pytest.mark.postgres

LONG_POLLS = 100


@pytest.fixture
def service_settings(postgres_settings):  # type: ignore[no-untyped-def]
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

    def long_poll(token: str) -> None:
        with client(server, token) as http:
            response = http.get("/v1/sync", params={"timeout": 30})
        with lock:
            answers.append((response.status_code, time.monotonic()))

    threads = [
        threading.Thread(target=long_poll, args=(token,))
        for token in tokens
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    time.sleep(2.0)  # every long-poll is waiting
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
