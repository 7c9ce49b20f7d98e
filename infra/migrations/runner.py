"""Applying a store's ordered, versioned schema steps, once.

Each database (a PostgreSQL schema, an SQLite file) keeps a table
`turnledger_migrations` with one row per step applied: the component (the
ledger's read side, the key store, the device store, the Merkle tree), the
step's version, what it does and when it ran. A component's version is its
newest row. At start-up each store applies the steps above its version, in
order, in one transaction together with their rows; a store whose version
is newer than the code's newest step is refused with `SchemaTooNewError`,
and that transaction is rolled back, so nothing is changed.

On PostgreSQL the transaction first takes an advisory lock on the schema,
so processes starting at once wait for each other: the first migrates, the
others find the steps done. On SQLite the transaction takes the file's write
lock before it reads the version, for the same reason.

Stores made before the steps were versioned (no table yet) start at version
0: their first steps are written to find any part of their work already
done (`IF NOT EXISTS`, a column looked up first), as those releases created
their schema piece by piece at every start-up.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from psycopg import sql

from turnledger.domain.errors import TurnLedgerError

MIGRATIONS_TABLE = "turnledger_migrations"
# The advisory lock's first key: namespaces the lock among the ledger's others.
_LOCK_NAMESPACE = "turnledger.migrations"


class SchemaTooNewError(TurnLedgerError):
    """Raised when a store's schema is newer than this code knows: it was
    migrated by a later release. Nothing is changed."""

    def __init__(self, component: str, found: int, newest: int) -> None:
        self.component = component
        self.found = found
        self.newest = newest
        super().__init__(
            f"the {component} schema is at version {found}, newer than this "
            f"release's newest ({newest}): upgrade turnledger to open it"
        )


@dataclass(frozen=True, slots=True)
class StoreNames:
    """The names a step's statements need: the schema (PostgreSQL) and the
    library's events table."""

    schema: str = ""
    events_table: str = ""

    def table(self, name: str) -> sql.Identifier:
        """A table of the schema (PostgreSQL)."""
        return sql.Identifier(self.schema, name)


@dataclass(frozen=True, slots=True)
class Step:
    """One versioned change of a component's schema."""

    version: int
    description: str
    apply: Callable[[Any, StoreNames], None]


def newest_version(steps: Sequence[Step]) -> int:
    return steps[-1].version if steps else 0


def check_steps(steps: Sequence[Step]) -> None:
    """Versions run 1..n, in order (a programming error otherwise)."""
    versions = [step.version for step in steps]
    assert versions == list(range(1, len(steps) + 1)), versions


# SQLite ------------------------------------------------------------------------

_SQLITE_TABLE = (
    f"CREATE TABLE IF NOT EXISTS {MIGRATIONS_TABLE} ("
    " component TEXT NOT NULL,"
    " version INTEGER NOT NULL,"
    " description TEXT NOT NULL,"
    " applied_at TEXT NOT NULL,"
    " PRIMARY KEY (component, version))"
)


def migrate_sqlite(
    cursor: Any, component: str, steps: Sequence[Step], names: StoreNames
) -> list[int]:
    """Apply `component`'s steps above its version, in the transaction that
    `cursor` has open (the caller commits, or rolls back on an error); the
    versions applied.

    The transaction must hold the file's write lock already (`BEGIN
    IMMEDIATE`, `sqlite_write_transaction`, or a write first): a deferred
    transaction that read the version before another process committed could
    not become a write, and would fail at once instead of waiting.
    """
    check_steps(steps)
    cursor.execute(_SQLITE_TABLE)
    cursor.execute(
        f"SELECT coalesce(max(version), 0) FROM {MIGRATIONS_TABLE} WHERE component = ?",
        (component,),
    )
    found = int(cursor.fetchone()[0])
    newest = newest_version(steps)
    if found > newest:
        raise SchemaTooNewError(component, found, newest)
    applied = []
    for step in steps[found:]:
        step.apply(cursor, names)
        cursor.execute(
            f"INSERT INTO {MIGRATIONS_TABLE} VALUES (?, ?, ?, ?)",
            (
                component,
                step.version,
                step.description,
                datetime.now(UTC).isoformat(),
            ),
        )
        applied.append(step.version)
    return applied


def check_sqlite_version(cursor: Any, component: str, steps: Sequence[Step]) -> None:
    """For a read-only opening, which migrates nothing: refuse a store whose
    `component` is newer than the code (a store without the table is older)."""
    if not sqlite_table_exists(cursor, MIGRATIONS_TABLE):
        return
    cursor.execute(
        f"SELECT coalesce(max(version), 0) FROM {MIGRATIONS_TABLE} WHERE component = ?",
        (component,),
    )
    found = int(cursor.fetchone()[0])
    if found > newest_version(steps):
        raise SchemaTooNewError(component, found, newest_version(steps))


@contextmanager
def sqlite_write_transaction(connection: sqlite3.Connection) -> Iterator[Any]:
    """BEGIN IMMEDIATE … COMMIT on a connection in autocommit mode (rolled
    back on any error)."""
    cursor = connection.cursor()
    cursor.execute("BEGIN IMMEDIATE")
    try:
        yield cursor
    except BaseException:
        connection.rollback()
        raise
    connection.commit()


