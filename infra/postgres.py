"""PostgreSQL pieces outside the library: the schema and the key store."""

from __future__ import annotations

import hashlib
import weakref
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

import orjson
import psycopg
from eventsourcing.persistence import (
    InterfaceError,
    Notification,
    OperationalError,
    StoredEvent,
    Tracking,
)
from eventsourcing.postgres import PostgresDatastore, PostgresFactory
from eventsourcing.utils import Environment, EnvType, retry
from psycopg import sql
from psycopg.pq import TransactionStatus
from psycopg.rows import DictRow
from psycopg_pool import ConnectionPool

from turnledger.domain.errors import (
    CredentialRevokedError,
    InvalidInputError,
    TurnDeletedError,
)
from turnledger.domain.ports import NewKey
from turnledger.infra.compaction import (
    DEFAULT_CHECKPOINT_WAIT_SECONDS,
    DEFAULT_LOCK_TIMEOUT_MS,
    KeyCompaction,
)
from turnledger.infra.key_session import QUIET_KEY_SESSION, configure_key_session
from turnledger.infra.keystore import KeyStore
from turnledger.infra.library_compat import PostgresRecorderWithRows
from turnledger.infra.owner_feed import (
    postgres_owner_feed_ddl,
    postgres_rebuild_owner_feed,
    postgres_select_owner_events,
)
from turnledger.infra.pool_check import (
    RECONNECT_TIMEOUT_SECONDS,
    check_unless_quiet,
    use_quiet_check,
)
from turnledger.infra.read_side_sql import (
    CONVERSATION_COLUMNS,
    ERASE_TURN_SIZES,
    FOLD_COLUMNS,
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

# The key table is hash-partitioned by conversation so that compaction (VACUUM
# FULL, which locks the table it rewrites) rewrites and locks only the small
# partitions a deletion touched, never the whole key table. See docs/deletion.md.
KEY_PARTITIONS = 32
KEY_TABLE = "turn_keys"
KEY_COLUMNS = "conversation_id, turn_id, wrapped_key"


def ensure_schema(conninfo: str, schema: str) -> None:
    """Create the schema the event store and key store live in."""
    with psycopg.connect(conninfo, autocommit=True) as connection:
        connection.execute(
            sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema))
        )


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
    ) -> None:
        self._conninfo = conninfo
        self._schema = schema
        self.horizon_wait_seconds = horizon_wait_seconds
        self.compaction_lock_timeout_ms = DEFAULT_LOCK_TIMEOUT_MS
        self.checkpoint_wait_seconds = DEFAULT_CHECKPOINT_WAIT_SECONDS
        self._key_compaction: KeyCompaction | None = None
        self._table = sql.Identifier(schema, KEY_TABLE)
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
            # caller waits for one briefly, then gets the pool's error.
            check=check_unless_quiet,
            reconnect_timeout=RECONNECT_TIMEOUT_SECONDS,
            timeout=5.0,
        )
        if read_only:  # audits change nothing, tables included
            return
        with self._pool.connection() as connection:
            self._create_tables(connection)

    def _create_tables(self, connection: psycopg.Connection[Any]) -> None:
        connection.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} ("
                " conversation_id uuid NOT NULL,"
                " turn_id text NOT NULL,"
                " wrapped_key bytea NOT NULL,"
                " PRIMARY KEY (conversation_id, turn_id))"
                " PARTITION BY HASH (conversation_id)"
            ).format(self._table)
        )
        for remainder in range(KEY_PARTITIONS):
            connection.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} PARTITION OF {} "
                    "FOR VALUES WITH (MODULUS {}, REMAINDER {})"
                ).format(
                    sql.Identifier(self._schema, f"turn_keys_p{remainder:02d}"),
                    self._table,
                    sql.Literal(KEY_PARTITIONS),
                    sql.Literal(remainder),
                )
            )
        # ANALYZE would otherwise copy sample key values into pg_statistic,
        # where no purge of ours would ever find them.
        connection.execute(
            sql.SQL("ALTER TABLE {} ALTER COLUMN wrapped_key SET STATISTICS 0").format(
                self._table
            )
        )
        # Turns whose keys were destroyed: their keys must never be created again.
        connection.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} ("
                " conversation_id uuid NOT NULL,"
                " turn_id text NOT NULL,"
                " PRIMARY KEY (conversation_id, turn_id))"
            ).format(self._destroyed)
        )
        connection.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} ("
                " application_name text PRIMARY KEY,"
                " followed_id bigint NOT NULL,"  # every log position seen
                " destroyed_id bigint NOT NULL,"  # last position that destroyed keys
                " compacted_id bigint NOT NULL,"  # last destroyed_id compacted
                " destroyed_xid xid8,"  # transaction of that last destruction
                " dirty_partitions text[] NOT NULL DEFAULT '{{}}')"
            ).format(self._tracking)
        )
        # The store's ids of itself: its master key's, its deletion record's.
        connection.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} "
                "(name text PRIMARY KEY, value text NOT NULL)"
            ).format(self._meta)
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
        with self._pool.connection() as connection:
            rows = connection.execute(
                sql.SQL(
                    "SELECT turn_id, wrapped_key FROM {} "
                    "WHERE conversation_id = %s AND turn_id = ANY(%s)"
                ).format(self._table),
                (conversation_id, list(turn_ids)),
            ).fetchall()
        return {turn_id: bytes(blob) for turn_id, blob in rows}

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
        with self._pool.connection() as connection:
            connection.execute(
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
        with self._pool.connection() as connection:
            row = connection.execute(
                sql.SQL(
                    "SELECT followed_id, destroyed_id, compacted_id FROM {} "
                    "WHERE application_name = %s"
                ).format(self._tracking),
                (application_name,),
            ).fetchone()
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
        with self._pool.connection() as connection:
            connection.execute(_UPSERT_META.format(self._meta), (name, value))

    def destroyed_key_ids(self) -> set[tuple[str, str]]:
        with self._pool.connection() as connection:
            rows = connection.execute(
                sql.SQL(
                    "SELECT replace(conversation_id::text, '-', ''), turn_id FROM {}"
                ).format(self._destroyed)
            ).fetchall()
        return set(rows)

    def any_wrapped_key(self) -> tuple[UUID, str, bytes] | None:
        with self._pool.connection() as connection:
            row = connection.execute(
                sql.SQL(
                    "SELECT conversation_id, turn_id, wrapped_key FROM {} LIMIT 1"
                ).format(self._table)
            ).fetchone()
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


# The read side, beside the events in the same schema ---------------------------

_READ_SIDE_DDL = [
    "CREATE TABLE IF NOT EXISTS {schema}.conversation_heads ("
    " conversation_id uuid PRIMARY KEY,"
    " owner_id text NOT NULL,"
    " version bigint NOT NULL,"
    " head_digest text NOT NULL,"
    " turn_count integer NOT NULL,"
    " eligible_count integer NOT NULL,"
    " created_at timestamptz NOT NULL,"
    " modified_at timestamptz NOT NULL)",
    "CREATE INDEX IF NOT EXISTS conversation_heads_by_owner "
    "ON {schema}.conversation_heads (owner_id, created_at)",
    # One row per turn: columns ordered so that none needs alignment padding,
    # versions as integer (a conversation never reaches 2**31 events).
    "CREATE TABLE IF NOT EXISTS {schema}.conversation_turns ("
    " conversation_id uuid NOT NULL,"
    " recorded_at timestamptz NOT NULL,"
    " deleted_at timestamptz,"
    " position integer NOT NULL,"
    " version integer NOT NULL,"
    " deleted_version integer,"
    " question_json_bytes integer,"
    " answer_json_bytes integer,"
    " question_chars integer,"
    " answer_chars integer,"
    ' status "char" NOT NULL,'
    " turn_id text NOT NULL,"
    # Checked at commit: a violation then fails the whole transaction as an
    # integrity error, where an immediate one would abort the pipeline the
    # library writes the events in, and surface as "pipeline aborted".
    " PRIMARY KEY (conversation_id, position) DEFERRABLE INITIALLY DEFERRED,"
    " UNIQUE (conversation_id, turn_id) DEFERRABLE INITIALLY DEFERRED)",
    # Added with turn parts: NULL (a text-only turn) in rows written before.
    # Checked first: ALTER TABLE would lock the table at every start-up.
    "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_attribute"
    " WHERE attrelid = {turns_table}::regclass AND attname = 'parts_sizes'"
    " AND NOT attisdropped) THEN"
    " ALTER TABLE {schema}.conversation_turns ADD COLUMN parts_sizes text;"
    " END IF; END $$",
    "CREATE TABLE IF NOT EXISTS {schema}.conversation_folds ("
    " conversation_id uuid NOT NULL,"
    " fold_id text NOT NULL,"
    " version bigint NOT NULL,"
    " recorded_at timestamptz NOT NULL,"
    " covers_through_turn_id text NOT NULL,"
    " covers_through_position integer NOT NULL,"
    " covered_turns integer NOT NULL,"
    " covered_eligible integer NOT NULL,"
    " summary_json_bytes integer,"
    " summary_chars integer,"
    " withdrawn_version bigint,"
    " PRIMARY KEY (conversation_id, fold_id) DEFERRABLE INITIALLY DEFERRED)",
]
_READ_SIDE_TABLES = ("conversation_heads", "conversation_turns", "conversation_folds")


def _same(value: Any) -> Any:
    return value


def as_bytes(statement: Any) -> bytes:
    """A statement of the library's (str, bytes or composed SQL) as bytes."""
    if isinstance(statement, bytes):
        return statement
    if isinstance(statement, str):
        return statement.encode()
    return bytes(statement.as_bytes(None))


def json_insert(
    table: sql.Composable, columns: str, *, suffix: str = "", source: str = "%s::json"
) -> sql.Composed:
    """INSERT of many rows in one statement, from one JSON array of objects.

    A batch's rows cost one parse, plan and execution instead of one each,
    and one parameter, encoded in one call (psycopg would dump
    arrays element by element, in Python). `source` is where the JSON comes
    from: a parameter, or an argument of the function the statement is in.
    """
    return sql.SQL(
        "INSERT INTO {table} ({columns}) SELECT {columns} "
        "FROM json_populate_recordset(NULL::{table}, {source})"
    ).format(table=table, columns=sql.SQL(columns), source=sql.SQL(source)) + sql.SQL(
        suffix
    )


_HEADS_UPSERT = (
    " ON CONFLICT (conversation_id) "
    "DO UPDATE SET version = EXCLUDED.version, "
    "head_digest = EXCLUDED.head_digest, "
    "turn_count = EXCLUDED.turn_count, "
    "eligible_count = EXCLUDED.eligible_count, "
    "modified_at = EXCLUDED.modified_at"
)
# Named with a version: a later release that changes what a batch writes adds
# a new function instead of changing this one under processes still using it.
_WRITE_FUNCTION = "turnledger_write_batch_v3"
# The device store's table (infra/devices.py), in the ledger's schema: a write
# with credentials is refused unless each names a device there not revoked.
DEVICE_TABLE = "devices"
_CREDENTIAL_REVOKED = "turnledger: a writer's credential is no longer valid"
# PostgreSQL refuses a NOTIFY payload of 8,000 bytes or more.
_MAX_WAKE_PAYLOAD = 7_999
# Where a batch's inserts take their rows: keys, turns, heads, events.
_PARAMETERS = (
    "%s::json",
    "%s::json",
    "%s::json",
    "%b::uuid[], %b::bigint[], %b::text[], %b::bytea[]",
)
_ARGUMENTS = ("key_rows", "turn_rows", "head_rows", "ids, versions, topics, states")


def in_one_statement(inserts: Sequence[sql.Composed]) -> sql.Composed:
    """Several inserts as one statement (all but the last as data-modifying
    WITH queries, which PostgreSQL always runs to completion)."""
    *first, last = inserts
    queries = sql.SQL(", ").join(
        sql.SQL("{} AS ({})").format(sql.Identifier(f"insert_{index}"), insert)
        for index, insert in enumerate(first)
    )
    return sql.SQL("WITH {} {}").format(queries, last)


def _json_cell(value: Any) -> str:
    # The text each column type reads back exactly: timestamps carry their
    # offset and microseconds; bytea in its hex input form.
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError("a timestamp without a time zone")
        return value.isoformat()
    if isinstance(value, bytes):
        return "\\x" + value.hex()
    raise TypeError(f"{type(value).__name__} is not a column value")


def json_rows(columns: str, rows: Sequence[Sequence[Any]]) -> str:
    """Rows as the JSON array of objects that json_insert reads.

    orjson, because this is on every batch's path: the standard library's
    encoder calls back into Python for each UUID and timestamp, and cost a
    batch of new turns more than its sealing. UUIDs are written natively (their
    canonical text); timestamps still go through `_json_cell`, which refuses
    one without a time zone.
    """
    names = [name.strip() for name in columns.split(",")]
    return orjson.dumps(
        [dict(zip(names, row, strict=True)) for row in rows],
        default=_json_cell,
        option=orjson.OPT_PASSTHROUGH_DATETIME,
    ).decode()


def schema_channel(schema: str, table: str) -> str:
    """The NOTIFY channel of one schema's events table: the schema's name in
    it, shortened with a digest when the whole would pass PostgreSQL's
    63-byte limit on names."""
    name = f"{schema}_{table}"
    if len(name.encode()) <= 63:
        return name
    digest = hashlib.sha256(schema.encode()).hexdigest()[:16]
    return f"{table[:40]}_{digest}"


def wake_payload(owner_ids: Collection[str]) -> str:
    """The NOTIFY payload of a batch: the owners whose data it changed, so a
    sync listener wakes their long-polls without reading the log back. Empty
    when they do not fit, which tells listeners to wake every waiter."""
    payload = orjson.dumps(sorted(set(owner_ids)))
    return payload.decode() if len(payload) <= _MAX_WAKE_PAYLOAD else ""


def woken_owners(payload: str) -> set[str] | None:
    """The owners named by a batch's NOTIFY payload, or None when it names
    none (a batch too wide, or a write made by the library's own insert)."""
    try:
        owners = orjson.loads(payload) if payload else None
    except orjson.JSONDecodeError:
        return None
    if not isinstance(owners, list) or not all(isinstance(o, str) for o in owners):
        return None
    return set(owners)


# Rows per statement of a rebuild (a live batch has far fewer).
_ROWS_PER_STATEMENT = 10_000


class PostgresReadSideRecorder(PostgresRecorderWithRows):
    """The library's PostgreSQL recorder, writing the read side and the new
    turns' keys in the events' own transaction."""

    # Writes with credentials (device ids) are refused, in their own
    # transaction, unless each is a device of the schema not revoked.
    checks_credentials = True

    def __init__(self, datastore: PostgresDatastore, **kwargs: Any) -> None:
        super().__init__(datastore, **kwargs)
        # The library names the channel after the table alone, so every store
        # in one database shared it: each schema's listeners heard the
        # others' writes. Set before anything uses it (the write function,
        # the library's NOTIFY and subscriptions all read this attribute).
        self.channel_name = schema_channel(datastore.schema, self.events_table_name)
        self._schema = sql.Identifier(datastore.schema)
        self._quiet: list[tuple[str, str]] | None = None
        # A batch's keys, turns, heads and events in one statement (see
        # insert_events); a rebuild's many rows go table by table.
        inserts = self._batch_inserts(_PARAMETERS)
        self._row_inserts = tuple(inserts[:-1])
        # Rendered once: a Composed is rendered again at every execution.
        self._insert_rows_and_events = in_one_statement(
            [statement for statement, _ in inserts]
        ).as_bytes(None)
        self._count_credentials = (
            sql.SQL("SELECT {} AS valid")
            .format(self._credentials_valid("%s"))
            .as_bytes(None)
        )
        self._write_function = sql.Identifier(datastore.schema, _WRITE_FUNCTION)
        self._call_write_function = (
            sql.SQL(
                "SELECT notification_id FROM "
                "{}(%s, %s, %s, %b, %b, %b, %b, %s, %s, %s) "
                "AS notification_id"
            )
            .format(self._write_function)
            .as_bytes(None)
        )
        self._quiet_connections: weakref.WeakSet[psycopg.Connection[Any]] = (
            weakref.WeakSet()
        )
        turns_table = sql.Literal(
            sql.SQL("{}.{}")
            .format(self._schema, sql.Identifier("conversation_turns"))
            .as_string(None)
        )
        self.sql_create_statements.extend(
            sql.SQL(statement).format(  # type: ignore[arg-type]
                schema=self._schema, turns_table=turns_table
            )
            for statement in _READ_SIDE_DDL
        )
        self.sql_create_statements.append(self._write_function_ddl())
        # The per-user feed index (infra/owner_feed.py): after the head rows.
        self.sql_create_statements.extend(
            postgres_owner_feed_ddl(datastore.schema, self.events_table_name)
        )
        self._select_owner_events = {
            with_topics: postgres_select_owner_events(
                datastore.schema, self.events_table_name, with_topics=with_topics
            )
            for with_topics in (False, True)
        }

    def _batch_inserts(
        self, sources: tuple[str, str, str, str]
    ) -> list[tuple[sql.Composed, str]]:
        """The inserts of a batch's keys, turn rows, heads and events, with
        their columns; `sources` says where each takes its rows from (the
        statement's parameters, or the write function's arguments)."""
        keys, turns, heads, events = sources
        return [
            (
                json_insert(
                    self._table(KEY_TABLE),
                    KEY_COLUMNS,
                    source=keys,
                    suffix=" ON CONFLICT DO NOTHING",
                ),
                KEY_COLUMNS,
            ),
            (
                json_insert(
                    self._table("conversation_turns"), TURN_COLUMNS, source=turns
                ),
                TURN_COLUMNS,
            ),
            (
                json_insert(
                    self._table("conversation_heads"),
                    CONVERSATION_COLUMNS,
                    source=heads,
                    suffix=_HEADS_UPSERT,
                ),
                CONVERSATION_COLUMNS,
            ),
            (
                sql.SQL(
                    "INSERT INTO {} (originator_id, originator_version, topic, state) "
                    "SELECT * FROM unnest({}) RETURNING notification_id"
                ).format(
                    sql.Identifier(self.datastore.schema, self.events_table_name),
                    sql.SQL(events),
                ),
                "originator_id, originator_version, topic, state",
            ),
        ]

    def _write_function_ddl(self) -> sql.Composed:
        """The function that writes a batch in one statement (insert_events).

        Its body is the transaction of the three-message path: the library's
        lock timeout and table lock, the NOTIFY (naming the batch's owners,
        `wake_payload`), then the keys, turn rows, heads and events in one
        statement. Replaced at every start, as the library does with its own
        function.
        """
        inserts = [statement for statement, _ in self._batch_inserts(_ARGUMENTS)]
        return self.write_function_ddl(
            function=self._write_function,
            arguments="key_rows json, turn_rows json, head_rows json, ids uuid[],"
            " versions bigint[], topics text[], states bytea[], lock_wait text,"
            " wake text, credentials text[]",
            # Nested: PL/pgSQL plans the inner query only when it first runs,
            # so ledgers without a device table never reference one.
            checks=sql.SQL(
                "IF credentials IS NOT NULL THEN"
                " IF {credentials_valid} < cardinality(credentials) THEN"
                " RAISE EXCEPTION USING MESSAGE = {revoked};"
                " END IF; END IF;"
            ).format(
                credentials_valid=self._credentials_valid("credentials"),
                revoked=sql.Literal(_CREDENTIAL_REVOKED),
            ),
            statement=in_one_statement(inserts),
        )

    def _credentials_valid(self, credentials: str) -> sql.Composed:
        """How many of the device ids in `credentials` are devices not revoked."""
        return sql.SQL(
            "(SELECT count(*) FROM {} WHERE device_id = ANY({}) AND revoked_at IS NULL)"
        ).format(self._table(DEVICE_TABLE), sql.SQL(credentials))

    def _check_credentials(
        self, curs: psycopg.Cursor[DictRow], credentials: Sequence[str]
    ) -> None:
        """In the transaction of `curs`: refuse unless every one is valid."""
        row = curs.execute(self._count_credentials, (list(credentials),)).fetchone()
        if row is None or row["valid"] < len(credentials):
            raise CredentialRevokedError(tuple(credentials))

    def _table(self, name: str) -> sql.Composed:
        return sql.SQL("{}.{}").format(self._schema, sql.Identifier(name))

    def _quiet_key_statements(self, *, session: bool = False) -> list[bytes]:
        """One statement that keeps key bytes out of the server log, for the
        settings this role may change (checked once): for the transaction, or
        with `session` for the connection's whole session."""
        if self._quiet is None:
            allowed = []
            with self.datastore.get_connection() as conn:
                for name, value in QUIET_KEY_SESSION.items():
                    row = conn.execute(
                        "SELECT has_parameter_privilege(%s, 'SET') AS allowed",
                        (name,),
                    ).fetchone()
                    if row is not None and row["allowed"]:
                        allowed.append((name, value))
            self._quiet = allowed
        if not self._quiet:
            return []
        local = sql.Literal(not session)
        return [
            (
                sql.SQL("SELECT ")
                + sql.SQL(", ").join(
                    sql.SQL("set_config({}, {}, {})").format(
                        sql.Literal(name), sql.Literal(value), local
                    )
                    for name, value in self._quiet
                )
            ).as_bytes(None)
        ]

    def _quiet_session(self, conn: psycopg.Connection[Any]) -> None:
        """Make `conn` log no parameter values, once per connection: the write
        function's call carries the wrapped keys as parameters, and statement
        logging would write them out before the function could say otherwise."""
        if conn in self._quiet_connections:
            return
        for statement in self._quiet_key_statements(session=True):
            conn.execute(statement)
        self._quiet_connections.add(conn)

    @retry((InterfaceError, OperationalError), max_attempts=10, wait=0.2)
    def insert_events(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        """The events, their read-side rows and new keys: one transaction in
        one round trip.

        The library's own insert (kept below for what does not fit one
        statement) runs each statement through psycopg's pipeline, whose
        per-statement bookkeeping cost more than the rest of a turn's write.
        A batch of new turns is one call of the schema's write function
        (`_write_function_ddl`), in autocommit: it sets the library's lock
        timeout, takes its table lock (notification ids in commit order),
        queues its NOTIFY and writes the keys, turn rows, heads and events in
        one statement, returning the events' notification ids; the deferred
        unique keys are checked as the statement's transaction commits. A
        batch that also changes rows (deletions, folds) is sent as three
        messages instead: BEGIN with the lock and the NOTIFY, the same insert,
        the updates and COMMIT. A conflict anywhere fails the whole
        transaction as an IntegrityError, as the library's insert does.
        """
        changes: RowChanges = kwargs.get("read_side") or RowChanges()
        new_keys: Sequence[NewKey] = kwargs.get("new_keys", ())
        credentials: Sequence[str] = kwargs.get("credentials", ())
        key_rows = [(k.conversation_id, k.key_id, k.wrapped) for k in new_keys]
        row_sets = self._row_sets(changes, key_rows)
        if not stored_events or any(
            len(rows) > _ROWS_PER_STATEMENT for rows in (*row_sets, stored_events)
        ):
            if credentials:
                # Turn writes with credentials come in groups of at most 64
                # requests, far below these sizes; a caller that still gets
                # here is refused rather than written unchecked.
                raise InvalidInputError(
                    "credentials", "a batch this large is not checked in one statement"
                )
            return super().insert_events(stored_events, **kwargs)
        parameters: list[Any] = [
            json_rows(columns, rows)
            for rows, (_, columns) in zip(row_sets, self._row_inserts, strict=True)
        ]
        parameters.extend(
            [
                [e.originator_id for e in stored_events],
                [e.originator_version for e in stored_events],
                [e.topic for e in stored_events],
                [e.state for e in stored_events],
            ]
        )
        wake = wake_payload([row.owner_id for row in changes.conversations])
        changes_rows = changes.deletions or changes.new_folds or changes.withdrawals
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            if not changes_rows:
                if new_keys:
                    self._quiet_session(conn)
                parameters.extend([self.lock_wait, wake, list(credentials) or None])
                try:
                    curs.execute(self._call_write_function, parameters)
                except psycopg.errors.RaiseException as error:
                    if error.diag.message_primary == _CREDENTIAL_REVOKED:
                        raise CredentialRevokedError(tuple(credentials)) from None
                    raise
                return [row["notification_id"] for row in curs.fetchall()]
            try:
                curs.execute(self._begin_and_lock(wake))
                if credentials:
                    self._check_credentials(curs, credentials)
                curs.execute(self._insert_rows_and_events, parameters)
                notification_ids = [row["notification_id"] for row in curs.fetchall()]
                self._write_changed_rows(curs, changes)
                curs.execute(b"COMMIT")
            except BaseException:
                if conn.info.transaction_status != TransactionStatus.IDLE:
                    conn.rollback()
                raise
        return notification_ids

    def _begin_and_lock(self, wake: str) -> bytes:
        return self.begin_lock_and_notify(self._quiet_key_statements(), wake)

    def write_rows(
        self,
        curs: psycopg.Cursor[DictRow],
        stored_events: Sequence[StoredEvent],
        **kwargs: Any,
    ) -> None:
        # psycopg prepares a statement it has run several times, even inside
        # this pipeline; when the transaction then fails (another process took
        # the version), it still believes the statement exists. These
        # statements are therefore never auto-prepared.
        curs.connection.prepare_threshold = None
        new_keys: Sequence[NewKey] = kwargs.get("new_keys", ())
        if new_keys:
            # As in the key store's own sessions (infra/key_session.py): with
            # statement logging on, the server would log the wrapped keys.
            for statement in self._quiet_key_statements():
                curs.execute(statement)
        changes = kwargs.get("read_side") or RowChanges()
        # A key already there means a duplicate turn: the turn row's unique
        # key refuses the transaction at commit.
        self._write_rows(
            curs,
            changes,
            key_rows=[(k.conversation_id, k.key_id, k.wrapped) for k in new_keys],
        )

    def _row_sets(
        self, changes: RowChanges, key_rows: Sequence[tuple[Any, ...]]
    ) -> list[Sequence[tuple[Any, ...]]]:
        """Rows of the keys, turns and heads inserts (in _row_inserts' order)."""
        key, time = _same, _same
        return [
            key_rows,
            [turn_values(t, key=key, time=time) for t in changes.new_turns],
            [conversation_values(r, key=key, time=time) for r in changes.conversations],
        ]

    def _write_rows(
        self,
        curs: psycopg.Cursor[Any],
        changes: RowChanges,
        *,
        key_rows: Sequence[tuple[Any, ...]] = (),
    ) -> None:
        for rows, (statement, columns) in zip(
            self._row_sets(changes, key_rows), self._row_inserts, strict=True
        ):
            for start in range(0, len(rows), _ROWS_PER_STATEMENT):
                chunk = rows[start : start + _ROWS_PER_STATEMENT]
                curs.execute(statement, [json_rows(columns, chunk)])
        self._write_changed_rows(curs, changes)

    def _write_changed_rows(
        self, curs: psycopg.Cursor[Any], changes: RowChanges
    ) -> None:
        """Deletions, folds and withdrawals (rare: a statement each kind)."""
        key, time = _same, _same
        if changes.deletions:
            # One statement per deletion event, however many turns it names.
            marked: dict[tuple[Any, ...], list[str]] = {}
            for d in changes.deletions:
                group = (d.deleted_version, d.deleted_at, d.conversation_id)
                marked.setdefault(group, []).append(d.turn_id)
            curs.executemany(
                sql.SQL(
                    "UPDATE {} SET deleted_version = %s, deleted_at = %s, "
                    f"{ERASE_TURN_SIZES} "
                    "WHERE conversation_id = %s AND turn_id = ANY(%s)"
                ).format(self._table("conversation_turns")),
                [(*group, turn_ids) for group, turn_ids in marked.items()],
            )
        if changes.new_folds:
            curs.executemany(
                sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
                    self._table("conversation_folds"),
                    sql.SQL(FOLD_COLUMNS),
                    sql.SQL(",".join(["%s"] * 11)),
                ),
                [fold_values(f, key=key, time=time) for f in changes.new_folds],
            )
        if changes.withdrawals:
            curs.executemany(
                sql.SQL(
                    "UPDATE {} SET withdrawn_version = %s, summary_json_bytes = NULL, "
                    "summary_chars = NULL WHERE conversation_id = %s AND fold_id = %s"
                ).format(self._table("conversation_folds")),
                [
                    (w.withdrawn_version, w.conversation_id, w.fold_id)
                    for w in changes.withdrawals
                ],
            )

    def replace_read_side(self, view: LedgerView) -> None:
        """Replace every row with those of `view` (a rebuild), in one transaction."""
        conversations, turns, folds = view.rows()
        with (
            self.datastore.get_connection() as conn,
            conn.transaction(),
            conn.cursor() as curs,
        ):
            for table in _READ_SIDE_TABLES:
                curs.execute(sql.SQL("DELETE FROM {}").format(self._table(table)))
            self._write_rows(
                curs,
                RowChanges(
                    conversations=tuple(conversations),
                    new_turns=tuple(turns),
                    new_folds=tuple(folds),
                ),
            )
            for statement in postgres_rebuild_owner_feed(
                self.datastore.schema, self.events_table_name
            ):
                curs.execute(statement)

    def select_owner_notifications(
        self, owner_id: str, after: int, limit: int, topics: Sequence[str] = ()
    ) -> list[Notification]:
        """The owner's events after log position `after`, oldest first, through
        the per-user feed index (infra/owner_feed.py)."""
        params: list[Any] = [owner_id, after]
        if topics:
            params.append(list(topics))
        params.append(limit)
        rows = self._select(self._select_owner_events[bool(topics)], params)
        return [
            Notification(
                id=row["notification_id"],
                originator_id=row["originator_id"],
                originator_version=row["originator_version"],
                topic=row["topic"],
                state=bytes(row["state"]),
            )
            for row in rows
        ]

    def _select(self, statement: sql.Composable, params: Sequence[Any]) -> list[Any]:
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(statement, params, prepare=True)
            return list(curs.fetchall())

    def conversations(self, ids: Collection[UUID]) -> dict[UUID, ConversationRow]:
        if not ids:
            return {}
        rows = self._select(
            sql.SQL("SELECT {} FROM {} WHERE conversation_id = ANY(%s)").format(
                sql.SQL(CONVERSATION_COLUMNS), self._table("conversation_heads")
            ),
            (list(ids),),
        )
        decoded = [conversation_row(row) for row in rows]
        return {row.conversation_id: row for row in decoded}

    def heads_and_turns(
        self, turn_ids: Mapping[UUID, Collection[str]]
    ) -> tuple[dict[UUID, ConversationRow], dict[UUID, dict[str, TurnRow]]]:
        pairs = [(c, t) for c, ids in turn_ids.items() for t in ids]
        with (
            self.datastore.get_connection() as conn,
            conn.cursor() as heads_cursor,
            conn.cursor() as turns_cursor,
        ):
            # Both statements go in one round trip.
            with conn.pipeline():
                heads_cursor.execute(
                    sql.SQL("SELECT {} FROM {} WHERE conversation_id = ANY(%s)").format(
                        sql.SQL(CONVERSATION_COLUMNS), self._table("conversation_heads")
                    ),
                    (list(turn_ids),),
                    prepare=True,
                )
                turns_cursor.execute(
                    sql.SQL(
                        "SELECT {} FROM {} WHERE (conversation_id, turn_id) IN "
                        "(SELECT * FROM unnest(%s::uuid[], %s::text[]))"
                    ).format(sql.SQL(TURN_COLUMNS), self._table("conversation_turns")),
                    ([c for c, _ in pairs], [t for _, t in pairs]),
                    prepare=True,
                )
            heads = [conversation_row(row) for row in heads_cursor.fetchall()]
            turns = [turn_row(row) for row in turns_cursor.fetchall()]
        found: dict[UUID, dict[str, TurnRow]] = {}
        for turn in turns:
            found.setdefault(turn.conversation_id, {})[turn.turn_id] = turn
        return {row.conversation_id: row for row in heads}, found

    def conversations_of(self, owner_id: str) -> list[ConversationRow]:
        return [
            conversation_row(row)
            for row in self._select(
                sql.SQL(
                    "SELECT {} FROM {} WHERE owner_id = %s "
                    "ORDER BY created_at, conversation_id"
                ).format(
                    sql.SQL(CONVERSATION_COLUMNS), self._table("conversation_heads")
                ),
                (owner_id,),
            )
        ]

    def turns_by_id(
        self, conversation_id: UUID, turn_ids: Collection[str]
    ) -> dict[str, TurnRow]:
        if not turn_ids:
            return {}
        rows = self._select(
            sql.SQL(
                "SELECT {} FROM {} WHERE conversation_id = %s AND turn_id = ANY(%s)"
            ).format(sql.SQL(TURN_COLUMNS), self._table("conversation_turns")),
            (conversation_id, list(turn_ids)),
        )
        decoded = [turn_row(row) for row in rows]
        return {row.turn_id: row for row in decoded}

    def turns_page(
        self, conversation_id: UUID, *, offset: int, limit: int, as_of: int
    ) -> list[TurnRow]:
        return [
            turn_row(row)
            for row in self._select(
                sql.SQL(
                    "SELECT {} FROM {} WHERE conversation_id = %s AND position >= %s "
                    "AND position < %s AND version <= %s ORDER BY position"
                ).format(sql.SQL(TURN_COLUMNS), self._table("conversation_turns")),
                (conversation_id, offset, offset + limit, as_of),
            )
        ]

    def eligible_newest_first(
        self, conversation_id: UUID, *, below: int, above: int, as_of: int, limit: int
    ) -> list[TurnRow]:
        return [
            turn_row(row)
            for row in self._select(
                sql.SQL(
                    "SELECT {} FROM {} WHERE conversation_id = %s AND position < %s "
                    "AND position > %s AND status = 'c' AND version <= %s "
                    "AND (deleted_version IS NULL OR deleted_version > %s) "
                    "ORDER BY position DESC LIMIT %s"
                ).format(sql.SQL(TURN_COLUMNS), self._table("conversation_turns")),
                (conversation_id, min(below, 2**31 - 1), above, as_of, as_of, limit),
            )
        ]

    def eligible_ids(
        self, conversation_id: UUID, *, first: int, last: int, as_of: int
    ) -> tuple[str, ...]:
        return tuple(
            row["turn_id"]
            for row in self._select(
                sql.SQL(
                    "SELECT turn_id FROM {} WHERE conversation_id = %s "
                    "AND position >= %s AND position <= %s AND status = 'c' "
                    "AND version <= %s "
                    "AND (deleted_version IS NULL OR deleted_version > %s) "
                    "ORDER BY position"
                ).format(self._table("conversation_turns")),
                (conversation_id, first, last, as_of, as_of),
            )
        )

    def folds(self, conversation_id: UUID) -> list[FoldRow]:
        return [
            fold_row(row)
            for row in self._select(
                sql.SQL(
                    "SELECT {} FROM {} WHERE conversation_id = %s ORDER BY version"
                ).format(sql.SQL(FOLD_COLUMNS), self._table("conversation_folds")),
                (conversation_id,),
            )
        ]

    def undeleted_turns(self, conversation_id: UUID) -> list[TurnRow]:
        return [
            turn_row(row)
            for row in self._select(
                sql.SQL(
                    "SELECT {} FROM {} WHERE conversation_id = %s "
                    "AND deleted_version IS NULL ORDER BY position"
                ).format(sql.SQL(TURN_COLUMNS), self._table("conversation_turns")),
                (conversation_id,),
            )
        ]

    def read_side_is_empty(self) -> bool:
        return not self._select(
            sql.SQL("SELECT 1 FROM {} LIMIT 1").format(
                self._table("conversation_heads")
            ),
            (),
        )

    def read_side_rows(
        self,
    ) -> tuple[list[ConversationRow], list[TurnRow], list[FoldRow]]:
        def every(columns: str, table: str) -> list[Any]:
            return self._select(
                sql.SQL("SELECT {} FROM {}").format(
                    sql.SQL(columns), self._table(table)
                ),
                (),
            )

        return (
            [
                conversation_row(r)
                for r in every(CONVERSATION_COLUMNS, "conversation_heads")
            ],
            [turn_row(r) for r in every(TURN_COLUMNS, "conversation_turns")],
            [fold_row(r) for r in every(FOLD_COLUMNS, "conversation_folds")],
        )


class PostgresReadSideFactory(PostgresFactory):
    application_recorder_class = PostgresReadSideRecorder

    def __init__(self, env: Environment | EnvType | None) -> None:
        super().__init__(env)
        # Connections broken by an outage are replaced, not handed out, with
        # no round trip before a transaction on a connection that is quiet.
        use_quiet_check(
            self.datastore,
            target_session_attrs=self.env.get("POSTGRES_TARGET_SESSION_ATTRS", "any"),
        )
