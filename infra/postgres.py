"""PostgreSQL pieces outside the library: the schema and the key store."""

from __future__ import annotations

from collections.abc import Collection
from uuid import UUID

import psycopg
from psycopg import sql
from psycopg_pool import ConnectionPool


def ensure_schema(conninfo: str, schema: str) -> None:
    """Create the schema the event store and key store live in."""
    with psycopg.connect(conninfo, autocommit=True) as connection:
        connection.execute(
            sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema))
        )


class PostgresKeyStore:
    """Wrapped turn keys in `<schema>.turn_keys`, through a psycopg pool."""

    def __init__(self, conninfo: str, schema: str, *, pool_size: int = 4) -> None:
        self._table = sql.Identifier(schema, "turn_keys")
        self._pool = ConnectionPool(
            conninfo, min_size=1, max_size=pool_size, open=True, name="turnledger-keys"
        )
        with self._pool.connection() as connection:
            connection.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} ("
                    " conversation_id uuid NOT NULL,"
                    " turn_id text NOT NULL,"
                    " wrapped_key bytea NOT NULL,"
                    " PRIMARY KEY (conversation_id, turn_id))"
                ).format(self._table)
            )

    def put_if_absent(
        self, conversation_id: UUID, turn_id: str, wrapped: bytes
    ) -> bytes:
        with self._pool.connection() as connection:
            connection.execute(
                sql.SQL(
                    "INSERT INTO {} VALUES (%s, %s, %s) ON CONFLICT DO NOTHING"
                ).format(self._table),
                (conversation_id, turn_id, wrapped),
            )
            row = connection.execute(
                sql.SQL(
                    "SELECT wrapped_key FROM {} "
                    "WHERE conversation_id = %s AND turn_id = %s"
                ).format(self._table),
                (conversation_id, turn_id),
            ).fetchone()
        assert row is not None
        return bytes(row[0])

    def get_many(
        self, conversation_id: UUID, turn_ids: Collection[str]
    ) -> dict[str, bytes]:
        with self._pool.connection() as connection:
            rows = connection.execute(
                sql.SQL(
                    "SELECT turn_id, wrapped_key FROM {} "
                    "WHERE conversation_id = %s AND turn_id = ANY(%s)"
                ).format(self._table),
                (conversation_id, list(turn_ids)),
            ).fetchall()
        return {turn_id: bytes(blob) for turn_id, blob in rows}

    def destroy(self, conversation_id: UUID, turn_ids: Collection[str]) -> int:
        with self._pool.connection() as connection:
            cursor = connection.execute(
                sql.SQL(
                    "DELETE FROM {} WHERE conversation_id = %s AND turn_id = ANY(%s)"
                ).format(self._table),
                (conversation_id, list(turn_ids)),
            )
            return cursor.rowcount

    def close(self) -> None:
        self._pool.close()
