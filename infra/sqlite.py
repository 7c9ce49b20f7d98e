"""SQLite key store: a file of its own, beside the event log's file."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import closing
from datetime import datetime
from pathlib import Path
from typing import Any
from uuid import UUID

from eventsourcing.persistence import Notification, StoredEvent, Tracking
from eventsourcing.sqlite import SQLiteCursor, SQLiteFactory

from turnledger.domain.errors import TurnDeletedError
from turnledger.infra.keystore import KeyStore
from turnledger.infra.library_compat import SQLiteRecorderWithRows
from turnledger.infra.migrations import ledger as ledger_steps
from turnledger.infra.migrations.runner import (
    StoreNames,
    check_sqlite_version,
    migrate_sqlite,
    sqlite_write_transaction,
)
from turnledger.infra.migrations.stores import KEYS, SQLITE_KEY_STEPS
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
from turnledger.projections.ledger_rows import (
    ConversationRow,
    FoldRow,
    RowChanges,
    TurnRow,
)
from turnledger.projections.read_side import LedgerView

# The key file's tables are versioned steps: infra/migrations/stores.py.

_ADVANCE = """
INSERT INTO key_purge_tracking VALUES (?, ?, ?, 0)
ON CONFLICT (application_name) DO UPDATE SET
    followed_id = max(followed_id, excluded.followed_id),
    destroyed_id = max(destroyed_id, excluded.destroyed_id)
