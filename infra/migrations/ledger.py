"""The ledger's read side, in the event log's own database: its versioned steps.

1. the conversation heads (with their owner index), turn rows and fold rows;
2. each turn row's parts sizes (added with turn parts: NULL, a text-only
   turn, in rows written before);
3. the per-user feed index (infra/owner_feed.py), built from the log;
4. no statistics of the size columns (PostgreSQL): ANALYZE would copy sample
   sizes, deleted turns' included, into pg_statistic, which no purge rewrites;
5. turn and fold rows hash-partitioned by conversation (PostgreSQL), as the
   key table is: the purge rewrites the partitions of the conversations it
   deleted from (their dead row versions hold the erased sizes), not the
   whole table;
6. the per-user feed index's rows as runs of consecutive log positions of
   one owner (PostgreSQL), written by a new trigger: a statement that writes
   a user's turns in a group indexes them in one row instead of one each.
"""

from __future__ import annotations

from typing import Any

from psycopg import sql

from turnledger.infra.migrations.runner import (
    Step,
    StoreNames,
    sqlite_column_exists,
    sqlite_table_exists,
)
from turnledger.infra.migrations.stores import KEY_PARTITIONS
from turnledger.infra.owner_feed import (
    OWNER_FEED_TABLE,
    SQLITE_OWNER_FEED_TABLE,
    postgres_owner_feed_ddl,
    postgres_owner_runs_ddl,
    sqlite_build_owner_feed,
)

COMPONENT = "ledger"

# SQLite ------------------------------------------------------------------------

_SQLITE_READ_SIDE = [
    """
    CREATE TABLE IF NOT EXISTS conversation_heads (
        conversation_id TEXT PRIMARY KEY,
        owner_id TEXT NOT NULL,
        version INTEGER NOT NULL,
        head_digest TEXT NOT NULL,
        turn_count INTEGER NOT NULL,
        eligible_count INTEGER NOT NULL,
        created_at TEXT NOT NULL,
        modified_at TEXT NOT NULL
    ) WITHOUT ROWID
    """,
    "CREATE INDEX IF NOT EXISTS conversation_heads_by_owner "
    "ON conversation_heads (owner_id, created_at)",
    """
    CREATE TABLE IF NOT EXISTS conversation_turns (
        conversation_id TEXT NOT NULL,
        position INTEGER NOT NULL,
        turn_id TEXT NOT NULL,
        status TEXT NOT NULL,
        version INTEGER NOT NULL,
        recorded_at TEXT NOT NULL,
        question_json_bytes INTEGER,
        answer_json_bytes INTEGER,
        question_chars INTEGER,
        answer_chars INTEGER,
        deleted_version INTEGER,
        deleted_at TEXT,
        PRIMARY KEY (conversation_id, position),
        UNIQUE (conversation_id, turn_id)
    ) WITHOUT ROWID
    """,
    """
    CREATE TABLE IF NOT EXISTS conversation_folds (
        conversation_id TEXT NOT NULL,
        fold_id TEXT NOT NULL,
        version INTEGER NOT NULL,
        recorded_at TEXT NOT NULL,
        covers_through_turn_id TEXT NOT NULL,
        covers_through_position INTEGER NOT NULL,
        covered_turns INTEGER NOT NULL,
        covered_eligible INTEGER NOT NULL,
        summary_json_bytes INTEGER,
        summary_chars INTEGER,
        withdrawn_version INTEGER,
        PRIMARY KEY (conversation_id, fold_id)
    ) WITHOUT ROWID
    """,
]


def _sqlite_read_side(cursor: Any, names: StoreNames) -> None:
    for statement in _SQLITE_READ_SIDE:
        cursor.execute(statement)


def _sqlite_parts_sizes(cursor: Any, names: StoreNames) -> None:
    if not sqlite_column_exists(cursor, "conversation_turns", "parts_sizes"):
        cursor.execute("ALTER TABLE conversation_turns ADD COLUMN parts_sizes TEXT")


def _sqlite_owner_feed(cursor: Any, names: StoreNames) -> None:
    if not sqlite_table_exists(cursor, OWNER_FEED_TABLE):
        cursor.execute(SQLITE_OWNER_FEED_TABLE)
        cursor.execute(sqlite_build_owner_feed(names.events_table))


def _sqlite_no_size_statistics(cursor: Any, names: StoreNames) -> None:
    # SQLite's ANALYZE samples indexed columns only, and no index holds a size.
    del cursor, names


