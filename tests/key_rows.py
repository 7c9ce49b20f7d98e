"""Hand edits of an SQLite key store's rows, as an attacker or a damaged disk
would make them: for tests of the vault's answers to them."""

from __future__ import annotations

from uuid import UUID

from turnledger.infra.sqlite_keys import SQLiteKeyStore


def wrapped_key(store: SQLiteKeyStore, conversation_id: UUID, turn_id: str) -> bytes:
    row = store._connection.execute(
        "SELECT wrapped_key FROM turn_keys WHERE conversation_id = ? AND turn_id = ?",
        (conversation_id.hex, turn_id),
    ).fetchone()
    return bytes(row[0])


def set_wrapped_key(
    store: SQLiteKeyStore, conversation_id: UUID, turn_id: str, wrapped: bytes
) -> None:
    store._connection.execute(
        "INSERT OR REPLACE INTO turn_keys VALUES (?, ?, ?)",
        (conversation_id.hex, turn_id, wrapped),
    )


def drop_key(store: SQLiteKeyStore, conversation_id: UUID, turn_id: str) -> None:
    store._connection.execute(
        "DELETE FROM turn_keys WHERE conversation_id = ? AND turn_id = ?",
        (conversation_id.hex, turn_id),
    )
