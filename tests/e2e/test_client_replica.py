"""The client reads its own writes when reads are served by a lagging replica.

A private primary (ports 55480-55489) and a streaming standby (55490-55499).
One `AsyncClient` goes through a balancer transport: writes to a real
`turnledger serve` process, reads to a second process (the app in this test,
without its lifespan, so it hears of no commit by itself: only the position
the client carries tells it what a read must see). With the standby's replay
paused, the client's read after its write is fresh; the same read without the
position is stale, which shows the standby really serves reads and lags.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator

import httpx
import psycopg
import pytest
from psycopg import sql

from tests.e2e.cluster import PrivateCluster, private_cluster, streaming_replica
from tests.e2e.conftest import Server, close_stores
from tests.e2e.test_replica_reads import _caught_up, _ReplayPaused
from turnledger.infra.client import AsyncClient
from turnledger.infra.http.app import create_app
from turnledger.infra.settings import Settings
from turnledger.infra.vault import new_master_key
from turnledger.infra.wal import WAL_SETTINGS

pytestmark = pytest.mark.postgres


@pytest.fixture
def clusters() -> Iterator[tuple[PrivateCluster, PrivateCluster]]:
    with (
        private_cluster(range(55480, 55490), WAL_SETTINGS) as primary,
        streaming_replica(primary, range(55490, 55500), WAL_SETTINGS) as replica,
    ):
        yield primary, replica


@pytest.fixture
def service_settings(
    clusters: tuple[PrivateCluster, PrivateCluster],
) -> Iterator[Settings]:
    primary, replica = clusters
    settings = Settings(
        _env_file=None,
        persistence="postgres",
        postgres_host="127.0.0.1",
        postgres_port=primary.port,
        postgres_schema=f"test_{uuid.uuid4().hex[:12]}",
        postgres_pool_size=3,
        master_key=new_master_key(),
        postgres_replica_host="127.0.0.1",
        postgres_replica_port=replica.port,
        postgres_replica_pool_size=3,
        postgres_replica_max_wait_seconds=0.2,
        postgres_replica_reads="session",
    )
    yield settings
    with psycopg.connect(primary.conninfo, autocommit=True) as connection:
        connection.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                sql.Identifier(settings.postgres_schema)
            )
        )


class Balancer(httpx.AsyncBaseTransport):
    """Writes to one process, reads to another, as a load balancer might."""

    def __init__(self, writer_url: str, reader: httpx.AsyncBaseTransport) -> None:
        self._writer = httpx.AsyncHTTPTransport()
        self._writer_url = httpx.URL(writer_url)
        self._reader = reader

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        is_read = request.method == "GET" or request.url.path.endswith("/window")
        if is_read:
            return await self._reader.handle_async_request(request)
        request.url = request.url.copy_with(
            host=self._writer_url.host, port=self._writer_url.port
        )
        return await self._writer.handle_async_request(request)

    async def aclose(self) -> None:
        await self._writer.aclose()


def test_the_client_reads_its_own_writes_through_a_lagging_replica(
    clusters: tuple[PrivateCluster, PrivateCluster],
    service_settings: Settings,
    launch: Callable[[], Server],
    add_device: Callable[[str, str], str],
) -> None:
    primary, replica = clusters
    token = add_device("alice", "phone")
    writer = launch()
    reader_app = create_app(service_settings)
    transport = Balancer(writer.base_url, httpx.ASGITransport(app=reader_app))

    async def scenario() -> tuple[list[str], list[str], list[str]]:
        async with (
            httpx.AsyncClient(transport=transport) as http,
            AsyncClient("http://balancer", token, http=http) as api,
        ):
            chat = (await api.start_conversation()).conversation_id
            await api.put_turn(chat, "t0", question="q0", answer="a0")
            _caught_up(primary, replica)
            with _ReplayPaused(replica):
                await api.put_turn(chat, "t1", question="q1", answer="a1")
                mine = api.position
                assert mine is not None
                # Without the write's position (first: the reading process
                # learns of the write from the position, once it is sent).
                api.position = None
                stale = await api.get_history(chat)
                api.position = mine
                fresh = await api.get_history(chat)
                window = await api.project_window(chat, question="q?", model="m")
            return (
                [i.turn_id for i in fresh.items],
                window.kept_turn_ids,
                [i.turn_id for i in stale.items],
            )

    try:
        fresh, window, stale = asyncio.run(scenario())
    finally:
        close_stores(reader_app)
    assert fresh == window == ["t0", "t1"]
    assert stale == ["t0"]
