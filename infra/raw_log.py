"""The event log's rows read as stored, cell by cell, on every store.

The library's recorders decode as they read (a UUID from SQLite's text, UTF-8
topics) and skip positions at or below zero; a hand-edited row then raises or
vanishes. These readers return every row, with any notification id, and every
cell as it is (`InvalidText` for SQLite text that is not UTF-8), so the audit
can report a malformed row instead of stopping at it. They only read: SQLite
is opened read-only, PostgreSQL in a read-only transaction.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from queue import Empty, Queue
from typing import Any, cast
from uuid import UUID

import psycopg
from eventsourcing.persistence import Recorder
from psycopg import sql

from turnledger.domain.transparency import InvalidText, RawRow, pages
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.settings import Settings

PAGE = 5000
# A row's values as a RawRow without a Python-level call per row (RawRow._make
# is one): the reader thread holds the lock the audit's hashing needs.
_raw_row = cast(Callable[[Sequence[Any]], RawRow], partial(tuple.__new__, RawRow))


def _raw_rows(cursor: Any) -> Callable[[Sequence[Any]], RawRow]:
    """psycopg's row factory for RawRows."""
    return _raw_row


EVENTS_TABLE = "conversations_events"  # the library names it after the application
SNAPSHOTS_TABLE = "conversations_snapshots"  # written by the first release only


_SQLITE_COLUMNS = (
    "SELECT rowid, originator_id, originator_version, topic, state, "
    "typeof(originator_id), typeof(topic), typeof(state) FROM stored_events "
)


def _sqlite_text(value: Any, kind: bytes) -> Any:
    if kind != b"text":
        return value
    try:
        return bytes(value).decode("utf-8")
    except UnicodeDecodeError:
        return InvalidText(bytes(value))


class SQLiteRawLog:
    def __init__(self, path: str) -> None:
        self._connection = sqlite3.connect(
            f"file:{path}?mode=ro", uri=True, check_same_thread=False, timeout=30
        )
        # Text comes back as bytes, so a non-UTF-8 cell cannot stop the read.
        self._connection.text_factory = bytes

    def _read(self, statement: str, params: tuple[Any, ...]) -> list[RawRow]:
        rows = self._connection.execute(statement, params).fetchall()
        self._connection.commit()  # end the read transaction: see new rows next time
        return [
            RawRow(
                notification_id=row[0],
                originator_id=_sqlite_text(row[1], row[5]),
                version=row[2],
                topic=_sqlite_text(row[3], row[6]),
                state=_sqlite_text(row[4], row[7]),
            )
            for row in rows
        ]

    def rows(self, after: int | None, limit: int) -> list[RawRow]:
        if after is None:
            return self._read(_SQLITE_COLUMNS + "ORDER BY rowid LIMIT ?", (limit,))
        return self._read(
            _SQLITE_COLUMNS + "WHERE rowid > ? ORDER BY rowid LIMIT ?", (after, limit)
        )

    def rows_of(self, conversation_id: UUID) -> list[RawRow]:
        return self._read(
            _SQLITE_COLUMNS + "WHERE originator_id = ? ORDER BY rowid",
            (conversation_id.hex,),
        )

    def count_through(self, notification_id: int | None) -> int:
        if notification_id is None:
            return 0
        row = self._connection.execute(
            "SELECT count(*) FROM stored_events WHERE rowid <= ?", (notification_id,)
        ).fetchone()
        self._connection.commit()
        return int(row[0])

    def snapshot_originators(self) -> set[UUID]:
        """The conversations the first release's snapshot table has rows of."""
        found = self._connection.execute(
            "SELECT 1 FROM sqlite_master WHERE name = 'stored_snapshots'"
        ).fetchone()
        rows = (
            self._connection.execute(
                "SELECT DISTINCT originator_id FROM stored_snapshots"
            ).fetchall()
            if found
            else []
        )
        self._connection.commit()
        return {parsed for (value,) in rows if (parsed := _uuid_of(value))}

    def close(self) -> None:
        self._connection.close()


def _uuid_of(value: Any) -> UUID | None:
    if isinstance(value, UUID):
        return value
    try:
        text = value.decode("ascii") if isinstance(value, bytes) else str(value)
        return UUID(hex=text)
    except (TypeError, ValueError, UnicodeDecodeError):
        return None


