"""Reads on standbys across a failover (infra/http/standbys.py, docs/ha.md).

The failure these tests pin down: after a failover, the old primary comes back
as a standby before it is rewound. It replays WAL the new primary never had,
so its replay position runs past the new primary's first commits, and by
position alone it looks caught up with writes it does not hold. Here a private
primary and its streaming standby change roles; the old primary writes on
after the promotion, then follows the new one without a rewind, exactly what
Patroni restarts before it notices the fork.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient
from psycopg.rows import dict_row

from tests.e2e.cluster import PrivateCluster, private_cluster, streaming_replica
from tests.e2e.conftest import close_stores
from tests.e2e.test_replica_reads import _caught_up, _primary_position, _replayed
from turnledger.infra.devices import open_device_registry
from turnledger.infra.http.app import create_app
from turnledger.infra.http.reads import ReadRouter
from turnledger.infra.http.standbys import STANDBY_STATE, Replayed, trusted_replay
from turnledger.infra.settings import Settings
from turnledger.infra.vault import new_master_key

pytestmark = pytest.mark.postgres

FIRST_PORTS = range(55500, 55510)
SECOND_PORTS = range(55510, 55520)
THIRD_PORTS = range(55520, 55530)
POSITION = "TurnLedger-Position"


def _settings(
    primary: PrivateCluster, standby: PrivateCluster, base: Settings
) -> Settings:
    return base.model_copy(
        update={
            "postgres_port": primary.port,
            "postgres_replica_host": "127.0.0.1",
            "postgres_replica_port": standby.port,
        }
    )


@pytest.fixture
def pair() -> Iterator[tuple[PrivateCluster, PrivateCluster, Settings]]:
    """A private primary, its streaming standby, and the settings of a service
    reading from the standby."""
    with (
        private_cluster(FIRST_PORTS) as first,
        streaming_replica(first, SECOND_PORTS) as second,
    ):
        base = Settings(
            _env_file=None,
            persistence="postgres",
            postgres_host="127.0.0.1",
            postgres_schema=f"test_{uuid.uuid4().hex[:12]}",
            postgres_pool_size=2,
            postgres_replica_pool_size=2,
            postgres_replica_max_wait_seconds=0.1,
            postgres_replica_reads="session",
            master_key=new_master_key(),
        )
        yield first, second, _settings(first, second, base)


@pytest.fixture
def diverged(
    pair: tuple[PrivateCluster, PrivateCluster, Settings],
) -> tuple[PrivateCluster, PrivateCluster, Settings]:
    """(new primary, old primary now its standby on the old timeline, the
    settings of a service on the first with the second as its standby); one
    conversation with turn t0, written before the failover."""
    first, second, before = pair
    token = _device(before)
    with TestClient(create_app(before), headers=_bearer(token)) as http:
        conversation = http.post("/v1/conversations").json()["conversation_id"]
        _put(http, conversation, "t0")
    _caught_up(first, second)
    second.promote()
    # WAL only the old primary has: a few MB past the fork.
    with psycopg.connect(first.conninfo, autocommit=True) as connection:
        connection.execute(
            "CREATE TABLE diverged AS"
            " SELECT g, repeat('x', 200) AS filler FROM generate_series(1, 20000) g"
        )
    first.follow(second)
    return second, first, _settings(second, first, before)


def test_an_old_primary_replaying_past_the_fork_serves_no_read_that_needs_the_new_one(
    diverged: tuple[PrivateCluster, PrivateCluster, Settings],
) -> None:
    new, old, settings = diverged
    with _service(settings) as (http, reads):
        conversation = http.post("/v1/conversations").json()["conversation_id"]
        written = _put(http, conversation, "t1")
        # By position alone the old primary has everything the write needs.
        assert _replayed(old) > _primary_position(new)
        assert not _receiving(old, "streaming")
        position = {POSITION: written.headers[POSITION]}
        assert _turn_ids(http, conversation, position) == ["t1"]
        assert reads.replica_reads == 0 and reads.primary_reads >= 1


def test_a_standby_back_with_less_than_its_check_said_serves_no_stale_read(
    pair: tuple[PrivateCluster, PrivateCluster, Settings],
) -> None:
    """The server behind a standby's host can come back having replayed less
    than it said before (restarted, rebuilt, rewound): its pool's connections
    break and are replaced, and the position it reported is asked again before
    it serves a read. Here a second standby, which holds back replaying (a
    one-hour apply delay), takes the first one's port."""
    primary, standby, settings = pair
    with _service(settings) as (http, reads):
        conversation = http.post("/v1/conversations").json()["conversation_id"]
        _put(http, conversation, "t0")
        _caught_up(primary, standby)
        with streaming_replica(
            primary, THIRD_PORTS, {"recovery_min_apply_delay": "3600s"}
        ) as behind:
            position = {POSITION: _put(http, conversation, "t1").headers[POSITION]}
            _caught_up(primary, standby)
            assert _turn_ids(http, conversation, position) == ["t0", "t1"]
            assert reads.replica_reads == 1  # the standby said it has t1
            standby.stop("immediate")
            behind.stop("fast")
            behind.port = standby.port
            behind.start()
            # The standby's pool finds its connections broken and replaces
            # them, now to the server that has not replayed t1.
            pool = _standby_pool(http)
            pool.check()
            while pool.get_stats().get("pool_available", 0) == 0:
                time.sleep(0.01)
            assert _turn_ids(http, conversation, position) == ["t0", "t1"]
            assert reads.replica_reads == 1


