"""Stores of the conversation index read model: memory, SQLite, PostgreSQL.

Rows and the tracked position are written in one transaction per page of the
log, so the index never claims to have seen an event whose effect is missing.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
from eventsourcing.persistence import Notification
from psycopg import sql

from turnledger.domain.application import Conversations
from turnledger.domain.audit import STARTED_TOPIC
from turnledger.domain.chain import ChainFormatError, read_link
from turnledger.infra.readmodels import ReadModelStore, Tracking, conversation_id_of
from turnledger.infra.settings import Settings
from turnledger.projections.conversation_index import (
    IndexChange,
    LoggedEvent,
    fold_page,
)

NAME = "conversation_index"


def logged_events(
    notifications: Sequence[Notification], ledger: Conversations
) -> list[LoggedEvent]:
    """What the fold needs; only a conversation's first event is decoded."""
    events = []
    for notification in notifications:
        try:
            head = read_link(notification).recorded_digest
        except ChainFormatError:
            head = ""  # the audit reports it; the index still tracks the version
        owner_id = None
        if notification.topic == STARTED_TOPIC:
            owner_id = ledger.mapper.to_domain_event(notification).owner_id  # type: ignore[attr-defined]
        events.append(
            LoggedEvent(
                conversation_id=conversation_id_of(notification),
                version=notification.originator_version,
                head_digest=head,
                owner_id=owner_id,
            )
        )
    return events


class ConversationIndexQueries:
    """What every store shares: applying a page of the log, and reads."""

    def apply(
        self, notifications: Sequence[Notification], ledger: Conversations
    ) -> None:
        self.apply_changes(
            fold_page(logged_events(notifications, ledger)), notifications[-1].id
        )

    def apply_changes(self, changes: Sequence[IndexChange], position: int) -> None:
        """Write the folded changes and track `position`, in one transaction."""
        raise NotImplementedError

    def conversations_of(self, owner_id: str) -> list[UUID]:
        return [row.conversation_id for row in self.rows() if row.owner_id == owner_id]

    def get(self, conversation_id: UUID) -> IndexChange | None:
        for row in self.rows():
            if row.conversation_id == conversation_id:
                return row
        return None

    def rows(self) -> list[IndexChange]:
        raise NotImplementedError


class MemoryConversationIndex(ConversationIndexQueries):
    name = NAME

    def __init__(self) -> None:
        self._rows: dict[UUID, IndexChange] = {}
        self._tracking = Tracking(0, False)
        self._lock = threading.Lock()

    def tracking(self) -> Tracking:
        return self._tracking

    def reset(self) -> None:
        with self._lock:
            self._rows.clear()
            self._tracking = Tracking(0, True)

    def apply_changes(self, changes: Sequence[IndexChange], position: int) -> None:
        with self._lock:
            for change in changes:
                before = self._rows.get(change.conversation_id)
                if change.owner_id is not None:
                    self._rows[change.conversation_id] = change
                elif before is not None and before.version < change.version:
                    self._rows[change.conversation_id] = IndexChange(
                        change.conversation_id,
                        change.version,
                        change.head_digest,
                        before.owner_id,
                    )
            self._tracking = Tracking(position, self._tracking.rebuilding)

    def finish_rebuild(self) -> None:
        self._tracking = Tracking(self._tracking.position, False)

    def rows(self) -> list[IndexChange]:
        return sorted(self._rows.values(), key=lambda row: str(row.conversation_id))

    def close(self) -> None:
        pass


_SQLITE_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS readmodel_tracking ("
    " name TEXT PRIMARY KEY, position INTEGER NOT NULL, rebuilding INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS conversation_index ("
    " conversation_id TEXT PRIMARY KEY, owner_id TEXT NOT NULL,"
    " version INTEGER NOT NULL, head_digest TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS conversation_index_owner"
    " ON conversation_index (owner_id)",
)


