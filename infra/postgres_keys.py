"""The PostgreSQL key store: wrapped turn keys, hash-partitioned by
conversation, and what the purge records about destroying them."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any
from uuid import UUID

import psycopg
from eventsourcing.persistence import (
    Tracking,
)
from psycopg import sql
from psycopg_pool import ConnectionPool

from turnledger.domain.errors import (
    TurnDeletedError,
)
from turnledger.infra.compaction import (
    DEFAULT_CHECKPOINT_WAIT_SECONDS,
    DEFAULT_LOCK_TIMEOUT_MS,
    KeyCompaction,
)
from turnledger.infra.key_session import configure_key_session
from turnledger.infra.keystore import KeyStore
from turnledger.infra.migrations.runner import StoreNames, migrate_postgres
from turnledger.infra.migrations.stores import (
    KEYS,
    POSTGRES_KEY_STEPS,
)
from turnledger.infra.pool_check import (
    RECONNECT_TIMEOUT_SECONDS,
    check_unless_quiet,
)
from turnledger.infra.pool_queries import execute, fetch_all, fetch_one
from turnledger.infra.postgres_sql import TURN_PAIRS, turn_pairs, uuid_array

# The key table is hash-partitioned by conversation so that compaction (VACUUM
# FULL, which locks the table it rewrites) rewrites and locks only the small
# partitions a deletion touched, never the whole key table. See docs/deletion.md.
KEY_TABLE = "turn_keys"
KEY_COLUMNS = "conversation_id, turn_id, wrapped_key"


class PostgresKeyStore(KeyStore):
    """Wrapped turn keys in `<schema>.turn_keys`, through a psycopg pool.

    New turns' keys are written by the event store, in the transaction of the
    events that need them (`PostgresReadSideRecorder`); this pool reads them,
    and the purge destroys them.

    DELETE only marks a row dead: its bytes stay in the table's file until the
    table is rewritten. The purge therefore records which partitions it
    deleted from, in the same transaction as the deletion and its position in
    the log, and `compact` rewrites exactly those with VACUUM FULL.
    """

    keys_with_events = True

    def __init__(
        self,
        conninfo: str,
        schema: str,
        *,
        pool_size: int = 4,
        horizon_wait_seconds: float = 5.0,
        read_only: bool = False,
        connect_timeout: float = 5.0,
    ) -> None:
        """`connect_timeout`: how long a caller waits for a connection
        (TURNLEDGER_POSTGRES_CONNECT_TIMEOUT), after which it gets the
        pool's error."""
        self._conninfo = conninfo
        self._schema = schema
        self.horizon_wait_seconds = horizon_wait_seconds
        self.compaction_lock_timeout_ms = DEFAULT_LOCK_TIMEOUT_MS
        self.checkpoint_wait_seconds = DEFAULT_CHECKPOINT_WAIT_SECONDS
        self._key_compaction: KeyCompaction | None = None
        self._table = sql.Identifier(schema, KEY_TABLE)
        # Rendered once (a sync read's key statement): a Composed is rendered
        # again at every execution.
        self._select_across = (
            sql.SQL(
                "SELECT conversation_id, turn_id, wrapped_key FROM {} "
                "WHERE conversation_id = ANY(%s::uuid[]) "
                "AND (conversation_id, turn_id) IN ({})"
            )
            .format(self._table, sql.SQL(TURN_PAIRS))
            .as_bytes(None)
        )
        self._tracking = sql.Identifier(schema, "key_purge_tracking")
        self._destroyed = sql.Identifier(schema, "destroyed_turn_keys")
        self._meta = sql.Identifier(schema, "key_store_meta")
        self._pool = ConnectionPool(
            conninfo,
            min_size=1,
            max_size=pool_size,
            open=True,
            name="turnledger-keys",
            configure=configure_key_session,  # no key bytes in the server's log
            # A connection lost in an outage is replaced, not handed out; a
            # caller waits for one as long as a connection may take to open,
            # then gets the pool's error.
            check=check_unless_quiet,
            reconnect_timeout=RECONNECT_TIMEOUT_SECONDS,
            timeout=connect_timeout,
        )
        if read_only:  # audits change nothing, tables included
            return
        with self._pool.connection() as connection:
            self._create_tables(connection)

    def _create_tables(self, connection: psycopg.Connection[Any]) -> None:
        """The steps of the key store's schema it has not had yet."""
        migrate_postgres(
            connection, KEYS, POSTGRES_KEY_STEPS, StoreNames(schema=self._schema)
        )

    def put_if_absent(
        self, conversation_id: UUID, turn_id: str, wrapped: bytes
    ) -> bytes:
        with self._pool.connection() as connection:
            # Shared with other writers, exclusive with the purge of this
            # conversation: the INSERT below (a new snapshot, taken after the
            # lock) sees the purge's tombstones, or the purge sees this key.
            connection.execute(_LOCK_SHARED, (str(conversation_id),))
            connection.execute(
                sql.SQL(
                    "INSERT INTO {} SELECT %(c)s, %(t)s, %(w)s WHERE NOT EXISTS "
                    "(SELECT 1 FROM {} WHERE conversation_id = %(c)s "
                    "AND turn_id = %(t)s) ON CONFLICT DO NOTHING"
                ).format(self._table, self._destroyed),
                {"c": conversation_id, "t": turn_id, "w": wrapped},
            )
            row = connection.execute(
                sql.SQL(
                    "SELECT wrapped_key FROM {} "
                    "WHERE conversation_id = %s AND turn_id = %s"
                ).format(self._table),
                (conversation_id, turn_id),
            ).fetchone()
        if row is None:
            raise TurnDeletedError(conversation_id, turn_id)
        return bytes(row[0])

    def get_many(
        self, conversation_id: UUID, turn_ids: Collection[str]
    ) -> dict[str, bytes]:
        rows = fetch_all(
            self._pool.connection,
            sql.SQL(
                "SELECT turn_id, wrapped_key FROM {} "
                "WHERE conversation_id = %s AND turn_id = ANY(%s)"
            ).format(self._table),
            (conversation_id, list(turn_ids)),
        )
        return {turn_id: bytes(blob) for turn_id, blob in rows}

    def get_across(
        self, turn_ids: Mapping[UUID, Collection[str]]
    ) -> dict[UUID, dict[str, bytes]]:
        if not any(turn_ids.values()):
            return {}
        with self._pool.connection() as connection:
            # The conversation list lets the executor skip the partitions of
            # other conversations; the pairs pick the turns.
            rows = connection.execute(
                self._select_across,
                (uuid_array(turn_ids), turn_pairs(turn_ids)),
                prepare=True,
            ).fetchall()
        found: dict[UUID, dict[str, bytes]] = {}
        for conversation_id, turn_id, blob in rows:
            found.setdefault(conversation_id, {})[turn_id] = bytes(blob)
        return found

    def destroy_keys(
        self, conversation_id: UUID, turn_ids: Collection[str], tracking: Tracking
    ) -> int:
        self._remember_destroyed(conversation_id, turn_ids, tracking)
        # One transaction: the rows, the position and the partitions to rewrite.
        with self._pool.connection() as connection:
            connection.execute(_LOCK_EXCLUSIVE, (str(conversation_id),))
            connection.execute(
                sql.SQL(
                    "INSERT INTO {} SELECT %s, unnest(%s::text[]) "
                    "ON CONFLICT DO NOTHING"
                ).format(self._destroyed),
                (conversation_id, list(turn_ids)),
            )
            rows = connection.execute(
                sql.SQL(
                    "WITH deleted AS (DELETE FROM {} WHERE conversation_id = %s "
                    "AND turn_id = ANY(%s) RETURNING tableoid) "
                    "SELECT c.relname, count(*) FROM deleted "
                    "JOIN pg_class c ON c.oid = deleted.tableoid GROUP BY c.relname"
                ).format(self._table),
                (conversation_id, list(turn_ids)),
            ).fetchall()
            connection.execute(
                sql.SQL(
                    "INSERT INTO {table} AS t VALUES "
                    "(%(name)s, %(id)s, %(id)s, 0, pg_current_xact_id(), %(dirty)s) "
                    "ON CONFLICT (application_name) DO UPDATE SET "
                    "followed_id = GREATEST(t.followed_id, EXCLUDED.followed_id), "
                    "destroyed_id = GREATEST(t.destroyed_id, EXCLUDED.destroyed_id), "
                    "destroyed_xid = EXCLUDED.destroyed_xid, "
                    "dirty_partitions = ARRAY(SELECT DISTINCT unnest("
                    "t.dirty_partitions || EXCLUDED.dirty_partitions))"
                ).format(table=self._tracking),
                {
                    "name": tracking.application_name,
                    "id": tracking.notification_id,
                    "dirty": [relname for relname, _ in rows],
                },
            )
        return sum(int(count) for _, count in rows)

    def insert_tracking(self, tracking: Tracking) -> None:
        execute(
            self._pool.connection,
            sql.SQL(
                "INSERT INTO {} AS t (application_name, followed_id, destroyed_id,"
                " compacted_id) VALUES (%s, %s, 0, 0) "
                "ON CONFLICT (application_name) DO UPDATE SET "
                "followed_id = GREATEST(t.followed_id, EXCLUDED.followed_id)"
            ).format(self._tracking),
            (tracking.application_name, tracking.notification_id),
        )

    def compact(self, application_name: str) -> bool:
        """Rewrite destroyed keys out of the partitions and the WAL, verified.

        False (pending) while an older transaction, a lock or WAL retention
        holds it; `compaction_holds` says which. See infra/compaction.py.
        """
        outcome = self._compaction().run(
            application_name,
            horizon_wait_seconds=self.horizon_wait_seconds,
            lock_timeout_ms=self.compaction_lock_timeout_ms,
            checkpoint_wait_seconds=self.checkpoint_wait_seconds,
        )
        return outcome.complete

    def compaction_holds(self, application_name: str) -> tuple[str, ...]:
        return self._compaction().holds(application_name)

    def _compaction(self) -> KeyCompaction:
        if self._key_compaction is None:
            self._key_compaction = KeyCompaction(
                self._pool, self._conninfo, self._schema
            )
        return self._key_compaction

    def _tracking_row(self, application_name: str) -> tuple[int, int, int] | None:
        row = fetch_one(
            self._pool.connection,
            sql.SQL(
                "SELECT followed_id, destroyed_id, compacted_id FROM {} "
                "WHERE application_name = %s"
            ).format(self._tracking),
            (application_name,),
        )
        return None if row is None else (int(row[0]), int(row[1]), int(row[2]))

    def connection_pools(self) -> list[ConnectionPool[Any]]:
        """The pool the service's readiness checks (infra/http/database.py)."""
        return [self._pool]

    def close(self) -> None:
        self._pool.close()

    def read_meta(self, name: str) -> str | None:
        with self._pool.connection() as connection:
            found = connection.execute(
                "SELECT to_regclass(%s)", (f"{self._schema}.key_store_meta",)
            ).fetchone()
            if found is None or found[0] is None:  # a store older than the table
                return None
            row = connection.execute(
                sql.SQL("SELECT value FROM {} WHERE name = %s").format(self._meta),
                (name,),
            ).fetchone()
        return None if row is None else str(row[0])

    def write_meta(self, name: str, value: str) -> None:
        execute(self._pool.connection, _UPSERT_META.format(self._meta), (name, value))

    def claim_meta(self, name: str, value: str) -> str:
        with self._pool.connection() as connection:
            # ON CONFLICT DO NOTHING waits for a racing insert to commit, so
            # the SELECT after it (a new snapshot) sees the first value.
            connection.execute(_INSERT_META.format(self._meta), (name, value))
            row = connection.execute(
                sql.SQL("SELECT value FROM {} WHERE name = %s").format(self._meta),
                (name,),
            ).fetchone()
        assert row is not None
        return str(row[0])

    def destroyed_key_ids(self) -> set[tuple[str, str]]:
        rows = fetch_all(
            self._pool.connection,
            sql.SQL(
                "SELECT replace(conversation_id::text, '-', ''), turn_id FROM {}"
            ).format(self._destroyed),
        )
        return set(rows)

    def any_wrapped_key(self) -> tuple[UUID, str, bytes] | None:
        row = fetch_one(
            self._pool.connection,
            sql.SQL(
                "SELECT conversation_id, turn_id, wrapped_key FROM {} LIMIT 1"
            ).format(self._table),
        )
        return None if row is None else (row[0], row[1], bytes(row[2]))

    def rewrap_all(
        self, rewrap: Callable[[UUID, str, bytes], bytes], *, key_id: str
    ) -> int:
        with self._pool.connection() as connection:
            # No key is created or destroyed while every row is rewrapped.
            connection.execute(
                sql.SQL("LOCK TABLE {} IN EXCLUSIVE MODE").format(self._table)
            )
            rows = connection.execute(
                sql.SQL("SELECT conversation_id, turn_id, wrapped_key FROM {}").format(
                    self._table
                )
            ).fetchall()
            with connection.cursor() as cursor:
                cursor.executemany(
                    sql.SQL(
                        "UPDATE {} SET wrapped_key = %s "
                        "WHERE conversation_id = %s AND turn_id = %s"
                    ).format(self._table),
                    [(rewrap(c, t, bytes(w)), c, t) for c, t, w in rows],
                )
            connection.execute(
                _UPSERT_META.format(self._meta), ("master_key_id", key_id)
            )
        return len(rows)


_INSERT_META = sql.SQL("INSERT INTO {} VALUES (%s, %s) ON CONFLICT (name) DO NOTHING")
_UPSERT_META = sql.SQL(
    "INSERT INTO {} VALUES (%s, %s) "
    "ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value"
)


# Transaction-scoped advisory locks per conversation (the first key namespaces
# them) ordering key creation against key destruction.
_LOCK_SHARED = (
    "SELECT pg_advisory_xact_lock_shared("
    "hashtext('turnledger.turn_keys'), hashtext(%s))"
)
_LOCK_EXCLUSIVE = (
    "SELECT pg_advisory_xact_lock(hashtext('turnledger.turn_keys'), hashtext(%s))"
)
