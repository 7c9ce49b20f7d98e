"""Reads on a streaming replica: a private primary, a hot standby made from it
with `pg_basebackup -R` on loopback, and `turnledger serve` reading from the
standby (TURNLEDGER_POSTGRES_REPLICA_*).

- The three-process convergence test of test_many_processes.py, run again
  through services that read from the replica.
- Read-your-writes with the standby's replay paused (`pg_wal_replay_pause()`):
  a read that carries the writer's position is served fresh (by the primary,
  after the bounded wait), never stale; the same read without the position,
  in a process that has not heard of the write, is stale, which shows the
  replica really serves reads and really lags.
- A long-poll waiting on a replica-reading process gets a turn written while
  replay is paused.
- Deletion: after a purge and its compaction on the primary, the standby's
  table files no longer hold the destroyed keys.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import httpx
import psycopg
import pytest
from fastapi.testclient import TestClient
from psycopg import sql

from tests.e2e.cluster import PrivateCluster, private_cluster, streaming_replica
from tests.e2e.conftest import Server, client, close_stores
from tests.e2e.test_many_processes import (
    test_three_processes_with_devices_moving_at_random_converge as converge,
)
from turnledger.infra.http.app import create_app
from turnledger.infra.http.standbys import POOL_WAIT_SECONDS
from turnledger.infra.persistence import open_conversations
from turnledger.infra.settings import Settings
from turnledger.infra.vault import new_master_key
from turnledger.infra.wal import WAL_SETTINGS

pytestmark = pytest.mark.postgres

PRIMARY_PORTS = range(55460, 55470)
REPLICA_PORTS = range(55470, 55480)
POSITION = "TurnLedger-Position"


@pytest.fixture(scope="module")
def clusters() -> Iterator[tuple[PrivateCluster, PrivateCluster]]:
    # The purge's own WAL settings, so its compaction can complete here.
    with (
        private_cluster(PRIMARY_PORTS, WAL_SETTINGS) as primary,
        streaming_replica(primary, REPLICA_PORTS, WAL_SETTINGS) as replica,
    ):
        yield primary, replica


@pytest.fixture
def service_settings(
    clusters: tuple[PrivateCluster, PrivateCluster],
) -> Iterator[Settings]:
    primary, replica = clusters
    schema = f"test_{uuid.uuid4().hex[:12]}"
    settings = Settings(
        _env_file=None,
        persistence="postgres",
        postgres_host="127.0.0.1",
        postgres_port=primary.port,
        postgres_schema=schema,
        postgres_pool_size=3,
        master_key=new_master_key(),
        postgres_replica_host="127.0.0.1",
        postgres_replica_port=replica.port,
        postgres_replica_pool_size=3,
        postgres_replica_max_wait_seconds=0.2,
        # Every read sees every commit made before it: the convergence checks
        # hold exactly as they do on one database.
        postgres_replica_reads="strict",
    )
    yield settings
    with psycopg.connect(primary.conninfo, autocommit=True) as connection:
        connection.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
        )


@pytest.mark.parametrize("seed", [1, 2])
def test_three_processes_converge_reading_from_the_replica(
    clusters: tuple[PrivateCluster, PrivateCluster],
    service_settings: Settings,
    launch: Callable[[], Server],
    add_device: Callable[[str, str], str],
    seed: int,
) -> None:
    """The convergence checks of test_many_processes.py, every process reading
    from the replica; the replica's own statistics show it served them."""
    _, replica = clusters
    converge(launch, add_device, seed)
    assert _scans_on(replica, service_settings.postgres_schema) > 100


def _scans_on(cluster: PrivateCluster, schema: str) -> int:
    """Table and index scans of the ledger's tables run on this server."""
    deadline = time.monotonic() + 10
    while True:
        with psycopg.connect(cluster.conninfo) as connection:
            row = connection.execute(
                "SELECT coalesce(sum(coalesce(seq_scan, 0) + coalesce(idx_scan, 0)), 0)"
                " FROM pg_stat_user_tables WHERE schemaname = %s",
                (schema,),
            ).fetchone()
        scans = int(row[0]) if row is not None else 0
        # Statistics reach the view within a second or so of the reads.
        if scans or time.monotonic() > deadline:
            return scans
        time.sleep(0.2)


