"""SQLite: the read side in the event log's file, `SQLiteReadSideFactory` for the
library, keys beside it (sqlite_keys.py); memory is this on in-memory files."""

from __future__ import annotations

import sqlite3
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from eventsourcing.persistence import Notification, StoredEvent
from eventsourcing.sqlite import SQLiteCursor, SQLiteFactory
from eventsourcing.utils import Environment, EnvType

from turnledger.infra.library_compat import SQLiteRecorderWithRows
from turnledger.infra.migrations import ledger as ledger_steps
from turnledger.infra.migrations.runner import (
    StoreNames,
    check_sqlite_version,
    migrate_sqlite,
)
from turnledger.infra.owner_feed import (
    OWNER_FEED_TABLE,
    SQLITE_INSERT_OWNER_ROW,
    sqlite_build_owner_feed,
    sqlite_select_owner_events,
)
from turnledger.infra.read_side_sql import (
    CONVERSATION_COLUMNS,
    ERASE_TURN_SIZES,
    FOLD_COLUMNS,
    TURN_COLUMN_COUNT,
    TURN_COLUMNS,
    conversation_row,
    conversation_values,
    fold_row,
    fold_values,
    turn_row,
    turn_values,
)
from turnledger.infra.sqlite_keys import (
    EVENTS_CHECKPOINT_TIMEOUT_SECONDS,
    SQLiteKeyStore,
    chunks,
)
from turnledger.projections.ledger_rows import (
    ConversationRow,
    FoldRow,
    RowChanges,
    TurnRow,
)
from turnledger.projections.read_side import LedgerView

__all__ = [
    "EVENTS_CHECKPOINT_TIMEOUT_SECONDS",
    "SQLiteKeyStore",
    "SQLiteReadSideFactory",
    "SQLiteReadSideRecorder",
]


# The read side, in the event log's own file -----------------------------------

# Their schema is versioned: infra/migrations/ledger.py.
_READ_SIDE_TABLES = ("conversation_heads", "conversation_turns", "conversation_folds")


def _hex(conversation_id: UUID) -> str:
    return conversation_id.hex


def _iso(at: datetime) -> str:
    return at.isoformat()


def _originator_key(originator_id: UUID | str) -> str:
    # As the library stores it (and the head rows key it): the UUID's hex.
    return originator_id.hex if isinstance(originator_id, UUID) else originator_id


