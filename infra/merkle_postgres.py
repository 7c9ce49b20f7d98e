"""The transparency log's tree in PostgreSQL, in the store's schema; the
tables are versioned steps (infra/migrations/stores.py), made again if
dropped, as the tree is a cache of the log."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import sql

from turnledger.domain.merkle import Coordinate, Node
from turnledger.infra.merkle_ports import (
    LeafRow,
    SQLTreeReads,
    TreeQueries,
    checked_nodes,
)
from turnledger.infra.migrations.runner import (
    StoreNames,
    ensure_schema,
    migrate_postgres,
)
from turnledger.infra.migrations.stores import MERKLE, POSTGRES_MERKLE_STEPS


class _PostgresWriter:
    def __init__(self, store: PostgresLeafStore, cursor: psycopg.Cursor[Any]) -> None:
        self._store = store
        self._cursor = cursor

    def tracking(self) -> tuple[int, int | None]:
        # FOR UPDATE: two followers (the service, a CLI run) take turns.
        row = self._cursor.execute(
            sql.SQL(
                "SELECT size, notification_id FROM {} WHERE id = 1 FOR UPDATE"
            ).format(self._store.tables["tracking"])
        ).fetchone()
        assert row is not None
        return int(row[0]), row[1]

    def read_nodes(self, coordinates: Sequence[Coordinate]) -> list[bytes]:
        return self._store.nodes_with(self._cursor, coordinates)

    def append(self, nodes: Sequence[Node], leaves: Sequence[LeafRow]) -> None:
        tables = self._store.tables
        copy_nodes = sql.SQL("COPY {} (level, idx, hash) FROM STDIN").format(
            tables["nodes"]
        )
        with self._cursor.copy(copy_nodes) as copy:
            for node in nodes:
                copy.write_row((node.level, node.offset, node.hash))
        copy_leaves = sql.SQL(
            "COPY {} (position, notification_id, leaf_input, leaf_hash) FROM STDIN"
        ).format(tables["leaves"])
        with self._cursor.copy(copy_leaves) as copy:
            for leaf in leaves:
                copy.write_row(leaf)

    def track(self, size: int, last_id: int) -> None:
        self._cursor.execute(
            sql.SQL(
                "UPDATE {} SET size = %s, notification_id = %s WHERE id = 1"
            ).format(self._store.tables["tracking"]),
            (size, last_id),
        )


class PostgresLeafStore(SQLTreeReads):
    def __init__(self, conninfo: str, schema: str, *, create: bool = True) -> None:
        self.tables = {
            name: sql.Identifier(schema, f"merkle_{name}")
            for name in ("nodes", "leaves", "tracking")
        }
        leaves = self.tables["leaves"]
        self.queries = TreeQueries(
            size=sql.SQL("SELECT size FROM {} WHERE id = 1").format(
                self.tables["tracking"]
            ),
            leaf_inputs=sql.SQL(
                "SELECT leaf_input FROM {} WHERE position >= %s AND position < %s "
                "ORDER BY position"
            ).format(leaves),
            position_of=sql.SQL(
                "SELECT position FROM {} WHERE notification_id = %s"
            ).format(leaves),
        )
        self._connection: psycopg.Connection[Any] = psycopg.connect(
            conninfo, autocommit=True
        )
        self._lock = threading.Lock()
        if not create:
            self._connection.read_only = True
            return
        ensure_schema(self._connection, schema)
        migrate_postgres(
            self._connection,
            MERKLE,
            POSTGRES_MERKLE_STEPS,
            StoreNames(schema=schema),
            # The tree is a cache of the log: dropped, it is made again.
            cache_table="merkle_tracking",
        )

    @contextmanager
    def writing(self) -> Iterator[_PostgresWriter]:
        with (
            self._lock,
            self._connection.transaction(),
            self._connection.cursor() as cursor,
        ):
            # The tree is a cache rebuilt from the log: a commit lost in a crash
            # is followed again, so it need not wait for the WAL flush.
            cursor.execute("SET LOCAL synchronous_commit = off")
            yield _PostgresWriter(self, cursor)

    def nodes_with(
        self, cursor: psycopg.Cursor[Any], coordinates: Sequence[Coordinate]
    ) -> list[bytes]:
        if not coordinates:
            return []
        found: dict[Coordinate, bytes] = {}
        positions = [index for level, index in coordinates if level == 0]
        if positions:
            rows = cursor.execute(
                sql.SQL(
                    "SELECT position, leaf_hash FROM {} WHERE position = ANY(%s)"
                ).format(self.tables["leaves"]),
                (positions,),
            ).fetchall()
            found.update({(0, r[0]): bytes(r[1]) for r in rows})
        upper = [c for c in coordinates if c[0]]
        if upper:
            rows = cursor.execute(
                sql.SQL(
                    "SELECT level, idx, hash FROM {} WHERE (level, idx) IN "
                    "(SELECT * FROM unnest(%s::smallint[], %s::bigint[]))"
                ).format(self.tables["nodes"]),
                ([c[0] for c in upper], [c[1] for c in upper]),
            ).fetchall()
            found.update({(r[0], r[1]): bytes(r[2]) for r in rows})
        return checked_nodes(coordinates, found)

    def read_nodes(self, coordinates: Sequence[Coordinate]) -> list[bytes]:
        with self._lock, self._connection.cursor() as cursor:
            return self.nodes_with(cursor, coordinates)

    def level_nodes(self, level: int) -> list[tuple[int, bytes]]:
        statement = (
            sql.SQL("SELECT idx, hash FROM {} WHERE level = %s ORDER BY idx").format(
                self.tables["nodes"]
            )
            if level
            else sql.SQL("SELECT position, leaf_hash FROM {} ORDER BY position").format(
                self.tables["leaves"]
            )
        )
        with self._lock, self._connection.cursor(binary=True) as cursor:
            # Binary results are already (int, bytes): the columns are bigint
            # and bytea. Converting 100,000 rows again cost a third of the read.
            rows: list[tuple[int, bytes]] = cursor.execute(
                statement, (level,) if level else ()
            ).fetchall()
        return rows

    @property
    def connection(self) -> psycopg.Connection[Any]:
        """For a reader of the same database to share (one connection fewer)."""
        return self._connection

    def close(self) -> None:
        self._connection.close()