def _replayed(replica: PrivateCluster) -> int:
    with psycopg.connect(replica.conninfo) as connection:
        row = connection.execute(
            "SELECT pg_last_wal_replay_lsn() - '0/0'::pg_lsn"
        ).fetchone()
    assert row is not None
    return int(row[0])


def _primary_position(primary: PrivateCluster) -> int:
    with psycopg.connect(primary.conninfo) as connection:
        row = connection.execute(
            "SELECT pg_current_wal_lsn() - '0/0'::pg_lsn"
        ).fetchone()
    assert row is not None
    return int(row[0])


def _caught_up(primary: PrivateCluster, replica: PrivateCluster) -> None:
    target = _primary_position(primary)
    deadline = time.monotonic() + 30
    while _replayed(replica) < target:
        assert time.monotonic() < deadline, "the replica never caught up"
        time.sleep(0.05)


class _ReplayPaused:
    def __init__(self, replica: PrivateCluster) -> None:
        self._replica = replica

    def __enter__(self) -> None:
        with psycopg.connect(self._replica.conninfo, autocommit=True) as connection:
            connection.execute("SELECT pg_wal_replay_pause()")
            deadline = time.monotonic() + 10
            while True:
                row = connection.execute(
                    "SELECT pg_get_wal_replay_pause_state()"
                ).fetchone()
                if row is not None and row[0] == "paused":
                    return
                assert time.monotonic() < deadline
                time.sleep(0.02)

    def __exit__(self, *exc: object) -> None:
        with psycopg.connect(self._replica.conninfo, autocommit=True) as connection:
            connection.execute("SELECT pg_wal_replay_resume()")


def _replica_has_turn(
    replica: PrivateCluster, schema: str, conversation: str, turn_id: str
) -> bool:
    with psycopg.connect(replica.conninfo) as connection:
        row = connection.execute(
            sql.SQL(
                "SELECT count(*) FROM {} WHERE conversation_id = %s AND turn_id = %s"
            ).format(sql.Identifier(schema, "conversation_turns")),
            (UUID(conversation), turn_id),
        ).fetchone()
    return row is not None and row[0] == 1


def _window(http: httpx.Client | TestClient, conversation: str, **headers: str) -> Any:
    response = http.post(
        f"/v1/conversations/{conversation}/window",
        json={"question": "what now?", "system": "be brief", "model": "m"},
        headers=headers,
    )
    assert response.status_code == 200, response.text
    return response


def _session(settings: Settings) -> Settings:
    return settings.model_copy(update={"postgres_replica_reads": "session"})