def sqlite_column_exists(cursor: Any, table: str, column: str) -> bool:
    cursor.execute(f"PRAGMA table_info({table})")
    return column in {row[1] for row in cursor.fetchall()}


def sqlite_table_exists(cursor: Any, table: str) -> bool:
    cursor.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
    )
    return cursor.fetchone() is not None


# PostgreSQL --------------------------------------------------------------------


def _postgres_lock_keys(schema: str) -> tuple[str, str]:
    return _LOCK_NAMESPACE, schema


_POSTGRES_TABLE = sql.SQL(
    "CREATE TABLE IF NOT EXISTS {} ("
    " component text NOT NULL,"
    " version integer NOT NULL,"
    " description text NOT NULL,"
    " applied_at timestamptz NOT NULL DEFAULT now(),"
    " applied_by integer NOT NULL DEFAULT pg_backend_pid(),"
    " PRIMARY KEY (component, version))"
)


def migrate_postgres(
    connection: Any,
    component: str,
    steps: Sequence[Step],
    names: StoreNames,
    *,
    cache_table: str | None = None,
) -> list[int]:
    """Apply `component`'s steps above its version in one transaction on
    `connection`, under the schema's migration lock; the versions applied.

    `cache_table`: the component is a cache, rebuilt from the log, whose
    tables may be dropped by hand; when this one is missing, its steps are
    applied again from the first.
    """
    check_steps(steps)
    table = names.table(MIGRATIONS_TABLE)
    with connection.transaction():
        cursor = connection.cursor()
        cursor.execute(
            "SELECT pg_advisory_xact_lock(hashtext(%s), hashtext(%s))",
            _postgres_lock_keys(names.schema),
        )
        cursor.execute(_POSTGRES_TABLE.format(table))
        found = _postgres_version(cursor, component, names, cache_table=cache_table)
        newest = newest_version(steps)
        if found > newest:
            raise SchemaTooNewError(component, found, newest)
        applied = []
        for step in steps[found:]:
            step.apply(cursor, names)
            cursor.execute(
                sql.SQL(
                    "INSERT INTO {} (component, version, description) "
                    "VALUES (%s, %s, %s)"
                ).format(table),
                (component, step.version, step.description),
            )
            applied.append(step.version)
    return applied


def _postgres_version(
    cursor: Any, component: str, names: StoreNames, *, cache_table: str | None
) -> int:
    """The component's version: 0 for a cache whose `cache_table` is gone
    (its rows are deleted, so its steps run again)."""
    table = names.table(MIGRATIONS_TABLE)
    cursor.execute(
        sql.SQL("SELECT coalesce(max(version), 0) FROM {} WHERE component = %s").format(
            table
        ),
        (component,),
    )
    found = int(_first_cell(cursor.fetchone()))
    if found and cache_table is not None:
        cursor.execute("SELECT to_regclass(%s)", (_qualified(names, cache_table),))
        if _first_cell(cursor.fetchone()) is None:
            cursor.execute(
                sql.SQL("DELETE FROM {} WHERE component = %s").format(table),
                (component,),
            )
            found = 0
    return found


def check_postgres_version(
    cursor: Any, component: str, steps: Sequence[Step], names: StoreNames
) -> None:
    """As `check_sqlite_version`, on PostgreSQL."""
    cursor.execute("SELECT to_regclass(%s)", (_qualified(names, MIGRATIONS_TABLE),))
    if _first_cell(cursor.fetchone()) is None:
        return
    found = _postgres_version(cursor, component, names, cache_table=None)
    if found > newest_version(steps):
        raise SchemaTooNewError(component, found, newest_version(steps))


def _first_cell(row: Any) -> Any:
    """The first column of a row, as a tuple or a dict (the library's rows)."""
    if row is None:
        return None
    return row[0] if isinstance(row, tuple) else next(iter(row.values()))


def _qualified(names: StoreNames, table: str) -> str:
    return '"{}"."{}"'.format(names.schema.replace('"', '""'), table.replace('"', '""'))


@contextmanager
def postgres_startup_lock(connection: Any, schema: str) -> Iterator[None]:
    """The schema's migration lock for a whole start-up (the library's own
    tables, then the steps), held by `connection`'s session."""
    keys = _postgres_lock_keys(schema)
    connection.execute("SELECT pg_advisory_lock(hashtext(%s), hashtext(%s))", keys)
    try:
        yield
    finally:
        connection.execute(
            "SELECT pg_advisory_unlock(hashtext(%s), hashtext(%s))", keys
        )


def ensure_schema(connection: Any, schema: str) -> None:
    """Create the schema unless it exists, under its migration lock (two
    processes creating it at once would otherwise collide)."""
    found = connection.execute(
        "SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)
    ).fetchone()
    if found is not None:
        return
    with connection.transaction():
        connection.execute(
            "SELECT pg_advisory_xact_lock(hashtext(%s), hashtext(%s))",
            _postgres_lock_keys(schema),
        )
        connection.execute(
            sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema))
        )