def _sqlite_partitioned(cursor: Any, names: StoreNames) -> None:
    # SQLite has no partitions: the purge checkpoints the file's WAL instead.
    del cursor, names


def _sqlite_owner_runs(cursor: Any, names: StoreNames) -> None:
    # SQLite keeps one index row per event, written by the recorder (it has
    # no statement triggers); the bound on stored bytes is PostgreSQL's.
    del cursor, names


SQLITE_STEPS = (
    Step(1, "read side: conversation heads, turn rows, fold rows", _sqlite_read_side),
    Step(2, "turn rows: parts sizes", _sqlite_parts_sizes),
    Step(3, "per-user feed index, built from the log", _sqlite_owner_feed),
    Step(4, "no statistics of the size columns", _sqlite_no_size_statistics),
    Step(5, "turn and fold rows partitioned by conversation", _sqlite_partitioned),
    Step(6, "per-user feed index rows as runs of positions", _sqlite_owner_runs),
)

# PostgreSQL --------------------------------------------------------------------

_POSTGRES_READ_SIDE = [
    "CREATE TABLE IF NOT EXISTS {heads} ("
    " conversation_id uuid PRIMARY KEY,"
    " owner_id text NOT NULL,"
    " version bigint NOT NULL,"
    " head_digest text NOT NULL,"
    " turn_count integer NOT NULL,"
    " eligible_count integer NOT NULL,"
    " created_at timestamptz NOT NULL,"
    " modified_at timestamptz NOT NULL)",
    "CREATE INDEX IF NOT EXISTS conversation_heads_by_owner "
    "ON {heads} (owner_id, created_at)",
    # One row per turn: columns ordered so that none needs alignment padding,
    # versions as integer (a conversation never reaches 2**31 events).
    "CREATE TABLE IF NOT EXISTS {turns} ("
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
    "CREATE TABLE IF NOT EXISTS {folds} ("
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


def _postgres_read_side(cursor: Any, names: StoreNames) -> None:
    tables = {
        "heads": names.table("conversation_heads"),
        "turns": names.table("conversation_turns"),
        "folds": names.table("conversation_folds"),
    }
    for statement in _POSTGRES_READ_SIDE:
        cursor.execute(sql.SQL(statement).format(**tables))  # type: ignore[arg-type]


def _postgres_parts_sizes(cursor: Any, names: StoreNames) -> None:
    cursor.execute(
        sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS parts_sizes text").format(
            names.table("conversation_turns")
        )
    )


def _postgres_owner_feed(cursor: Any, names: StoreNames) -> None:
    for statement in postgres_owner_feed_ddl(names.schema, names.events_table):
        cursor.execute(statement)


# The columns that hold sizes of texts: a deletion erases them from the row.
SIZE_COLUMNS = {
    "conversation_turns": {
        "question_json_bytes": "integer",
        "answer_json_bytes": "integer",
        "question_chars": "integer",
        "answer_chars": "integer",
        "parts_sizes": "text",
    },
    "conversation_folds": {"summary_json_bytes": "integer", "summary_chars": "integer"},
}


def _postgres_no_size_statistics(cursor: Any, names: StoreNames) -> None:
    # STATISTICS 0: ANALYZE samples nothing of them from now on. Setting the
    # type a column already has rewrites nothing but drops the statistics
    # ANALYZE kept of it before.
    for table, columns in SIZE_COLUMNS.items():
        changes = sql.SQL(", ").join(
            sql.SQL(
                "ALTER COLUMN {column} SET STATISTICS 0, "
                "ALTER COLUMN {column} TYPE {type}"
            ).format(column=sql.Identifier(column), type=sql.SQL(kind))
            for column, kind in columns.items()
        )
        cursor.execute(sql.SQL("ALTER TABLE {} {}").format(names.table(table), changes))


