"""infra/library_compat.py against the library's own behaviour, side by side.

The ledger's PostgreSQL write replaces the library's insert with one function
call (or, for a batch that also changes rows, BEGIN + lock + NOTIFY sent as
one message). Each test runs the same scenario through the library's own
recorder and through the ledger's two paths, and asserts the guarantees the
library gives: notification ids in commit order without gaps, a NOTIFY on the
channel its `subscribe()` listens to, and its lock timeout. An eventsourcing
upgrade that changes one of them fails here.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import psycopg
import pytest
from eventsourcing.persistence import StoredEvent
from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore
from psycopg import sql

from turnledger.infra.persistence import open_conversations
from turnledger.infra.postgres import PostgresReadSideRecorder
from turnledger.infra.settings import Settings
from turnledger.projections.ledger_rows import FoldWithdrawal, RowChanges

pytestmark = pytest.mark.postgres

Write = Callable[[Sequence[StoredEvent]], Sequence[int] | None]
# The library's recorder, the ledger's one-call write, the ledger's write
# that also changes rows (the BEGIN + lock + NOTIFY message).
WRITERS = ["library", "one_call", "with_changes"]


def _datastore(settings: Settings, *, lock_timeout: int = 0) -> PostgresDatastore:
    return PostgresDatastore(
        dbname=settings.postgres_dbname,
        host=settings.postgres_host,
        port=str(settings.postgres_port),
        user=settings.postgres_user,
        password=settings.postgres_password.get_secret_value(),
        schema=settings.postgres_schema,
        pool_size=4,
        max_overflow=8,
        lock_timeout=lock_timeout,
    )


class Store:
    def __init__(self, recorder: PostgresApplicationRecorder, writer: str) -> None:
        self.recorder = recorder
        self.writer = writer

    def write(self, events: Sequence[StoredEvent]) -> Sequence[int]:
        kwargs: dict[str, Any] = {}
        if self.writer == "with_changes":
            # A withdrawal of a fold that does not exist changes no row, but
            # sends the write down the several-statement path.
            kwargs["read_side"] = RowChanges(
                withdrawals=(FoldWithdrawal(uuid.uuid4(), "no-such-fold", 1),)
            )
        ids = self.recorder.insert_events(events, **kwargs)
        assert ids is not None
        return ids

    @property
    def table(self) -> sql.Identifier:
        return sql.Identifier(
            self.recorder.datastore.schema, self.recorder.events_table_name
        )


@pytest.fixture(params=WRITERS)
def open_store(
    request: pytest.FixtureRequest, postgres_settings: Settings
) -> Iterator[Callable[..., Store]]:
    # A ledger makes the schema with every table its writes touch.
    open_conversations(postgres_settings).close()
    made: list[PostgresDatastore] = []

    def _open(*, lock_timeout: int = 0) -> Store:
        datastore = _datastore(postgres_settings, lock_timeout=lock_timeout)
        made.append(datastore)
        recorder: PostgresApplicationRecorder
        if request.param == "library":
            recorder = PostgresApplicationRecorder(
                datastore, events_table_name="library_events"
            )
        else:
            recorder = PostgresReadSideRecorder(
                datastore, events_table_name="conversations_events"
            )
        recorder.create_table()
        return Store(recorder, request.param)

    yield _open
    for datastore in made:
        datastore.close()


def _events(count: int) -> list[StoredEvent]:
    originator_id = uuid.uuid4()
    return [
        StoredEvent(
            originator_id=originator_id,
            originator_version=version,
            topic="tests:Event",
            state=b'{"n":%d}' % version,
        )
        for version in range(1, count + 1)
    ]


def test_notification_ids_commit_in_order_without_gaps(
    open_store: Callable[..., Store],
) -> None:
    """8 concurrent writers, a reader polling all along: every read sees ids
    1..k with none missing (no later id committed before an earlier one),
    and each write's ids are consecutive and its own."""
    store = open_store()
    seen: list[list[int]] = []
    writing = threading.Event()
    writing.set()

    def read() -> None:
        while writing.is_set():
            rows = store.recorder.select_notifications(start=1, limit=100_000)
            seen.append([row.id for row in rows])

    def write(results: list[Sequence[int]]) -> None:
        for _ in range(20):
            results.append(store.write(_events(3)))

    reader = threading.Thread(target=read)
    reader.start()
    results: list[list[Sequence[int]]] = [[] for _ in range(8)]
    writers = [threading.Thread(target=write, args=(r,)) for r in results]
    for thread in writers:
        thread.start()
    for thread in writers:
        thread.join()
    writing.clear()
    reader.join()
    everything = [ids for each in results for ids in each]
    assert all(list(ids) == list(range(ids[0], ids[0] + 3)) for ids in everything)
    assert sorted(i for ids in everything for i in ids) == list(
        range(1, 8 * 20 * 3 + 1)
    )
    assert len(seen) > 1
    for ids in seen:
        assert ids == list(range(1, len(ids) + 1))


def test_a_write_notifies_the_channel_the_library_listens_to(
    open_store: Callable[..., Store], postgres_settings: Settings
) -> None:
    store = open_store()
    with psycopg.connect(
        postgres_settings.postgres_conninfo(), autocommit=True
    ) as conn:
        conn.execute(
            sql.SQL("LISTEN {}").format(sql.Identifier(store.recorder.channel_name))
        )
        store.write(_events(2))
        notices = list(conn.notifies(timeout=5, stop_after=1))
    assert [n.channel for n in notices] == [store.recorder.channel_name]


def test_the_library_subscription_receives_the_writes(
    open_store: Callable[..., Store],
) -> None:
    store = open_store()
    store.write(_events(1))
    received: list[int] = []
    with store.recorder.subscribe(gt=1) as subscription:
        # Written once the subscription listens: only a NOTIFY wakes it
        # before its poll interval.
        started = time.monotonic()
        store.write(_events(2))
        for notification in subscription:
            received.append(notification.id)
            if len(received) == 2:
                break
        elapsed = time.monotonic() - started
    assert received == [2, 3]
    assert elapsed < 5


def test_a_held_table_lock_times_out_after_the_library_lock_timeout(
    open_store: Callable[..., Store], postgres_settings: Settings
) -> None:
    """POSTGRES_LOCK_TIMEOUT=1: a write behind a held lock fails after about
    a second (not at once, not never), and writes nothing."""
    store = open_store(lock_timeout=1)
    attempt = type(store.recorder).insert_events.__wrapped__  # without the retries
    with psycopg.connect(postgres_settings.postgres_conninfo()) as holder:
        holder.execute(sql.SQL("LOCK TABLE {} IN EXCLUSIVE MODE").format(store.table))
        # Released after 5 s: a write that waited for it would then succeed.
        release = threading.Timer(5, holder.rollback)
        release.start()
        started = time.monotonic()
        with pytest.raises(Exception, match="lock timeout") as raised:
            kwargs: dict[str, Any] = {}
            if store.writer == "with_changes":
                kwargs["read_side"] = RowChanges(
                    withdrawals=(FoldWithdrawal(uuid.uuid4(), "none", 1),)
                )
            attempt(store.recorder, _events(1), **kwargs)
        elapsed = time.monotonic() - started
        release.join()
    assert 0.9 <= elapsed < 5, (elapsed, raised.value)
    assert store.recorder.max_notification_id() in (None, 0)