class SQLiteConversationIndex(ConversationIndexQueries):
    """In its own file beside the event log (`readmodels.sqlite3`)."""

    name = NAME

    def __init__(self, path: Path) -> None:
        self._connection = sqlite3.connect(
            str(path), check_same_thread=False, isolation_level=None, timeout=30
        )
        self._lock = threading.Lock()
        with self._lock:
            for statement in _SQLITE_SCHEMA:
                self._connection.execute(statement)

    def _transaction(self, statements: list[tuple[str, tuple[Any, ...]]]) -> None:
        with self._lock:
            self._connection.execute("BEGIN IMMEDIATE")
            try:
                for statement, params in statements:
                    self._connection.execute(statement, params)
                self._connection.execute("COMMIT")
            except BaseException:
                self._connection.execute("ROLLBACK")
                raise

    def tracking(self) -> Tracking:
        with self._lock:
            row = self._connection.execute(
                "SELECT position, rebuilding FROM readmodel_tracking WHERE name = ?",
                (NAME,),
            ).fetchone()
        return Tracking(0, False) if row is None else Tracking(row[0], bool(row[1]))

    def reset(self) -> None:
        self._transaction(
            [
                ("DELETE FROM conversation_index", ()),
                ("INSERT OR REPLACE INTO readmodel_tracking VALUES (?, 0, 1)", (NAME,)),
            ]
        )

    def apply_changes(self, changes: Sequence[IndexChange], position: int) -> None:
        statements: list[tuple[str, tuple[Any, ...]]] = []
        for change in changes:
            key = change.conversation_id.hex
            if change.owner_id is not None:
                statements.append(
                    (
                        "INSERT OR REPLACE INTO conversation_index VALUES (?, ?, ?, ?)",
                        (key, change.owner_id, change.version, change.head_digest),
                    )
                )
            else:
                statements.append(
                    (
                        "UPDATE conversation_index SET version = ?, head_digest = ?"
                        " WHERE conversation_id = ? AND version < ?",
                        (change.version, change.head_digest, key, change.version),
                    )
                )
        rebuilding = int(self.tracking().rebuilding)
        statements.append(
            (
                "INSERT OR REPLACE INTO readmodel_tracking VALUES (?, ?, ?)",
                (NAME, position, rebuilding),
            )
        )
        self._transaction(statements)

    def finish_rebuild(self) -> None:
        self._transaction(
            [
                (
                    "UPDATE readmodel_tracking SET rebuilding = 0 WHERE name = ?",
                    (NAME,),
                ),
            ]
        )

    def rows(self) -> list[IndexChange]:
        with self._lock:
            rows = self._connection.execute(
                "SELECT conversation_id, version, head_digest, owner_id"
                " FROM conversation_index ORDER BY conversation_id"
            ).fetchall()
        return [IndexChange(UUID(row[0]), row[1], row[2], row[3]) for row in rows]

    def conversations_of(self, owner_id: str) -> list[UUID]:
        with self._lock:
            rows = self._connection.execute(
                "SELECT conversation_id FROM conversation_index WHERE owner_id = ?"
                " ORDER BY conversation_id",
                (owner_id,),
            ).fetchall()
        return [UUID(row[0]) for row in rows]

    def close(self) -> None:
        with self._lock:
            self._connection.close()