class PostgresRawLog:
    def __init__(
        self,
        conninfo: str,
        schema: str,
        *,
        connection: psycopg.Connection[Any] | None = None,
    ) -> None:
        """`connection`: read through one the caller owns (and closes) instead
        of a read-only one of its own, e.g. the checkpoint writer's, which
        then follows the rows in the transaction that extends its tree."""
        self._owned = connection is None
        if connection is None:
            connection = psycopg.connect(conninfo, autocommit=True)
            connection.read_only = True
        self._connection = connection
        self._table = sql.Identifier(schema, EVENTS_TABLE)
        self._schema = schema
        self._columns = sql.SQL(
            "SELECT notification_id, originator_id, originator_version, topic, state "
            "FROM {} "
        ).format(self._table)

    def _read(self, statement: sql.Composed, params: tuple[Any, ...]) -> list[RawRow]:
        # Binary results: bytea arrives as bytes, not hex text to parse; each
        # row is made a RawRow as it is loaded, not copied into one after.
        with self._connection.cursor(binary=True, row_factory=_raw_rows) as cursor:
            return cursor.execute(statement, params).fetchall()

    def rows(self, after: int | None, limit: int) -> list[RawRow]:
        if after is None:
            return self._read(
                self._columns + sql.SQL("ORDER BY notification_id LIMIT %s"), (limit,)
            )
        return self._read(
            self._columns
            + sql.SQL("WHERE notification_id > %s ORDER BY notification_id LIMIT %s"),
            (after, limit),
        )

    def snapshot_originators(self) -> set[UUID]:
        """The conversations the first release's snapshot table has rows of."""
        with self._connection.cursor() as cursor:
            found = cursor.execute(
                "SELECT to_regclass(format('%%I.%%I', %s::text, %s::text))",
                (self._schema, SNAPSHOTS_TABLE),
            ).fetchone()
            if found is None or found[0] is None:
                return set()
            rows = cursor.execute(
                sql.SQL("SELECT DISTINCT originator_id FROM {}").format(
                    sql.Identifier(self._schema, SNAPSHOTS_TABLE)
                )
            ).fetchall()
        return {parsed for (value,) in rows if (parsed := _uuid_of(value))}

    def pages(self, page_size: int) -> Iterator[list[RawRow]]:
        """The whole log, the next page read while the caller works on this one.

        The server and the network work while the caller hashes (PostgreSQL
        runs in its own process); one query at a time on the connection.
        """
        queue: Queue[list[RawRow] | BaseException | None] = Queue(maxsize=2)
        stop = threading.Event()

        def read() -> None:
            after: int | None = None
            try:
                while not stop.is_set():
                    page = self.rows(after, page_size)
                    queue.put(page or None)
                    if not page:
                        return
                    after = page[-1].notification_id
            except BaseException as error:  # noqa: BLE001 - handed to the caller
                queue.put(error)

        reader = threading.Thread(target=read, name="raw-log-prefetch", daemon=True)
        reader.start()
        try:
            while True:
                item = queue.get()
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            stop.set()
            while reader.is_alive():  # let a blocked put finish, then the thread
                try:
                    queue.get(timeout=0.05)
                except Empty:
                    continue
            reader.join()

    def rows_of(self, conversation_id: UUID) -> list[RawRow]:
        return self._read(
            self._columns
            + sql.SQL("WHERE originator_id = %s ORDER BY notification_id"),
            (conversation_id,),
        )

    def count_through(self, notification_id: int | None) -> int:
        if notification_id is None:
            return 0
        row = self._connection.execute(
            sql.SQL("SELECT count(*) FROM {} WHERE notification_id <= %s").format(
                self._table
            ),
            (notification_id,),
        ).fetchone()
        return 0 if row is None else int(row[0])

    def close(self) -> None:
        if self._owned:
            self._connection.close()


def open_raw_log(
    settings: Settings, ledger: Conversations | None = None
) -> SQLiteRawLog | PostgresRawLog | RecorderLog:
    """A raw reader of the store these settings name (memory needs its ledger)."""
    match settings.persistence:
        case "sqlite":
            return SQLiteRawLog(str(settings.sqlite_events_path))
        case "postgres":
            return PostgresRawLog(
                settings.postgres_conninfo(), settings.postgres_schema
            )
        case "memory":
            if ledger is None:
                raise ValueError("the in-memory store is read through its ledger")
            return RecorderLog(ledger.recorder)


class RecorderLog:
    """Rows through the library's recorder: for the memory store, an SQLite
    database in memory that only its ledger's pool reaches (a connection of
    the reader's own to that shared cache would get "database table is
    locked" at once beside a write in progress, where a file's WAL lets it
    read), and that no one outside the process can hand-edit."""

    def __init__(self, recorder: Recorder) -> None:
        self._recorder: Any = recorder

    def rows(self, after: int | None, limit: int) -> list[RawRow]:
        page = self._recorder.select_notifications(
            after, limit, inclusive_of_start=after is None
        )
        return [
            RawRow(n.id, n.originator_id, n.originator_version, n.topic, n.state)
            for n in page
        ]

    def rows_of(self, conversation_id: UUID) -> list[RawRow]:
        # Only the notification log knows the ids: scan it (memory is small).
        return [
            row
            for page in pages(self, 1000)
            for row in page
            if row.originator_id == conversation_id
        ]

    def count_through(self, notification_id: int | None) -> int:
        if notification_id is None:
            return 0
        return sum(
            1
            for page in pages(self, 1000)
            for row in page
            if row.notification_id <= notification_id
        )

    def close(self) -> None:
        pass