"""


# How long compaction waits for readers of the event log's file to move to
# its newest snapshot before it stays pending (writers queue meanwhile).
EVENTS_CHECKPOINT_TIMEOUT_SECONDS = 0.2


class SQLiteKeyStore(KeyStore):
    """Keys in their own SQLite file.

    `secure_delete` makes SQLite overwrite a destroyed key's bytes with zeros
    rather than leave them on a free page, and the file is in WAL mode so that
    compaction can checkpoint and truncate the WAL, which otherwise keeps old
    copies of pages (and so of keys) in frames that are reused, not erased.
    The purge's tracking row lives in this same file, so destroying keys and
    recording the position commit in one transaction.

    Compaction also checkpoints and truncates the event log's WAL
    (`events_path`): its frames keep the read side's pages as they were
    before a deletion erased the turn's sizes from its row.
    """

    def __init__(
        self,
        path: Path | str,
        *,
        read_only: bool = False,
        events_path: Path | str | None = None,
    ) -> None:
        """`read_only`: for audits, which must change nothing: the file is
        opened read-only and no table is created. `events_path`: the event
        log's file, whose WAL compaction truncates too."""
        self._events_path = None if events_path is None else Path(events_path)
        self._holds: tuple[str, ...] = ()  # why this process's last run stayed pending
        target = f"file:{Path(path).resolve()}?mode=ro" if read_only else str(path)
        self._connection = sqlite3.connect(
            target,
            check_same_thread=False,
            isolation_level=None,
            timeout=30,
            uri=read_only,
        )
        self._lock = threading.Lock()
        if read_only:
            return
        with self._lock:
            self._connection.execute("PRAGMA secure_delete = ON")
            self._connection.execute("PRAGMA journal_mode = WAL")
            with sqlite_write_transaction(self._connection) as cursor:
                migrate_sqlite(cursor, KEYS, SQLITE_KEY_STEPS, StoreNames())

    def put_if_absent(
        self, conversation_id: UUID, turn_id: str, wrapped: bytes
    ) -> bytes:
        with self._lock:
            # One statement, so SQLite's write lock orders it against a purge.
            self._connection.execute(
                "INSERT OR IGNORE INTO turn_keys SELECT ?, ?, ? WHERE NOT EXISTS "
                "(SELECT 1 FROM destroyed_turn_keys "
                "WHERE conversation_id = ? AND turn_id = ?)",
                (conversation_id.hex, turn_id, wrapped, conversation_id.hex, turn_id),
            )
            row = self._connection.execute(
                "SELECT wrapped_key FROM turn_keys "
                "WHERE conversation_id = ? AND turn_id = ?",
                (conversation_id.hex, turn_id),
            ).fetchone()
        if row is None:
            raise TurnDeletedError(conversation_id, turn_id)
        return bytes(row[0])

    def get_many(
        self, conversation_id: UUID, turn_ids: Collection[str]
    ) -> dict[str, bytes]:
        found: dict[str, bytes] = {}
        ids = list(turn_ids)
        with self._lock:
            for chunk in _chunks(ids):
                rows = self._connection.execute(
                    "SELECT turn_id, wrapped_key FROM turn_keys "
                    "WHERE conversation_id = ? "
                    f"AND turn_id IN ({','.join('?' * len(chunk))})",
                    (conversation_id.hex, *chunk),
                )
                found.update((turn_id, bytes(blob)) for turn_id, blob in rows)
        return found

    def destroy_keys(
        self, conversation_id: UUID, turn_ids: Collection[str], tracking: Tracking
    ) -> int:
        deleted = 0
        ids = list(turn_ids)
        self._remember_destroyed(conversation_id, ids, tracking)
        with self._lock:
            self._connection.execute("BEGIN IMMEDIATE")
            try:
                for chunk in _chunks(ids):
                    deleted += self._connection.execute(
                        "DELETE FROM turn_keys WHERE conversation_id = ? "
                        f"AND turn_id IN ({','.join('?' * len(chunk))})",
                        (conversation_id.hex, *chunk),
                    ).rowcount
                self._connection.executemany(
                    "INSERT OR IGNORE INTO destroyed_turn_keys VALUES (?, ?)",
                    ((conversation_id.hex, turn_id) for turn_id in ids),
                )
                self._connection.execute(
                    _ADVANCE,
                    (
                        tracking.application_name,
                        tracking.notification_id,
                        tracking.notification_id,
                    ),
                )
                self._connection.execute("COMMIT")
            except BaseException:
                self._connection.execute("ROLLBACK")
                raise
        return deleted

    def insert_tracking(self, tracking: Tracking) -> None:
        with self._lock:
            self._connection.execute(
                _ADVANCE, (tracking.application_name, tracking.notification_id, 0)
            )

    def compact(self, application_name: str) -> bool:
        """Checkpoint and truncate both WALs; deleted cells are already zeroed."""
        with self._lock:
            row = self._connection.execute(
                "SELECT destroyed_id FROM key_purge_tracking "
                "WHERE application_name = ?",
                (application_name,),
            ).fetchone()
            if row is None:
                return False
            if not self._checkpoint():
                self._holds = (
                    "another connection reads the key file on an older snapshot: "
                    "its WAL could not be truncated",
                )
                return False
            if not self._checkpoint_events():
                self._holds = (
                    f"another connection reads {self._events_path} on an older "
                    "snapshot: its WAL (old read-side rows, sizes included) could "
                    "not be truncated",
                )
                return False
            self._holds = ()
            self._connection.execute(
                "UPDATE key_purge_tracking SET compacted_id = max(compacted_id, ?) "
                "WHERE application_name = ?",
                (row[0], application_name),
            )
            # Leave the WAL empty again (it now holds only the tracking page).
            self._checkpoint()
            return True

    def compaction_holds(self, application_name: str) -> tuple[str, ...]:
        return self._holds

    def close(self) -> None:
        with self._lock:
            self._connection.close()

    def read_meta(self, name: str) -> str | None:
        with self._lock:
            try:
                row = self._connection.execute(
                    "SELECT value FROM key_store_meta WHERE name = ?", (name,)
                ).fetchone()
            except sqlite3.OperationalError:  # a store older than the table
                return None
        return None if row is None else str(row[0])

    def write_meta(self, name: str, value: str) -> None:
        with self._lock:
            self._connection.execute(
                "INSERT OR REPLACE INTO key_store_meta VALUES (?, ?)", (name, value)
            )

    def claim_meta(self, name: str, value: str) -> str:
        with self._lock:
            # INSERT OR IGNORE is atomic across processes; the read after it
            # sees whichever insert came first.
            self._connection.execute(
                "INSERT OR IGNORE INTO key_store_meta VALUES (?, ?)", (name, value)
            )
            row = self._connection.execute(
                "SELECT value FROM key_store_meta WHERE name = ?", (name,)
            ).fetchone()
        return str(row[0])

    def destroyed_key_ids(self) -> set[tuple[str, str]]:
        with self._lock:
            # Stored as 32 hex digits (a first-release store may have dashes).
            rows = self._connection.execute(
                "SELECT replace(conversation_id, '-', ''), turn_id "
                "FROM destroyed_turn_keys"
            ).fetchall()
        return set(rows)

    def any_wrapped_key(self) -> tuple[UUID, str, bytes] | None:
        with self._lock:
            row = self._connection.execute(
                "SELECT conversation_id, turn_id, wrapped_key FROM turn_keys LIMIT 1"
            ).fetchone()
        return None if row is None else (UUID(hex=row[0]), row[1], bytes(row[2]))

    def rewrap_all(
        self, rewrap: Callable[[UUID, str, bytes], bytes], *, key_id: str
    ) -> int:
        with self._lock:
            self._connection.execute("BEGIN IMMEDIATE")
            try:
                rows = self._connection.execute(
                    "SELECT conversation_id, turn_id, wrapped_key FROM turn_keys"
                ).fetchall()
                self._connection.executemany(
                    "UPDATE turn_keys SET wrapped_key = ? "
                    "WHERE conversation_id = ? AND turn_id = ?",
                    ((rewrap(UUID(hex=c), t, bytes(w)), c, t) for c, t, w in rows),
                )
                self._connection.execute(
                    "INSERT OR REPLACE INTO key_store_meta VALUES (?, ?)",
                    ("master_key_id", key_id),
                )
                self._connection.execute("COMMIT")
            except BaseException:
                self._connection.execute("ROLLBACK")
                raise
            # Old wrappings in the WAL open nothing a new one does not.
            self._checkpoint()
        return len(rows)

    def _checkpoint(self) -> bool:
        row = self._connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        return row[0] == 0  # (busy, frames in the WAL, frames checkpointed)

    def _checkpoint_events(self) -> bool:
        """Copy the event log's WAL into its file and truncate it to 0 bytes.

        The read side's rows live in the event log's file: the deletion that
        erased a turn's sizes (and a withdrawn fold's) wrote new pages, with
        the old cells zeroed (`secure_delete`), but the WAL still holds the
        frames of those pages from before. A reader on an older snapshot
        makes the checkpoint stop short: then compaction stays pending.
        """
        if self._events_path is None or not self._events_path.exists():
            return True
        with closing(
            sqlite3.connect(
                self._events_path,
                isolation_level=None,
                timeout=EVENTS_CHECKPOINT_TIMEOUT_SECONDS,
            )
        ) as connection:
            try:
                row = connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            except sqlite3.OperationalError:  # locked: retried later
                return False
        return bool(row[0] == 0)

    def _tracking_row(self, application_name: str) -> tuple[int, int, int] | None:
        with self._lock:
            row = self._connection.execute(
                "SELECT followed_id, destroyed_id, compacted_id "
                "FROM key_purge_tracking WHERE application_name = ?",
                (application_name,),
            ).fetchone()
        return None if row is None else (int(row[0]), int(row[1]), int(row[2]))


def _chunks(items: list[str], size: int = 500) -> list[list[str]]:
    return [items[start : start + size] for start in range(0, len(items), size)]


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
        for chunk in _chunks([i.hex for i in ids]):
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
        for chunk in _chunks(list(turn_ids)):
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

    def application_recorder(self) -> SQLiteReadSideRecorder:
        recorder = super().application_recorder()
        assert isinstance(recorder, SQLiteReadSideRecorder)
        if not self.env_create_table():  # read-only: nothing is migrated
            recorder.check_schema_version()
        return recorder