# The tables step 5 partitions: their columns as steps 1 and 2 left them,
# and their unique keys (named apart from the unpartitioned table's, which
# the new one replaces within the step).
PARTITIONED_READ_SIDE: dict[str, tuple[tuple[str, ...], str]] = {
    "conversation_turns": (
        (
            "conversation_id uuid NOT NULL",
            "recorded_at timestamptz NOT NULL",
            "deleted_at timestamptz",
            "position integer NOT NULL",
            "version integer NOT NULL",
            "deleted_version integer",
            "question_json_bytes integer",
            "answer_json_bytes integer",
            "question_chars integer",
            "answer_chars integer",
            'status "char" NOT NULL',
            "turn_id text NOT NULL",
            "parts_sizes text",
        ),
        "CONSTRAINT conversation_turns_at_position"
        " PRIMARY KEY (conversation_id, position) DEFERRABLE INITIALLY DEFERRED,"
        " CONSTRAINT conversation_turns_of_turn_id"
        " UNIQUE (conversation_id, turn_id) DEFERRABLE INITIALLY DEFERRED",
    ),
    "conversation_folds": (
        (
            "conversation_id uuid NOT NULL",
            "fold_id text NOT NULL",
            "version bigint NOT NULL",
            "recorded_at timestamptz NOT NULL",
            "covers_through_turn_id text NOT NULL",
            "covers_through_position integer NOT NULL",
            "covered_turns integer NOT NULL",
            "covered_eligible integer NOT NULL",
            "summary_json_bytes integer",
            "summary_chars integer",
            "withdrawn_version bigint",
        ),
        "CONSTRAINT conversation_folds_of_fold_id"
        " PRIMARY KEY (conversation_id, fold_id) DEFERRABLE INITIALLY DEFERRED",
    ),
}


def _is_partitioned(cursor: Any, schema: str, table: str) -> bool:
    cursor.execute(
        "SELECT c.relkind::text FROM pg_class c JOIN pg_namespace n "
        "ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = %s",
        (schema, table),
    )
    row = cursor.fetchone()  # a tuple, or a dict: the library's row factory
    cell = (
        None
        if row is None
        else next(iter(row.values() if isinstance(row, dict) else row))
    )
    return cell == "p"


# Fewer partitions than the key table's 32 (each costs a store's creation
# some 64 ms of DDL on the test machine), by a modulus that divides its
# modulus: the same hash then puts a conversation in read-side partition
# (its key partition's number) % 8.
READ_SIDE_PARTITIONS = 8
assert KEY_PARTITIONS % READ_SIDE_PARTITIONS == 0


def _postgres_partitioned(cursor: Any, names: StoreNames) -> None:
    """Hash partitions by conversation, with the key table's hash and a
    modulus dividing its own, so a conversation's rows sit in the partition
    `read_side_partition` names for its keys' partition."""
    for table, (columns, keys) in PARTITIONED_READ_SIDE.items():
        if _is_partitioned(cursor, names.schema, table):
            continue
        staged = names.table(f"{table}_partitioned")
        cursor.execute(
            sql.SQL(
                "CREATE TABLE {} ({}, {}) PARTITION BY HASH (conversation_id)"
            ).format(staged, sql.SQL(", ".join(columns)), sql.SQL(keys))
        )
        for remainder in range(READ_SIDE_PARTITIONS):
            cursor.execute(
                sql.SQL(
                    "CREATE TABLE {} PARTITION OF {} "
                    "FOR VALUES WITH (MODULUS {}, REMAINDER {})"
                ).format(
                    names.table(f"{table}_p{remainder}"),
                    staged,
                    sql.Literal(READ_SIDE_PARTITIONS),
                    sql.Literal(remainder),
                )
            )
        listed = sql.SQL(", ").join(
            sql.Identifier(column.split()[0]) for column in columns
        )
        cursor.execute(
            sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {}").format(
                staged, listed, listed, names.table(table)
            )
        )
        # Dropping the old table unlinks its files, dead row versions and all.
        cursor.execute(sql.SQL("DROP TABLE {}").format(names.table(table)))
        cursor.execute(
            sql.SQL("ALTER TABLE {} RENAME TO {}").format(staged, sql.Identifier(table))
        )
    _postgres_no_size_statistics(cursor, names)


def _postgres_owner_runs(cursor: Any, names: StoreNames) -> None:
    for statement in postgres_owner_runs_ddl(names.schema, names.events_table):
        cursor.execute(statement)


def read_side_partition(table: str, key_partition: str) -> str:
    """The partition of `table` that holds the conversations whose keys are
    in the key table's partition `key_partition` ("turn_keys_p13" ->
    "conversation_turns_p5")."""
    remainder = int(key_partition.rsplit("_p", 1)[1]) % READ_SIDE_PARTITIONS
    return f"{table}_p{remainder}"


POSTGRES_STEPS = (
    Step(1, "read side: conversation heads, turn rows, fold rows", _postgres_read_side),
    Step(2, "turn rows: parts sizes", _postgres_parts_sizes),
    Step(3, "per-user feed index, built from the log", _postgres_owner_feed),
    Step(4, "no statistics of the size columns", _postgres_no_size_statistics),
    Step(5, "turn and fold rows partitioned by conversation", _postgres_partitioned),
    Step(6, "per-user feed index rows as runs of positions", _postgres_owner_runs),
)