class SQLiteReadSideRecorder(SQLiteRecorderWithRows):
    """The library's SQLite recorder, writing the read side with the events."""

    def create_table(self) -> None:
        super().create_table()
        # The read side's tables and the per-user feed index: the steps this
        # file has not had yet, in one transaction (infra/migrations/).
        with self.datastore.transaction(commit=True) as c:
            # BEGIN is deferred: a read first could not wait to become a write.
            c.execute(f"UPDATE {self.events_table_name} SET rowid = rowid WHERE 0")
            migrate_sqlite(
                c,
                ledger_steps.COMPONENT,
                ledger_steps.SQLITE_STEPS,
                StoreNames(events_table=self.events_table_name),
            )

    def check_schema_version(self) -> None:
        """For a read-only opening: refuse a read side newer than the code."""
        with self.datastore.transaction(commit=False) as c:
            check_sqlite_version(c, ledger_steps.COMPONENT, ledger_steps.SQLITE_STEPS)

    def write_rows(
        self,
        c: SQLiteCursor,
        ids: Sequence[int],
        stored_events: Sequence[StoredEvent],
        **kwargs: Any,
    ) -> None:
        changes: RowChanges | None = kwargs.get("read_side")
        if changes is not None:
            self._write_rows(c, changes)
        if ids:
            # After the head rows: a new conversation's owner is in its own.
            c.executemany(
                SQLITE_INSERT_OWNER_ROW,
                [
                    (notification_id, _originator_key(event.originator_id))
                    for notification_id, event in zip(ids, stored_events, strict=True)
                ],
            )

    def _write_rows(self, c: SQLiteCursor, changes: RowChanges) -> None:
        key, time = _hex, _iso
        if changes.deletions or changes.withdrawals:
            # Erased sizes are zeroed in the page, not left in its free space
            # (the SQLite build's default may be off); compaction then
            # truncates the WAL's older frames of the page.
            c.execute("PRAGMA secure_delete = ON")
        if changes.new_turns:
            c.executemany(
                f"INSERT INTO conversation_turns ({TURN_COLUMNS}) "
                f"VALUES ({','.join('?' * TURN_COLUMN_COUNT)})",
                [turn_values(t, key=key, time=time) for t in changes.new_turns],
            )
        for deletion in changes.deletions:
            c.execute(
                "UPDATE conversation_turns SET deleted_version = ?, deleted_at = ?, "
                f"{ERASE_TURN_SIZES} "
                "WHERE conversation_id = ? AND turn_id = ?",
                (
                    deletion.deleted_version,
                    time(deletion.deleted_at),
                    key(deletion.conversation_id),
                    deletion.turn_id,
                ),
            )
        if changes.new_folds:
            c.executemany(
                f"INSERT INTO conversation_folds ({FOLD_COLUMNS}) "
                f"VALUES ({','.join('?' * 11)})",
                [fold_values(f, key=key, time=time) for f in changes.new_folds],
            )
        for withdrawal in changes.withdrawals:
            c.execute(
                "UPDATE conversation_folds SET withdrawn_version = ?, "
                "summary_json_bytes = NULL, summary_chars = NULL "
                "WHERE conversation_id = ? AND fold_id = ?",
                (
                    withdrawal.withdrawn_version,
                    key(withdrawal.conversation_id),
                    withdrawal.fold_id,
                ),
            )
        if changes.conversations:
            c.executemany(
                f"INSERT OR REPLACE INTO conversation_heads ({CONVERSATION_COLUMNS}) "
                f"VALUES ({','.join('?' * 8)})",
                [
                    conversation_values(r, key=key, time=time)
                    for r in changes.conversations
                ],
            )

    def replace_read_side(self, view: LedgerView) -> None:
        """Replace every row with those of `view` (a rebuild), in one transaction."""
        conversations, turns, folds = view.rows()
        with self.datastore.transaction(commit=True) as c:
            c.execute("PRAGMA secure_delete = ON")
            for table in _READ_SIDE_TABLES:
                c.execute(f"DELETE FROM {table}")  # noqa: S608 - fixed names
            self._write_rows(
                c,
                RowChanges(
                    conversations=tuple(conversations),
                    new_turns=tuple(turns),
                    new_folds=tuple(folds),
                ),
            )
            c.execute(f"DELETE FROM {OWNER_FEED_TABLE}")  # noqa: S608 - fixed name
            c.execute(sqlite_build_owner_feed(self.events_table_name))

    def select_owner_notifications(
        self, owner_id: str, after: int, limit: int, topics: Sequence[str] = ()
    ) -> list[Notification]:
        """The owner's events after log position `after`, oldest first, through
        the per-user feed index (infra/owner_feed.py)."""
        statement = sqlite_select_owner_events(
            self.events_table_name, topics=len(topics)
        )
        return [
            Notification(
                id=row["notification_id"],
                originator_id=self.convert_originator_id(row["originator_id"]),
                originator_version=row["originator_version"],
                topic=row["topic"],
                state=bytes(row["state"]),
            )
            for row in self._select(statement, (owner_id, after, *topics, limit))
        ]

    def _select(self, statement: str, params: Sequence[Any]) -> list[Any]:
        with self.datastore.transaction(commit=False) as c:
            c.execute(statement, params)
            return list(c.fetchall())

    def conversations(self, ids: Collection[UUID]) -> dict[UUID, ConversationRow]:
        found: dict[UUID, ConversationRow] = {}
        for chunk in chunks([i.hex for i in ids]):
            for row in self._select(
                f"SELECT {CONVERSATION_COLUMNS} FROM conversation_heads "
                f"WHERE conversation_id IN ({','.join('?' * len(chunk))})",
                chunk,
            ):
                decoded = conversation_row(row)
                found[decoded.conversation_id] = decoded
        return found

    def heads_and_turns(
        self, turn_ids: Mapping[UUID, Collection[str]]
    ) -> tuple[dict[UUID, ConversationRow], dict[UUID, dict[str, TurnRow]]]:
        return self.conversations(turn_ids.keys()), {
            conversation_id: self.turns_by_id(conversation_id, ids)
            for conversation_id, ids in turn_ids.items()
            if ids
        }

    def deleted_turns(
        self, turn_ids: Mapping[UUID, Collection[str]]
    ) -> set[tuple[UUID, str]]:
        found: set[tuple[UUID, str]] = set()
        for conversation_id, ids in turn_ids.items():
            for chunk in chunks(list(ids)):
                found.update(
                    (conversation_id, row[0])
                    for row in self._select(
                        "SELECT turn_id FROM conversation_turns "
                        "WHERE conversation_id = ? "
                        f"AND turn_id IN ({','.join('?' * len(chunk))}) "
                        "AND deleted_version IS NOT NULL",
                        (conversation_id.hex, *chunk),
                    )
                )
        return found

    def conversations_of(self, owner_id: str) -> list[ConversationRow]:
        return [
            conversation_row(row)
            for row in self._select(
                f"SELECT {CONVERSATION_COLUMNS} FROM conversation_heads "
                "WHERE owner_id = ? ORDER BY created_at, conversation_id",
                (owner_id,),
            )
        ]

    def turns_by_id(
        self, conversation_id: UUID, turn_ids: Collection[str]
    ) -> dict[str, TurnRow]:
        found: dict[str, TurnRow] = {}
        for chunk in chunks(list(turn_ids)):
            for row in self._select(
                f"SELECT {TURN_COLUMNS} FROM conversation_turns "
                "WHERE conversation_id = ? "
                f"AND turn_id IN ({','.join('?' * len(chunk))})",
                (conversation_id.hex, *chunk),
            ):
                decoded = turn_row(row)
                found[decoded.turn_id] = decoded
        return found

    def turns_page(
        self, conversation_id: UUID, *, offset: int, limit: int, as_of: int
    ) -> list[TurnRow]:
        return [
            turn_row(row)
            for row in self._select(
                f"SELECT {TURN_COLUMNS} FROM conversation_turns "
                "WHERE conversation_id = ? AND position >= ? AND position < ? "
                "AND version <= ? ORDER BY position",
                (conversation_id.hex, offset, offset + limit, as_of),
            )
        ]

    def eligible_newest_first(
        self, conversation_id: UUID, *, below: int, above: int, as_of: int, limit: int
    ) -> list[TurnRow]:
        return [
            turn_row(row)
            for row in self._select(
                f"SELECT {TURN_COLUMNS} FROM conversation_turns "
                "WHERE conversation_id = ? AND position < ? AND position > ? "
                "AND status = 'c' AND version <= ? "
                "AND (deleted_version IS NULL OR deleted_version > ?) "
                "ORDER BY position DESC LIMIT ?",
                (conversation_id.hex, below, above, as_of, as_of, limit),
            )
        ]

    def eligible_ids(
        self, conversation_id: UUID, *, first: int, last: int, as_of: int
    ) -> tuple[str, ...]:
        return tuple(
            row["turn_id"]
            for row in self._select(
                "SELECT turn_id FROM conversation_turns "
                "WHERE conversation_id = ? AND position >= ? AND position <= ? "
                "AND status = 'c' AND version <= ? "
                "AND (deleted_version IS NULL OR deleted_version > ?) "
                "ORDER BY position",
                (conversation_id.hex, first, last, as_of, as_of),
            )
        )

    def folds(self, conversation_id: UUID) -> list[FoldRow]:
        return [
            fold_row(row)
            for row in self._select(
                f"SELECT {FOLD_COLUMNS} FROM conversation_folds "
                "WHERE conversation_id = ? ORDER BY version",
                (conversation_id.hex,),
            )
        ]

    def undeleted_turns(self, conversation_id: UUID) -> list[TurnRow]:
        return [
            turn_row(row)
            for row in self._select(
                f"SELECT {TURN_COLUMNS} FROM conversation_turns "
                "WHERE conversation_id = ? AND deleted_version IS NULL "
                "ORDER BY position",
                (conversation_id.hex,),
            )
        ]

    def read_side_is_empty(self) -> bool:
        return not self._select("SELECT 1 FROM conversation_heads LIMIT 1", ())

    def read_side_rows(
        self,
    ) -> tuple[list[ConversationRow], list[TurnRow], list[FoldRow]]:
        return (
            [
                conversation_row(row)
                for row in self._select(
                    f"SELECT {CONVERSATION_COLUMNS} FROM conversation_heads", ()
                )
            ],
            [
                turn_row(row)
                for row in self._select(
                    f"SELECT {TURN_COLUMNS} FROM conversation_turns", ()
                )
            ],
            [
                fold_row(row)
                for row in self._select(
                    f"SELECT {FOLD_COLUMNS} FROM conversation_folds", ()
                )
            ],
        )


class SQLiteReadSideFactory(SQLiteFactory):
    application_recorder_class = SQLiteReadSideRecorder

    def __init__(self, env: Environment | EnvType | None) -> None:
        super().__init__(env)
        # The memory store (persistence.py): a database in memory lives while
        # a connection to it is open; one is held until the factory closes.
        pool = self.datastore.pool
        self._keep_alive: sqlite3.Connection | None = None
        if pool.is_sqlite_memory_mode:
            if "cache=shared" not in pool.db_name:  # each connection its own
                raise ValueError(f"{pool.db_name}: in memory, it needs cache=shared")
            self._keep_alive = sqlite3.connect(
                pool.db_name, uri=True, check_same_thread=False
            )

    def close(self) -> None:
        super().close()
        if self._keep_alive is not None:
            self._keep_alive.close()

    def application_recorder(self) -> SQLiteReadSideRecorder:
        recorder = super().application_recorder()
        assert isinstance(recorder, SQLiteReadSideRecorder)
        if not self.env_create_table():  # read-only: nothing is migrated
            recorder.check_schema_version()
        return recorder
