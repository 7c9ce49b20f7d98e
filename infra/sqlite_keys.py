"""SQLite key store: a file of its own, beside the event log's file."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Collection
from contextlib import closing
from pathlib import Path
from uuid import UUID

from eventsourcing.persistence import Tracking

from turnledger.domain.errors import TurnDeletedError
from turnledger.infra.keystore import KeyStore
from turnledger.infra.migrations.runner import (
    StoreNames,
    migrate_sqlite,
    sqlite_write_transaction,
)
from turnledger.infra.migrations.stores import KEYS, SQLITE_KEY_STEPS

# The key file's tables are versioned steps: infra/migrations/stores.py.

_ADVANCE = """
INSERT INTO key_purge_tracking VALUES (?, ?, ?, 0)
ON CONFLICT (application_name) DO UPDATE SET
    followed_id = max(followed_id, excluded.followed_id),
    destroyed_id = max(destroyed_id, excluded.destroyed_id)
"""


# The name of an SQLite database in memory, private to the connection that
# opens it: the memory store's key, device and tree stores each keep one.
MEMORY = ":memory:"

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
        log's file, whose WAL compaction truncates too. `path` `MEMORY`: the
        memory store's keys, in a database that lives as long as this object
        (no WAL, nothing to compact but the tracking row)."""
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
            for chunk in chunks(ids):
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
                for chunk in chunks(ids):
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


def chunks(items: list[str], size: int = 500) -> list[list[str]]:
    """`items` in lists of `size`: under SQLite's limit on bound parameters."""
    return [items[start : start + size] for start in range(0, len(items), size)]
