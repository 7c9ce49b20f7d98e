"""SQLite key store: a file of its own, beside the event log's file."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Collection
from pathlib import Path
from uuid import UUID

_SCHEMA = """
CREATE TABLE IF NOT EXISTS turn_keys (
    conversation_id TEXT NOT NULL,
    turn_id TEXT NOT NULL,
    wrapped_key BLOB NOT NULL,
    PRIMARY KEY (conversation_id, turn_id)
) WITHOUT ROWID
"""


class SQLiteKeyStore:
    """Keys in their own SQLite file, with secure_delete so a destroyed key's
    bytes are overwritten in the file rather than left on a free page."""

    def __init__(self, path: Path | str) -> None:
        self._connection = sqlite3.connect(
            str(path), check_same_thread=False, isolation_level=None, timeout=30
        )
        self._lock = threading.Lock()
        with self._lock:
            self._connection.execute("PRAGMA secure_delete = ON")
            self._connection.execute(_SCHEMA)

    def put_if_absent(
        self, conversation_id: UUID, turn_id: str, wrapped: bytes
    ) -> bytes:
        with self._lock:
            self._connection.execute(
                "INSERT OR IGNORE INTO turn_keys VALUES (?, ?, ?)",
                (conversation_id.hex, turn_id, wrapped),
            )
            row = self._connection.execute(
                "SELECT wrapped_key FROM turn_keys "
                "WHERE conversation_id = ? AND turn_id = ?",
                (conversation_id.hex, turn_id),
            ).fetchone()
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

    def destroy(self, conversation_id: UUID, turn_ids: Collection[str]) -> int:
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
                self._connection.execute("COMMIT")
            except BaseException:
                self._connection.execute("ROLLBACK")
                raise
        return deleted

    def close(self) -> None:
        with self._lock:
            self._connection.close()


def _chunks(items: list[str], size: int = 500) -> list[list[str]]:
    return [items[start : start + size] for start in range(0, len(items), size)]