def _standby_pool(http: TestClient) -> Any:
    """The connection pool of the service's one standby."""
    (standby,) = http.app.state.service.standbys  # type: ignore[attr-defined]
    return standby.ledger.recorder.datastore.pool


def test_a_replica_host_that_is_not_a_standby_serves_no_read(
    pair: tuple[PrivateCluster, PrivateCluster, Settings],
) -> None:
    """A member named as a replica host that is a primary (one promoted, or
    the primary itself in a host list) is left alone: the read goes to the
    service's primary and the host is skipped for the next reads."""
    primary, _, settings = pair
    on_itself = _settings(primary, primary, settings)
    with _service(on_itself) as (http, reads):
        conversation = http.post("/v1/conversations").json()["conversation_id"]
        position = {POSITION: _put(http, conversation, "t0").headers[POSITION]}
        assert _turn_ids(http, conversation, position) == ["t0"]
        assert reads.replica_reads == 0
        (standby,) = http.app.state.service.standbys  # type: ignore[attr-defined]
        assert not standby.available and standby.replayed is None


def test_a_role_without_pg_read_all_stats_gets_the_position_alone(
    pair: tuple[PrivateCluster, PrivateCluster, Settings],
) -> None:
    """The boundary docs/ha.md states, on a real standby: STANDBY_STATE as a
    plain role shows a WAL receiver but not its status or timeline, so only
    the position is checked; granted pg_read_all_stats, the role gets both."""
    primary, standby, _ = pair
    with psycopg.connect(primary.conninfo, autocommit=True) as connection:
        connection.execute("CREATE ROLE plain LOGIN")
    _caught_up(primary, standby)
    plain = standby.conninfo.replace("user=postgres", "user=plain")
    with psycopg.connect(plain, row_factory=dict_row) as connection:
        row = connection.execute(STANDBY_STATE).fetchone()
    assert row is not None and row["receiver"] is not None
    assert row["status"] is None and row["timeline"] is None
    assert trusted_replay(row, 1) == Replayed(int(row["position"]), None)
    with psycopg.connect(primary.conninfo, autocommit=True) as connection:
        connection.execute("GRANT pg_read_all_stats TO plain")
    _caught_up(primary, standby)
    with psycopg.connect(plain, row_factory=dict_row) as connection:
        row = connection.execute(STANDBY_STATE).fetchone()
    assert row is not None and row["status"] == "streaming"
    assert trusted_replay(row, 1) == Replayed(int(row["position"]), 1)


@contextmanager
def _service(settings: Settings) -> Iterator[tuple[TestClient, ReadRouter]]:
    """The service reading from the standby, in this process (no lifespan: it
    hears of no commit but its own), and its read router."""
    app = create_app(settings)
    http = TestClient(app, headers=_bearer(_device(settings)))
    try:
        yield http, app.state.service.reads
    finally:
        http.close()
        close_stores(app)


def _turn_ids(
    http: TestClient, conversation: str, headers: dict[str, str]
) -> list[str]:
    history = http.get(f"/v1/conversations/{conversation}/turns", headers=headers)
    assert history.status_code == 200, history.text
    return [item["turn_id"] for item in history.json()["items"]]


def _receiving(cluster: PrivateCluster, status: str) -> bool:
    with psycopg.connect(cluster.conninfo) as connection:
        row = connection.execute(
            "SELECT count(*) FROM pg_stat_wal_receiver WHERE status = %s", (status,)
        ).fetchone()
    return row is not None and row[0] > 0


def _device(settings: Settings) -> str:
    registry = open_device_registry(settings)
    try:
        return registry.add("alice", f"device-{uuid.uuid4().hex[:6]}").token
    finally:
        registry.close()


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _put(http: TestClient, conversation: str, turn_id: str) -> Any:
    response = http.put(
        f"/v1/conversations/{conversation}/turns/{turn_id}",
        json={"question": f"q {turn_id}", "answer": f"a {turn_id}"},
    )
    assert response.status_code == 200, response.text
    return response