def test_a_read_carrying_the_writers_position_is_never_stale(
    clusters: tuple[PrivateCluster, PrivateCluster],
    service_settings: Settings,
    launch: Callable[[], Server],
    add_device: Callable[[str, str], str],
) -> None:
    primary, replica = clusters
    settings = _session(service_settings)
    writer_token = add_device("alice", "phone")
    reader_token = add_device("alice", "laptop")
    writer_server = launch()  # strict or session: its writes are the same
    # The reading process runs in this test without its lifespan, so it has
    # no sync listener: it hears of no other process's commits, and only the
    # position the client carries can tell it what the read must see.
    reader_app = create_app(settings)
    reader = TestClient(reader_app, headers={"Authorization": f"Bearer {reader_token}"})
    try:
        with client(writer_server, writer_token) as writer:
            conversation = writer.post("/v1/conversations").json()["conversation_id"]
            writer.put(
                f"/v1/conversations/{conversation}/turns/t0",
                json={"question": "q0", "answer": "a0"},
            ).raise_for_status()
            _caught_up(primary, replica)
            assert _window(reader, conversation).json()["kept_turn_ids"] == ["t0"]

            with _ReplayPaused(replica):
                wrote = writer.put(
                    f"/v1/conversations/{conversation}/turns/t1",
                    json={"question": "q1", "answer": "a1"},
                )
                assert wrote.status_code == 200, wrote.text
                position = wrote.headers[POSITION]
                # The replica has not replayed the write.
                assert not _replica_has_turn(
                    replica, settings.postgres_schema, conversation, "t1"
                )
                # Without the position, this process reads the lagging replica.
                stale = _window(reader, conversation)
                assert stale.json()["kept_turn_ids"] == ["t0"]
                # With it: after the bounded wait, the primary serves the read.
                began = time.monotonic()
                fresh = _window(reader, conversation, **{POSITION: position})
                waited = time.monotonic() - began
                assert fresh.json()["kept_turn_ids"] == ["t0", "t1"]
                assert waited >= settings.postgres_replica_max_wait_seconds
                history = reader.get(
                    f"/v1/conversations/{conversation}/turns",
                    headers={POSITION: position},
                ).json()
                assert [i["turn_id"] for i in history["items"]] == ["t0", "t1"]
                # A position of another user is refused, not trusted.
                other = TestClient(
                    reader_app,
                    headers={"Authorization": f"Bearer {add_device('bob', 'x')}"},
                )
                refused = other.get("/v1/conversations", headers={POSITION: position})
                assert refused.status_code == 422, refused.text
            # Once replayed, the replica serves it without a wait.
            _caught_up(primary, replica)
            assert _replica_has_turn(
                replica, settings.postgres_schema, conversation, "t1"
            )
            assert _window(reader, conversation, **{POSITION: position}).json()[
                "kept_turn_ids"
            ] == ["t0", "t1"]
    finally:
        reader.close()
        close_stores(reader_app)


def test_a_long_poll_on_a_replica_reading_process_gets_a_write_made_during_lag(
    clusters: tuple[PrivateCluster, PrivateCluster],
    service_settings: Settings,
    launch: Callable[[], Server],
    add_device: Callable[[str, str], str],
) -> None:
    primary, replica = clusters
    writer_token = add_device("carol", "phone")
    poller_token = add_device("carol", "laptop")
    one, other = launch(), launch()
    with (
        client(one, writer_token) as writer,
        client(other, poller_token) as poller,
    ):
        conversation = writer.post("/v1/conversations").json()["conversation_id"]
        _caught_up(primary, replica)
        cursor = poller.get("/v1/sync").json()["next_cursor"]
        with _ReplayPaused(replica):
            result: dict[str, Any] = {}

            def poll() -> None:
                result["response"] = poller.get(
                    "/v1/sync", params={"since": cursor, "timeout": 20}
                )

            thread = threading.Thread(target=poll)
            thread.start()
            time.sleep(0.5)  # the long-poll is waiting
            began = time.monotonic()
            writer.put(
                f"/v1/conversations/{conversation}/turns/late",
                json={"question": "during lag", "answer": "still delivered"},
            ).raise_for_status()
            thread.join(timeout=30)
            delivered = time.monotonic() - began
            assert not _replica_has_turn(
                replica, service_settings.postgres_schema, conversation, "late"
            )
        response = result["response"]
        assert response.status_code == 200, response.text
        changes = response.json()["changes"]
        assert [c.get("turn_id") for c in changes] == ["late"]
        assert changes[0]["question"] == "during lag"
        assert delivered < 5, delivered  # woken by the commit, not the timeout


