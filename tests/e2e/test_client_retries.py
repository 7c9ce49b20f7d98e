"""The client's retries across a real database outage and a real server restart.

The database is a private PostgreSQL cluster (ports 55480-55499, apart from
the other tests' clusters); the service is the real `turnledger serve`.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from uuid import UUID

import httpx
import pytest

from tests.e2e.cluster import PrivateCluster, private_cluster
from tests.e2e.conftest import free_port, start_server, stop_server
from turnledger.domain.errors import DatabaseUnavailableError
from turnledger.infra.client import AsyncClient, Client, RetryPolicy
from turnledger.infra.devices import open_device_registry
from turnledger.infra.settings import Settings
from turnledger.infra.vault import new_master_key

PATIENT = RetryPolicy(attempts=40, initial_delay=0.1, max_delay=2.0, max_elapsed=90)
OUTAGE_SECONDS = 4.0


@pytest.fixture
def cluster() -> Iterator[PrivateCluster]:
    with private_cluster(range(55480, 55490)) as running:
        yield running


class Recorder:
    """Every response the client received: (time, status, Retry-After)."""

    def __init__(self) -> None:
        self.responses: list[tuple[float, int, str | None]] = []

    def __call__(self, response: httpx.Response) -> None:
        self.responses.append(
            (
                time.monotonic(),
                response.status_code,
                response.headers.get("retry-after"),
            )
        )


def _token(settings: Settings) -> str:
    registry = open_device_registry(settings)
    try:
        return registry.add("alice", "phone").token
    finally:
        registry.close()


@pytest.mark.postgres
def test_turns_sent_during_an_outage_are_retried_until_recorded_once(
    cluster: PrivateCluster, tmp_path: Path
) -> None:
    settings = Settings(
        _env_file=None,
        persistence="postgres",
        postgres_port=cluster.port,
        postgres_schema="client_retries",
        postgres_pool_size=4,
        master_key=new_master_key(),
        http_retry_after_seconds=1,
    )
    token = _token(settings)
    server = start_server(settings, tmp_path / "server.log")
    sync_seen, async_seen = Recorder(), Recorder()
    try:
        http = httpx.Client(event_hooks={"response": [sync_seen]})
        api = Client(server.base_url, token, retry=PATIENT, http=http)
        conversation = api.start_conversation(client_key="outage").conversation_id
        api.put_turn(conversation, "before", question="q", answer="a")

        cluster.stop("immediate")
        down_at = time.monotonic()
        restart = threading.Timer(OUTAGE_SECONDS, cluster.start)
        restart.start()
        with pytest.raises(DatabaseUnavailableError):
            # Adding a device is not idempotent (a retry could mint a second
            # token): its 503 is raised at once, not retried.
            api.add_device("tablet")
        assert [r[1] for r in sync_seen.responses[-1:]] == [503]
        # Readiness answers 503 too: an answer, returned, not retried.
        assert api.ready().status == "unavailable"
        sync_seen.responses.clear()
        async_result: list[object] = []
        writer = threading.Thread(
            target=lambda: async_result.append(
                asyncio.run(
                    _put_async(server.base_url, token, conversation, async_seen)
                )
            )
        )
        writer.start()
        receipt = api.put_turn(conversation, "during", question="q2", answer="a2")
        writer.join()
        restart.join()
        answered_at = time.monotonic()
        history = api.get_history(conversation).items
        api.close()
        http.close()
    finally:
        stop_server(server)
    assert answered_at - down_at >= OUTAGE_SECONDS - 0.5
    assert receipt.turn_id == "during"
    # Each recorded once (the two writers race: either order).
    assert sorted(item.turn_id for item in history) == [
        "before",
        "during",
        "during-async",
    ]
    for seen in (sync_seen, async_seen):
        unavailable = [r for r in seen.responses if r[1] == 503]
        assert unavailable, "no attempt met the outage"
        # Each 503 carried Retry-After: 1, and the next attempt waited for it.
        assert {r[2] for r in unavailable} == {"1"}
        for (at, status, _), (next_at, _, _) in zip(
            seen.responses, seen.responses[1:], strict=False
        ):
            if status == 503:
                assert next_at - at >= 0.95
    assert async_result and getattr(async_result[0], "turn_id", None) == "during-async"


async def _put_async(
    base_url: str, token: str, conversation: UUID, seen: Recorder
) -> object:
    async def hook(response: httpx.Response) -> None:
        seen(response)

    async with (
        httpx.AsyncClient(event_hooks={"response": [hook]}) as http,
        AsyncClient(base_url, token, retry=PATIENT, http=http) as api,
    ):
        return await api.put_turn(
            conversation, "during-async", question="q3", answer="a3"
        )


def test_a_turn_sent_while_the_server_restarts_is_recorded_once(
    tmp_path: Path,
) -> None:
    settings = Settings(_env_file=None, persistence="sqlite", data_dir=tmp_path / "d")
    token = _token(settings)
    port = free_port()
    log = tmp_path / "server.log"
    server = start_server(settings, log, port=port)
    requests: list[float] = []
    http = httpx.Client(event_hooks={"request": [lambda _: requests.append(0.0)]})
    api = Client(server.base_url, token, retry=PATIENT, http=http)
    try:
        conversation = api.start_conversation().conversation_id
        stop_server(server)
        replacement: list[object] = []
        restart = threading.Timer(
            2.0, lambda: replacement.append(start_server(settings, log, port=port))
        )
        restart.start()
        began = time.monotonic()
        receipt = api.put_turn(conversation, "t1", question="q", answer="a")
        took = time.monotonic() - began
        restart.join()
        again = api.put_turn(conversation, "t1", question="q", answer="a")
        history = api.get_history(conversation).items
    finally:
        api.close()
        http.close()
        for started in replacement:
            stop_server(started)  # type: ignore[arg-type]
    assert took >= 1.5 and len(requests) > 3  # refused, then retried
    assert again == receipt
    assert [item.turn_id for item in history] == ["t1"]
    assert "Traceback" not in log.read_text(errors="replace")
