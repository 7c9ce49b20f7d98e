"""SQLite key store: a file of its own, beside the event log's file."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Collection
from pathlib import Path
from uuid import UUID

from eventsourcing.persistence import Tracking

from turnledger.domain.errors import TurnDeletedError
from turnledger.infra.keystore import KeyStore

_SCHEMA = [
    """
    CREATE TABLE IF NOT EXISTS turn_keys (
        conversation_id TEXT NOT NULL,
        turn_id TEXT NOT NULL,
        wrapped_key BLOB NOT NULL,
        PRIMARY KEY (conversation_id, turn_id)
    ) WITHOUT ROWID
    """,
    # Turns whose keys were destroyed: their keys must never be created again.
    """
    CREATE TABLE IF NOT EXISTS destroyed_turn_keys (
        conversation_id TEXT NOT NULL,
        turn_id TEXT NOT NULL,
        PRIMARY KEY (conversation_id, turn_id)
    ) WITHOUT ROWID
    """,
    # How far the purge has followed each application's log: every position
    # seen, the last one that destroyed keys, and the last one compacted.
    """
    CREATE TABLE IF NOT EXISTS key_purge_tracking (
        application_name TEXT PRIMARY KEY,
        followed_id INTEGER NOT NULL,
        destroyed_id INTEGER NOT NULL,
        compacted_id INTEGER NOT NULL
    )
    """,
]

_ADVANCE = """
INSERT INTO key_purge_tracking VALUES (?, ?, ?, 0)
ON CONFLICT (application_name) DO UPDATE SET
    followed_id = max(followed_id, excluded.followed_id),
    destroyed_id = max(destroyed_id, excluded.destroyed_id)
"""


class SQLiteKeyStore(KeyStore):
    """Keys in their own SQLite file.

    `secure_delete` makes SQLite overwrite a destroyed key's bytes with zeros
    rather than leave them on a free page, and the file is in WAL mode so that
    compaction can checkpoint and truncate the WAL, which otherwise keeps old
    copies of pages (and so of keys) in frames that are reused, not erased.
    The purge's tracking row lives in this same file, so destroying keys and
    recording the position commit in one transaction.
    """

    def __init__(self, path: Path | str) -> None:
        self._connection = sqlite3.connect(
            str(path), check_same_thread=False, isolation_level=None, timeout=30
        )
        self._lock = threading.Lock()
        with self._lock:
            self._connection.execute("PRAGMA secure_delete = ON")
            self._connection.execute("PRAGMA journal_mode = WAL")
            for statement in _SCHEMA:
                self._connection.execute(statement)

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
        """Checkpoint and truncate the WAL; deleted cells are already zeroed."""
        with self._lock:
            row = self._connection.execute(
                "SELECT destroyed_id FROM key_purge_tracking "
                "WHERE application_name = ?",
                (application_name,),
            ).fetchone()
            if row is None or not self._checkpoint():
                return False
            self._connection.execute(
                "UPDATE key_purge_tracking SET compacted_id = max(compacted_id, ?) "
                "WHERE application_name = ?",
                (row[0], application_name),
            )
            # Leave the WAL empty again (it now holds only the tracking page).
            self._checkpoint()
            return True

    def close(self) -> None:
        with self._lock:
            self._connection.close()

    def _checkpoint(self) -> bool:
        row = self._connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        return row[0] == 0  # (busy, frames in the WAL, frames checkpointed)

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