def test_a_replica_read_behind_a_lock_held_by_recovery_goes_to_the_primary(
    clusters: tuple[PrivateCluster, PrivateCluster],
    service_settings: Settings,
    add_device: Callable[[str, str], str],
) -> None:
    """A standby's queries wait behind the ACCESS EXCLUSIVE locks its recovery
    replays (VACUUM FULL of the purge takes them on the primary), and recovery
    may itself wait for the standby's queries up to max_standby_streaming_delay
    (30 s): a sync read once hung that long. Here recovery keeps such a lock
    (replay paused after the lock, before the commit that released it on the
    primary): the read gives up the replica after its lock timeout and the
    primary serves it, at once and complete."""
    primary, replica = clusters
    settings = _session(service_settings)
    token = add_device("frank", "phone")
    app = create_app(settings)
    http = TestClient(app, headers={"Authorization": f"Bearer {token}"})
    reads = app.state.service.reads
    feed = sql.Identifier(settings.postgres_schema, "owner_feed")
    try:
        conversation = http.post("/v1/conversations").json()["conversation_id"]
        http.put(
            f"/v1/conversations/{conversation}/turns/t0",
            json={"question": "q0", "answer": "a0"},
        ).raise_for_status()
        _caught_up(primary, replica)
        assert http.get("/v1/sync").status_code == 200
        assert reads.replica_reads > 0  # the replica serves this process's reads
        with psycopg.connect(primary.conninfo) as locker:
            locker.execute(
                sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(feed)
            )
            _wait_for_recovery_lock(replica, settings.postgres_schema, "owner_feed")
            with _ReplayPaused(replica):
                locker.commit()  # free on the primary; still held on the standby
                result: dict[str, Any] = {}

                def pull() -> None:
                    began = time.monotonic()
                    result["response"] = http.get("/v1/sync")
                    result["seconds"] = time.monotonic() - began

                primary_reads = reads.primary_reads
                thread = threading.Thread(target=pull)
                thread.start()
                thread.join(timeout=20)
                assert not thread.is_alive(), "the read waited for recovery"
        response = result["response"]
        assert response.status_code == 200, response.text
        assert [c.get("turn_id") for c in response.json()["changes"]] == [None, "t0"]
        assert result["seconds"] < 5, result["seconds"]
        assert reads.primary_reads > primary_reads
    finally:
        http.close()
        close_stores(app)


def _wait_for_recovery_lock(
    replica: PrivateCluster, schema: str, relation: str
) -> None:
    """Until the standby's recovery holds the ACCESS EXCLUSIVE lock on it."""
    deadline = time.monotonic() + 30
    with psycopg.connect(replica.conninfo, autocommit=True) as connection:
        while True:
            row = connection.execute(
                "SELECT count(*) FROM pg_locks l JOIN pg_class c "
                "ON c.oid = l.relation JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = %s AND c.relname = %s "
                "AND l.mode = 'AccessExclusiveLock' AND l.granted",
                (schema, relation),
            ).fetchone()
            if row is not None and row[0]:
                return
            assert time.monotonic() < deadline, "the standby never replayed the lock"
            time.sleep(0.05)


def _key_table_files(replica: PrivateCluster, schema: str) -> list[Path]:
    """The standby's files of every key partition (and its indexes)."""
    with psycopg.connect(replica.conninfo) as connection:
        rows = connection.execute(
            "SELECT pg_relation_filepath(c.oid) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relname LIKE 'turn_keys%%' "
            "AND pg_relation_filepath(c.oid) IS NOT NULL",
            (schema,),
        ).fetchall()
    base = replica.data
    files: list[Path] = []
    for (relative,) in rows:
        files.extend(sorted(base.glob(f"{relative}*")))
    return files


def _wal_segments(replica: PrivateCluster) -> list[Path]:
    return sorted((replica.data / "pg_wal").glob("0*"))


def _flush_standby(primary: PrivateCluster, replica: PrivateCluster) -> None:
    """Get the standby's pages to its files: a standby writes them at a
    restartpoint, which needs a checkpoint of the primary replayed first."""
    with psycopg.connect(primary.conninfo, autocommit=True) as connection:
        connection.execute("CHECKPOINT")
    _caught_up(primary, replica)
    with psycopg.connect(replica.conninfo, autocommit=True) as connection:
        connection.execute("CHECKPOINT")


def _holding(files: list[Path], needles: dict[str, bytes]) -> set[str]:
    found = set()
    for path in files:
        try:
            content = path.read_bytes()
        except FileNotFoundError:
            continue
        found |= {label for label, needle in needles.items() if needle in content}
    return found


