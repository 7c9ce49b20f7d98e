"""The versioned steps of the key store, the device store and the Merkle tree.

On SQLite each lives in a file of its own; on PostgreSQL all are in the
ledger's schema, beside its `turnledger_migrations` rows.

Key store: 1. the wrapped keys (on PostgreSQL hash-partitioned by
conversation, so compaction rewrites only the partitions a deletion
touched), the turns whose keys were destroyed, and the purge's tracking;
2. the store's ids of itself (its master key's, its deletion record's);
3. (PostgreSQL only) the compaction's state: how far it rewrote, which WAL
   may still hold destroyed keys and why it is pending (infra/compaction.py).
   Releases before it created that table at the first compaction, so the
   step finds it there on a store they compacted.
Device store: 1. the devices. Merkle tree: 1. nodes, leaves and tracking.
"""

from __future__ import annotations

from typing import Any

from psycopg import sql

from turnledger.infra.migrations.runner import Step, StoreNames

KEYS, DEVICES, MERKLE = "keys", "devices", "merkle"
# The key table's partitions (docs/deletion.md).
KEY_PARTITIONS = 32
DEVICE_TABLE = "devices"
KEY_COMPACTION_TABLE = "key_compaction"

# Key store ------------------------------------------------------------------------

_SQLITE_KEYS = [
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
_SQLITE_KEY_META = (
    "CREATE TABLE IF NOT EXISTS key_store_meta ("
    " name TEXT PRIMARY KEY, value TEXT NOT NULL)"
)


def _run(statements: list[str]) -> Any:
    def apply(cursor: Any, names: StoreNames) -> None:
        for statement in statements:
            cursor.execute(statement)

    return apply


SQLITE_KEY_STEPS = (
    Step(1, "wrapped turn keys, destroyed keys, purge tracking", _run(_SQLITE_KEYS)),
    Step(2, "the store's ids of itself", _run([_SQLITE_KEY_META])),
)


def _postgres_keys(cursor: Any, names: StoreNames) -> None:
    table = names.table("turn_keys")
    cursor.execute(
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} ("
            " conversation_id uuid NOT NULL,"
            " turn_id text NOT NULL,"
            " wrapped_key bytea NOT NULL,"
            " PRIMARY KEY (conversation_id, turn_id))"
            " PARTITION BY HASH (conversation_id)"
        ).format(table)
    )
    for remainder in range(KEY_PARTITIONS):
        cursor.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} PARTITION OF {} "
                "FOR VALUES WITH (MODULUS {}, REMAINDER {})"
            ).format(
                names.table(f"turn_keys_p{remainder:02d}"),
                table,
                sql.Literal(KEY_PARTITIONS),
                sql.Literal(remainder),
            )
        )
    # ANALYZE would otherwise copy sample key values into pg_statistic,
    # where no purge of ours would ever find them.
    cursor.execute(
        sql.SQL("ALTER TABLE {} ALTER COLUMN wrapped_key SET STATISTICS 0").format(
            table
        )
    )
    # Turns whose keys were destroyed: their keys must never be created again.
    cursor.execute(
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} ("
            " conversation_id uuid NOT NULL,"
            " turn_id text NOT NULL,"
            " PRIMARY KEY (conversation_id, turn_id))"
        ).format(names.table("destroyed_turn_keys"))
    )
    cursor.execute(
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} ("
            " application_name text PRIMARY KEY,"
            " followed_id bigint NOT NULL,"  # every log position seen
            " destroyed_id bigint NOT NULL,"  # last position that destroyed keys
            " compacted_id bigint NOT NULL,"  # last destroyed_id compacted
            " destroyed_xid xid8,"  # transaction of that last destruction
            " dirty_partitions text[] NOT NULL DEFAULT '{{}}')"
        ).format(names.table("key_purge_tracking"))
    )


def _postgres_key_meta(cursor: Any, names: StoreNames) -> None:
    cursor.execute(
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (name text PRIMARY KEY, value text NOT NULL)"
        ).format(names.table("key_store_meta"))
    )