class PostgresConversationIndex(ConversationIndexQueries):
    """Tables `readmodel_tracking` and `conversation_index` in the ledger's schema."""

    name = NAME

    def __init__(self, conninfo: str, schema: str) -> None:
        self._connection = psycopg.connect(conninfo, autocommit=True)
        self._lock = threading.Lock()
        self._tracking_table = sql.Identifier(schema, "readmodel_tracking")
        self._index_table = sql.Identifier(schema, "conversation_index")
        with self._lock, self._connection.transaction():
            self._connection.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} (name text PRIMARY KEY,"
                    " position bigint NOT NULL, rebuilding boolean NOT NULL)"
                ).format(self._tracking_table)
            )
            self._connection.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} (conversation_id uuid PRIMARY KEY,"
                    " owner_id text NOT NULL, version bigint NOT NULL,"
                    " head_digest text NOT NULL)"
                ).format(self._index_table)
            )
            self._connection.execute(
                sql.SQL(
                    "CREATE INDEX IF NOT EXISTS conversation_index_owner"
                    " ON {} (owner_id)"
                ).format(self._index_table)
            )

    def tracking(self) -> Tracking:
        with self._lock:
            row = self._connection.execute(
                sql.SQL("SELECT position, rebuilding FROM {} WHERE name = %s").format(
                    self._tracking_table
                ),
                (NAME,),
            ).fetchone()
        return Tracking(0, False) if row is None else Tracking(row[0], row[1])

    def _set_tracking(self, position: int, rebuilding: bool) -> None:
        self._connection.execute(
            sql.SQL(
                "INSERT INTO {} VALUES (%s, %s, %s) ON CONFLICT (name) DO UPDATE"
                " SET position = EXCLUDED.position, rebuilding = EXCLUDED.rebuilding"
            ).format(self._tracking_table),
            (NAME, position, rebuilding),
        )

    def reset(self) -> None:
        with self._lock, self._connection.transaction():
            self._connection.execute(
                sql.SQL("DELETE FROM {}").format(self._index_table)
            )
            self._set_tracking(0, True)

    def apply_changes(self, changes: Sequence[IndexChange], position: int) -> None:
        rebuilding = self.tracking().rebuilding
        whole = [c for c in changes if c.owner_id is not None]
        moves = [c for c in changes if c.owner_id is None]
        with (
            self._lock,
            self._connection.transaction(),
            self._connection.cursor() as cur,
        ):
            if whole:
                cur.executemany(
                    sql.SQL(
                        "INSERT INTO {} VALUES (%s, %s, %s, %s) ON CONFLICT"
                        " (conversation_id) DO UPDATE SET owner_id = EXCLUDED.owner_id,"
                        " version = EXCLUDED.version,"
                        " head_digest = EXCLUDED.head_digest"
                    ).format(self._index_table),
                    [
                        (c.conversation_id, c.owner_id, c.version, c.head_digest)
                        for c in whole
                    ],
                )
            if moves:
                cur.executemany(
                    sql.SQL(
                        "UPDATE {} SET version = %s, head_digest = %s"
                        " WHERE conversation_id = %s AND version < %s"
                    ).format(self._index_table),
                    [
                        (c.version, c.head_digest, c.conversation_id, c.version)
                        for c in moves
                    ],
                )
            self._set_tracking(position, rebuilding)

    def finish_rebuild(self) -> None:
        with self._lock:
            self._connection.execute(
                sql.SQL("UPDATE {} SET rebuilding = false WHERE name = %s").format(
                    self._tracking_table
                ),
                (NAME,),
            )

    def rows(self) -> list[IndexChange]:
        with self._lock:
            rows = self._connection.execute(
                sql.SQL(
                    "SELECT conversation_id, version, head_digest, owner_id FROM {}"
                    " ORDER BY conversation_id::text"
                ).format(self._index_table)
            ).fetchall()
        return [IndexChange(row[0], row[1], row[2], row[3]) for row in rows]

    def conversations_of(self, owner_id: str) -> list[UUID]:
        with self._lock:
            rows = self._connection.execute(
                sql.SQL(
                    "SELECT conversation_id FROM {} WHERE owner_id = %s"
                    " ORDER BY conversation_id::text"
                ).format(self._index_table),
                (owner_id,),
            ).fetchall()
        return [row[0] for row in rows]

    def close(self) -> None:
        with self._lock:
            self._connection.close()


def open_conversation_index(settings: Settings) -> ReadModelStore:
    match settings.persistence:
        case "sqlite":
            settings.data_dir.mkdir(parents=True, exist_ok=True)
            return SQLiteConversationIndex(settings.data_dir / "readmodels.sqlite3")
        case "postgres":
            from turnledger.infra.postgres import ensure_schema

            ensure_schema(settings.postgres_conninfo(), settings.postgres_schema)
            return PostgresConversationIndex(
                settings.postgres_conninfo(), settings.postgres_schema
            )
        case _:
            return MemoryConversationIndex()