def test_after_a_purge_the_replicas_key_files_no_longer_hold_the_keys(
    clusters: tuple[PrivateCluster, PrivateCluster], service_settings: Settings
) -> None:
    primary, replica = clusters
    ledger = open_conversations(service_settings)
    try:
        conversation = ledger.start_conversation("dora")
        for n in range(6):
            ledger.confirm_turn(
                "dora", conversation, turn_id=f"t{n}", question=f"q{n}", answer=f"a{n}"
            )
        with psycopg.connect(primary.conninfo) as connection:
            rows = connection.execute(
                sql.SQL(
                    "SELECT turn_id, wrapped_key FROM {} WHERE conversation_id = %s"
                ).format(sql.Identifier(service_settings.postgres_schema, "turn_keys")),
                (conversation,),
            ).fetchall()
        keys = {str(turn_id): bytes(blob) for turn_id, blob in rows}
        doomed = {f"t{n}": keys[f"t{n}"] for n in range(3)}
        kept = {f"t{n}": keys[f"t{n}"] for n in range(3, 6)}
        _flush_standby(primary, replica)
        files = _key_table_files(replica, service_settings.postgres_schema)
        assert files
        # The scan finds the keys while they exist on the standby.
        assert _holding(files, doomed | kept) == set(doomed) | set(kept)
        assert _holding(_wal_segments(replica), doomed) == set(doomed)

        receipt = ledger.delete_history("dora", conversation, turn_ids=list(doomed))
        report = receipt.purge
        assert report is not None
        for _ in range(20):
            if not report.compaction_pending:
                break
            time.sleep(0.2)
            report = ledger.purge_deleted_history()
        assert not report.compaction_pending, report

        _flush_standby(primary, replica)
        files = _key_table_files(replica, service_settings.postgres_schema)
        # The standby replayed the DELETE and the VACUUM FULL: its current key
        # files hold the surviving keys and none of the destroyed ones.
        assert _holding(files, doomed | kept) == set(kept)
        # Its WAL too (the standby runs with the purge's WAL settings, and the
        # primary's compaction switched segments and checkpointed; the
        # standby's restartpoint then removed the segments before it).
        assert _holding(_wal_segments(replica), doomed) == set()
    finally:
        ledger.close()


def test_reads_go_to_the_primary_while_the_replica_is_down(
    clusters: tuple[PrivateCluster, PrivateCluster],
    service_settings: Settings,
    launch: Callable[[], Server],
    add_device: Callable[[str, str], str],
) -> None:
    primary, replica = clusters
    token = add_device("erin", "phone")
    server = launch()
    with httpx.Client(
        base_url=server.base_url,
        headers={"Authorization": f"Bearer {token}"},
        timeout=120,
    ) as http:
        conversation = http.post("/v1/conversations").json()["conversation_id"]
        http.put(
            f"/v1/conversations/{conversation}/turns/t0",
            json={"question": "q0", "answer": "a0"},
        ).raise_for_status()
        _caught_up(primary, replica)
        assert _window(http, conversation).json()["kept_turn_ids"] == ["t0"]
        replica.stop("immediate")
        try:
            began = time.monotonic()
            assert _window(http, conversation).json()["kept_turn_ids"] == ["t0"]
            # The first read finds the replica gone: it waits for a standby
            # connection at most POOL_WAIT_SECONDS (not the connect timeout),
            # then the primary serves it; the next ones skip the replica.
            first = time.monotonic() - began
            assert first < POOL_WAIT_SECONDS + 0.75, first
            timings = []
            for n in range(1, 4):
                http.put(
                    f"/v1/conversations/{conversation}/turns/t{n}",
                    json={"question": f"q{n}", "answer": f"a{n}"},
                ).raise_for_status()
                began = time.monotonic()
                window = _window(http, conversation)
                timings.append(time.monotonic() - began)
                assert window.json()["kept_turn_ids"] == [f"t{k}" for k in range(n + 1)]
            assert max(timings) < 1, timings
        finally:
            replica.start()
            _caught_up(primary, replica)