def _postgres_key_compaction(cursor: Any, names: StoreNames) -> None:
    cursor.execute(
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} ("
            " application_name text PRIMARY KEY,"
            " rewritten_id bigint NOT NULL,"  # last destroyed_id rewritten
            " wal_segment text,"  # WAL up to here may hold destroyed keys
            " holds text[] NOT NULL DEFAULT '{{}}',"  # why still pending
            " checked_at timestamptz)"
        ).format(names.table(KEY_COMPACTION_TABLE))
    )


POSTGRES_KEY_STEPS = (
    Step(1, "wrapped turn keys, destroyed keys, purge tracking", _postgres_keys),
    Step(2, "the store's ids of itself", _postgres_key_meta),
    Step(3, "the compaction's state", _postgres_key_compaction),
)

# Device store ------------------------------------------------------------------

SQLITE_DEVICE_STEPS = (
    Step(
        1,
        "devices",
        _run(
            [
                "CREATE TABLE IF NOT EXISTS devices ("
                " device_id TEXT PRIMARY KEY,"
                " user_id TEXT NOT NULL,"
                " name TEXT NOT NULL,"
                " created_at TEXT NOT NULL,"
                " revoked_at TEXT,"
                " added_by TEXT,"
                " token_digest BLOB NOT NULL UNIQUE)"
            ]
        ),
    ),
)


def _postgres_devices(cursor: Any, names: StoreNames) -> None:
    cursor.execute(
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} ("
            " device_id text PRIMARY KEY,"
            " user_id text NOT NULL,"
            " name text NOT NULL,"
            " created_at timestamptz NOT NULL,"
            " revoked_at timestamptz,"
            " added_by text,"
            " token_digest bytea NOT NULL UNIQUE)"
        ).format(names.table(DEVICE_TABLE))
    )


POSTGRES_DEVICE_STEPS = (Step(1, "devices", _postgres_devices),)

# Merkle tree -----------------------------------------------------------------------

SQLITE_MERKLE_STEPS = (
    Step(
        1,
        "tree nodes, leaves and tracking",
        _run(
            [
                "CREATE TABLE IF NOT EXISTS merkle_nodes (level INTEGER NOT NULL, "
                "idx INTEGER NOT NULL, hash BLOB NOT NULL, PRIMARY KEY (level, idx)) "
                "WITHOUT ROWID",
                "CREATE TABLE IF NOT EXISTS merkle_leaves ("
                "position INTEGER PRIMARY KEY, "
                "notification_id INTEGER NOT NULL UNIQUE, leaf_input BLOB NOT NULL, "
                "leaf_hash BLOB NOT NULL)",
                "CREATE TABLE IF NOT EXISTS merkle_tracking (id INTEGER PRIMARY KEY "
                "CHECK (id = 1), size INTEGER NOT NULL, notification_id INTEGER)",
                "INSERT OR IGNORE INTO merkle_tracking VALUES (1, 0, NULL)",
            ]
        ),
    ),
)

_POSTGRES_MERKLE = [
    "CREATE TABLE IF NOT EXISTS {nodes} (level smallint NOT NULL, idx bigint NOT NULL, "
    "hash bytea NOT NULL, PRIMARY KEY (level, idx))",
    "CREATE TABLE IF NOT EXISTS {leaves} (position bigint PRIMARY KEY, "
    "notification_id bigint NOT NULL UNIQUE, leaf_input bytea NOT NULL, "
    "leaf_hash bytea NOT NULL)",
    "CREATE TABLE IF NOT EXISTS {tracking} (id integer PRIMARY KEY CHECK (id = 1), "
    "size bigint NOT NULL, notification_id bigint)",
    "INSERT INTO {tracking} VALUES (1, 0, NULL) ON CONFLICT DO NOTHING",
]


def _postgres_merkle(cursor: Any, names: StoreNames) -> None:
    tables = {
        name: names.table(f"merkle_{name}") for name in ("nodes", "leaves", "tracking")
    }
    for statement in _POSTGRES_MERKLE:
        cursor.execute(sql.SQL(statement).format(**tables))  # type: ignore[arg-type]


POSTGRES_MERKLE_STEPS = (Step(1, "tree nodes, leaves and tracking", _postgres_merkle),)
